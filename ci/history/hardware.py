"""A GPU's hardware fault, told by its error line: the machine's, whichever test met it.

Contract: `hardware_fault(line)` is true when ``line`` names a fault of the device itself, not of
the code running on it: CUDA's uncorrectable ECC error (cudaErrorECCUncorrectable, "uncorrectable
ECC error encountered"), a GPU that has fallen off the bus, or an NVIDIA driver Xid event whose
number NVIDIA's Xid catalogue lays on the hardware (48 double-bit ECC, 63/64 row remapping or page
retirement, 74 NVLink, 79 fallen off the bus, 92 a high single-bit ECC rate, 94/95 contained and
uncontained ECC errors). Other Xids (13 and 31 are an application's bad access as often as not)
and every other CUDA error are not told here. An assertion that quotes such text is the test's own
check (`ci.history.errors.is_check`), never a fault.

No test's race flips a bit in device memory or takes the GPU off the bus: the fault follows the
machine, and every test that meets it after the fault fails alike, so a test's earlier failures
of this kind are never its own flake evidence (`ci.history.infra_flakes`) and rule 1 of
`ci.history.verdict` keeps such a failure infra when no runner is to blame (`machine_only`), as it
keeps a missing GPU (`ci.history.infra_flakes.MACHINE_KINDS`). The infra kind ingest stores stays
``cuda``: only the reading of the line is new, so stores written before need no migration.
"""

from __future__ import annotations

import re

from ci.history.errors import is_check

_HARDWARE = re.compile(r"uncorrectable ECC error|cudaErrorECCUncorrectable|\bECC errors? (?:detected|encountered)"
                       r"|fallen off the bus|\bXid\b(?:\s*\([^)]*\))?:?\s*(?:48|63|64|74|79|92|94|95)\b", re.I)


def hardware_fault(line: str) -> bool:
    """Whether ``line`` names a GPU's hardware fault (see the module docstring)."""
    return bool(line) and not is_check(line) and _HARDWARE.search(line) is not None


def machine_only(kind: str, line: str, machine_kinds: frozenset[str]) -> bool:
    """Whether an infra-looking failure of ``kind`` with error ``line`` can only be a machine's:
    ``kind`` is one of ``machine_kinds`` or the line names a hardware fault."""
    return bool(kind) and (kind in machine_kinds or hardware_fault(line))
