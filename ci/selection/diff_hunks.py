"""The hunks of a ``git diff -U0``, per file: the one reader of unified diff output.

Contract:
- `file_diffs` returns one `FileDiff` per file the diff changes, in the diff's order: its old
  and new path (None for the side that is ``/dev/null``: a file added or deleted) and its hunks
  as git numbers them (`Hunk`: ``old_start,old_count`` and ``new_start,new_count``; a count of 0
  means a pure insertion or deletion *after* line ``start``). ``hunks`` is None for a binary file
  or a hunk header it cannot follow (the whole file is then the unit).
- `touched_old_lines` maps each file the diff changes (its old path; a file the diff adds maps to
  None: it has no old lines) to the set of old line numbers the change touches: every removed or
  replaced line, and for a pure insertion after old line ``s`` both neighbours ``s`` and ``s + 1``
  (the inserted code may belong to either's block; line 1 for an insertion at the top). A binary
  file, or a diff it cannot follow, maps to None.
- Paths are repo-relative as git prints them (``a/`` and ``b/`` prefixes are removed); quoted
  paths are refused with `ValueError` (run git with ``core.quotepath=off``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_BINARY = re.compile(r"Binary files (.+) and (.+) differ$")
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Hunk:
    """One hunk's header: ``old_count`` lines from ``old_start`` became ``new_count`` lines from
    ``new_start`` (a count of 0: nothing on that side, after line ``start``)."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int


@dataclass(frozen=True)
class FileDiff:
    """One file's part of a diff; see the module docstring."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...] | None

    @property
    def path(self) -> str:
        """The old path, or the new one for an added file."""
        return self.old_path if self.old_path is not None else self.new_path or ""


def _path(text: str, prefix: str) -> str | None:
    text = text.rstrip("\n").split("\t", 1)[0]
    if text == "/dev/null":
        return None
    if text.startswith('"'):
        raise ValueError(f"quoted path {text!r} in the diff: run git with -c core.quotepath=off")
    return text[len(prefix):] if text.startswith(prefix) else text


def file_diffs(diff: str) -> list[FileDiff]:
    """See the module docstring."""
    out: list[FileDiff] = []
    old_path: str | None = None
    current: tuple[str | None, str | None] | None = None
    hunks: list[Hunk] | None = []
    body = [0, 0]  # the current hunk's old and new lines still to come: content, never a header

    def close() -> None:
        if current is not None:
            out.append(FileDiff(*current, None if hunks is None else tuple(hunks)))

    for line in diff.splitlines():
        if body[0] and line.startswith("-"):  # a removed line reading "-- x" is not a "--- " header
            body[0] -= 1
        elif body[1] and line.startswith("+"):
            body[1] -= 1
        elif line.startswith("diff --git "):
            close()
            current, old_path, hunks, body[:] = None, None, [], [0, 0]
        elif line.startswith("--- "):
            old_path = _path(line[4:], "a/")
        elif line.startswith("+++ "):
            new_path = _path(line[4:], "b/")
            if old_path is not None or new_path is not None:
                close()
                current, hunks = (old_path, new_path), []
        elif (binary := _BINARY.match(line)) is not None:
            close()
            current, hunks = (_path(binary.group(1), "a/"), _path(binary.group(2), "b/")), None
        elif line.startswith("@@") and current is not None and hunks is not None:
            match = _HUNK.match(line)
            if match is None:
                hunks = None
                continue
            hunk = Hunk(int(match.group(1)), int(match.group(2) or "1"), int(match.group(3)), int(match.group(4) or "1"))
            hunks.append(hunk)
            body[:] = [hunk.old_count, hunk.new_count]
    close()
    return out


def touched_old_lines(diff: str) -> dict[str, frozenset[int] | None]:
    """See the module docstring."""
    out: dict[str, frozenset[int] | None] = {}
    for part in file_diffs(diff):
        if part.old_path is None or part.hunks is None:
            out[part.path] = None
            continue
        lines: set[int] = set()
        for hunk in part.hunks:
            if hunk.old_count == 0:
                lines.update(n for n in (hunk.old_start, hunk.old_start + 1) if n >= 1)
            else:
                lines.update(range(hunk.old_start, hunk.old_start + hunk.old_count))
        out[part.path] = frozenset(lines)
    return out
