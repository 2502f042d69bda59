"""Which devices a recorded test file touched, or tried to: CUDA, Triton launches, NCCL.

`install` puts one meta path finder in front (`AfterImport`); it answers only for the modules in
`_PATCHES` and, once such a module has run, wraps the one function that means a device is used:
``torch.cuda._lazy_init`` (every CUDA use in Python or C++ goes through it; a failure under
torch's inductor is its own probe, caught, and is not noted), the Triton
``JITFunction.run`` and ``InterpretedFunction.run`` (a kernel launch, compiled or under
``TRITON_INTERPRET=1``: on a GPU runner that launch compiles for the GPU, so it counts as
``triton``), ``Autotuner.run`` (an autotuned launch: it benchmarks on the device before any
``JITFunction.run``), and ``torch.distributed.init_process_group`` with an NCCL backend.
``torch.cuda.is_available`` and ``device_count`` called from the observed repository's own code
(not torch's) and answering no are noted as a ``query`` event: `ci.observe.facts` counts it only
for a file that then failed; when the test file chose its tensors' device by that answer
(`ci.observe.adaptive`) it is an ``adaptive`` event instead, which always counts. torch and triton
are never imported here; a process that imports neither pays one dict lookup per import.

A call that raises still counts, with its message: on a CPU machine "Torch not compiled with
CUDA enabled", "Found no NVIDIA driver" or Triton's "0 active drivers" say the test wanted the
device. Each event goes to ``devices.<pid>.jsonl`` in the recording's parts directory
(`PARTS_ENV`), one ``{"test", "device", "evidence"}`` line, one ``os.write``, for the test file
running now (`TEST_ENV`); an event outside any test file, or outside a recording, is dropped.
Each (test, evidence) is written once per process.

Contract: nothing here raises into the program; a wrapper calls the original and returns or
raises what it does. Imported at interpreter start-up by `ci.observe.child`: standard library only.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

from ci.observe import adaptive
from ci.observe.files import PARTS_ENV, ROOT_ENV, TEST_ENV
from ci.observe.finder_guard import FinderGuard

PART_GLOB = "devices.*.jsonl"
MAX_EVIDENCE = 160  # characters of one evidence string
_seen: set[tuple[str, str]] = set()


def note(device: str, evidence: str, kind: str = "use") -> None:
    """Record that the running test file touched (or tried) ``device`` (``kind`` ``use``), or asked
    for it and heard no (``query``), or chose its device by that answer (``adaptive``); see the
    module docstring."""
    parts, test = os.environ.get(PARTS_ENV), os.environ.get(TEST_ENV)
    if not parts or not test or (test, evidence) in _seen:
        return
    _seen.add((test, evidence))
    event = {"test": test, "device": device, "evidence": evidence[:MAX_EVIDENCE]}
    line = json.dumps(event if kind == "use" else {**event, kind: True}) + "\n"
    try:
        fd = os.open(os.path.join(parts, f"devices.{os.getpid()}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError:
        pass  # the recording is over


def _failure(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _watched(device: str, what: Callable[[tuple, dict], str | None], original: Callable,
             probe: Callable[[], bool] | None = None) -> Callable:
    """``original`` that first notes ``device`` with ``what(args, kwargs)`` (None: not a device use);
    a failure is not noted when ``probe()`` says the caller only probed the machine."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            evidence = what(args, kwargs)
        except Exception:
            evidence = None
        try:
            result = original(*args, **kwargs)
        except BaseException as exc:
            if evidence is not None and not (probe is not None and _quiet(probe)):
                note(device, f"{evidence} failed: {_failure(exc)}")
            raise
        if evidence is not None:
            note(device, evidence)
        return result

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _kernel(kind: str) -> Callable[[tuple, dict], str]:
    def what(args: tuple, kwargs: dict) -> str:
        fn = getattr(args[0], "fn", None)
        for _ in range(4):  # an Autotuner's or Heuristics' fn is the JITFunction, whose fn is Python's
            if fn is None or hasattr(fn, "__code__"):
                break
            fn = getattr(fn, "fn", None)
        code = getattr(fn, "__code__", None)
        where = getattr(code, "co_filename", "?")
        root = os.environ.get(ROOT_ENV, "")
        if root and where.startswith(root.rstrip("/") + "/"):
            where = where[len(root.rstrip("/")) + 1:]
        return f"triton {kind} {where}:{getattr(fn, '__name__', '?')}"
    return what


