"""The runs table of a bot reply: one row per dispatched run, found and edited in place by key.

A row is ``| `tier` | part | `runner labels` | tests | run | result |``; its key is (tier, part),
where part is ``targets`` (the `/rerun-test` targets of that tier) or ``i/N`` (shard i of N of a
`/rerun-tier` run). Every cell is written by the bot: tier names match ``[A-Za-z_][A-Za-z0-9_]*``
and text from elsewhere goes through `commands.quote`, so a cell never holds a raw ``|`` and a
row splits back into the same cells.

A result cell that starts with ``**`` holds results (written by ``report``); anything else
(``dispatched``, ``dispatch failed: ...``) is a placeholder waiting for them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

HEADER = "| tier | part | runner | tests | run | result |"
SEPARATOR = "|---|---|---|---|---|---|"
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

    @property
    def key(self) -> tuple[str, str]:
        return self.tier, self.part

    @property
    def has_results(self) -> bool:
        return self.result.startswith("**")

    def render(self) -> str:
        return f"| `{self.tier}` | {self.part} | {self.runner} | {self.tests} | {self.run} | {self.result} |"

    def with_result(self, result: str, run: str | None = None) -> "RunRow":
        return replace(self, result=result, run=run if run is not None else self.run)


def parse_row(line: str) -> RunRow | None:
    """The row on ``line``, or None if the line is not a runs-table row."""
    if not (line.startswith("| `") and line.endswith(" |")):
        return None
    cells = line[2:-2].split(" | ")
    if len(cells) != 6 or not (cells[0].startswith("`") and cells[0].endswith("`")):
        return None
    return RunRow(cells[0][1:-1], *cells[1:])


def rows_in(body: str) -> list[RunRow]:
    return [row for line in body.split("\n") if (row := parse_row(line)) is not None]


def find_row(body: str, tier: str, part: str) -> RunRow | None:
    return next((row for row in rows_in(body) if row.key == (tier, part)), None)


def table(rows: list[RunRow]) -> str:
    return "\n".join([HEADER, SEPARATOR] + [row.render() for row in rows])


def put_row(body: str, row: RunRow) -> str:
    """``body`` with the row of ``row.key`` replaced by ``row``; a missing row is appended to the
    runs table, and a body without one gets a table at its end."""
    lines = body.split("\n")
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


__all__ = ["HEADER", "RunRow", "SEPARATOR", "TARGETS_PART", "find_row", "parse_row", "put_row", "rows_in", "table"]
