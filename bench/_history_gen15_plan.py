"""The seed's draws for the fifteenth history that PEFT's data does not hold: when each merged pull
request was opened, how often it was pushed (each push tested merged into main's tip), whether its own
change broke tests before its last push, the unmerged pull requests, the flaky tests, the hub
outages and the bad hosts. Contract: deterministic per seed and scale; every merged pull request's
last push is clean and its pushes' bases come before its merge commit.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from bench._history_gen15_jobs import Flake, Outage
from bench._history_gen15_world import GPU_FILES, Case, World


@dataclass(frozen=True)
class Push:
    """One push to a pull request: its ``sha`` (the merge commit GitHub makes of the head and
    main's tip), time, ``base`` that tip's index, and whether the pull request's own breakage is in it.
    A branch cut from an old main is still tested merged into the newest: its fork point is moot."""

    sha: str
    when: datetime
    base: int
    broken: bool


@dataclass(frozen=True)
class PullRequest:
    number: int
    author: str
    merged: int | None
    pushes: tuple[Push, ...]
    new_cases: tuple[Case, ...]
    new_os: str
    new_file: str


def fake_sha(*parts: object) -> str:
    return hashlib.sha1("-".join(map(str, parts)).encode()).hexdigest()


def _own_cases(world: World, files: tuple[str, ...], base: int, rng: random.Random) -> tuple[Case, ...]:
    present = set(world.files_at(base)) - GPU_FILES
    tests = [f for f in files if f in present]
    methods = {m.group(1) for f in files if (m := re.match(r"src/peft/tuners/([a-z_]+)/", f))}
    tests = tests or [f"tests/test_{m}.py" for m in sorted(methods) if f"tests/test_{m}.py" in present]
    tests = tests or [rng.choice(sorted(present & {"tests/test_custom_models.py", "tests/test_decoder_models.py",
                                                   "tests/test_tuners_utils.py", "tests/test_other.py"}))]
    pool = [c for f in tests for c in world.catalogue[f]]
    return tuple(rng.sample(pool, min(len(pool), rng.randint(1, 2))))


def _pushes(world: World, rng: random.Random, key: object, opened: datetime, last: datetime,
            count: int, broken_until: int) -> tuple[Push, ...]:
    times = sorted([opened] + [opened + (last - opened) * rng.random() for _ in range(count - 1)])
    pushes = []
    for k, when in enumerate(times):
        base = world.base_at(when)  # pull_request runs test refs/pull/N/merge: the head merged into main's tip
        pushes.append(Push(fake_sha("gen15", key, k), when, base, k < broken_until))
    return tuple(pushes)


def pull_requests(world: World, rng: random.Random, limit: int | None, new_break: float,
                  closed_share: float) -> list[PullRequest]:
    """The merged pull requests of the range (their real numbers, authors, files and merge
    times), then unmerged ones drawn between them."""
    first = world.commits[0].time
    merged = [c for c in world.commits if c.pr is not None and not c.docs_only and c.index > 0][:limit]
    prs = []
    for commit in merged:
        opened = max(first + timedelta(minutes=10),
                     commit.time - timedelta(hours=min(960.0, rng.lognormvariate(3.2, 1.3))))
        count = 1 + min(5, int(rng.expovariate(0.7)))
        broken = rng.random() < new_break
        if broken and count == 1:
            count = 2
        broken_until = rng.randint(1, count - 1) if broken else 0
        pushes = _pushes(world, rng, commit.pr, opened, commit.time - timedelta(minutes=15), count, broken_until)
        pushes = tuple(p if p.base < commit.index else Push(p.sha, p.when, commit.index - 1, p.broken) for p in pushes)
        cases = _own_cases(world, commit.files, pushes[0].base, rng) if broken else ()
        new_os = "windows-latest" if broken and rng.random() < 0.15 else ""
        src = next((f for f in commit.files if f.startswith("src/")), "")
        prs.append(PullRequest(commit.pr, commit.author, commit.index, pushes, cases, new_os, src))
    used = {c.pr for c in world.commits if c.pr is not None}
    numbers = [n for n in range(min(used), max(used)) if n not in used] if used else []
    authors = sorted({c.author for c in world.commits})
    span = (world.commits[-1].time - first).total_seconds()
    for _ in range(int(len(merged) * closed_share)):
        number = numbers.pop(rng.randrange(len(numbers)))
        opened = first + timedelta(seconds=rng.uniform(0.02, 0.97) * span)
        count = 1 + min(3, int(rng.expovariate(0.9)))
        broken = rng.random() < 0.35
        pushes = _pushes(world, rng, number, opened, opened + timedelta(hours=rng.uniform(1, 120)), count,
                         count if broken else 0)
        files = world.commits[rng.randrange(len(world.commits))].files
        cases = _own_cases(world, files, pushes[0].base, rng) if broken else ()
        prs.append(PullRequest(number, rng.choice(authors), None, pushes, cases, "", ""))
    return prs


def flakes(world: World, rng: random.Random, count: int) -> tuple[Flake, ...]:
    """``count`` flaky tests of the CPU suite with their causes and rates."""
    pool = sorted({c for f in world.files_at(len(world.commits) - 1) if f not in GPU_FILES
                   for c in world.catalogue[f]}, key=lambda c: c.node)
    chosen = rng.sample(pool, min(count, len(pool)))
    out = []
    for case in chosen:
        cause = rng.choices(["tolerance", "timing", "winlock"], weights=[5, 3, 2])[0]
        rate = rng.uniform(0.001, 0.008)
        out.append(Flake(case, cause, rate, 0.45 if cause == "timing" else rate))
    return tuple(out)


def outages(world: World, rng: random.Random) -> tuple[Outage, ...]:
    """Hub outages: about one every three to four weeks, 20 minutes to 2 hours each."""
    start, end = world.commits[0].time, world.commits[-1].time
    out = []
    when = start + timedelta(days=rng.uniform(3, 21))
    while when < end:
        out.append(Outage(when, when + timedelta(minutes=rng.uniform(20, 120)), rng.uniform(0.05, 0.25)))
        when += timedelta(days=rng.uniform(10, 40))
    return tuple(out)
