"""The prior from a runtime map: how much of what the test executed each candidate commit changes.

A map (docs/depmaps.md) says which lines of which files the test file executed at the map's
commit. Each candidate's change (its diff against its first parent) is then one of three `Touch`
levels, weighed by `TouchWeights`:

- ``LINES``: it changes a line the test executed (a hunk's old lines, `diff_hunks.touched_old_lines`,
  meet the executed lines carried to the candidate's parent), a whole file it executed (added,
  deleted, binary), or a file it opened (data: the whole file is the unit);
- ``FILE``: it changes a file the test executed, none of its executed lines; or a line run at
  import time (the map's ``shared`` lines, session-wide) of a file the test's own work did not run;
- ``NONE``: nothing the test executed or opened.

Pure: the caller reads the diffs (`ci.commands.culprit_prior`) and carries the executed lines from
the map's commit to each candidate's parent (`diff_hunks.carry_lines`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Mapping, Sequence

from ci.selection.diff_hunks import FileDiff, carry_lines

# Weights, against 1 for a commit that changes an executed line. A change to a file the test ran
# but to none of its lines reaches the test only through code the map did not see run (a branch
# other inputs take, a syntax error, a line the recorder missed); one outside every file it ran or
# opened only through the environment. docs/culprit.md has the shares measured on rich.
W_FILE = 0.1
W_NONE = 0.02


class Touch(enum.IntEnum):
    NONE = 0
    FILE = 1
    LINES = 2


@dataclass(frozen=True)
class TouchWeights:
    """Prior weight per `Touch` level (not normalised; each in (0, 1], ``lines`` the highest)."""

    lines: float = 1.0
    file: float = W_FILE
    none: float = W_NONE

    def __post_init__(self) -> None:
        for value in (self.lines, self.file, self.none):
            if not 0 < value <= 1:
                raise ValueError(f"prior weight {value} not within (0, 1]")

    def weights(self, touches: Sequence[Touch]) -> list[float]:
        """One weight per candidate; ValueError for an empty window."""
        if not touches:
            raise ValueError("a window needs at least one candidate commit")
        by_level = {Touch.LINES: self.lines, Touch.FILE: self.file, Touch.NONE: self.none}
        return [by_level[t] for t in touches]


def touch_level(diff: Sequence[FileDiff], executed: Mapping[str, frozenset[int]], opened: frozenset[str],
                files: frozenset[str] = frozenset(), imported: Mapping[str, frozenset[int]] | None = None) -> Touch:
    """The level of one commit's change (its `file_diffs`): ``executed`` the test's lines at the
    commit's parent (file -> line numbers), ``opened`` the files it opened, ``files`` those it
    executed at the map's commit (a file this commit adds is all new lines), ``imported`` the
    shared lines of the other files (at the parent too)."""
    level = Touch.NONE
    for part in diff:
        shared = (imported or {}).get(part.old_path or "")
        if shared and (part.hunks is None or any(hunk.old_lines & shared for hunk in part.hunks)):
            level = Touch.FILE
        paths = {p for p in (part.old_path, part.new_path) if p is not None}
        if paths & opened:
            return Touch.LINES
        lines = executed.get(part.old_path or "")
        if lines is None:
            if part.new_path in executed or part.new_path in files:  # all of it new
                return Touch.LINES
            continue
        if part.hunks is None or part.new_path is None:
            return Touch.LINES
        if any(hunk.old_lines & lines for hunk in part.hunks):
            return Touch.LINES
        level = Touch.FILE
    return level


def carry(executed: Mapping[str, frozenset[int]], diff: Sequence[FileDiff]) -> dict[str, frozenset[int]]:
    """``executed`` on the new side of ``diff``: lines moved through each changed file's hunks
    (`carry_lines`), with the lines inserted between two of them; a deleted file's are dropped; a
    file whose hunks are unknown (binary) keeps its numbers."""
    out = dict(executed)
    for part in diff:
        if part.old_path is None or part.old_path not in executed:
            continue
        lines = out.pop(part.old_path)
        if part.new_path is None:
            continue
        if part.hunks is None:
            out[part.new_path] = lines
            continue
        between = [range(h.new_start, h.new_start + h.new_count) for h in part.hunks  # code inserted inside
                   if h.old_count == 0 and {h.old_start, h.old_start + 1} <= lines]  # what ran: it runs too
        out[part.new_path] = carry_lines(lines, part.hunks).union(*between)
    return out
