"""The tenth labelled history (held out): torchao's (pytorch/ao) real main branch on its GitHub
Actions GPU workflows, with simulated flakes, runner and service problems, re-runs and cancels on top.

Real (``bench/_history_gen10_data.json``, made by ``python -m bench._history_gen10_extract
GIT_DIR``, checked by ``python -m bench._history_gen10_verify GIT_DIR``): 250 consecutive
first-parent commits of main, 7dd8be5dd4ac..741fec67830e (2026-03-31 to 2026-08-14), with their
times, authors, touched files and pull request numbers; the test files under ``test/`` at
741fec67830e with their test functions, parametrization counts and torchao imports; which GPU jobs
run which files (the workflows at 741fec67830e: ``regression_test.yml`` and
``regression_test_pt2e_gpu.yml`` on the A10G pool, ``1xL4_tests.yml``, ``1xH100_tests.yml`` and,
on pushes to main only, ``4xH100_tests.yml``, each with a torch-nightly and a torch-2.13 leg, and
``nightly_smoke_test.yml`` at 14:00 UTC daily on torch nightly); the triggers (``push`` to main
and ``pull_request``, no path filters; each workflow's concurrency group is the run number on
main, so main's runs never cancel, and the pull request's ref otherwise, with cancel-in-progress,
so a new push to a pull request cancels its runs still going); no pytest retries (no rerun plugin:
each test is one ``<testcase>``, so a failure is always the final attempt); the breakage windows
of the real reverts and fixes (`bench._history_gen10_world.windows`): the window's tests fail on
main from the breaker until the revert or fix, the breaker's own pull request runs fail them
(``new``), other pull requests whose merge base lies inside fail them (``broken_on_main``), the
fix's own pull request passes them. torchao's fix for "NF4Tensor narrow() crash with recent
PyTorch nightly" is a real torch-nightly break: its tests fail on the nightly legs from the
window's start to that fix.

Modelled (the tree does not say): a fix's breaker is the newest earlier commit touching one of the
fix's torchao files (at most 15 back); at most 3 tests of one file break; each pull request is
opened 2 h to 5 days before its merge and pushed 1 to 3 times (a push 5 to 40 minutes after the
previous one, 30 % of the time, so it cancels the runs still going); a pull_request run tests the
merge with main's newest commit at its push (GitHub's merge ref); test-infra's ``linux_job``
stops a job's script at its first failing command (``set -e``); each pytest command writes JUnit
(torchao's do not); durations and queues. To keep a seed under 2 minutes the default `Scale` takes
120 of the 250 pull requests (every breaker's and ender's, the rest a seeded sample) and each test
file's first 2 test functions, a parametrized one as its first case (``[0]``).

Simulated (rates in `bench._history_gen10_causes`): numerical-tolerance and SQNR flakes (2.5 % of
nodes, each failing 0.5-3 % of its jobs), inductor cache / recompile-limit errors (0.4 % of a
compile test's jobs), CUDA OOM on the 24 GB pools (0.1 %), NCCL watchdog timeouts on 4xH100 (2 %):
all ``flaky``; Hugging Face hub 429 / 504 for tests that download (0.4 %, 50 % during two 3-hour
incidents), one g5 host with ECC errors for 5 days (6 % of its tests), a runner that loses its
connection (0.3 % of jobs: "The self-hosted runner: ... lost communication with the server", the
job fails with no report), the H100 pool's 4-hour driver mismatch
after a node-image roll (every test of the job's first command): all ``infra``; a torch nightly
that breaks up to 4 of ``test/float8/test_compile.py``'s tests on the nightly legs for 36 hours, no
torchao commit's doing: ``broken_on_main`` (main fails them too, whatever the pull request
holds); GitHub's "Re-run failed jobs" (same run id, ``attempt`` 2, only the failed jobs) on 40 %
of failed pull request runs and 25 % of main's (never the nightly smoke test's).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from bench import _history_gen10_causes as causes_mod
from bench._history_gen10_causes import DAY, HOUR, Causes
from bench._history_gen10_runs import JobPlan, WorkflowRun, simulate_job
from bench._history_gen10_world import World, Window, load, windows
from bench._verdicts_records import Run

REPO = "pytorch/ao"


@dataclass(frozen=True)
class Scale:
    """How much of the real window to use: its newest ``commits`` commits, at most ``prs`` of their
    pull requests (None: all; else every breaker's and ender's and a seeded sample of the rest), each test file's first ``max_functions`` test
    functions with a parametrized one's first ``max_cases`` cases (the bench's time); ``attempt_text`` has no effect (no rerun plugin writes
    retried attempts here) and is kept for ``--stock-junit``."""

    commits: int = 250
    prs: int | None = 120
    max_cases: int = 1
    max_functions: int = 2
    rerun_rate: float = 0.4
    main_rerun_rate: float = 0.25
    attempt_text: bool = True


QUICK = Scale(commits=24, prs=14)


@dataclass
class History:
    """One seed's runs in the order they finish, with what made them."""

    seed: int
    runs: list[Run] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    causes: Causes | None = None
    world: World | None = None


def fake_sha(*parts: object) -> str:
    return hashlib.sha1("gen10-".join(str(p) for p in parts).encode()).hexdigest()


class _Ids:
    def __init__(self, rng: random.Random):
        self.rng, self.next = rng, 14_100_000_000

    def __call__(self) -> str:
        self.next += self.rng.randint(1, 4000)
        return str(self.next)


