"""gen14's real skeleton, read from `bench._history_gen14_extract.DATA`: commits, the tests each commit
collects, the GPU jobs its workflows start, and the pull-request pushes and nightly runs laid over it.

Real: commits (sha, time, author, subject, PR number, files), test functions and their case ids,
the workflows' jobs, path filters and cron, the breakage windows. Simulated (from ``rng``): when each
pull request was opened and pushed (its merge commit's time is real), the base each push ran on,
which days' nightly runs are kept (`Scale.nightly_quiet_every`).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache

from bench._history_gen14_ci import GpuJob as Job
from bench._history_gen14_extract import DATA

HOUR = 3600


@dataclass(frozen=True)
class Case:
    """One collected test case: pytest's node id and JUnit classname and name."""

    file: str
    cls: str
    func: str
    node: str
    classname: str
    name: str


@dataclass(frozen=True)
class Push:
    """A run to make: ``event`` ``pull_request`` (push ``push`` of pull request ``pr``) or ``schedule``,
    at ``time`` (epoch seconds), on main commit ``base``, its own head sha ``sha``."""

    event: str
    time: int
    base: int
    sha: str
    pr: int | None
    push: int
    last: bool
    author: str
    merged_as: int | None


@lru_cache(maxsize=1)
def load() -> dict:
    return json.loads(DATA.read_text())


def fake_sha(*parts: object) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


def when(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _cases(file: str, funcs: list[list], params: int) -> list[Case]:
    module = file[:-3].replace("/", ".")
    out: list[Case] = []
    for cls, func, count, *ids in funcs:
        names = [f"{func}[{i}]" for i in ids[:params]] if ids else ([func] if count else [])
        for name in names:
            node = f"{file}::{cls}::{name}" if cls else f"{file}::{name}"
            out.append(Case(file, cls, func, node, f"{module}.{cls}" if cls else module, name))
    return out


class Tree:
    """The test cases and CI shape of each commit of the range, cases capped at ``params`` per function."""

    def __init__(self, params: int, first: int = 0):
        data = load()
        self.commits: list[dict] = data["commits"][first:]
        self.first = first
        self.windows = [w for w in data["windows"] if w["start"] >= first]
        files: dict[str, list[list] | None] = {}
        changes: dict[int, list[dict]] = {}
        for entry in data["tests"]:
            if entry["at"] < first:
                files[entry["file"]] = entry["funcs"]
            else:
                changes.setdefault(entry["at"] - first, []).append(entry)
        self._cases: list[list[Case]] = []
        current = {f: _cases(f, funcs, params) for f, funcs in sorted(files.items()) if funcs}
        snapshot = [c for f in sorted(current) for c in current[f]]
        for i in range(len(self.commits)):
            if i in changes:
                for entry in changes[i]:
                    if entry["funcs"]:
                        current[entry["file"]] = _cases(entry["file"], entry["funcs"], params)
                    else:
                        current.pop(entry["file"], None)
                snapshot = [c for f in sorted(current) for c in current[f]]
            self._cases.append(snapshot)
        shapes = sorted(data["ci"], key=lambda s: s["at"])
        self._shape = [max((s for s in shapes if s["at"] - first <= i), key=lambda s: s["at"]) for i in range(len(self.commits))]
        self.test_files = sorted({c.file for cases in self._cases for c in cases})

    def cases(self, commit: int) -> list[Case]:
        return self._cases[commit]

    def jobs(self, commit: int, nightly: bool) -> list[Job]:
        shape = self._shape[commit]
        return [Job(**j) for j in (shape["nightly_jobs"] if nightly else shape["pr_jobs"])]

    def runs_on_pr(self, commit: int, files: list[str]) -> bool:
        """Whether the pull request workflow at ``commit`` runs for a change touching ``files``."""
        paths = self._shape[commit]["pr_paths"]
        return bool(self._shape[commit]["pr_jobs"]) and any(fnmatch.fnmatch(f, p) for f in files for p in paths)

    def head_at(self, epoch: int) -> int:
        """The main commit that was the branch's head at ``epoch`` (-1: before the range)."""
        head = -1
        for i, commit in enumerate(self.commits):
            if commit["time"] <= epoch:
                head = i
        return head


def pushes(tree: Tree, rng: random.Random, quiet_every: int) -> list[Push]:
    """Each merged pull request's pushes (1 to 4, the last one hours before its merge) and each
    nightly run: daily at the cron's 02:15 UTC while main moved the day before, else every
    ``quiet_every``-th day."""
    out: list[Push] = []
    for i, commit in enumerate(tree.commits):
        if commit["pr"] is None:
            continue
        merged = commit["time"]
        opened = merged - int(rng.lognormvariate(3.2, 1.1) * HOUR) - HOUR
        count = min(4, 1 + int(rng.expovariate(0.9)))
        times = sorted(rng.randint(opened, merged - HOUR // 2) for _ in range(count - 1)) + [merged - rng.randint(900, 3 * HOUR)]
        times = sorted(max(opened, t) for t in times)
        base = max(tree.head_at(opened), 0)
        for k, at in enumerate(times, start=1):
            if k > 1 and rng.random() < 0.35:  # the author merged main into the branch
                base = max(base, tree.head_at(at))
            base = min(base, i - 1) if i > 0 else 0
            out.append(Push("pull_request", at, max(base, 0), fake_sha("pr", commit["pr"], k, commit["sha"]),
                            commit["pr"], k, k == len(times), commit["author"], i))
    start = tree.commits[0]["time"] // 86400 * 86400 + 86400
    for day in range(start, tree.commits[-1]["time"] + 86400, 86400):
        at = day + 2 * HOUR + 15 * 60
        head = tree.head_at(at)
        moved = tree.commits[head]["time"] > at - 86400 if head >= 0 else False
        if head < 0 or (not moved and (day // 86400) % quiet_every):
            continue
        out.append(Push("schedule", at + rng.randint(0, 600), head, tree.commits[head]["sha"], None, 1, True, "", None))
    return sorted(out, key=lambda p: p.time)


def start_of(push: Push) -> datetime:
    return when(push.time) + timedelta(seconds=20)
