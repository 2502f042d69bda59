"""TorchDynamo reads slipcover's probes as no-ops: recording must not change a test's outcome.

On CPython 3.11 the slipcover core (`ci.observe.slipcover_core`) puts into repository code a call
sequence ``PUSH_NULL; LOAD_CONST <slipcover's C signal>; LOAD_CONST <probe>; PRECALL; CALL;
POP_TOP`` (after a ``NOP`` that `ci.observe.retire` turns into a jump). ``torch.compile`` traces a
function by reading its bytecode, and dynamo cannot hold a built-in function as a constant: a
recorded ``torch.compile`` of a repository function failed with "Cannot construct
``ConstantVariable`` ... built-in function signal" where the plain run passed.
``allow_in_graph`` or ``torch._dynamo.disable`` on the probe cannot help: the failure is the
``LOAD_CONST``, before any call.

Contract:

- `guard` is applied once ``torch._dynamo.bytecode_transformation`` is imported (at once if it
  is; never importing torch itself). It wraps that module's ``_cached_cleaned_instructions``,
  the one place dynamo turns a code object into its instruction list (what it compiles and what
  it inlines), so that each probe sequence of a code object holding ``signal`` becomes ``NOP``s
  (the same instruction objects: jump targets and exception ranges stay right).
- the compiled code has no probes, so dynamo records for it instead: each probe it neutralises
  is signalled once, when dynamo first reads that code object (dynamo caches the list), which
  puts every probed line of the traced function into the current context, branches it did not
  take included (more lines, never fewer). A later test file that calls the already compiled
  function records none of its lines; code dynamo does not compile keeps its probes and its
  exact lines.
- anything not shaped like a probe is left as it is; a torch without that function is left alone.
- `record_reads` is the same wrap for a core without probes (``sysmon`` on CPython 3.12+, where
  dynamo's compiled frames run no line of their code as Python, so ``sys.monitoring`` saw none of
  them): it hands every code object dynamo reads to a callback, which records all its lines.
"""

from __future__ import annotations

import dis
import json
import os
import sys
from collections.abc import Callable
from typing import Any

MODULE = "torch._dynamo.bytecode_transformation"
_CALL_SEQUENCE = ("PUSH_NULL", "LOAD_CONST", "LOAD_CONST", "PRECALL", "CALL", "POP_TOP")
_NOP = dis.opmap["NOP"]


def guard(signal: Callable[..., Any], after_import: Callable[[str, Callable[[], None]], None]) -> None:
    """Patch dynamo (see the module docstring) now if it is imported, else through
    ``after_import(MODULE, then)``, which must call ``then`` right after that module runs."""
    if MODULE in sys.modules:
        patch(sys.modules[MODULE], signal)
    else:
        after_import(MODULE, lambda: patch(sys.modules[MODULE], signal))


def patch(module: Any, signal: Callable[..., Any]) -> None:
    """Wrap ``module._cached_cleaned_instructions`` once (see the module docstring)."""
    read = getattr(module, "_cached_cleaned_instructions", None)
    if read is None or getattr(read, "_ci_probes_signal", None) is not None:
        return

    def cleaned(code, *args, **kwargs):
        instructions = read(code, *args, **kwargs)
        if any(const is signal for const in code.co_consts):
            neutralise(instructions, signal)
        return instructions

    cleaned._ci_probes_signal = signal  # type: ignore[attr-defined]
    module._cached_cleaned_instructions = cleaned


def neutralise(instructions: list[Any], signal: Callable[..., Any]) -> int:
    """Turn each probe call sequence in dynamo's ``instructions`` into ``NOP``s in place,
    signalling its probe first; return how many there were."""
    found = 0
    width = len(_CALL_SEQUENCE)
    for at in range(len(instructions) - width + 1):
        run = instructions[at:at + width]
        if tuple(i.opname for i in run) != _CALL_SEQUENCE or run[1].argval is not signal:
            continue
        signal(run[2].argval)
        for inst in run:
            inst.opcode, inst.opname, inst.arg, inst.argval, inst.argrepr = _NOP, "NOP", None, None, ""
        found += 1
    return found


def record_reads(on_read: Callable[[Any], None], after_import: Callable[[str, Callable[[], None]], None]) -> None:
    """Call ``on_read(code)`` for each code object dynamo reads (see the module docstring), from
    now on if dynamo is imported, else through ``after_import`` as in `guard`."""
    def wrap() -> None:
        module = sys.modules[MODULE]
        read = getattr(module, "_cached_cleaned_instructions", None)
        if read is None or getattr(read, "_ci_on_read", None) is not None:
            return

        def cleaned(code, *args, **kwargs):
            on_read(code)
            return read(code, *args, **kwargs)

        cleaned._ci_on_read = on_read  # type: ignore[attr-defined]
        module._cached_cleaned_instructions = cleaned

    if MODULE in sys.modules:
        wrap()
    else:
        after_import(MODULE, wrap)


def line_recorder(log: str, keep: Callable[[str], bool], context: Callable[[], str]) -> Callable[[Any], None]:
    """A `record_reads` callback: every line of each code object dynamo reads whose file ``keep``
    accepts goes to ``context()``, appended to ``log`` as one JSON line ``{context: {path:
    [line, ...]}}`` (`ci.observe.child`'s parts, which the merge reads). Never raises for a log
    it cannot write (the recording is over)."""
    seen: set[tuple[str, Any]] = set()

    def on_read(code: Any) -> None:
        where = context()
        if (where, code) in seen or not keep(code.co_filename):
            return
        seen.add((where, code))
        lines = sorted({line for _, _, line in code.co_lines() if line})
        record = json.dumps({where: {code.co_filename: lines}}) + "\n"
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, record.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError:
            pass

    return on_read


class AfterImport:
    """A meta path finder that calls ``then`` once, right after the module ``name`` is executed,
    and takes itself out of ``sys.meta_path`` the first time it sees that name."""

    def __init__(self, name: str, then: Callable[[], None]):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run, then = spec.loader.exec_module, self.then

        def exec_module(module):
            run(module)
            sys.modules[fullname] = module  # wrap_pytest imports it by name: it must be there already
            then()

        spec.loader.exec_module = exec_module
        return spec


def after_import(name: str, then: Callable[[], None]) -> None:
    """Call ``then`` right after the module ``name`` is first executed (`AfterImport`)."""
    sys.meta_path.insert(0, AfterImport(name, then))
