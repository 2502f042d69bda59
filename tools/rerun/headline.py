"""The reply's headline: what was dispatched, then, as results arrive, the outcome and its tally.

Contract: the bot writes the changing part of its first sentence between `OPEN` and `CLOSE`
(HTML comments, which GitHub does not show): ``4 of 4 run(s) dispatched`` at first. `retitle`
rewrites that span from the runs table alone, so every writer (the bot's final edit, each run's
``report``) leaves the same headline for the same rows:

- no row has results yet: the span is left as it is;
- some have: ``2 of 4 runs reported so far: 40 passed, 1 failed: flaky 9 % ±4 over 120 runs ...``;
- all have: ``3 passed, 1 failed: broken on main since abc1234`` (a single failure gives its
  verdict's detail, several a tally of verdicts: ``2 broken on main, 1 new``).

A row waits for results while its result cell starts with ``dispatched``; rows whose dispatch
failed are not waited for. Runs that wrote no report, and runs that ended without sending any
result (`SILENT`, written by `silent_cell`), are named after the tally with their run link, so a
missing shard is never mistaken for a passing one.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from tools.rerun.runs_table import TARGETS_PART, RunRow, rows_in
from tools.rerun.verdicts import cell_kinds, tally_text

OPEN, CLOSE = "<!-- status -->", "<!-- /status -->"
SILENT = "**no result**"
NO_REPORT = "**no report**"
WAITING = "dispatched"
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors)\b")
_CONCLUSION = re.compile(r"[a-z_]{1,40}")


def span(text: str) -> str:
    """``text`` as the headline's changing part."""
    return f"{OPEN}{text}{CLOSE}"


def silent_cell(conclusion: str) -> str:
    """The result cell of a run that ended (``conclusion`` as GitHub gives it: ``cancelled``,
    ``failure``, ``timed_out``...) without sending any result."""
    shown = conclusion if _CONCLUSION.fullmatch(conclusion) else "unknown"
    return f"{SILENT}: the run ended ({shown}) without sending a result"


@dataclass(frozen=True)
class Tally:
    """What the rows hold: runs waited for and reported, test counts, verdict kinds, and the rows
    that reported nothing usable."""

    expected: int
    reported: int
    counts: Counter[str]
    kinds: Counter[str]
    single: str | None  # the verdict cell of the only failing test, when there is exactly one
    no_report: tuple[RunRow, ...]
    silent: tuple[RunRow, ...]


def tally(rows: Sequence[RunRow]) -> Tally:
    """The `Tally` of a runs table's rows."""
    expected = [r for r in rows if r.has_results or r.result.startswith(WAITING)]
    reported = [r for r in expected if r.has_results]
    counts: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    verdict_cells = []
    for row in reported:
        if row.result.startswith(("**passed**", "**failed**")):
            for number, what in _COUNT.findall(row.result.partition("<br>")[0]):
                counts[what] += int(number)
            if cell_kinds(row.verdict):
                kinds += cell_kinds(row.verdict)
                verdict_cells.append(row.verdict)
    single = verdict_cells[0] if counts["failed"] + counts["errors"] == 1 and sum(kinds.values()) == 1 else None
    return Tally(len(expected), len(reported), counts, kinds, single,
                 tuple(r for r in reported if r.result.startswith(NO_REPORT)),
                 tuple(r for r in reported if r.result.startswith(SILENT)))


def _name(row: RunRow) -> str:
    what = f"`{row.tier}` targets" if row.part == TARGETS_PART else f"shard {row.part} of `{row.tier}`"
    return f"{what} ({row.run})" if row.run.startswith("[") else what


MAX_NAMED = 5


def _named(rows: Sequence[RunRow]) -> str:
    more = len(rows) - MAX_NAMED
    return ", ".join(_name(r) for r in rows[:MAX_NAMED]) + (f" and {more} more" if more > 0 else "")


def outcome(rows: Sequence[RunRow]) -> str | None:
    """The headline's changing part for ``rows``, or None while no row has results."""
    t = tally(rows)
    if not t.reported:
        return None
    c = t.counts
    text = f"{c['passed']} passed, {c['failed']} failed" + (f", {c['errors']} errors" if c["errors"] else "")
    if t.single:
        text += f": {t.single}"
    elif t.kinds:
        text += f": {tally_text(t.kinds)}"
    if t.reported < t.expected:
        text = f"{t.reported} of {t.expected} runs reported so far: {text}"
    if t.silent:
        text += "; no result from " + _named(t.silent)
    if t.no_report:
        text += "; no report from " + _named(t.no_report)
    return text


def retitle(body: str) -> str:
    """``body`` with its headline span rewritten from its runs table (see the module docstring)."""
    start = body.find(OPEN)
    end = body.find(CLOSE, start + len(OPEN)) if start >= 0 else -1
    if end < 0:
        return body
    text = outcome(rows_in(body))
    if text is None:
        return body
    return body[:start] + span(text) + body[end + len(CLOSE):]


__all__ = ["CLOSE", "NO_REPORT", "OPEN", "SILENT", "Tally", "outcome", "retitle", "silent_cell", "span", "tally"]
