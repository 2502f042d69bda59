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
"""

from __future__ import annotations

import dis
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
