"""A second, independent labelled GPU CI history (issue 47), written from how GitHub Actions runs
an SGLang-shaped project and how real GPU tests fail, not from `ci.history.verdict`'s rules.

The story (seeded; `generate(seed)` is the same history every time):
- Two tiers: ``gpu_1gpu`` (28 tests, runners ``h100-1g-01``..``04``; ``h100-1g-03`` is the bad
  one) and ``gpu_4gpu`` (14 tests, runners ``h100-4g-01``..``02``). A tier's run is two shards,
  each on a runner drawn at random, each its own JUnit report (``junit-<tier>-<i>-of-2``).
- The default branch: `Scale.commits` commits a few hours apart (about ten days). Each commit
  touches one or two of eight areas; its push runs only those areas' tests. A nightly after every
  eighth commit runs everything at the branch's tip.
- Pull requests (`Scale.prs`): each opens on a base 0-4 commits behind the tip at that time (a
  base lags main), runs its areas' tests on 1-3 pushes, and 30 % of runs with a failure get a
  ``/rerun-failed`` (GitHub's "re-run failed jobs": the same run id, attempt 2, the failed shards
  again). Runs take 40-90 minutes, so pull request runs and pushes interleave; a run's reports
  reach the history when it finishes (`Run.finished`).
- Flaky tests (12, rates 2-10 %): a server that does not start in 600 s, a port still in use,
  an NCCL watchdog timeout on the 4-GPU tier, a tolerance check with varying numbers.
  Correlated retries: a shard run is "loaded" with probability `LOADED` (a noisy neighbour,
  a slow disk), which triples every flake rate in it; and once a flake failed an attempt, its
  rerun (pytest-rerunfailures, one rerun, same machine, seconds later) fails with probability
  `RETRY_FAIL[kind]` (0.25-0.6), not the base rate: a port is still held, the machine still slow.
- Infra: the bad runner breaks 45 % of its shard runs (Xid 79 / "unspecified launch failure" on
  1-3 consecutive tests, NCCL "unhandled system error", OOM kill exit 137, full disk); a good
  runner 1 %. Every attempt of a hit test fails (the machine is still broken on the rerun).
- Breakages on main (`Breakage`): one fixed by a revert two commits later and re-broken by a pull
  request merged later (its own runs break it: ``new``); one a week old and still open at the end;
  one that breaks a flaky test with a different message than its flake. Pull requests break
  tests of their own (30 %), some fixed by their next push.
Truth (`Label`): the cause of every test with a failed attempt in a run: ``broken_on_main`` (broken
at the run's base by the default branch), ``new`` (the pull request's own change), ``infra`` (the
machine), ``flaky`` (the test's nondeterminism). A breakage wins over infra and flakes, infra
over a flake: the first is what a fix must address.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from bench._history_gen2_text import BREAK_LINES, INFRA_KINDS, Failure, JUnitCase, breakage, flake, infra, junit_xml
from bench._verdicts_records import LABELS, Label, Report, Run  # noqa: F401 (LABELS: read from here too)

REPO = "sgl-project/sglang"
TIERS: dict[str, tuple[str, ...]] = {
    "gpu_1gpu": ("h100-1g-01", "h100-1g-02", "h100-1g-03", "h100-1g-04"),
    "gpu_4gpu": ("h100-4g-01", "h100-4g-02"),
}
BAD_RUNNER = "h100-1g-03"
SHARDS = 2
AREAS = ("attention", "moe", "spec", "lora", "quant", "server", "dist", "sampling")
LOADED = 0.2
LOAD_FACTOR = 3.0
RETRY_FAIL = {"startup": 0.45, "port": 0.6, "nccl": 0.4, "numeric": 0.25, "close": 0.25}
BAD_RUNNER_RATE, GOOD_RUNNER_RATE = 0.45, 0.01
START = datetime(2026, 11, 2, 8, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Scale:
    """How much history, and how its JUnit is written: ``attempt_text`` as `ci run` writes it (the
    registry plugin's per-attempt properties, `ci.pytest_attempts`: every failed attempt's error),
    else as stock pytest + pytest-rerunfailures do (a retried attempt keeps no text)."""

    commits: int = 60
    prs: int = 60
    attempt_text: bool = True


QUICK = Scale(commits=24, prs=14)


@dataclass(frozen=True)
class TestSpec:
    tier: str
    area: str
    file: str
    cls: str
    name: str
    line: int
    flake_rate: float = 0.0
    flake_kind: str = ""

    @property
    def node(self) -> str:
        return f"{self.file}::{self.cls}::{self.name}"


@dataclass(frozen=True)
class Breakage:
    """``node`` fails with ``line`` on the default branch from commit ``start`` up to ``end``
    (exclusive; None: still broken at the end)."""

    node: str
    tier: str
    line: str
    start: int
    end: int | None
    why: str

    def covers(self, commit: int) -> bool:
        return self.start <= commit and (self.end is None or commit < self.end)


@dataclass
class History:
    seed: int
    tests: list[TestSpec]
    breakages: list[Breakage]
    main_shas: list[str]
    runs: list[Run]  # in the order they finish (the order GitHub's reports reach the history)


def sha_of(seed: int, what: str) -> str:
    return hashlib.sha1(f"gen2-{seed}-{what}".encode()).hexdigest()


def make_tests(rng: random.Random) -> list[TestSpec]:
    tests: list[TestSpec] = []
    for tier, count in (("gpu_1gpu", 28), ("gpu_4gpu", 14)):
        for i in range(count):
            area = AREAS[i % len(AREAS)] if tier == "gpu_1gpu" else ("dist", "moe", "server", "spec")[i % 4]
            stem = f"test_{area}_{'tp4_' if tier == 'gpu_4gpu' else ''}{i // len(AREAS)}"
            tests.append(TestSpec(tier, area, f"test/srt/{stem}.py", f"Test{area.title()}{i}", f"test_{area}_case{i}",
                                  10 + 7 * i))
    kinds_1 = ("startup", "port", "numeric", "close", "startup", "numeric", "port", "startup")
    kinds_4 = ("nccl", "startup", "nccl", "port")
    flaky_1 = rng.sample(range(28), len(kinds_1))
    flaky_4 = rng.sample(range(28, 42), len(kinds_4))
    for index, kind in [*zip(flaky_1, kinds_1), *zip(flaky_4, kinds_4)]:
        t = tests[index]
        tests[index] = TestSpec(t.tier, t.area, t.file, t.cls, t.name, t.line, round(rng.uniform(0.02, 0.10), 3), kind)
    return tests


def plan_breakages(rng: random.Random, tests: list[TestSpec], commits: int) -> tuple[list[Breakage], int]:
    """The default branch's breakages, and the index of the stable test the later pull request re-breaks."""
    stable = [i for i, t in enumerate(tests) if not t.flake_rate]
    flaky = [i for i, t in enumerate(tests) if t.flake_rate and t.flake_kind != "nccl" and t.tier == "gpu_1gpu"]
    reverted, open_one = rng.sample(stable, 2)
    flaky_one = rng.choice(flaky)
    c = commits
    at = [round(c * f) for f in (0.3, 0.2, 0.45, 0.55, 0.7)]
    line_r, line_o, line_f = rng.sample(BREAK_LINES, 3)
    out = [
        Breakage(tests[reverted].node, tests[reverted].tier, line_r, at[0], at[0] + 2, "broken, reverted 2 commits later"),
        Breakage(tests[open_one].node, tests[open_one].tier, line_o, at[1], None, "broken and still open"),
        Breakage(tests[flaky_one].node, tests[flaky_one].tier, line_f, at[2], at[2] + 4,
                 "a flaky test broken with another message"),
        Breakage(tests[reverted].node, tests[reverted].tier, line_r, at[3], at[4], "re-broken by a merged pull request"),
    ]
    return out, reverted