def _tip(world: World, first: int, t: float) -> int:
    """main's newest commit (index) at time ``t`` (the window's first when none is yet)."""
    best = first
    for c in world.commits[first:]:
        if c.time > t:
            break
        best = c.index
    return best


def _workflows(world: World, event: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for job in world.jobs:
        if event in job.events:
            out.setdefault(job.workflow, []).append(job)
    return out


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The history of ``seed``: every run of main, the pull requests and the nightly smoke test."""
    world = load(scale.max_cases, scale.max_functions)
    rng = random.Random(f"gen10-{seed}")
    first = len(world.commits) - scale.commits
    commits = world.commits[first:]
    wins = [w for w in windows(world, seed) if w.end > first]
    causes = causes_mod.draw(world, seed, commits[0].time, commits[-1].time)
    ids = _Ids(rng)
    runs: list[Run] = []
    for commit in commits:  # push to main: every workflow, never cancelled
        for workflow, jobs in _workflows(world, "push").items():
            plan = WorkflowRun("push", commit.sha, commit.index, commit.index, None, commit.author,
                               commit.time + rng.randint(20, 120), workflow, ids())
            runs += _attempts(plan, jobs, world, wins, causes, rng, scale.main_rerun_rate, None)
    prs = [c for c in commits if c.pr is not None]
    if scale.prs is not None:  # the windows' breakers and ends always, a seeded sample of the rest
        story = {i for w in wins for i in (w.start, w.end)}
        kept = [c for c in prs if c.index in story]
        rest = [c for c in prs if c.index not in story]
        prs = sorted(kept + rng.sample(rest, max(0, min(scale.prs - len(kept), len(rest)))), key=lambda c: c.index)
    for commit in prs:
        runs += _pull_request(commit, world, first, wins, causes, rng, ids, scale)
    day = (commits[0].time // DAY) * DAY + 14 * HOUR
    while day < commits[-1].time + DAY:
        if day >= commits[0].time:
            tip = world.commits[_tip(world, first, day)]
            plan = WorkflowRun("nightly", tip.sha, tip.index, tip.index, None, "", day + rng.randint(60, 600),
                               "nightly_smoke_test.yml", ids())
            runs += _attempts(plan, _workflows(world, "nightly")["nightly_smoke_test.yml"], world, wins, causes,
                              rng, 0.0, None)
        day += DAY
    runs.sort(key=lambda r: (r.finished, r.run_id, r.attempt))
    return History(seed, runs, wins, causes, world)


def _pull_request(commit, world: World, first: int, wins: list[Window], causes: Causes, rng: random.Random,
                  ids: _Ids, scale: Scale) -> list[Run]:
    """Every run of one pull request: its pushes, each cancelling the runs its previous left going."""
    opened = commit.time - rng.randint(2 * HOUR, 5 * DAY)
    pushes = [opened]
    while len(pushes) < 3 and rng.random() < 0.45:
        quick = rng.random() < 0.3
        gap = rng.randint(5 * 60, 40 * 60) if quick else rng.randint(2 * HOUR, 2 * DAY)
        if pushes[-1] + gap > commit.time - HOUR:
            break
        pushes.append(pushes[-1] + gap)
    runs: list[Run] = []
    for rev, pushed in enumerate(pushes):
        base = _tip(world, first, pushed)
        if base >= commit.index:  # merged already: a push after its base caught up is not modelled
            base = commit.index - 1
        sha = fake_sha(commit.pr, rev)
        cancel_at = pushes[rev + 1] if rev + 1 < len(pushes) else None
        for workflow, jobs in _workflows(world, "pull_request").items():
            plan = WorkflowRun("pull_request", sha, commit.index, max(base, 0), commit.pr, commit.author,
                               pushed + rng.randint(20, 120), workflow, ids(),
                               base_sha=world.commits[max(base, 0)].sha)
            runs += _attempts(plan, jobs, world, wins, causes, rng, scale.rerun_rate, cancel_at)
    return runs


def _attempts(plan: WorkflowRun, jobs: list, world: World, wins: list[Window], causes: Causes,
              rng: random.Random, rerun_rate: float, cancel_at: int | None) -> list[Run]:
    """The workflow run's first attempt and, when a job failed and someone re-runs failed jobs
    before a newer push cancels it, its second."""
    out: list[Run] = []
    todo = list(jobs)
    start = plan.started
    for attempt in (1, 2):
        results = [simulate_job(JobPlan(plan, job, attempt, start), world, wins, causes, rng) for job in todo]
        finished = max(r.finished for r in results)
        cancelled = cancel_at is not None and cancel_at < finished
        kept = [r for r in results if not cancelled or r.finished <= cancel_at]
        run = Run(plan.event, plan.sha, plan.base, plan.when(start),
                  plan.when(min(finished, cancel_at) if cancelled else finished), plan.run_id, attempt=attempt,
                  pr=plan.pr, base_sha=plan.base_sha, author=plan.author)
        run.reports = [r.report for r in kept if r.report is not None]
        if run.reports:
            out.append(run)
        failed = [r.job for r in kept if r.failed]
        if cancelled or not failed or rng.random() >= rerun_rate:
            break
        start = finished + rng.randint(10 * 60, 90 * 60)
        if cancel_at is not None and start >= cancel_at:
            break
        todo = failed
    return out

