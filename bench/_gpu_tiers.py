"""Part a of `bench.gpu`: every GPU tier of the registry that this machine fits, through `ci run`.

A tier fits when `ci.running.hardware.LazyHardware` finds nothing missing (what `ci run --tier T`
checks before it runs). Each fitting tier runs as ``python -m ci run --tier T --registry R
--junit J`` in a child process (its own process group, killed whole at the time limit); its JUnit
report is read back here. A tier passes when `ci run` exits 0, at least one test passed, none
failed or errored, and no test skipped outside the files the registry excuses (``may_skip: true``
or quarantined, the files `ci run` itself excuses when a whole tier skips). `ci run` fails a GPU
tier only when every test skipped; on a GPU machine check any skip is a test that did not run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ci.registry import Registry, Status, load_registry
from ci.results.junit import ERROR, FAILED, PASSED, SKIPPED, parse_junit
from ci.running.hardware import LazyHardware

TIER_TIMEOUT_S = 360.0
LOG_TAIL_LINES = 40


@dataclass(frozen=True)
class TierRow:
    """One GPU tier's outcome. ``skipped`` counts every skip, ``excused`` those of may_skip or
    quarantined files; ``problem`` is why the tier failed (``""`` when it passed), ``log_tail``
    the end of `ci run`'s output when it failed."""

    tier: str
    passed: int
    failed: int
    skipped: int
    excused: int
    problem: str
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        return not self.problem


def fitting_tiers(registry: Registry) -> tuple[list[str], dict[str, str]]:
    """(GPU tiers this machine fits, in registry order; {tier: what is missing} for the others)."""
    hardware = LazyHardware()
    fits: list[str] = []
    gaps: dict[str, str] = {}
    for name, tier in registry.tiers.items():
        if not tier.needs_gpu:
            continue
        gap = hardware.missing(tier)
        if gap is None:
            fits.append(name)
        else:
            gaps[name] = gap
    return fits, gaps


def run_tier(registry_path: Path, root: Path, tier: str, timeout_s: float = TIER_TIMEOUT_S) -> TierRow:
    """Run ``tier`` through `ci run` from ``root`` and count its JUnit report (see the module docstring)."""
    registry = load_registry(registry_path)
    excused = {p for p, e in registry.tests.items() if e.may_skip or e.status is Status.QUARANTINED}
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        junit, log_path = Path(tmp) / f"junit-{tier}.xml", Path(tmp) / "ci-run.log"
        argv = [sys.executable, "-m", "ci", "run", "--tier", tier, "--registry", str(registry_path),
                "--junit", str(junit)]
        with open(log_path, "w") as log:
            child = subprocess.Popen(argv, cwd=root, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc: int | None = child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)  # the xdist workers too
                child.wait()
                rc = None
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
        if not junit.is_file():
            why = f"timed out after {timeout_s:.0f} s" if rc is None else f"ci run exited {rc}"
            return TierRow(tier, 0, 0, 0, 0, f"{why}, no JUnit report", tail)
        cases = parse_junit(junit, root=root, known_files=registry.tests).cases
    passed = sum(c.outcome == PASSED for c in cases)
    failed = sum(c.outcome in (FAILED, ERROR) for c in cases)
    skips = [c for c in cases if c.outcome == SKIPPED]
    unexcused = [c for c in skips if c.file not in excused]
    problems = []
    if rc is None:
        problems.append(f"timed out after {timeout_s:.0f} s")
    elif rc != 0:
        problems.append(f"ci run exited {rc}")
    if failed:
        problems.append(f"{failed} failed")
    if unexcused:
        files = sorted({c.file or "(unknown file)" for c in unexcused})
        problems.append(f"{len(unexcused)} skipped outside may_skip files ({', '.join(files)})")
    if not passed:
        problems.append("no test passed")
    problem = "; ".join(problems)
    return TierRow(tier, passed, failed, len(skips), len(skips) - len(unexcused), problem, tail if problem else "")
