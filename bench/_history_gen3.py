"""A third labelled history for `python -m bench verdicts --generator gen3` (issue 47), written
from what a vLLM-like GPU CI looks like, independently of the verdict rules and of gen2.

Per seed: six tiers in 1-4 shards (`bench._history_gen3_world`), runners in three pools, main
commits 1.5 hours apart whose pushes run the tiers they touch plus the fast check, a nightly of
every tier, and pull requests on bases 0-10 commits behind main, each push one run. A failed run
is re-run ("Re-run failed jobs": the same run id, ``run_attempt`` 2, only the failed shards, on
whichever runner picks them up) for 35 % of pull request runs and 20 % of main's. Within a job
the plugin reruns a failing test as its tier says (2, 1 or 0 times), never an ImportError; a
crashed xdist worker's test is rerun too, but its rerun leaves only a nameless element, so a crash
that passes on its rerun is not a failure anyone sees (and is not labelled). Causes, in the order they win:

- main's breakages and a pull request's own bugs (`bench._history_gen3_story`): every attempt;
- ``h100-04``'s GPU, stuck after an ECC error for two stretches of 6-12 hours, then repaired:
  90 % of its jobs in a stretch fail from a random test on, every attempt (``infra``);
- 17 flaky tests at 3-8 % an attempt: downloads 8x during two Hugging Face outages of 2-3 hours,
  OOM 10x when an L4 job is co-scheduled with another (15 %), timeouts 3x on the slow ``l4-07``,
  on the rerun in the same job a port collision 30 % likely again and a worker crash 50 %.

Every test of every run that failed an attempt is labelled with its true cause (`Label`); runs are listed in
the order they finish, which is the order `bench._verdicts_score` ingests them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench._history_gen3_story import Breakage, PullRequest, breakages, main_tiers, pull_requests, sha, windows
from bench._history_gen3_text import Failure, failure, flake, junit_xml, stuck_gpu, testcase
from bench._history_gen3_world import (BAD_GPU_RUNNER, DOWNLOAD, FLAKE, OOM, POOL_LOAD, POOLS, PORT, SLOW_RUNNER,
                                       TIER, TIERS, TIMEOUT, XDIST, Test, Tier)
from bench._verdicts_records import LABELS, Label, Report

BROKEN_ON_MAIN, NEW, INFRA, FLAKY = LABELS
HOURS_PER_COMMIT = 1.5
# How likely a flake of this kind is again on the rerun in the same job: the port is still taken,
# the worker's memory pressure is still there.
AGAIN = {PORT: 0.3, XDIST: 0.5}


@dataclass(frozen=True)
class Scale:
    """How big a history is and how often things happen (see the module docstring)."""

    commits: int = 72
    prs: int = 70
    nightly_every: int = 12
    self_break: float = 0.3
    rerun_pr: float = 0.35
    rerun_main: float = 0.2
    cosched: float = 0.15
    bad_gpu: float = 0.9
    attempt_text: bool = True  # False: JUnit as stock pytest-rerunfailures writes it, no ci.attempt.*


QUICK = Scale(commits=24, prs=14, nightly_every=8)


@dataclass
class Run:
    """One attempt of one workflow run. ``main_index``: the main commit a push or nightly ran;
    ``base_index``: a pull request run's merge base. ``labels``: each final failure's truth, its
    ``why`` the planted event (``breakage:NAME``, ``own-bug``, ``stuck-gpu``, ``flake:KIND``)."""

    run_id: str
    attempt: int
    event: str
    sha: str
    pr: int | None
    author: str
    base_sha: str
    started: float
    finished: float = 0.0
    main_index: int | None = None
    base_index: int | None = None
    push: int = 0
    reports: list[Report] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)


@dataclass
class History:
    """A seed's history: runs in the order they finish, and what the story planted."""

    seed: int
    scale: Scale
    runs: list[Run]
    commits: list[str]
    breakages: list[Breakage]
    pull_requests: list[PullRequest]
    stuck_gpu: tuple[tuple[float, float], ...]
    outages: tuple[tuple[float, float], ...]