def _nccl(args: tuple, kwargs: dict) -> str | None:
    backend = kwargs.get("backend", args[0] if args else None)
    return "init_process_group(backend=nccl)" if backend is not None and "nccl" in str(backend).lower() else None


def _quiet(probe: Callable[[], bool]) -> bool:
    try:
        return probe()
    except Exception:
        return False


def _compiler_probe() -> bool:
    """Whether torch's compiler is on the stack: inductor asks ``torch.cuda.current_device()`` for
    a cache key and catches the failure on a CPU machine, which is no test wanting a GPU."""
    frame = sys._getframe(1)
    while frame is not None:
        if "/torch/_inductor/" in frame.f_code.co_filename.replace("\\", "/"):
            return True
        frame = frame.f_back
    return False


def _own_caller() -> str | None:
    """``path:line`` of the caller of the wrapped query when it is in the observed repository."""
    root = os.environ.get(ROOT_ENV, "").rstrip("/")
    caller = sys._getframe(2)  # 0 this, 1 the wrapper, 2 who asked
    frame_file, line = caller.f_code.co_filename, caller.f_lineno
    if not root or not frame_file.startswith(root + "/") or "/site-packages/" in frame_file:
        return None
    return f"{frame_file[len(root) + 1:]}:{line}"


def _query(name: str, original: Callable) -> Callable:
    """``original`` (a yes/no or count query) that, when it answers no to the repository's own
    code, notes an ``adaptive`` event if the test file chose its device by it
    (`ci.observe.adaptive`), else a ``query`` event."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        try:
            where = None if result else _own_caller()
            if where is not None:
                chose = adaptive.choice(sys._getframe(1), os.environ.get(ROOT_ENV, ""),
                                        os.environ.get(TEST_ENV, ""), f"torch.cuda.{name}() {result!r}")
                note("cuda", chose or f"torch.cuda.{name}() -> {result!r} at {where}",
                     kind="adaptive" if chose else "query")
        except Exception:
            pass
        return result

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _patch_cuda(module: Any) -> None:
    module._lazy_init = _watched("cuda", lambda a, k: "torch.cuda.init", module._lazy_init, _compiler_probe)
    for name in ("is_available", "device_count"):
        setattr(module, name, _query(name, getattr(module, name)))


def _patch_method(cls_name: str, kind: str) -> Callable[[Any], None]:
    def patch(module: Any) -> None:
        cls = getattr(module, cls_name)
        cls.run = _watched("triton", _kernel(kind), cls.run)
    return patch


def _patch_c10d(module: Any) -> None:
    module.init_process_group = _watched("nccl", _nccl, module.init_process_group)


_PATCHES: dict[str, Callable[[Any], None]] = {
    "torch.cuda": _patch_cuda,
    "triton.runtime.jit": _patch_method("JITFunction", "launch"),
    "triton.runtime.interpreter": _patch_method("InterpretedFunction", "interpret"),
    "triton.runtime.autotuner": _patch_method("Autotuner", "autotune"),
    "torch.distributed.distributed_c10d": _patch_c10d,
}


class _PatchingLoader:
    """The module's own loader, then its patch (any error in the patch is swallowed)."""

    def __init__(self, loader: Any, patch: Callable[[Any], None]):
        self._loader, self._patch = loader, patch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self._loader
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception:
            pass


class AfterImport:
    """The meta path finder of `install`: the other finders' spec, its loader wrapped."""

    def __init__(self) -> None:
        self.guard = FinderGuard()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        with self.guard.asking(name) as first:
            if not first:
                return None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                        spec.loader = _PatchingLoader(spec.loader, patch)
                    return spec
        return None


def install() -> None:
    """Put `AfterImport` first on ``sys.meta_path``, once per process."""
    if not any(isinstance(f, AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, AfterImport())
