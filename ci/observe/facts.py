"""Per test file facts beyond lines: how long it ran, how it ended, why pytest skipped it.

Each recording process that runs tests adds them to its ``items.<pid>.json`` part under
``"facts"``: ``{test: {"duration_s": s, "outcomes": [...], "skip_reasons": [...]}}``. A pytest
process (`ci.observe.record`) adds each report of a test file's items (`PytestFacts`); a test
script's own process (`ci.observe.script_test`) its wall time and exit status. The merge
(`combine`) sums durations (xdist workers share a file's items), keeps every skip reason once,
and gives a file one outcome: ``error`` when any setup or teardown failed, else ``failed`` when any
test failed, else ``passed`` when any passed, else ``skipped``.

Contract: nothing here raises for a report it does not understand; `combine` skips a record of
another shape. A named tuple, not a dataclass: test scripts import this module at start-up.
"""

from __future__ import annotations

from typing import Any, Iterable, NamedTuple

RANK = ("error", "failed", "passed", "skipped")  # the first a file has is its outcome
MAX_REASONS = 20  # a file that skips each of 500 parametrised cases for its own reason


class Facts(NamedTuple):
    """One test file's merged facts (`combine`)."""

    duration_s: float | None
    outcome: str | None
    skip_reasons: tuple[str, ...]


def report_outcome(when: str, outcome: str) -> str | None:
    """The outcome one pytest report stands for: a failed setup or teardown is an ``error``, a
    passed setup or teardown none."""
    if when == "call":
        return outcome
    if outcome == "failed":
        return "error"
    return "skipped" if outcome == "skipped" else None


def skip_reason(longrepr: Any) -> str | None:
    """pytest's skip reason from a skipped report's ``longrepr`` ((path, line, "Skipped: why"))."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3 and isinstance(longrepr[2], str):
        return longrepr[2].removeprefix("Skipped: ")
    return None


class PytestFacts:
    """What one pytest process saw of each test file's reports."""

    def __init__(self) -> None:
        self.files: dict[str, dict[str, Any]] = {}

    def add(self, test: str, when: str, outcome: str, duration: float, longrepr: Any) -> None:
        """One report of ``test``'s item (setup, call or teardown)."""
        entry = self.files.setdefault(test, {"duration_s": 0.0, "outcomes": [], "skip_reasons": []})
        entry["duration_s"] += max(0.0, float(duration))
        kind = report_outcome(when, outcome)
        if kind is not None and kind not in entry["outcomes"]:
            entry["outcomes"].append(kind)
        reason = skip_reason(longrepr) if outcome == "skipped" else None
        if reason is not None and reason not in entry["skip_reasons"] and len(entry["skip_reasons"]) < MAX_REASONS:
            entry["skip_reasons"].append(reason)


def combine(records: Iterable[Any]) -> dict[str, Facts]:
    """Every process's ``"facts"`` record merged per test file (see the module docstring)."""
    duration: dict[str, float] = {}
    outcomes: dict[str, set[str]] = {}
    reasons: dict[str, list[str]] = {}
    for record in records:
        if not isinstance(record, dict):
            continue
        for test, entry in record.items():
            if not isinstance(entry, dict):
                continue
            seconds = entry.get("duration_s")
            duration[test] = duration.get(test, 0.0) + (seconds if isinstance(seconds, (int, float)) else 0.0)
            outcomes.setdefault(test, set()).update(o for o in entry.get("outcomes", ()) if o in RANK)
            found = reasons.setdefault(test, [])
            found.extend(r for r in entry.get("skip_reasons", ()) if isinstance(r, str) and r not in found)
    return {test: Facts(round(duration[test], 3), next((o for o in RANK if o in outcomes[test]), None),
                        tuple(reasons[test][:MAX_REASONS])) for test in duration}
