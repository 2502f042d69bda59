"""The est_time drift rule at its edges, in each of its three places (issue #32's mutation survivors).

The rule (docs/results.md): a file drifts when its measured time is off its
``est_time`` by *more than* 25 % *and* by *more than* 5 seconds, either way. Exactly 25 % or exactly
5 s is not drift. `ci durations` (`ci.results.durations.collect`), `ci run`'s summary
(`ci.results.summary`) and the HUD (`ci.report.build.drifted`) must agree on every case below;
each case's numbers are exact in binary floating point, so the boundary is hit exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.registry import parse_registry
from ci.report.build import drifted
from ci.results.durations import collect
from ci.results.junit import FileResult, parse_junit
from ci.results.summary import summarize
from tests.ci.history_support import Case, junit_xml

CASES = [
    # est_time, measured, drifts
    (40.0, 50.0, False),    # +25 % exactly (10 s)
    (40.0, 50.5, True),     # +26.25 %, 10.5 s
    (40.0, 30.0, False),    # -25 % exactly
    (40.0, 29.5, True),     # -26.25 %
    (8.0, 13.0, False),     # +62.5 % but 5 s exactly
    (8.0, 13.5, True),      # +68.75 %, 5.5 s
    (8.0, 3.0, False),      # 5 s under exactly
    (8.0, 2.5, True),       # 5.5 s under, -68.75 %
    (10.0, 12.5, False),    # +25 % and only 2.5 s
    (100.0, 124.0, False),  # 24 s over but +24 %
    (100.0, 125.5, True),
]
FILE = "tests/test_t.py"


@pytest.mark.parametrize("est, measured, drifts", CASES)
def test_the_hud_drift_boundary(est: float, measured: float, drifts: bool) -> None:
    assert drifted(measured, est) is drifts


@pytest.mark.parametrize("est, measured, drifts", CASES)
def test_the_run_summary_drift_boundary(est: float, measured: float, drifts: bool) -> None:
    summary = summarize({FILE: FileResult(FILE, tests=1, passed=1, time=measured)}, {FILE: est}, measured)
    assert [r.file for r in summary.drifting] == ([FILE] if drifts else [])


@pytest.mark.parametrize("est, measured, drifts", CASES)
def test_the_durations_drift_boundary(tmp_path: Path, est: float, measured: float, drifts: bool) -> None:
    registry, problems = parse_registry(
        "version: 1\ntiers:\n  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}\n"
        f"tests:\n  {FILE}: {{tiers: [cpu], est_time: {est:g}, owner: me, status: active}}\n", "registry.yaml")
    assert problems == [] and registry is not None
    report = tmp_path / "r.xml"
    report.write_text(junit_xml([Case(FILE, "test_one", time=measured)]), encoding="utf-8")
    result = collect([parse_junit(report)], registry)
    assert result.measurements[FILE].value == measured
    assert [d.path for d in result.drifts] == ([FILE] if drifts else [])
