"""The eleventh history's world, read from the committed data file alone
(`bench._history_gen11_data.json`): FlashInfer's real main commits, its test files as CI jobs run
them (tiers and shards of pr-test.yml's matrix), the real breakage windows, and the pull requests'
lives (when each was opened, pushed, labelled ``run-ci`` and on which main commit it was based).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from bench._history_gen11_parse import affects

DATA = Path(__file__).with_name("_history_gen11_data.json")
H100_SHARDS = 4  # the unit runner's batches as its JUnit files come out (modelled: by path hash)


@dataclass(frozen=True)
class Node:
    """One test case: pytest's node id, its file, its JUnit classname and name."""

    node: str
    file: str
    classname: str
    name: str
    xfail: bool = False


@dataclass(frozen=True)
class Commit:
    """One real first-parent commit of main."""

    index: int
    sha: str
    time: datetime
    author: str
    pr: int | None
    subject: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Window:
    """A real breakage: ``breaker`` (index) breaks ``nodes`` until ``fixer`` (index) lands; on
    ``tiers`` only (an architecture-specific break fails on the H100 alone)."""

    kind: str
    breaker: int
    fixer: int
    nodes: tuple[str, ...]
    tiers: tuple[str, ...]
    style: int


@dataclass
class PullRequest:
    """A merged pull request: its pushes (times, bases) and which of them the ``run-ci`` label or
    ``@flashinfer-bot run`` sent to CI."""

    number: int
    merged: int  # the main commit it became
    author: str
    pushes: list[tuple[datetime, int]] = field(default_factory=list)  # (time, base commit index)
    tested: list[bool] = field(default_factory=list)


@dataclass(frozen=True)
class Jobs:
    """The tiers' files: ``h100`` shards (task_run_unit_tests.sh: every suite file), the five A10G
    parts (task_jit_run_tests_partN.sh) and the T4 job (part 3's files)."""

    shards: dict[str, tuple[tuple[str, ...], ...]]


@lru_cache(maxsize=1)
def load() -> dict:
    """The data file, read once."""
    return json.loads(DATA.read_text(encoding="utf-8"))


def commits(count: int) -> list[Commit]:
    """The last ``count`` real commits of the data file's range, oldest first."""
    data = load()
    touched = data["touched"]
    rows = data["commits"][-count:]
    return [Commit(i, c["sha"], datetime.fromtimestamp(c["time"], timezone.utc), c["author"], c["pr"], c["subject"],
                   tuple(touched[f] for f in c["files"])) for i, c in enumerate(rows)]


def _classname(path: str, name: str) -> tuple[str, str]:
    module = path[:-3].replace("/", ".")
    if "::" in name:
        cls, _, rest = name.partition("::")
        return f"{module}.{cls}", rest
    return module, name


def suite_nodes(funcs_per_file: int) -> dict[str, tuple[Node, ...]]:
    """Each kept test file's nodes: the first node id of its first ``funcs_per_file`` functions."""
    out = {}
    for path, info in load()["tests"].items():
        nodes = []
        for name, _count, xfail, first in info.get("funcs", [])[:funcs_per_file]:
            if first:
                classname, case = _classname(path, first)
                nodes.append(Node(f"{path}::{first}", path, classname, case, bool(xfail)))
        if nodes:
            out[path] = tuple(nodes)
    return out


def jobs(files: dict[str, tuple[Node, ...]]) -> Jobs:
    """The tiers' shards over the suite's files, as pr-test.yml's matrix runs them."""
    parts = tuple(tuple(f for f in part if f in files) for part in load()["a10g_parts"])
    h100: list[list[str]] = [[] for _ in range(H100_SHARDS)]
    for path in sorted(files):
        h100[int(hashlib.sha1(path.encode()).hexdigest(), 16) % H100_SHARDS].append(path)
    return Jobs({"h100": tuple(tuple(s) for s in h100), "a10g": parts, "t4": (parts[2],)})


def deps_of(path: str) -> list[str]:
    data = load()
    return [data["paths"][i] for i in data["tests"][path]["deps"]]


def flags(path: str) -> tuple[bool, bool]:
    """(downloads artifacts or models, multi-GPU comm test) of a test file."""
    info = load()["tests"][path]
    return bool(info["hub"]), bool(info["comm"])


def windows(history: list[Commit], files: dict[str, tuple[Node, ...]], rng: random.Random) -> list[Window]:
    """The data file's real windows inside ``history``: which of their tests' nodes fail (seeded:
    one to three of each file's suite nodes) and on which tiers."""
    index = {c.sha: c.index for c in history}
    out = []
    for w in load()["windows"]:
        if w["breaker"] not in index or w["fixer"] not in index:
            continue
        nodes = []
        for path in w["tests"]:
            pool = [n.node for n in files.get(path, ()) if not n.xfail]
            nodes += rng.sample(pool, min(len(pool), rng.randint(1, 2)))
        if nodes:
            tiers = ("h100", "a10g", "t4") if rng.random() < 0.5 else ("h100",)
            out.append(Window(w["kind"], index[w["breaker"]], index[w["fixer"]], tuple(nodes), tiers,
                              rng.randrange(3)))
    return out


def affected(commit: Commit, path: str) -> bool:
    """Whether a real commit plausibly affects a test file (its files against the test's deps)."""
    return affects(list(commit.files), path, deps_of(path))


def pull_requests(history: list[Commit], rng: random.Random, quick: bool) -> list[PullRequest]:
    """Each merged pull request's pushes (one to four), each on the main commit before it (a push
    after a rebase moves to the newest), and which pushes ran CI: the last always (the merge needs
    the required check green), an earlier one when someone applied ``run-ci`` or commented
    ``@flashinfer-bot run`` (half of them)."""
    out = []
    for c in history:
        if c.pr is None or c.index == 0:
            continue
        opened = c.time.timestamp() - rng.uniform(3 * 3600, (1 if quick else 5) * 86400)
        n = rng.choice((1, 1, 1, 2, 2, 3))
        times = sorted(rng.uniform(opened, c.time.timestamp() - 1200) for _ in range(n))
        pr = PullRequest(c.pr, c.index, c.author)
        base = _main_at(history, opened, c.index)
        for k, t in enumerate(times):
            if k and rng.random() < 0.3:
                base = _main_at(history, t, c.index)
            pr.pushes.append((datetime.fromtimestamp(t, timezone.utc), base))
            pr.tested.append(k == n - 1 or rng.random() < 0.4)
        out.append(pr)
    return out


def _main_at(history: list[Commit], when: float, before: int) -> int:
    """The newest main commit at ``when`` (never the pull request's own merge or later)."""
    best = 0
    for c in history[:before]:
        if c.time.timestamp() <= when:
            best = c.index
    return best


def head_sha(pr: int, push: int) -> str:
    """A pull request push's head commit (simulated: the real heads are not on main)."""
    return hashlib.sha1(f"flashinfer-pr-{pr}-{push}".encode()).hexdigest()
