"""Which rows of the matrix need a look first, and since which commit they fail.

Contract:
- A row's *results* are its cells that say something about the code: pass, flaky, fail,
  broken and infra (a failure all the same: it stays red until a run passes). not-run, skipped, quarantined and manual say nothing, so they never end a streak.
- FAILING: the row's latest result is fail, broken or infra. Its streak is the unbroken run of
  those results back from the latest one; ``since`` is the column of the streak's oldest
  failure (the first commit of the current breakage), ``streak`` how many columns failed in it.
  A streak that reaches the oldest column shown may have begun earlier.
- FLAKY: not failing, and a flaky, fail or broken cell among the last `RECENT` columns.
- OK: everything else (what the page's hide-green toggle hides).
- `ordered` puts FAILING rows first, then FLAKY, then OK; inside a group the rows keep the order
  they were given (the registry's), so the order is stable from one page to the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Sequence, TypeVar

from ci.report.model import (BROKEN, FAIL, FAILING_ROW, FLAKY, INFRA, FLAKY_ROW, OK_ROW, PASS, RECENT, ROW_STATES,
                             FileRow)

_RESULTS = frozenset((PASS, FLAKY, FAIL, BROKEN, INFRA))
_FAILED = frozenset((FAIL, BROKEN, INFRA))
_SHAKY = frozenset((FLAKY, FAIL, BROKEN, INFRA))


@dataclass(frozen=True)
class Triage:
    """A row's state (`ci.report.model.ROW_STATES`) and, when FAILING, its streak: the column it
    began in, the failing columns in it, and the latest result's column."""

    state: str
    since: int = -1
    streak: int = 0
    latest: int = -1


def triage(cells: Sequence[str], recent: int = RECENT) -> Triage:
    """The state of one row of statuses, oldest first (see the module docstring)."""
    results = [i for i, status in enumerate(cells) if status in _RESULTS]
    if results and cells[results[-1]] in _FAILED:
        since, streak = results[-1], 0
        for i in reversed(results):
            if cells[i] not in _FAILED:
                break
            since, streak = i, streak + 1
        return Triage(FAILING_ROW, since, streak, results[-1])
    if any(status in _SHAKY for status in cells[max(0, len(cells) - recent):]):
        return Triage(FLAKY_ROW)
    return Triage(OK_ROW)


def days_between(first: str, last: str) -> float:
    """Days from ISO 8601 time ``first`` to ``last``; 0.0 when either is empty or unreadable."""
    try:
        return max(0.0, (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds() / 86400.0)
    except ValueError:
        return 0.0


Row = TypeVar("Row", bound=FileRow)


def ordered(rows: Sequence[Row]) -> list[Row]:
    """``rows`` with FAILING first, then FLAKY, then OK, each group in its given order."""
    rank = {state: i for i, state in enumerate(ROW_STATES)}
    return sorted(rows, key=lambda r: rank[r.state])