class _Story:
    """The random draws of one history, in one place (the order of draws is the seed's contract)."""

    def __init__(self, seed: int, scale: Scale) -> None:
        self.seed, self.scale = seed, scale
        self.rng = random.Random(seed)
        self.tests = make_tests(self.rng)
        self.breakages, self.rebreak = plan_breakages(self.rng, self.tests, scale.commits)
        self.run_ids = iter(range(7_000_000 + seed * 100_000, 8_000_000 + seed * 100_000))

    def run_tests(self, run: Run, tests: list[TestSpec], pr_breaks: dict[str, str], runner_of: list[str],
                  shards: list[int] | None = None) -> None:
        """Fill ``run.reports``: ``tests`` of one tier, sharded, each shard on its runner."""
        rng = self.rng
        tier = tests[0].tier
        for shard in range(SHARDS):
            if shards is not None and shard not in shards:
                continue
            mine = [t for k, t in enumerate(tests) if k % SHARDS == shard]
            if not mine:
                continue
            runner = runner_of[shard]
            rate = BAD_RUNNER_RATE if runner == BAD_RUNNER else GOOD_RUNNER_RATE
            hit: dict[str, str] = {}
            if rng.random() < rate:
                kind = rng.choice(INFRA_KINDS)
                first = rng.randrange(len(mine))
                for t in mine[first:first + (rng.randint(1, 3) if kind == "xid" else 1)]:
                    hit[t.node] = kind
            loaded = rng.random() < LOADED
            cases, labels = [], []
            for t in mine:
                where = f"{t.file}:{t.line + 3}: Error"
                main_break = next((b for b in self.breakages if b.node == t.node and b.covers(run.commit)), None)
                attempts: list[Failure | None]
                if t.node in pr_breaks:
                    attempts = [breakage(pr_breaks[t.node], where)] * 2
                    labels.append(Label(t.node, tier, "new", True, "the pull request breaks it"))
                elif main_break is not None:
                    attempts = [breakage(main_break.line, where)] * 2
                    labels.append(Label(t.node, tier, "broken_on_main", True, main_break.why))
                elif t.node in hit:
                    attempts = [infra(hit[t.node], rng, where)] * 2
                    labels.append(Label(t.node, tier, "infra", True, f"{runner}: {hit[t.node]}"))
                else:
                    attempts = self._flake_attempts(t, loaded, where)
                    if attempts[0] is not None:
                        labels.append(Label(t.node, tier, "flaky", attempts[-1] is not None,
                                            f"{t.flake_kind} flake{' (loaded machine)' if loaded else ''}"))
                cases.append(JUnitCase(t.file, t.file[:-3].replace("/", ".") + "." + t.cls, t.name, t.line,
                                       tuple(attempts), round(rng.uniform(20, 300), 3)))
            stamp = (run.started + timedelta(minutes=5 + 20 * shard)).isoformat(timespec="microseconds")
            run.reports.append(Report(tier, shard, SHARDS, runner,
                                      junit_xml(cases, runner, stamp, self.scale.attempt_text), labels))

    def _flake_attempts(self, t: TestSpec, loaded: bool, where: str) -> list[Failure | None]:
        rng = self.rng
        p = min(0.5, t.flake_rate * (LOAD_FACTOR if loaded else 1.0))
        if not t.flake_rate or rng.random() >= p:
            return [None]
        retry = flake(t.flake_kind, rng, where) if rng.random() < RETRY_FAIL[t.flake_kind] else None
        return [flake(t.flake_kind, rng, where), retry]

    def tier_runs(self, run: Run, selected: set[str] | None, pr_breaks: dict[str, str]) -> None:
        for tier, runners in TIERS.items():
            tests = [t for t in self.tests if t.tier == tier and (selected is None or t.area in selected)]
            if tests:
                self.run_tests(run, tests, pr_breaks, [self.rng.choice(runners) for _ in range(SHARDS)])


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The history of ``seed`` at ``scale``: every run, labelled, in the order runs finish."""
    story = _Story(seed, scale)
    rng = story.rng
    shas = [sha_of(seed, f"main-{c}") for c in range(scale.commits)]
    times = [START]
    for _ in range(scale.commits - 1):
        times.append(times[-1] + timedelta(minutes=rng.randint(90, 330)))
    runs: list[Run] = []
    for c in range(scale.commits):
        areas = set(rng.sample(AREAS, rng.randint(1, 2)))
        areas |= {t.area for b in story.breakages for t in story.tests if b.node == t.node and c in (b.start, b.end)}
        push = Run("push", shas[c], c, times[c], times[c] + timedelta(minutes=rng.randint(40, 90)), str(next(story.run_ids)),
                   author=f"dev{rng.randint(1, 9)}")
        story.tier_runs(push, areas, {})
        runs.append(push)
        if c % 8 == 7:
            at = times[c] + timedelta(minutes=30)
            nightly = Run("nightly", shas[c], c, at, at + timedelta(minutes=rng.randint(150, 200)), str(next(story.run_ids)))
            story.tier_runs(nightly, None, {})
            runs.append(nightly)
    rebreaker = next(b for b in story.breakages if b.why.startswith("re-broken"))
    rebreak_node = story.tests[story.rebreak]
    for number in range(1, scale.prs + 1):
        runs.extend(_pull_request(story, number, shas, times, rebreaker if number == scale.prs // 2 else None,
                                  rebreak_node))
    runs.sort(key=lambda r: (r.finished, r.run_id, r.attempt))
    return History(seed, story.tests, story.breakages, shas, runs)


def _tip_at(times: list[datetime], at: datetime) -> int:
    return max(c for c, t in enumerate(times) if t <= at) if at >= times[0] else 0


def _pull_request(story: _Story, number: int, shas: list[str], times: list[datetime], rebreaker: Breakage | None,
                  rebreak_node: TestSpec) -> list[Run]:
    rng = story.rng
    if rebreaker is not None:  # merged as commit rebreaker.start: opened while main's tip was just before it
        tip = rebreaker.start - 1
        opened = times[tip] + timedelta(minutes=rng.randint(5, 60))
    else:
        opened = times[0] + (times[-1] - times[0]) * rng.random()
        tip = _tip_at(times, opened)
    base = max(0, tip - rng.randint(0, 2 if rebreaker else 4))  # cut a while ago: a base lags main
    at = opened
    areas = set(rng.sample(AREAS, rng.randint(1, 3)))
    breaks: dict[str, str] = {}
    if rebreaker is not None:
        breaks[rebreaker.node] = rebreaker.line
        areas.add(rebreak_node.area)
    elif rng.random() < 0.3:
        victim = rng.choice([t for t in story.tests if t.area in areas  # not one main already broke
                             and not any(b.node == t.node and b.covers(base) for b in story.breakages)])
        breaks[victim.node] = rng.choice(BREAK_LINES)
    author = f"contributor{rng.randint(1, 20)}"
    runs: list[Run] = []
    for push in range(rng.randint(1, 3)):
        sha = sha_of(story.seed, f"pr{number}-{push}")
        if push and breaks and rebreaker is None and rng.random() < 0.5:
            breaks = {}  # the next push fixed its own breakage
        run = Run("pull_request", sha, base, at, at + timedelta(minutes=rng.randint(40, 90)), str(next(story.run_ids)),
                  pr=number, base_sha=shas[base], author=author)
        story.tier_runs(run, areas, breaks)
        runs.append(run)
        if run.labels and rng.random() < 0.3:
            failed = {(r.tier, r.shard, r.runner) for r in run.reports if r.labels}
            again = Run("pull_request", sha, base, run.finished + timedelta(minutes=rng.randint(15, 60)), run.finished,
                        run.run_id, 2, number, shas[base], author)
            again.finished = again.started + timedelta(minutes=rng.randint(40, 90))
            for tier, shard, _ in sorted(failed):
                tests = [t for t in story.tests if t.tier == tier and t.area in areas]
                runners = [rng.choice(TIERS[tier]) for _ in range(SHARDS)]
                story.run_tests(again, tests, breaks, runners, [shard])
            runs.append(again)
        at = run.finished + timedelta(minutes=rng.randint(30, 600))
    return runs
