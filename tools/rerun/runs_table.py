"""The runs table of a bot reply: one row per dispatched run, found and edited in place by key.

A row is ``| `tier` | part | result | verdict | run | tests | `runner labels` |``: the result and what
the test history says of its failures (`tools.rerun.verdicts`) come first, so that they stay in
view and the wide cells (tests, runner) wrap last. Its key is (tier, part),
where part is ``targets`` (the `/rerun-test` targets of that tier) or ``i/N`` (shard i of N of a
`/rerun-tier` run). Every cell is written by the bot: tier names match ``[A-Za-z_][A-Za-z0-9_]*``
and text from elsewhere goes through `commands.quote`, so a cell never holds a raw ``|`` and a
row splits back into the same cells.

A result cell that starts with ``**`` holds results (written by ``report``); anything else
(``dispatched``, ``dispatch failed: ...``) is a placeholder waiting for them.

Replies written before the verdict column (``| tier | part | runner | tests | run | result |``) are
still read: such a row parses with an empty verdict, and `put_row` rewrites the whole table in the
current layout the first time it edits one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

HEADER = "| tier | part | result | verdict | run | tests | runner |"
SEPARATOR = "|---|---|---|---|---|---|---|"
LEGACY_HEADER = "| tier | part | runner | tests | run | result |"
LEGACY_SEPARATOR = "|---|---|---|---|---|---|"
NO_VERDICT = "—"
TARGETS_PART = "targets"


@dataclass(frozen=True)
class RunRow:
    """One row; every field is the cell's Markdown."""

    tier: str
    part: str
    runner: str
    tests: str
    run: str
    result: str
    verdict: str = NO_VERDICT

    @property
    def key(self) -> tuple[str, str]:
        return self.tier, self.part

    @property
    def has_results(self) -> bool:
        return self.result.startswith("**")

    def render(self) -> str:
        return (f"| `{self.tier}` | {self.part} | {self.result} | {self.verdict or NO_VERDICT} | {self.run} "
                f"| {self.tests} | {self.runner} |")

    def with_result(self, result: str, run: str | None = None, verdict: str = NO_VERDICT) -> "RunRow":
        return replace(self, result=result, run=run if run is not None else self.run, verdict=verdict)


def parse_row(line: str) -> RunRow | None:
    """The row on ``line``, or None if the line is not a runs-table row."""
    if not (line.startswith("| `") and line.endswith(" |")):
        return None
    cells = line[2:-2].split(" | ")
    if len(cells) not in (6, 7) or not (cells[0].startswith("`") and cells[0].endswith("`")):
        return None
    if len(cells) == 6:  # the layout before the verdict column
        tier, part, runner, tests, run, result = cells
        return RunRow(tier[1:-1], part, runner, tests, run, result)
    tier, part, result, verdict, run, tests, runner = cells
    return RunRow(tier[1:-1], part, runner, tests, run, result, verdict)


def rows_in(body: str) -> list[RunRow]:
    return [row for line in body.split("\n") if (row := parse_row(line)) is not None]


def find_row(body: str, tier: str, part: str) -> RunRow | None:
    return next((row for row in rows_in(body) if row.key == (tier, part)), None)


def table(rows: list[RunRow]) -> str:
    return "\n".join([HEADER, SEPARATOR] + [row.render() for row in rows])


def _current_layout(lines: list[str]) -> list[str]:
    """``lines`` with a table in the layout before the verdict column rewritten in the current one."""
    if LEGACY_HEADER not in lines:
        return lines
    start = lines.index(LEGACY_HEADER)
    out = lines[:start] + [HEADER, SEPARATOR]
    end = start + 2
    while end < len(lines) and (row := parse_row(lines[end])) is not None:
        out.append(row.render())
        end += 1
    return out + lines[end:]


def put_row(body: str, row: RunRow) -> str:
    """``body`` with the row of ``row.key`` replaced by ``row``; a missing row is appended to the
    runs table, and a body without one gets a table at its end."""
    lines = _current_layout(body.split("\n"))
    for i, line in enumerate(lines):
        found = parse_row(line)
        if found is not None and found.key == row.key:
            lines[i] = row.render()
            return "\n".join(lines)
    if HEADER in lines:
        end = lines.index(HEADER) + 2
        while end < len(lines) and parse_row(lines[end]) is not None:
            end += 1
        return "\n".join(lines[:end] + [row.render()] + lines[end:])
    return body.rstrip("\n") + "\n\n" + table([row]) + "\n"


__all__ = ["HEADER", "LEGACY_HEADER", "NO_VERDICT", "RunRow", "SEPARATOR", "TARGETS_PART", "find_row", "parse_row", "put_row", "rows_in", "table"]
