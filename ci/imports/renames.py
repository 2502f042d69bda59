"""What happened to a name a module no longer defines, from the repository's git history.

``from pkg.mod import Old`` fails because ``Old`` was renamed or removed; spelling alone guesses
the nearest name still defined (SGLang's ``KVFP4QuantizeUtil`` -> "did you mean
'NVFP4KVQuantizeUtil'?", a different class). History knows: the last commit whose diff of
``pkg/mod.py`` touches a definition of ``Old`` (``git log -G``) is the one that removed it, and
the definition that commit added in the same hunk is what took its place
(``BlockFP4KVQuantizeUtil``).

`find_renames` answers many names at once, a few git processes in parallel, each bounded by a
timeout, the whole bounded by a deadline; a name it cannot answer (no git, no checkout) gets no
history, and the caller falls back to spelling. Where the history walk failed or timed out (a
loaded machine: SGLang's walk passed its 10 s at load 13), the answer says so (`Rename.unread`)
rather than let spelling guess. A shallow clone (actions/checkout's default depth 1) lacks the
commit that renamed a name, and spelling would then guess a different name; there the answer says
that history is missing (`Rename.shallow_depth`), unless ``deepen`` allows fetching more of it:
``git fetch --deepen`` in growing steps, up to that many commits, from the default remote. Nothing
else is written; git runs with its pager, prompts and external diff drivers off.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PER_LOOKUP_SECONDS = 10.0
TOTAL_SECONDS = 20.0
FETCH_SECONDS = 120.0  # each `git fetch --deepen` step; the network is slower than the history walk
FIRST_DEEPEN_STEP = 100
WORKERS = 4
_PR = re.compile(r"\(#(\d+)\)\s*$")
# A definition of {name}, in Python's regex syntax and in git's (POSIX extended) for `log -G`.
_DEFINITION = r"^\s*(?:(?:async\s+)?def|class)\s+{name}\b|^{name}\s*(?::[^=]*)?=[^=]"
_GIT_DEFINITION = (r"^[[:space:]]*((async[[:space:]]+)?def|class)[[:space:]]+{name}([^A-Za-z0-9_]|$)"
                   r"|^{name}[[:space:]]*(:[^=]*)?=[^=]")
_DEFINED = re.compile(r"^(?:(?:async\s+)?def|class)\s+([A-Za-z_][A-Za-z0-9_]*)|^([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^=]*)?=[^=]")
_ENV = {"GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "GIT_EXTERNAL_DIFF": "", "LC_ALL": "C"}


@dataclass(frozen=True)
class Rename:
    """What history says of ``name`` in ``path``. ``commit`` (short hash; ``pr`` its pull request
    number when the subject names one) is the last commit that touched a definition of it there:
    the one that removed it; ``replacement`` is the definition that commit added in its place
    (None: it added none). ``defined_in``: files that define ``name`` today (it may have moved).
    ``commit`` is None when history has no such commit but ``defined_in`` does, or when the
    clone is shallow (``shallow_depth``: the commits it holds) and lacks the commit, or when
    ``unread``: the history walk failed or timed out (a loaded machine), so it cannot tell."""

    path: str
    name: str
    commit: str | None
    pr: str | None
    replacement: str | None
    defined_in: tuple[str, ...] = ()
    shallow_depth: int | None = None
    unread: bool = False

    def describe(self, label: Callable[[str], str] = str) -> str:
        """``renamed to New in abc1234 (#123)``, ``removed in abc1234; defined in pkg.other``,
        ``history is shallow at depth 1: ...``; ``label`` names a file (the import check gives
        dotted module names)."""
        where = f"{self.commit} (#{self.pr})" if self.pr else self.commit
        moved = f"defined in {', '.join(label(p) for p in self.defined_in[:3])}" if self.defined_in else ""
        if self.commit is None and self.unread and not moved:
            return (f"git history could not be read in time: cannot tell what {self.name!r} was renamed to; "
                    f"lint again, or run `git log -G {self.name} -- {self.path}`")
        if self.commit is None and self.shallow_depth is not None and not moved:
            return (f"history is shallow at depth {self.shallow_depth}: cannot tell what {self.name!r} was renamed "
                    f"to; fetch full history (actions/checkout with fetch-depth: 0) or lint with --deepen N")
        if self.commit is None:
            return moved
        if self.replacement:
            return f"renamed to {self.replacement} in {where}"
        return f"removed in {where}" + (f"; {moved}" if moved else "")


def is_git_checkout(root: str | os.PathLike[str]) -> bool:
    """True when ``root`` is inside a git work tree and git runs."""
    answer = _git(Path(root), ["rev-parse", "--is-inside-work-tree"], time.monotonic() + PER_LOOKUP_SECONDS)
    return (answer or "").strip() == "true"


def _pr(subject: str) -> str | None:
    """The pull request a commit subject names at its end (``... (#21954)``), if any."""
    match = _PR.search(subject)
    return match.group(1) if match else None


def _git(root: Path, args: list[str], deadline: float) -> str | None:
    timeout = min(PER_LOOKUP_SECONDS, deadline - time.monotonic())
    if timeout <= 0:
        return None
    try:
        result = subprocess.run(["git", "-c", "core.quotepath=off", *args], cwd=root, capture_output=True,
                                timeout=timeout, env={**os.environ, **_ENV})
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.decode("utf-8", "replace") if result.returncode == 0 else None


def replacement_in(diff: str, name: str) -> str | None:
    """The definition a ``-U0`` diff adds in the hunk that removes ``name``'s: the one at the same
    indentation (a class for a class), closest in spelling when there are several; None if that
    hunk adds no definition."""
    removed_at = re.compile(_DEFINITION.format(name=re.escape(name)))
    for hunk in re.split(r"^@@[^\n]*@@[^\n]*\n", diff, flags=re.M)[1:]:
        lines = hunk.splitlines()
        gone = [line[1:] for line in lines if line.startswith("-") and removed_at.search(line[1:])]
        if not gone:
            continue
        indent = len(gone[0]) - len(gone[0].lstrip())
        added = []
        for line in lines:
            if line.startswith("+") and len(line[1:]) - len(line[1:].lstrip()) == indent:
                match = _DEFINED.match(line[1:].lstrip())
                if match and (match.group(1) or match.group(2)) != name:
                    added.append(match.group(1) or match.group(2))
        if added:
            ranked = difflib.get_close_matches(name, added, n=1, cutoff=0.0)
            return ranked[0] if ranked else added[0]
        return None
    return None


def _defined_now(root: Path, names: set[str], deadline: float) -> dict[str, tuple[str, ...]]:
    """name -> tracked .py files with a top-level class or function of that name, for all
    ``names`` in one ``git grep``."""
    if not names:
        return {}
    alternatives = "|".join(sorted(names))
    out = _git(root, ["grep", "-I", "-o", "--full-name", "-E",
                      f"^((async[[:space:]]+)?def|class)[[:space:]]+({alternatives})([^A-Za-z0-9_]|$)",
                      "--", "*.py"], deadline)
    found: dict[str, set[str]] = {}
    for line in (out or "").splitlines():
        path, _, match = line.partition(":")
        words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", match)
        name = next((w for w in words if w in names), None)
        if name is not None:
            found.setdefault(name, set()).add(path)
    return {name: tuple(sorted(paths)) for name, paths in found.items()}


def _last_touch(root: Path, path: str, name: str, deadline: float, start: str = "HEAD") -> tuple[str, str] | None:
    """(short hash, subject) of the newest commit at or before ``start`` whose diff of ``path``
    adds or removes a definition of ``name``. Path-limited, so it reads only that file's history."""
    log = _git(root, ["log", "-n", "1", "--format=%h%x00%s", "-G", _GIT_DEFINITION.format(name=name), start,
                      "--", path], deadline)
    if not log or "\0" not in log:
        return None
    commit, subject = log.strip().split("\0", 1)
    return commit, subject


def _copied_from(root: Path, paths: list[str], deadline: float) -> dict[str, tuple[str, str]]:
    """path -> (commit, old path) for each of ``paths`` created as a rename or copy of another
    file: one walk for the creating commits of all of them, one ``git show`` per such commit."""
    log = _git(root, ["log", "--diff-filter=A", "--format=%x01%h", "--name-only", "--", *paths], deadline)
    created: dict[str, str] = {}
    for chunk in (log or "").split("\x01")[1:]:
        commit, *names = [line for line in chunk.splitlines() if line]
        for name in names:
            created.setdefault(name, commit)  # newest first: the file as it is now
    out: dict[str, tuple[str, str]] = {}
    for commit in sorted(set(created.values())):
        status = _git(root, ["show", "--format=", "--name-status", "-M", "-C", commit], deadline) or ""
        for line in status.splitlines():
            fields = line.split("\t")
            if len(fields) == 3 and fields[0][:1] in ("R", "C") and created.get(fields[2]) == commit:
                out[fields[2]] = (commit, fields[1])
    return out


def _file_diffs(patch: str) -> dict[str, str]:
    """The per-file parts of a ``git log -p`` / ``git diff`` patch, by the file's new path."""
    out: dict[str, str] = {}
    for part in re.split(r"^diff --git ", patch, flags=re.M)[1:]:
        header = part.split("\n", 1)[0]
        match = re.search(r" b/(.+)$", header)
        if match:
            out[match.group(1)] = out.get(match.group(1), "") + part
    return out


def _history(root: Path, pending: set[tuple[str, str]], deadline: float) -> dict[tuple[str, str], Rename] | None:
    """The newest commit removing each pending definition from its path, in one history walk
    over all the paths (``git log -p -G`` with every name), newest first; None when the walk
    failed or ran out of time."""
    names = "|".join(sorted({name for _, name in pending}))
    patch = _git(root, ["log", "-p", "-U0", "--no-color", "--no-ext-diff", "--format=%x01%h%x00%s",
                        "-G", _GIT_DEFINITION.format(name=f"({names})"), "--",
                        *sorted({path for path, _ in pending})], deadline)
    if patch is None:
        return None
    removal = {name: re.compile(_DEFINITION.format(name=re.escape(name))) for _, name in pending}
    found: dict[tuple[str, str], Rename] = {}
    for chunk in patch.split("\x01")[1:]:
        head, _, body = chunk.partition("\n")
        commit, _, subject = head.partition("\0")
        diffs = _file_diffs(body)
        for path, name in pending:
            if (path, name) in found or path not in diffs:
                continue
            if any(line.startswith("-") and removal[name].search(line[1:]) for line in diffs[path].splitlines()):
                found[(path, name)] = Rename(path, name, commit, _pr(subject), replacement_in(diffs[path], name))
    return found


def _through_copy(root: Path, path: str, name: str, origin: tuple[str, str], deadline: float) -> Rename | None:
    """For a path whose own history never touched ``name`` but that was created as a rename or
    copy of another file (``origin``: SGLang's nsa_backend.py -> dsa_backend.py): what that file's
    history says, diffed across the copy as ``git log --follow`` would (without its walk of every
    commit in the repository)."""
    created, old = origin
    touched = _last_touch(root, old, name, deadline, start=created)
    if touched is None:
        return None
    commit, subject = touched
    target = path if commit == created else old
    diff = _git(root, ["diff", "-U0", "--no-color", "--no-ext-diff", f"{commit}^:{old}", f"{commit}:{target}"],
                deadline)
    return Rename(path, name, commit, _pr(subject), replacement_in(diff or "", name))


def shallow_depth(root: str | os.PathLike[str]) -> int | None:
    """How many commits a shallow clone holds from HEAD back (1 for actions/checkout's default);
    None when the repository is not shallow (or git cannot say)."""
    deadline = time.monotonic() + PER_LOOKUP_SECONDS
    answer = _git(Path(root), ["rev-parse", "--is-shallow-repository"], deadline)
    if (answer or "").strip() != "true":
        return None
    count = _git(Path(root), ["rev-list", "--count", "HEAD"], deadline)
    return int(count) if count and count.strip().isdigit() else None


def _deepen_to(root: Path, depth: int, target: int) -> bool:
    """``git fetch --deepen`` by ``target - depth`` commits from the default remote; False when
    the fetch fails (git refuses where no remote is configured)."""
    try:
        result = subprocess.run(["git", "fetch", "--quiet", "--no-tags", "--no-recurse-submodules",
                                 f"--deepen={target - depth}"], cwd=root, capture_output=True,
                                timeout=FETCH_SECONDS, env={**os.environ, **_ENV})
    except (OSError, subprocess.SubprocessError):
        return False
    return result.returncode == 0


def _lookup(base: Path, wanted: set[tuple[str, str]], deadline: float) -> tuple[dict[tuple[str, str], Rename], bool]:
    """What history (the file's own, then across the copy that created it) says of each pair,
    and whether the walk of the files' own history finished."""
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        # The two history walks are independent: run them side by side.
        walk = pool.submit(_history, base, wanted, deadline)
        origins = _copied_from(base, sorted({path for path, _ in wanted}), deadline)
        walked = walk.result()
        found = walked if walked is not None else {}
        rest = sorted(pair for pair in wanted - set(found) if pair[0] in origins)
        copies = list(pool.map(lambda pair: _through_copy(base, pair[0], pair[1], origins[pair[0]], deadline), rest))
    found.update({pair: rename for pair, rename in zip(rest, copies) if rename is not None})
    return found, walked is not None


def find_renames(root: str | os.PathLike[str], wanted: set[tuple[str, str]], *,
                 total_seconds: float = TOTAL_SECONDS, deepen: int = 0) -> dict[tuple[str, str], Rename]:
    """``{(repo-relative path, name): Rename}`` for each wanted pair history can answer; pairs
    it cannot (see the module docstring) are left out, except in a shallow clone or after a
    failed or timed-out walk, where they get a `Rename` saying so. ``deepen``: the most commits a
    shallow clone may be deepened to (0: never fetch). Empty when ``root`` is no git checkout."""
    wanted = {(path, name) for path, name in wanted if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name)}
    if not wanted or not is_git_checkout(root):
        return {}
    base = Path(root)
    depth = shallow_depth(base)
    found, complete = _lookup(base, wanted, time.monotonic() + total_seconds)
    while depth is not None and depth < deepen and wanted - set(found):
        target = min(deepen, max(FIRST_DEEPEN_STEP, 4 * depth))
        if not _deepen_to(base, depth, target):
            break
        deeper = shallow_depth(base)
        if deeper is not None and deeper <= depth:
            break  # the fetch brought nothing older
        depth = deeper
        more, complete = _lookup(base, wanted - set(found), time.monotonic() + total_seconds)
        found.update(more)
    deadline = time.monotonic() + total_seconds
    unexplained = {name for path, name in wanted if (path, name) not in found or found[(path, name)].replacement is None}
    defined = _defined_now(base, unexplained, deadline)
    out: dict[tuple[str, str], Rename] = {}
    for path, name in wanted:
        rename = found.get((path, name))
        elsewhere = tuple(p for p in defined.get(name, ()) if p != path)
        if rename is not None and rename.replacement is None and elsewhere:
            rename = Rename(path, name, rename.commit, rename.pr, None, elsewhere)
        elif rename is None and (elsewhere or depth is not None or not complete):
            rename = Rename(path, name, None, None, None, elsewhere, depth, unread=not complete)
        if rename is not None:
            out[(path, name)] = rename
    return out


__all__ = ["Rename", "find_renames", "is_git_checkout", "replacement_in", "shallow_depth"]
