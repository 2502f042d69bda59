"""Fitting a bot reply under GitHub's comment limit without ever dropping a runs-table row.

`replies.cap` cuts a body at a line boundary; for a reply whose runs table is long (a `/rerun-tier`
of many shards, each row holding failing node ids) that cut falls inside the table and drops rows,
results included. `fit` shortens the table's cells first, in steps, stopping at the first step
that fits:

1. every tests cell becomes a count (``7 test(s)``), every failing list keeps its first
   `SHORT_FAILING` ids;
2. result cells keep the verdict, the counts and the time (the failing ids are in the run's log
   and its JUnit report, which the row links);
3. runner cells become ``…`` (the tier names the runner);
4. result cells keep the outcome and the non-zero counts only (``**failed**: 41 passed, 1 failed``),
   verdict cells one word (`verdicts.short_cell`: ``broken+``), tests cells ``—``.

Every row keeps its key, its run link and the start of its result cell (``**failed**: 1 passed,
...``), so `runs_table.find_row` and `RunRow.has_results` read it as before, and a later report
edits it in place. So that no reply ever needs more, ``/rerun-tier`` refuses a tier with more
shards than `max_rows` (the worst case of step 4, about 200 rows); `replies.cap` stays the last
resort for anything else.
"""

from __future__ import annotations

import re
from dataclasses import replace

from tools.rerun.replies import MAX_BODY_CHARS, _size, cap
from tools.rerun.runs_table import NO_VERDICT, RunRow, parse_row
from tools.rerun.verdicts import SHORT_WORST, short_cell

SHORT_FAILING = 3
STEPS = (1, 2, 3, 4)
FAILING = "<br>failing:<br>"
_MORE = re.compile(r"… and (\d+) more$")
_COUNTS = re.compile(r"(\*\*[a-z ]+\*\*): (\d+) passed, (\d+) failed, (\d+) skipped, (\d+) errors in .*")
_SHORTEST = re.compile(r"\*\*[a-z ]+\*\*(?:: [0-9a-z ,]+)?")
_COUNTED = re.compile(r"\d+ test\(s\)")


def count_tests(cell: str) -> str:
    """``<n> test(s)`` for a tests cell of ``<br>``-separated entries ending in ``… and N more``."""
    if not cell or cell == "—" or _COUNTED.fullmatch(cell):
        return cell
    items = cell.split("<br>")
    more = _MORE.fullmatch(items[-1])
    count = len(items) - 1 + int(more[1]) if more else len(items)
    return f"{count} test(s)"


def _short_result(cell: str, step: int) -> str:
    head, sep, failing = cell.partition(FAILING)
    if step >= 4:
        counts = _COUNTS.fullmatch(head)
        if counts is None:
            return head if _SHORTEST.fullmatch(head) else head.split(":", 1)[0]  # ``**no report**``
        kept = [f"{n} {what}" for n, what in zip(counts.groups()[1:], ("passed", "failed", "skipped", "errors"))
                if n != "0"]
        return f"{counts[1]}: {', '.join(kept) or 'no test'}"
    if step >= 2:
        if cell.startswith("**no report**") and len(head) > 60:
            return "**no report**: the run produced no report (the reason is in its log)"
        return head + (" (failing ids: in the run)" if sep else "")
    if not sep:
        return cell
    ids = failing.split("<br>")
    more = _MORE.fullmatch(ids[-1])
    total = len(ids) - 1 + int(more[1]) if more else len(ids)
    ids = [i for i in ids if not _MORE.fullmatch(i)]
    shown = ids[:SHORT_FAILING]
    rest = total - len(shown)
    return head + FAILING + "<br>".join(shown) + (f"<br>… and {rest} more" if rest > 0 else "")


def shorten(row: RunRow, step: int) -> RunRow:
    """``row`` with its cells shortened to ``step`` (1 to 4, see the module docstring)."""
    row = replace(row, tests=count_tests(row.tests))
    if row.has_results:
        row = replace(row, result=_short_result(row.result, step))
    if step >= 3:
        row = replace(row, runner="…")
    if step >= 4:
        row = replace(row, verdict=short_cell(row.verdict), tests="—" if row.tests else row.tests)
    return row


# The longest run link a row can hold on github.com: owner 39 and repository 100 characters, a
# 20-digit run id.
_LONGEST_RUN = f"[run](https://github.com/{'o' * 39}/{'r' * 100}/actions/runs/{'9' * 20})"
# Room kept for everything in a reply that is not a runs-table row (header, notes, the marker).
REPLY_OVERHEAD = 8_000


def max_rows(tier: str, limit: int = MAX_BODY_CHARS) -> int:
    """How many rows of ``tier`` one reply holds with every result kept, whatever the results:
    rows at `fit`'s last step with the longest run link and five-digit counts."""
    worst = RunRow(tier, "99999/99999", "…", NO_VERDICT, _LONGEST_RUN,
                   "**failed**: 99999 passed, 99999 failed, 99999 skipped, 99999 errors", "v" * SHORT_WORST)
    return max(0, (limit - REPLY_OVERHEAD) // (_size(worst.render()) + 1))


def fit(body: str, limit: int = MAX_BODY_CHARS) -> str:
    """``body`` if it fits ``limit`` characters, else with its runs-table cells shortened step by
    step until it does (see the module docstring); `replies.cap` only as the last resort."""
    if _size(body) <= limit:
        return body
    lines = body.split("\n")
    rows = {i: row for i, line in enumerate(lines) if (row := parse_row(line)) is not None}
    for step in STEPS:
        for i, row in rows.items():
            lines[i] = shorten(row, step).render()
        shortened = "\n".join(lines)
        if _size(shortened) <= limit:
            return shortened
    return cap(shortened, limit)


__all__ = ["STEPS", "SHORT_FAILING", "count_tests", "fit", "shorten"]
