"""What an observed run (`ci observe`'s map) says about each test file's tier and time.

A test file **needs a GPU** when its entry has ``devices`` (`ci.observe.devices`): it touched CUDA,
launched a Triton kernel (the interpreter's launches included: on a GPU runner they compile for
the GPU), or started NCCL, or it tried to and failed for lack of a GPU, or pytest skipped it
because CUDA or a GPU was missing, or a device guard failed it, or it failed after its own code
heard no from ``torch.cuda.is_available()``, or its own module code or test function put that
answer on a device (device-adaptive, `ci.observe.adaptive`: passed or not, a GPU runner runs its
GPU path) (`ci.observe.facts`). Its observed ``duration_s`` gives ``est_time`` by `ci durations
--write`'s rule (``ceil(seconds x 1.1)``, at least 1) and, for a GPU test, ``timeout`` by the
registry's (``max(120, 4 x est_time)``, `ci.registry.derived_timeout`).

Contract: `read_observed` raises ValueError naming the file for a file it cannot read, a map that
`ci.selection.depmap_format.parse_depmap` refuses, or one without facts (not version 3).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping

from ci.registry import derived_timeout
from ci.registry.model import Status, TestEntry
from ci.regular_file import MAX_REPORT_BYTES, read_regular
from ci.results.durations import propose
from ci.selection.depmap_format import DepmapError, parse_depmap


@dataclass(frozen=True)
class Observed:
    """One test file's facts from an observed run."""

    path: str
    devices: tuple[str, ...]
    evidence: tuple[str, ...]
    duration_s: float | None
    outcome: str | None

    @property
    def needs_gpu(self) -> bool:
        return bool(self.devices)

    @property
    def est_time(self) -> int | None:
        """The est_time its observed duration gives (None: no duration observed)."""
        return None if self.duration_s is None else propose(self.duration_s)

    def why(self) -> str:
        """``cuda, triton: torch.cuda.init; triton launch k.py:add`` (at most three pieces of evidence)."""
        shown = "; ".join(self.evidence[:3]) + (" ..." if len(self.evidence) > 3 else "")
        return f"{', '.join(self.devices)}: {shown}"


def read_observed(path: str | Path) -> dict[str, Observed]:
    """Each test file of the observed map at ``path`` (see the module docstring)."""
    try:
        text = read_regular(path, MAX_REPORT_BYTES)
    except OSError as exc:
        raise ValueError(f"cannot read observed facts {path}: {exc.strerror or exc}") from None
    try:
        depmap = parse_depmap(text, str(path))
    except DepmapError as exc:
        raise ValueError(f"{exc} (write it with `python -m ci observe --out {path} -- COMMAND`)") from None
    if not any(t.duration_s is not None or t.outcome is not None for t in depmap.tests.values()):
        raise ValueError(f"{path}: no observed facts (a version-3 map from `python -m ci observe`, not a recording's)")
    return {p: Observed(p, t.devices, t.device_evidence, t.duration_s, t.outcome) for p, t in depmap.tests.items()}


def gpu_reason(seen: Observed) -> str:
    """The manual reason of an observed GPU test on a registry without a GPU tier."""
    return f"a GPU test (observed {seen.why()}); give it a GPU tier, the cpu tier cannot run it"


def with_observed(tests: Mapping[str, TestEntry], observed: Mapping[str, Observed]) -> dict[str, TestEntry]:
    """``tests`` with each observed file's est_time measured; an observed GPU test is made manual
    with `gpu_reason` and gets its timeout (see the module docstring)."""
    out = dict(tests)
    for path, seen in observed.items():
        entry = out.get(path)
        if entry is None:
            continue
        est = seen.est_time if seen.est_time is not None else entry.est_time
        entry = replace(entry, est_time=est)
        if seen.needs_gpu:
            entry = replace(entry, status=Status.MANUAL, reason=gpu_reason(seen), timeout=derived_timeout(est))
        out[path] = entry
    return out
