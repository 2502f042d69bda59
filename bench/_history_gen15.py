"""The fifteenth labelled history (issue 47, held out from the verdict rules): PEFT's real main
branch (huggingface/peft, July 2025 to January 2026) on its real GitHub Actions shape, with
simulated failures on top.

Real, from ``_history_gen15_data.json`` (`bench._history_gen15_extract`): the first-parent commits
with their times, authors, pull request numbers and touched files; the test files each commit
holds and their real classes, functions and parametrize ids; tests.yml's matrix at each commit
(python 3.9-3.12 then 3.10-3.13, ubuntu/macos-13/windows then ubuntu/windows, fail-fast off, no
concurrency group so nothing is cancelled, ``pytest -n 3 tests/`` with no rerun plugin) on push to
main and on pull_request, docs-only changes skipped (paths-ignore); tests-main.yml (transformers
main, push only); nightly.yml (02:00 UTC cron, single- and multi-GPU self-hosted groups, GPU tests
only there: a CPU job skips them); and the breakage windows the subjects name (the one
``introduced in #N`` fix, dependency fixes for transformers, pytest and torch, one Windows fix).

Simulated (`bench._history_gen15_plan`, `bench._history_gen15_jobs`): pull requests' open times,
pushes (each tested as GitHub's merge of the head into main's tip), their own breakages, unmerged pull
requests, dependency onsets, flaky tests (tolerance, timing, Windows file locks), hub outages, full
disks, xdist workers killed, a GPU host with Xid errors, lost runners (no JUnit) and "Re-run failed
jobs" attempts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from bench._history_gen15_jobs import Context, Flake, Job, run_job
from bench._history_gen15_plan import PullRequest, flakes, outages, pull_requests
from bench._history_gen15_world import Shape, World, load_world
from bench._verdicts_records import Run

MAIN_TIER = "tests on transformers main"


@dataclass(frozen=True)
class Scale:
    """How much history: ``commits`` the first N of the range (None: all 224), ``prs`` at most N
    merged pull requests; ``funcs_per_file`` and ``cases_per_func`` how much of each real test file
    a job runs; rates of a pull request's own breakage, unmerged ones, re-runs and lost runners.
    ``attempt_text``: whether rerun attempts would carry `ci.pytest_attempts`' ``ci.attempt.*``
    properties (pytest-rerunfailures' own JUnit leaves a rerun attempt empty); PEFT's CI reruns no
    test inside a job, so this history's JUnit is the same either way."""

    commits: int | None = None
    prs: int | None = None
    funcs_per_file: int = 2
    cases_per_func: int = 1
    new_break: float = 0.05
    closed_share: float = 0.15
    rerun: float = 0.55
    lost: float = 0.004
    flaky_tests: int = 14
    attempt_text: bool = True


QUICK = Scale(commits=24, prs=14)


@dataclass
class History:
    """The runs in the order they finish, and the files a checkout holds (xunit2 names no file)."""

    seed: int
    runs: list[Run]
    checkout_files: tuple[str, ...] = ()
    pull_requests: list[PullRequest] = field(default_factory=list)
    world: World | None = None
    flakes: tuple[Flake, ...] = ()


class _Runner:
    """Hands out run ids, runner names and bad hosts, from the seed."""

    def __init__(self, rng: random.Random, world: World) -> None:
        self.rng = rng
        self.next_id = 16_000_000_000 + rng.randrange(10**8)
        span = world.commits[-1].time - world.commits[0].time
        self.gpu_bad = (world.commits[0].time + span * rng.uniform(0.2, 0.8))
        self.gpu_host = f"aws-g6-4xlarge-plus-{rng.randrange(16**5):05x}"

    def run_id(self) -> str:
        self.next_id += self.rng.randint(1, 40)
        return str(self.next_id)

    def hosted(self, tier: str, os: str, started: datetime) -> Job:
        seconds = {"ubuntu": 1500, "macos": 2100, "windows": 2700}[os.split("-")[0]] * self.rng.uniform(0.8, 1.3)
        bad = f"fv-az{self.rng.randint(100, 999)}-{self.rng.randint(100, 999)}" if (
            os.startswith("ubuntu") and self.rng.random() < 0.006) else ""
        host = bad or f"fv-az{self.rng.randint(100, 999)}-{self.rng.randint(100, 999)}"
        return Job(tier, "main" if tier == MAIN_TIER else "cpu", os, f"GitHub Actions {self.rng.randint(1, 999)}",
                   host, started + timedelta(seconds=self.rng.uniform(20, 240)), seconds, bad)

    def gpu(self, tier: str, group: str, started: datetime) -> Job:
        bad = tier.endswith("single_gpu") and self.gpu_bad <= started <= self.gpu_bad + timedelta(days=4) \
            and self.rng.random() < 0.5
        host = self.gpu_host if bad else f"{group}-{self.rng.randrange(16**5):05x}"
        return Job(tier, "gpu", "ubuntu-22.04", host, host, started + timedelta(seconds=self.rng.uniform(60, 900)),
                   self.rng.uniform(5400, 9000), host if bad else "")


def _cpu_tiers(shape: Shape) -> list[tuple[str, str]]:
    return [(f"tests ({os}, {py})", os) for os in shape.os for py in shape.python]


def _attempts(ctx: Context, runner: _Runner, scale: Scale, rng: random.Random, event: str, sha: str, when: datetime,
              jobs: list[Job], rerun: bool, **extra: object) -> list[Run]:
    """A run's attempts: the first runs every job, each re-run ("Re-run failed jobs") only the
    jobs that failed or were lost, on the same merge commit with dependencies installed afresh."""
    run_id, runs, attempt = runner.run_id(), [], 1
    previous: dict[str, dict[str, str]] = {}
    while jobs:
        reports, failed, ends = [], [], []
        for job in jobs:
            job.previous = previous.get(job.tier, {})
            ends.append(job.started + timedelta(seconds=job.seconds))
            if rng.random() < scale.lost:  # runner lost: job "cancelled", nothing uploaded
                failed.append(job.tier)
                continue
            report, labels = run_job(ctx, job, rng)
            reports.append((ends[-1], report))
            if labels:
                failed.append(job.tier)
                previous[job.tier] = labels
        reports.sort(key=lambda pair: pair[0])
        runs.append(Run(event, sha, ctx.base, when, max(ends), run_id, attempt, **extra,
                        reports=[r for _, r in reports]))
        labels = {lab for _, r in reports for lab in r.labels}
        wants = 0.15 if any(lab.label == "new" for lab in labels) else scale.rerun
        if not rerun or not failed or attempt >= 3 or rng.random() >= wants:
            break
        attempt += 1
        when = max(ends) + timedelta(minutes=rng.uniform(3, 240))
        ctx = replace(ctx, when=when)  # same merge commit, dependencies installed afresh
        by_tier = {job.tier: job for job in jobs}
        jobs = [runner.hosted(t, by_tier[t].os, when) for t in failed]
    return runs


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The history for ``seed`` at ``scale``, its runs in the order they finish."""
    world = load_world(seed, scale.cases_per_func, scale.funcs_per_file)
    if scale.commits is not None:
        world = World(world.commits[:scale.commits], world.shapes, world.catalogue, world.spans,
                      tuple(w for w in world.windows if w.end < scale.commits))
    rng = random.Random(f"gen15-{seed}")
    runner = _Runner(rng, world)
    flaky, hub = flakes(world, rng, scale.flaky_tests), outages(world, rng)
    prs = pull_requests(world, rng, scale.prs, scale.new_break, scale.closed_share)
    runs: list[Run] = []

    def ctx(base: int, when: datetime, own: int | None = None, pr: PullRequest | None = None,
            broken: bool = False) -> Context:
        return Context(world, base, when, own, pr.new_cases if pr and broken else (),
                       pr.new_os if pr else "", pr.new_file if pr else "", flaky, hub)

    for commit in world.commits:
        if commit.docs_only:
            continue
        when = commit.time + timedelta(seconds=rng.uniform(5, 60))
        jobs = [runner.hosted(t, os, when) for t, os in _cpu_tiers(world.shape_at(commit.index))]
        runs += _attempts(ctx(commit.index, when, commit.index), runner, scale, rng, "push", commit.sha,
                          when, jobs, False, author=commit.author)
        main_job = [runner.hosted(MAIN_TIER, "ubuntu-latest", when)]
        runs += _attempts(ctx(commit.index, when, commit.index), runner, scale, rng, "push", commit.sha,
                          when, main_job, False, author=commit.author)
    day = world.commits[0].time.replace(hour=2, minute=0, second=0, microsecond=0) + timedelta(days=1)
    while day < world.commits[-1].time:
        when = day + timedelta(minutes=rng.uniform(5, 45))  # GitHub delays scheduled runs
        base = world.base_at(when)
        shape = world.shape_at(base)
        jobs = [runner.gpu(f"nightly {name.removeprefix('run_all_tests_')}", group, when)
                for name, group in shape.gpu_groups]
        runs += _attempts(ctx(base, when), runner, scale, rng, "schedule", world.commits[base].sha,
                          when, jobs, False)
        day += timedelta(days=1)
    for pr in prs:
        for push in pr.pushes:
            jobs = [runner.hosted(t, os, push.when) for t, os in _cpu_tiers(world.shape_at(push.base))]
            runs += _attempts(ctx(push.base, push.when, None, pr, push.broken), runner, scale, rng,
                              "pull_request", push.sha, push.when, jobs, True, pr=pr.number,
                              base_sha=world.commits[push.base].sha, author=pr.author)
    runs.sort(key=lambda r: (r.finished, r.run_id, r.attempt))
    files = tuple(sorted(world.catalogue)) + ("pyproject.toml",)
    return History(seed, runs, files, prs, world, flaky)
