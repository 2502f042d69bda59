"""What changed since a map was recorded, line by line, read from git: the input of line-level
map selection.

A map's line numbers are those of the commit it was recorded at. So the changed files' lines are
read against that commit: ``git diff -U0 SHA -- FILES`` (to the working tree, so an uncommitted
change counts too) through `ci.selection.diff_hunks` (the one diff reader), and each changed
Python file's old text with ``git show SHA:FILE``. A change made on the default branch after the
map was recorded is then part of the diff: it can only add tests, never hide one. With a base
(``ci plan --base``), the lines that differ between the map's commit and the merge base are added
too: a line the branch reverted to the map's text still differs between base and branch.

Contract: `GitLines(cwd, changed).scopes_for(sha)` gives the changed files' scopes
(`ci.selection.edit_scopes.diff_scopes`) relative to ``sha``, or None when git cannot tell (no
commit recorded, the commit is not in this checkout: a shallow clone, git failing); the map is
then judged by file. `GitLines.drift_for(sha)` gives, the same way, the scopes of every other file
that differs between ``sha`` and the working tree (main moved on since the map, or the map is of
another line of history): a map recorded there may not show what its test runs here.
`GitLines.references_for(sha, paths)` indexes those files' references at ``sha`` for
`ci.selection.reach` (None when git does not know the commit); `read_at` reads many files at one
commit with one git process. Results are cached per commit. It never raises for
git's failures.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ci.selection.diff_hunks import Hunk, comment_only_lines, file_diffs, touched_old_lines
from ci.selection.edit_scopes import Scope, diff_scopes
from ci.selection.reach import ReferenceIndex

_GIT = ("git", "-c", "core.quotepath=off")
Scopes = dict[str, "tuple[Scope, ...] | None"]


def read_at(cwd: str | Path, rev: str, paths: Iterable[str], *, from_root: bool = False) -> dict[str, bytes]:
    """The text of each of ``paths`` (relative to ``cwd``; with ``from_root``, to the repository's
    root, which also works in a bare repository) at commit ``rev``, by one ``git cat-file
    --batch``; a path git has no file for at ``rev`` is left out, and so is everything when git
    fails."""
    wanted = sorted({p for p in paths if p and "\n" not in p})
    if not wanted:
        return {}
    prefix = "" if from_root else "./"
    names = "".join(f"{rev}:{prefix}{p}\n" for p in wanted).encode()
    try:
        proc = subprocess.run([*_GIT, "cat-file", "--batch"], cwd=cwd, input=names, capture_output=True,
                              check=False, timeout=300)
    except (OSError, subprocess.SubprocessError):
        return {}
    if proc.returncode != 0:
        return {}
    out: dict[str, bytes] = {}
    data, at = proc.stdout, 0
    for path in wanted:
        end = data.find(b"\n", at)
        if end < 0:
            break
        header = data[at:end].split()
        at = end + 1
        if len(header) != 3 or not header[2].isdigit():
            continue  # "<name> missing", "ambiguous"
        size = int(header[2])
        if header[1] == b"blob":
            out[path] = data[at:at + size]
        at += size + 1
    return out


def _git(args: list[str], cwd: str | Path, *, text: bool = True) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run([*_GIT, *args], cwd=cwd, capture_output=True, text=text, check=False, timeout=300)
    except (OSError, subprocess.SubprocessError):
        return None


@dataclass
class GitLines:
    """See the module docstring; ``changed``: the repo-relative changed paths (relative to ``cwd``)."""

    cwd: Path
    changed: Sequence[str]
    base: str | None = None
    _memo: dict[str, Scopes | None] = field(default_factory=dict)
    _drift: dict[str, Scopes | None] = field(default_factory=dict)
    _indexes: dict[str, ReferenceIndex | None] = field(default_factory=dict)
    _known: dict[str, bool] = field(default_factory=dict)

    def scopes_for(self, sha: str | None) -> Scopes | None:
        if sha is None or not self.changed:
            return None
        if sha not in self._memo:
            self._memo[sha] = self._read(sha)
        return self._memo[sha]

    def drift_for(self, sha: str | None) -> Scopes | None:
        """The scopes, relative to ``sha``, of the files outside the change that differ between
        ``sha`` and the working tree; None when git cannot tell."""
        if sha is None or not self._knows(sha):
            return None
        if sha not in self._drift:
            names = _git(["diff", "--name-only", "-z", "--no-renames", "--relative", sha, "--"], self.cwd)
            others = [] if names is None else sorted(set(filter(None, names.stdout.split("\0"))) - set(self.changed))
            self._drift[sha] = None if names is None or names.returncode != 0 else (
                self._scopes(sha, others, [[sha]]) if others else {})
        return self._drift[sha]

    def references_for(self, sha: str | None, paths: Iterable[str]) -> ReferenceIndex | None:
        """The references of ``paths``' Python files at ``sha`` (`ci.selection.reach`), or None
        when git does not know the commit. Built once per commit: the caller gives every path it will
        ask about at that commit in its first call."""
        if sha is None:
            return None
        if sha not in self._indexes:
            wanted = [p for p in paths if p.endswith(".py")]
            self._indexes[sha] = ReferenceIndex(read_at(self.cwd, sha, wanted)) if self._knows(sha) else None
        return self._indexes[sha]

    def _knows(self, sha: str) -> bool:
        """Whether the checkout holds commit ``sha`` (asked of git once per commit)."""
        if sha not in self._known:
            found = _git(["cat-file", "-e", f"{sha}^{{commit}}"], self.cwd)
            self._known[sha] = found is not None and found.returncode == 0
        return self._known[sha]

    def _read(self, sha: str) -> Scopes | None:
        if not self._knows(sha):
            return None
        targets = [[sha]]
        if self.base is not None:
            merge = _git(["merge-base", self.base, "HEAD"], self.cwd)
            if merge is None or merge.returncode != 0:
                return None
            targets.append([sha, merge.stdout.strip()])
        return self._scopes(sha, self.changed, targets)

    def _scopes(self, sha: str, paths: Sequence[str], targets: list[list[str]]) -> Scopes | None:
        """The scopes of ``paths`` relative to ``sha``, from the diff to each of ``targets``."""
        touched: dict[str, frozenset[int] | None] = {}
        comments: dict[str, frozenset[int]] = {}
        code: dict[str, frozenset[int]] = {}
        hunks: dict[str, list[tuple[Hunk, ...] | None]] = {}
        for target in targets:
            diff = _git(["diff", "-U0", "--no-renames", "--no-color", "--no-ext-diff", "--relative", *target, "--",
                         *paths], self.cwd)
            if diff is None or diff.returncode != 0:
                return None
            try:
                parts = file_diffs(diff.stdout)
            except ValueError:
                return None
            found, trivial = touched_old_lines(parts), comment_only_lines(parts)
            for part in parts:
                hunks.setdefault(part.path, []).append(part.hunks)
            for path, lines in found.items():
                known = touched.get(path, frozenset())
                touched[path] = None if lines is None or known is None else known | lines
                comments[path] = comments.get(path, frozenset()) | trivial.get(path, frozenset())
                code[path] = code.get(path, frozenset()) | ((lines or frozenset()) - trivial.get(path, frozenset()))

        old = read_at(self.cwd, sha, [p for p, lines in touched.items() if p.endswith(".py") and lines is not None])
        scopes = diff_scopes(touched, old.get, {p: comments[p] - code[p] for p in comments}, hunks)
        # a listed file git finds no difference in is judged by file: a list may name what git cannot see
        return {path: scopes.get(path) for path in paths}
