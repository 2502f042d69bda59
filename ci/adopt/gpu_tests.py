"""Which test files ``ci init`` must not make active on its CPU tier, and which register suites in-source.

A test file is a **GPU test** when, read with `ast` (never run):

1. it calls ``register_<backend>_ci(...)`` at module level for a backend other than ``cpu``
   (``cuda``, ``amd``, ``npu``, ``xpu``, ...) and for no ``cpu`` backend: the repository itself says
   where it runs (a ``register_cpu_ci`` call says it runs on CPU, whatever else it uses); or
2. it has no registration and uses CUDA: an attribute of ``torch.cuda`` other than the guards
   ``is_available`` / ``device_count`` (``torch.cuda.synchronize()``), a ``.cuda()`` call, a call
   argument ``"cuda"`` or ``"cuda:N"`` (``device="cuda"``, ``torch.device("cuda:0")``, ``.to("cuda")``),
   or an import of a CUDA-only package (`CUDA_MODULES`).

Limits: a test that uses CUDA only behind ``skipIf(not torch.cuda.is_available())`` is a GPU test
by rule 2, although on CPU it would only skip (nothing is lost by not running it there); CUDA
reached through a helper module, a device string built at run time, or a non-CUDA accelerator used
without a registration (``"mps"``, ``"xpu"``) is not seen. Either way ``init`` says which files and
why, and an entry's ``status:`` / ``tiers:`` are one edit away.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ci.imports.scan import parse_python, read_bytes

CUDA_MODULES = ("pycuda", "cupy", "numba.cuda", "cuda", "tensorrt")
_GUARDS = {"is_available", "device_count"}
_PREFILTER = (b"cuda", b"register_", *{m.rsplit(".", 1)[-1].encode() for m in CUDA_MODULES})


@dataclass(frozen=True)
class Evidence:
    """Why ``path`` is a GPU test: ``kind`` ``registration`` or ``cuda``, ``what`` and ``where`` (file:line)."""

    path: str
    kind: str
    what: str
    where: str


@dataclass
class TreeReading:
    """The GPU tests (path -> `Evidence`) and the files registering suites in-source (path -> suites)."""

    gpu: dict[str, Evidence] = field(default_factory=dict)
    registered: dict[str, list[str]] = field(default_factory=dict)


def _backend(call: ast.Call) -> str | None:
    name = call.func.id if isinstance(call.func, ast.Name) else None
    if name and name.startswith("register_") and name.endswith("_ci") and len(name) > len("register__ci"):
        return name[len("register_"):-len("_ci")]
    return None


def _suite(call: ast.Call) -> str | None:
    args = {k.arg: k.value for k in call.keywords if k.arg}
    if len(call.args) > 1:
        args.setdefault("suite", call.args[1])
    for key in ("suite", "stage"):
        node = args.get(key)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            runner = args.get("runner_config")
            if key == "stage" and isinstance(runner, ast.Constant) and isinstance(runner.value, str):
                return f"{node.value}-test-{runner.value}"
            return node.value if key == "suite" else None
    return None


def _is_cuda_string(node: ast.AST) -> bool:
    if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return False
    value = node.value
    return value == "cuda" or (value.startswith("cuda:") and value[5:].isdigit())


def _cuda_use(tree: ast.Module) -> tuple[str, int] | None:
    """The first CUDA use in the module (see the module docstring), as (what, line)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr not in _GUARDS and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "cuda" and isinstance(node.value.value, ast.Name) and node.value.value.id == "torch":
            return f"torch.cuda.{node.attr}", node.lineno
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
                return ".cuda()", node.lineno
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                if _is_cuda_string(arg):
                    return f"a {arg.value!r} device argument", node.lineno  # type: ignore[attr-defined]
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [f"{node.module}.{a.name}" for a in node.names] if node.module and not node.level else [])
            for name in names:
                if any(name == m or name.startswith(m + ".") for m in CUDA_MODULES):
                    return f"import {name}", node.lineno
    return None


def read_tree(root: Path, files: Iterable[str]) -> TreeReading:
    """Reads each repo-relative test file once (see the module docstring). A file that cannot be
    read or parsed is neither: lint reports what it can about it."""
    reading = TreeReading()
    for rel in files:
        try:
            data = read_bytes(os.fspath(root / rel))
        except OSError:
            continue
        if not any(word in data for word in _PREFILTER):
            continue  # no rule can match: no parse
        tree, failure = parse_python(data, rel)
        if tree is None or failure is not None:
            continue
        calls = [n.value for n in tree.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
                 and _backend(n.value) is not None]
        if calls:
            reading.registered[rel] = sorted({s for s in map(_suite, calls) if s is not None})
            gpu = [c for c in calls if _backend(c) != "cpu"]
            if gpu and len(gpu) == len(calls):
                first = gpu[0]
                reading.gpu[rel] = Evidence(rel, "registration", f"register_{_backend(first)}_ci",
                                            f"{rel}:{first.lineno}")
            continue
        use = _cuda_use(tree)
        if use is not None:
            reading.gpu[rel] = Evidence(rel, "cuda", use[0], f"{rel}:{use[1]}")
    return reading


__all__ = ["CUDA_MODULES", "Evidence", "TreeReading", "read_tree"]
