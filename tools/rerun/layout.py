"""The runs table's layout: what needs attention first, passing shards collapsed, the pacing said.

Contract: `relayout(body)` rewrites the runs table of a reply (the table that starts at
`runs_table.HEADER`, with what this module wrote around it) from its rows alone, so every writer
(the bot's progress and final edits, each run's ``report``, the ``workflow_run`` hook) leaves the
same layout for the same rows, and a row stays one line that `runs_table.find_row` and `put_row`
find wherever it sits:

- a table with a shard row (part ``i/N``, a ``/rerun-tier``) is ordered: rows that failed or
  gave no result (and failed dispatches) first, then the rows still waiting (``dispatched``), and
  the passed rows last, collapsed in a ``<details>`` whose summary counts them (GFM renders a
  table inside ``<details>`` when blank lines surround it); within a group, by tier and shard.
  Its tests cells become counts (`fit.count_tests`, ``3 test(s)``): a shard's list of paths made
  each row hundreds of pixels tall at 828 px, and a failing row names its failing ids anyway;
- while any row waits, a note above the table says that results are paced and how long a
  finished run's row may take to appear: runs write their rows one at a time,
  `budget.REPORT_SLOT_SECONDS` apart, each in its own slot of a cycle as long as the comment's
  runs (`budget.report_slot_wait`); the note goes once nothing waits.

A body without a runs table in the current layout is returned as it is.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from tools.rerun.budget import REPORT_SLOT_SECONDS, shard_of
from tools.rerun.fit import count_tests
from tools.rerun.headline import WAITING
from tools.rerun.runs_table import HEADER, SEPARATOR, RunRow, parse_row

NOTE_OPEN, NOTE_CLOSE = "<!-- pacing -->", "<!-- /pacing -->"
DETAILS_CLOSE = "</details>"
_DETAILS_OPEN = re.compile(r"<details><summary>[^<>]*</summary>")
PASSED = "**passed**"
ATTENTION, WAITS, PASSES = 0, 1, 2


def group(row: RunRow) -> int:
    """`ATTENTION` (failed, no result, no report, dispatch failed), `WAITS` or `PASSES`."""
    if row.result.startswith(PASSED):
        return PASSES
    return WAITS if row.result.startswith(WAITING) else ATTENTION


def pacing_note(waited: int) -> str:
    """The note shown while runs are pending, for a comment of ``waited`` runs."""
    cycle = math.ceil(waited * REPORT_SLOT_SECONDS)
    return (f"{NOTE_OPEN}_Results are paced to stay within GitHub's write limits: the runs write their rows "
            f"one at a time, one every {REPORT_SLOT_SECONDS:.1f} s, each in its own turn, so a run's row can "
            f"appear up to {cycle} s after it ends._{NOTE_CLOSE}")


def _order(row: RunRow) -> tuple[int, str, int, int]:
    shard = shard_of(row.part)
    return group(row), row.tier, *(shard or (0, 0))


def _region(lines: list[str]) -> tuple[int, int] | None:
    """[start, end) of the runs table and what this module wrote around it, or None."""
    if HEADER not in lines:
        return None
    start = lines.index(HEADER)
    if start >= 2 and lines[start - 1] == "" and lines[start - 2].startswith(NOTE_OPEN):
        start -= 2
    last = start
    for i in range(start, len(lines)):
        line = lines[i]
        if line in (HEADER, SEPARATOR, DETAILS_CLOSE) or line.startswith(NOTE_OPEN) \
                or _DETAILS_OPEN.fullmatch(line) or parse_row(line) is not None:
            last = i
        elif line != "":
            break
    return start, last + 1


def _rows_table(rows: list[RunRow]) -> list[str]:
    return [HEADER, SEPARATOR] + [r.render() for r in rows]


def relayout(body: str) -> str:
    """``body`` with its runs table laid out as the module docstring says."""
    lines = body.split("\n")
    region = _region(lines)
    if region is None:
        return body
    start, end = region
    rows = [row for line in lines[start:end] if (row := parse_row(line)) is not None]
    out: list[str] = []
    waited = [r for r in rows if r.has_results or r.result.startswith(WAITING)]
    if any(r.result.startswith(WAITING) for r in rows):
        out += [pacing_note(len(waited)), ""]
    if any(shard_of(r.part) for r in rows):
        rows = sorted((replace(r, tests=count_tests(r.tests)) for r in rows), key=_order)
        shown = [r for r in rows if group(r) != PASSES]
        passed = [r for r in rows if group(r) == PASSES]
        out += _rows_table(shown)
        if passed:
            out += ["", f"<details><summary>{len(passed)} passed run(s)</summary>", ""]
            out += _rows_table(passed) + ["", DETAILS_CLOSE]
    else:
        out += _rows_table(rows)
    return "\n".join(lines[:start] + out + lines[end:])


__all__ = ["ATTENTION", "NOTE_CLOSE", "NOTE_OPEN", "PASSES", "WAITS", "group", "pacing_note", "relayout"]
