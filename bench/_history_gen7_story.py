"""gen7's real skeleton, read from ``bench/_history_gen7_data.json`` alone (no SGLang clone needed):
the commits of `SPAN`, the test files, and the breakage windows SGLang's own reverts and fixes mark.

Windows (the rules, applied to the real commits; nothing here is random):

* a revert: ``Revert "X" (#N)`` whose quoted subject is an earlier commit B of the span (PR number
  aside) opens a window at B that the revert R closes;
* a fix: a subject that starts (after ``[tags]``) with fix/fixes/fixed/hotfix, or holds "fix test"
  or "fix flaky", closes a window opened by the most recent commit B of the last `FIX_REACH`
  commits that touched one of the fix's files, hub files left out (a file that more than
  `HUB_SHARE` of the tests import, such as server_args.py, says nothing about which test broke);
* the tests that fail in a window: those whose file or imported modules B touched (and, for a
  fix, the fix touched too), at most `MAX_BROKEN` of them, the most specific first (a touched file
  that fewer tests import counts more; ties by path). A window that touches no kept test breaks
  nothing and is dropped; a window inside an earlier one's span is kept (two causes at once).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("_history_gen7_data.json")
FIX_REACH = 20
HUB_SHARE = 0.2
MAX_BROKEN = 4
_PR = re.compile(r"\s*\(#(\d+)\)\s*$")
_REVERT = re.compile(r'^revert\s+"(.*)"', re.IGNORECASE)
_FIX = re.compile(r"^(\[[^\]]*\]\s*)*(fix(es|ed)?|hotfix)\b|fix (flaky|test)", re.IGNORECASE)


@dataclass(frozen=True)
class Test:
    """A real registered test file of the span's first commit, one of its test methods."""

    file: str
    tier: str
    cls: str
    name: str
    line: int
    touches: frozenset[str]  # its own file and the module files it imports

    @property
    def node(self) -> str:
        return f"{self.file}::{self.cls}::{self.name}" if self.cls else f"{self.file}::{self.name}"


@dataclass(frozen=True)
class Commit:
    """A real first-parent commit: ``index`` its place in the span, ``files`` the kept ones it touched."""

    index: int
    sha: str
    time: str
    author: str
    subject: str
    files: frozenset[str]
    pr: int | None


@dataclass(frozen=True)
class Window:
    """Tests ``files`` fail on main from commit ``start`` (the breaking one) up to ``end`` (the
    revert or fix, exclusive); ``kind`` is ``revert`` or ``fix``."""

    kind: str
    start: int
    end: int
    files: tuple[str, ...]
    touched: tuple[str, ...]


@dataclass(frozen=True)
class Skeleton:
    span: tuple[str, str]
    commits: tuple[Commit, ...]
    tests: tuple[Test, ...]
    windows: tuple[Window, ...]


def pr_number(subject: str) -> int | None:
    """The pull request number GitHub's squash merge appends: ``... (#28571)``."""
    found = _PR.search(subject)
    return int(found.group(1)) if found else None


def bare_subject(subject: str) -> str:
    return _PR.sub("", subject).strip()


def _popularity(tests: list[dict], paths: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in tests:
        for i in t["imports"]:
            counts[paths[i]] = counts.get(paths[i], 0) + 1
    return counts


def _broken(files: dict[str, frozenset[str]], hit: set[str], popular: dict[str, int]) -> tuple[str, ...]:
    """At most `MAX_BROKEN` test files whose touches meet ``hit``, the most specific first."""
    scored = [(-sum(1 / max(1, popular.get(p, 1)) for p in touches & hit), path)
              for path, touches in files.items() if touches & hit]
    return tuple(path for _, path in sorted(scored)[:MAX_BROKEN])


def find_windows(commits: list[Commit], files: dict[str, frozenset[str]], popular: dict[str, int],
                 hubs: set[str]) -> list[Window]:
    """The revert and fix windows of ``commits`` (see the module docstring)."""
    by_subject = {bare_subject(c.subject): c.index for c in commits}
    out = []
    for c in commits:
        revert = _REVERT.match(c.subject)
        if revert:
            start = by_subject.get(bare_subject(revert.group(1)))
            if start is None or start >= c.index:
                continue
            hit = set(commits[start].files)
            kind = "revert"
        elif _FIX.search(c.subject) and c.files - hubs:
            start = next((b.index for b in reversed(commits[max(0, c.index - FIX_REACH):c.index])
                          if b.files & (c.files - hubs)), None)
            if start is None:
                continue
            hit = set(commits[start].files & c.files) or set(commits[start].files & c.files - hubs)
            kind = "fix"
        else:
            continue
        broken = _broken(files, hit, popular)
        if broken:
            out.append(Window(kind, start, c.index, broken, tuple(sorted(hit))))
    return out


@lru_cache(maxsize=1)
def load(path: Path = DATA) -> Skeleton:
    """The skeleton of the committed data file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    paths = data["paths"]
    tests, files = [], {}
    for t in data["tests"]:
        touches = frozenset([t["path"], *(paths[i] for i in t["imports"])])
        files[t["path"]] = touches
        tests += [Test(t["path"], t["tier"], cls, name, line, touches) for cls, name, line in t["methods"]]
    commits = [Commit(i, c["sha"], c["time"], c["author"], c["subject"], frozenset(paths[f] for f in c["files"]),
                      pr_number(c["subject"])) for i, c in enumerate(data["commits"])]
    popular = _popularity(data["tests"], paths)
    hubs = {p for p, n in popular.items() if n > HUB_SHARE * len(data["tests"])}
    windows = find_windows(commits, files, popular, hubs)
    return Skeleton(tuple(data["span"]), tuple(commits), tuple(tests), tuple(windows))