@dataclass
class _Job:
    """What a job's tests meet: its runner, whether it shares its host, whether its GPU is stuck
    (and from which test on), and whether Hugging Face is down."""

    runner: str
    cosched: bool
    fault_at: int | None
    outage: bool


def _during(spans: tuple[tuple[float, float], ...], when: float) -> bool:
    return any(lo <= when < hi for lo, hi in spans)


class _Simulator:
    def __init__(self, seed: int, scale: Scale):
        self.rng = random.Random(seed)
        self.scale = scale
        self.times = [i * HOURS_PER_COMMIT + self.rng.uniform(0, 0.5) for i in range(scale.commits)]
        self.shas = [sha(self.rng) for _ in self.times]
        self.broken = breakages(scale.commits)
        hours = self.times[-1]
        self.stuck = windows(self.rng, hours, (0.3, 0.68), (6.0, 12.0))
        self.outages = windows(self.rng, hours, (0.2, 0.6), (2.0, 3.0))
        self.prs = pull_requests(self.rng, scale.prs, self.times, self.broken, scale.self_break)

    def breakage(self, node: str, base: int, pr: PullRequest | None, push: int) -> tuple[str, str, bool, str] | None:
        """(label, error, once, cause) when ``node`` is broken in this tree, else None."""
        for b in self.broken:
            if node in b.nodes and b.start <= base < b.end:
                return BROKEN_ON_MAIN, b.error(node), b.once, f"breakage:{b.name}"
        if pr is not None and node in pr.breaks and pr.breaks_from <= push < pr.breaks_until:
            return NEW, pr.errors[pr.breaks.index(node)], False, "own-bug"
        return None

    def job(self, tier: Tier, shard: int, start: float) -> _Job:
        runner = self.rng.choice(POOLS[tier.pool])
        cosched = tier.pool == POOL_LOAD and self.rng.random() < self.scale.cosched
        tests = tier.shard(shard)
        stuck = runner == BAD_GPU_RUNNER and _during(self.stuck, start) and self.rng.random() < self.scale.bad_gpu
        return _Job(runner, cosched, self.rng.randrange(len(tests)) if stuck else None, _during(self.outages, start))

    def attempts(self, test: Test, index: int, tier: Tier, job: _Job, run: Run, pr: PullRequest | None) \
            -> tuple[list[Failure | None], Label | None]:
        tries = 1 + tier.reruns
        base = run.main_index if run.main_index is not None else run.base_index
        broken = self.breakage(test.node, base, pr, run.push)
        if broken is not None:
            label, error, once, cause = broken
            got = [failure(test, error)] * (1 if once else tries)
            return list(got), Label(test.node, tier.name, label, True, cause)
        if job.fault_at is not None and index >= job.fault_at:
            got = [stuck_gpu(test, index == job.fault_at and a == 0) for a in range(tries)]
            return list(got), Label(test.node, tier.name, INFRA, True, "stuck-gpu")
        spec = FLAKE.get(test.node)
        if spec is None:
            return [None], None
        rate = spec.rate * (8 if spec.kind == DOWNLOAD and job.outage else 1) * \
            (10 if spec.kind == OOM and job.cosched else 1) * (3 if spec.kind == TIMEOUT and job.runner == SLOW_RUNNER else 1)
        out: list[Failure | None] = []
        for _ in range(tries):
            if self.rng.random() >= min(rate, 0.9):
                out.append(None)
                break
            out.append(flake(spec.kind, test, self.rng, worker=self.rng.randrange(4)))
            rate = max(rate, AGAIN.get(spec.kind, 0.0))
        if not any(a is not None and (not a.crash or i == len(out) - 1) for i, a in enumerate(out)):
            return out, None  # a crash passed on its rerun: the report shows no failure
        # a failure that passed on its rerun is an answer too: `ci history verdicts` lists it
        return out, Label(test.node, tier.name, FLAKY, all(a is not None for a in out), f"flake:{spec.kind}")

    def play(self, run: Run, jobs: list[tuple[str, int]], pr: PullRequest | None) -> list[tuple[str, int]]:
        """Run ``jobs`` for ``run``: fills its reports, labels and finish time; the failed jobs."""
        failed, finish = [], run.started
        for tier_name, shard in jobs:
            tier = TIER[tier_name]
            start = run.started + self.rng.uniform(0.0, 0.5)
            job = self.job(tier, shard, start)
            cases, fails, errors, total = [], 0, 0, 0.0
            for index, test in enumerate(tier.shard(shard)):
                got, label = self.attempts(test, index, tier, job, run, pr)
                secs = [(905.0 if a is not None and a.error.startswith("Failed: Timeout") else
                         test.seconds * self.rng.uniform(0.7, 1.4)) for a in got]
                total += sum(secs)
                cases.append(testcase(test, got, secs, self.scale.attempt_text))
                if label is not None:
                    run.labels.append(label)
                if got[-1] is not None:
                    fails += got[-1].outcome == "failed"
                    errors += got[-1].outcome == "error"
            stamp = f"2026-11-{1 + int(start // 24) % 28:02d}T{int(start % 24):02d}:00:00.000000+00:00"
            run.reports.append(Report(tier.name, shard, tier.shards, job.runner,
                                      junit_xml(cases, fails, errors, total, job.runner, stamp)))
            finish = max(finish, start + 0.1 + total / 3600)
            if fails or errors:
                failed.append((tier_name, shard))
        run.finished = finish
        return failed

    def all_runs(self) -> list[Run]:
        planned: list[tuple[Run, list[tuple[str, int]], PullRequest | None]] = []
        every = self.scale.nightly_every
        for i, (when, commit) in enumerate(zip(self.times, self.shas)):
            author = self.rng.choice(("vllm-bot", "maintainer"))
            tiers = main_tiers(i, self.rng, self.broken)
            planned.append((Run("", 1, "push", commit, None, author, "", when, main_index=i),
                            [(t, s) for t in tiers for s in range(TIER[t].shards)], None))
            if i and i % every == 0:
                planned.append((Run("", 1, "nightly", commit, None, "schedule", "", when + 0.3, main_index=i),
                                [(t.name, s) for t in TIERS for s in range(t.shards)], None))
        for pr in self.prs:
            for push, (when, commit, base) in enumerate(pr.pushes):
                run = Run("", 1, "pull_request", commit, pr.number, pr.author, self.shas[base], when,
                          base_index=base, push=push)
                planned.append((run, [(t, s) for t in pr.tiers for s in range(TIER[t].shards)], pr))
        planned.sort(key=lambda p: p[0].started)
        runs: list[Run] = []
        for number, (run, jobs, pr) in enumerate(planned):
            run.run_id = str(11_800_000_000 + 1_000 * number + self.rng.randrange(1_000))
            failed = self.play(run, jobs, pr)
            runs.append(run)
            again = self.scale.rerun_pr if run.event == "pull_request" else self.scale.rerun_main
            if failed and self.rng.random() < again:
                second = Run(run.run_id, 2, run.event, run.sha, run.pr, run.author, run.base_sha,
                             run.finished + self.rng.uniform(0.3, 3.0), main_index=run.main_index,
                             base_index=run.base_index, push=run.push)
                self.play(second, failed, pr)
                runs.append(second)
        runs.sort(key=lambda r: r.finished)
        return runs


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The labelled history of ``seed`` (the same seed and scale give the same history)."""
    sim = _Simulator(seed, scale)
    runs = sim.all_runs()
    return History(seed, scale, runs, sim.shas, sim.broken, sim.prs, sim.stuck, sim.outages)
