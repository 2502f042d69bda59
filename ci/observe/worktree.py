"""Whether a recording ran its commit's text: the tracked files that differed from HEAD at any time
while it ran.

A map's line numbers are read as those of its commit (``sha``). A tracked file that differs from
that commit while the tests run (an uncommitted edit, a step that rewrites sources before the
tests, a test that rewrites one and puts it back) made the recorded lines those of another text:
a later change to the committed body would miss them. So the recording's owner takes a snapshot
when it starts (`snapshot`, into the parts directory: HEAD, the tracked files that differ from it,
and each tracked file's size, mtime and inode) and compares at its end (`finish`).

Contract: `finish` returns the commit and the dirty files: those that differed from HEAD at the
start or at the end, and every tracked file whose stat changed in between (modified during the
run, even if put back). Where it cannot vouch for the tree (not a git checkout, git failing, no
snapshot, HEAD moved during the run) the commit is None: the map then claims no commit and is
judged by file. Never raises.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

SNAPSHOT = "worktree.json"
_GIT = ("git", "--no-optional-locks", "-c", "core.quotepath=off")


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run([*_GIT, *args], cwd=root, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def head_commit(root: Path) -> str | None:
    """The checkout's commit, or None outside a git checkout."""
    out = _git(root, "rev-parse", "--verify", "HEAD")
    sha = (out or "").strip().lower()
    return sha if len(sha) in (40, 64) else None


def _differing(root: Path) -> list[str] | None:
    """The tracked files (relative to ``root``) whose text differs from HEAD, staged or not."""
    out = _git(root, "diff", "--name-only", "-z", "--no-renames", "--relative", "HEAD", "--")
    return None if out is None else [p for p in out.split("\0") if p]


def _stats(root: Path) -> dict[str, list[int]] | None:
    out = _git(root, "ls-files", "-z")
    if out is None:
        return None
    stats: dict[str, list[int]] = {}
    base = str(root)  # not `root / rel`: a Path per tracked file was most of this loop's cost
    for rel in filter(None, out.split("\0")):
        try:
            st = os.stat(os.path.join(base, rel))
        except OSError:
            stats[rel] = []  # absent: deleted in the tree; a file that appears later differs
            continue
        stats[rel] = [st.st_size, st.st_mtime_ns, st.st_ino]
    return stats


def snapshot(parts: Path, root: Path) -> None:
    """Write the start's snapshot of ``root`` into ``parts`` (nothing outside a git checkout),
    unless ``parts`` holds one of ``root`` already."""
    try:
        if json.loads((parts / SNAPSHOT).read_text(encoding="utf-8")).get("root") == str(root):
            return
    except (OSError, ValueError, AttributeError):
        pass
    head, dirty, stats = head_commit(root), _differing(root), _stats(root)
    if head is None or dirty is None or stats is None:
        return
    data = {"root": str(root), "head": head, "dirty": dirty, "stats": stats}
    (parts / SNAPSHOT).write_text(json.dumps(data), encoding="utf-8")


def finish(parts: Path, root: Path) -> tuple[str | None, frozenset[str]]:
    """The map's commit and dirty files at the recording's end (see the module docstring)."""
    try:
        start = json.loads((parts / SNAPSHOT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None, frozenset()
    head, dirty, stats = head_commit(root), _differing(root), _stats(root)
    if start.get("root") != str(root) or head is None or head != start.get("head") or dirty is None or stats is None:
        return None, frozenset()
    before = start["stats"]
    moved = {rel for rel in stats.keys() | before.keys() if stats.get(rel) != before.get(rel)}
    return head, frozenset(start["dirty"]) | frozenset(dirty) | moved
