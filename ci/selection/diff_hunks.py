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
- `Hunk.comment_only` is true when every removed and added line of the hunk is blank or a
  whole-line ``#`` comment, as text (whether such a line lies inside a multi-line string is for
  the reader of the old source to say: `ci.selection.edit_scopes.diff_scopes`);
  `comment_only_lines` gives the old lines `touched_old_lines` counts for such hunks.
- `Hunk.added` holds the hunk's new lines (without the ``+``); `apply_hunks` rebuilds a file's
  new text from its old text and its hunks.
- `carry_lines` moves a set of old line numbers (a map's executed lines) to the new side: a line
  outside every hunk shifts by the lines the hunks before it added or removed; a line a hunk
  replaced becomes all of that hunk's new lines (the code that took its place), a removed one its
  insertion point (`insertion_point`: the new lines around where it was).
- Paths are repo-relative as git prints them (``a/`` and ``b/`` prefixes are removed); quoted
  paths are refused with `ValueError` (run git with ``core.quotepath=off``).
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

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
    comment_only: bool = False
    added: tuple[str, ...] = field(default=(), compare=False)

    @property
    def old_lines(self) -> frozenset[int]:
        """The old lines this hunk touches (see `touched_old_lines`)."""
        if self.old_count == 0:
            return frozenset(n for n in (self.old_start, self.old_start + 1) if n >= 1)  # 0: line 1
        return frozenset(range(self.old_start, self.old_start + self.old_count))


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
    trivial = [True]  # every content line of the current hunk so far is blank or a comment

    added: list[str] = []  # the current hunk's ``+`` lines

    def finish_hunk() -> None:
        if hunks:
            hunks[-1] = replace(hunks[-1], comment_only=hunks[-1].comment_only and trivial[0], added=tuple(added))

    def close() -> None:
        finish_hunk()
        if current is not None:
            out.append(FileDiff(*current, None if hunks is None else tuple(hunks)))

    for line in diff.splitlines():
        if body[0] and line.startswith("-") or body[1] and line.startswith("+"):
            # a removed line reading "-- x" is not a "--- " header
            side = 0 if line.startswith("-") and body[0] else 1
            body[side] -= 1
            if side:
                added.append(line[1:])
            text = line[1:].strip()
            trivial[0] = trivial[0] and (not text or text.startswith("#"))
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
            finish_hunk()
            hunk = Hunk(int(match.group(1)), int(match.group(2) or "1"), int(match.group(3)), int(match.group(4) or "1"),
                        comment_only=True)
            hunks.append(hunk)
            body[:], trivial[0] = [hunk.old_count, hunk.new_count], True
            added.clear()
    close()
    return out


def touched_old_lines(diff: str | Sequence[FileDiff]) -> dict[str, frozenset[int] | None]:
    """See the module docstring; ``diff``: its text, or its `file_diffs` already read."""
    out: dict[str, frozenset[int] | None] = {}
    for part in file_diffs(diff) if isinstance(diff, str) else diff:
        if part.old_path is None or part.hunks is None:
            out[part.path] = None
            continue
        out[part.path] = frozenset().union(*(hunk.old_lines for hunk in part.hunks))
    return out


def insertion_point(start: int) -> set[int]:
    """The lines around a pure insertion or deletion after line ``start`` (line 1 at the top)."""
    return {n for n in (start, start + 1) if n >= 1}


def _hunk_end(hunk: Hunk) -> int:
    """The last old line at or before ``hunk``: an insertion after ``old_start`` moves the lines
    after it."""
    return hunk.old_start + hunk.old_count - 1 if hunk.old_count else hunk.old_start


def carry_lines(lines: Iterable[int], hunks: Sequence[Hunk]) -> frozenset[int]:
    """``lines`` of a file's old version, carried through ``hunks`` (one file's part of ``git diff
    -U0 OLD NEW``, in git's order) to the new version's numbers; see the module docstring."""
    # a line stops at the first hunk that ends at or after it (`_hunk_end`); in git's order those
    # ends never decrease, so the sorted lines split into one run per hunk (binary searches) and
    # each run moves as a whole: a map's thousands of lines per file through a window of diffs
    hunks = sorted(hunks, key=lambda h: h.old_start)
    ordered = sorted(lines)
    out: set[int] = set()
    shift, lo = 0, 0
    for hunk in hunks:
        hi = bisect_right(ordered, _hunk_end(hunk), lo)
        inside = bisect_left(ordered, hunk.old_start, lo, hi) if hunk.old_count else hi
        out.update(ordered[lo:inside] if not shift else [line + shift for line in ordered[lo:inside]])
        if inside < hi:  # replaced: the code that took its place, or where it was
            out.update(range(hunk.new_start, hunk.new_start + hunk.new_count) if hunk.new_count
                       else insertion_point(hunk.new_start))
        shift += hunk.new_count - hunk.old_count
        lo = hi
    out.update(ordered[lo:] if not shift else [line + shift for line in ordered[lo:]])
    return frozenset(out)


def apply_hunks(old_text: str, hunks: tuple[Hunk, ...]) -> str | None:
    """The new text of a file from its old text and its ``-U0`` hunks (`Hunk.added` holds each
    hunk's new lines), or None when the hunks do not fit the text (another version of the file,
    a hunk whose lines were not all read)."""
    old = old_text.splitlines(keepends=True)
    if old and not old[-1].endswith(("\n", "\r")):
        old[-1] += "\n"  # "\ No newline at end of file" is not a content line; the text is the same
    out: list[str] = []
    at = 0  # old lines copied so far
    for hunk in sorted(hunks, key=lambda h: h.old_start):
        if len(hunk.added) != hunk.new_count:
            return None
        keep = hunk.old_start if hunk.old_count == 0 else hunk.old_start - 1
        if keep < at or keep + hunk.old_count > len(old):
            return None
        out += old[at:keep]
        out += [line + "\n" for line in hunk.added]
        at = keep + hunk.old_count
    return "".join(out + old[at:])


def comment_only_lines(diff: str | Sequence[FileDiff]) -> dict[str, frozenset[int]]:
    """Per file, the old lines touched only by comment-only hunks (see the module docstring);
    ``diff``: its text, or its `file_diffs` already read."""
    out: dict[str, frozenset[int]] = {}
    for part in file_diffs(diff) if isinstance(diff, str) else diff:
        if part.old_path is None or part.hunks is None:
            continue
        code = frozenset().union(*(h.old_lines for h in part.hunks if not h.comment_only))
        out[part.path] = frozenset().union(*(h.old_lines for h in part.hunks if h.comment_only)) - code
    return out
