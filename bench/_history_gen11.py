"""The eleventh labelled history (held out): FlashInfer's real skeleton, its real CI's shape, and
simulated flakes and infrastructure on top. It works from ``bench/_history_gen11_data.json`` alone
(made by ``python -m bench._history_gen11_extract GIT_DIR``, checked by
``python -m bench._history_gen11_verify GIT_DIR``).

Real (from the FlashInfer mirror, commits b7cd951dfac4..fb28d7242b35 of main, 250 first-parent):
- the commits in order, their commit times, authors, "(#NNNN)" pull request numbers and touched
  files; each merged pull request is one commit of main;
- the test files at fb28d7242b35 (407; 78 kept whole: the A10G scripts', the windows', the xfail
  ones and the 36 most touched), their test functions and parametrization counts, the first node id
  of each function as pytest writes it, their ``pytest.mark.xfail`` marks (none strict, and
  pytest.ini sets no ``xfail_strict``), the flashinfer modules each imports and the csrc/include
  files the JIT builds for those modules (``gen_*_module`` bodies in flashinfer/jit);
- which tests a commit plausibly affects (the files it touches against those dependencies), and
  the 12 breakage windows: a real revert ("Revert PR 4122" (#4171) of #4122) or fix ("fix...",
  "Fix ...", "[BUG]", "[Bugfix]", a named "regressions from #N"; not docs, CI, build or typo fixes)
  and the commit it repairs (the one it names, else the newest earlier commit touching the same
  code), failing the tests both reach (files more than 25 tests reach excluded) from the breaker
  until the repair. The range's other reverts break nothing here: #4344 reverts #4141, which
  touched only the unit runner's own tests and scripts/, and #4041's original (#3837) is older;
- pr-test.yml: ``push`` to main and ``pull_request`` runs (a pull request runs only when ``run-ci``
  is applied or ``@flashinfer-bot run`` re-applies it: new pushes need a new trigger), one
  concurrency group per ref with ``cancel-in-progress`` (a newer run cancels the older, on main
  too), one ``fail-fast`` matrix (the first failing job cancels the rest), jobs "JIT Unittest 1-5
  (A10G)" (task_jit_run_tests_partN.sh's files), "JIT Unittest (T4)" (part 3's), "JIT Unittest
  (H100)" (task_run_unit_tests.sh: every file, one JUnit per batch, uploaded on ``always()``, so a
  cancelled H100 job keeps its finished batches); no automatic retries ("a failure here is a real
  failure"), no pytest reruns; ci-bot-commands.yml's ``@flashinfer-bot rerun failed`` (GitHub's
  "Re-run failed jobs": same run id, ``run_attempt`` + 1, failed and cancelled jobs only) and
  ``@flashinfer-bot rerun`` (every job).

Simulated (seeded): pull request lives (opened 3 h to 5 days before the merge, one to four
pushes, a rebase onto newer main on 30 % of later pushes, earlier pushes sent to CI half the
time, the last always); head shas; job lengths (H100 150 +- 30 min, A10G 50 +- 15, T4 40 +- 10)
and hosts; JUnit for the A10G and T4 jobs (the real ones only print to the log); the H100 batches
(4, by path hash); xunit1 with ``file`` (as the ingest reads xunit2 with its registry); which
nodes of a window's files fail (one to three a file) and on which tiers (half of the windows on
every tier, half on the H100 alone); and these rates (`bench._history_gen11_jobs.Rates`):
- flaky: 6 % of nodes are tolerance-prone and miss ``torch.testing.assert_close`` (or an SQNR
  bound for fp4/fp8/quant files) on 4 % of attempts; 0.6 % of jobs hit a racy kernel's illegal
  memory access, which fails every later test of that file's pytest process too;
- infra: a corrupt or concurrently written JIT cache (~/.cache/flashinfer) or an nvcc/ninja error
  errors every test of one file on 1.2 % of jobs (2.4 % on the shared H100 node); CUDA OOM from
  another runner's process on 1.5 % of H100 jobs (1-4 tests); artifactory/HF hub 5xx/429 on 3 % of
  the downloading tests' attempts; NCCL/MPI errors on 4 % of comm tests' attempts; one A10G host
  with ECC errors for three days (60 % of its jobs, 1-3 tests); an A10G/T4 pool outage of eight
  hours after a bad image rollout (every test: "Error 803: system has unsupported display driver /
  cuda driver combination"); a runner that loses communication with the server on 0.7 % of jobs
  (no JUnit at all, the job fails: nothing to label, but it fails the run and fail-fast cancels
  the rest);
- re-runs: 50 % of failed pull request runs get a re-run (70 % "failed jobs", 30 % every job)
  15 min to 4 h later, up to attempt 3, unless a newer run of the pull request started first;
  failed main runs are not re-run;
- xfail: half the xfail nodes start passing at a seeded commit: a non-strict XPASS is a pass in
  pytest's JUnit, so they are passes from then (an expected failure is pytest's
  ``<skipped type="pytest.xfail">``); neither is ever labelled.

Labels: ``new`` where the run's own pull request is the breaker, ``broken_on_main`` where its base
holds the breaker and not the fix, ``infra`` and ``flaky`` as above (breakage first, then outage,
bad host, JIT cache, OOM, download, comm, illegal access, tolerance). Each failure is its job
attempt's only attempt (no pytest reruns), so ``every_attempt`` is true.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bench import _history_gen11_world as world_mod
from bench._history_gen11_jobs import Code, JobResult, Rates, World, attempt
from bench._verdicts_records import Run

RUN_ID0 = 17_100_000_000
RERUN = 0.5
RERUN_ALL = 0.3
MAX_ATTEMPT = 3
TOLERANCE_PRONE = 0.06


@dataclass(frozen=True)
class Scale:
    """``commits`` of the data file's real range (the newest), ``funcs_per_file`` node ids per test
    file; ``attempt_text`` is kept for ``--stock-junit`` and changes nothing here (no pytest
    reruns, so no retried attempt needs its own text)."""

    commits: int = 250
    funcs_per_file: int = 2
    attempt_text: bool = True
    rates: Rates = Rates()


QUICK = Scale(commits=48, funcs_per_file=1)  # the newest 48: one real window inside


@dataclass
class History:
    """The runs in the order they finish, with the world they came from."""

    seed: int
    runs: list[Run] = field(default_factory=list)
    world: World | None = None
    commits: list[world_mod.Commit] = field(default_factory=list)
    prs: list[world_mod.PullRequest] = field(default_factory=list)


def build_world(seed: int, scale: Scale, history: list[world_mod.Commit]) -> World:
    """The seeded parts of the world over the real skeleton."""
    rng = random.Random(f"gen11-world-{seed}")
    files = world_mod.suite_nodes(scale.funcs_per_file)
    nodes = [n for f in sorted(files) for n in files[f]]
    prone = frozenset(n.node for n in nodes if not n.xfail and rng.random() < TOLERANCE_PRONE)
    downloads = frozenset(n.node for n in nodes if world_mod.flags(n.file)[0])
    comms = frozenset(n.node for n in nodes if world_mod.flags(n.file)[1])
    span = (history[0].time, history[-1].time)
    day = timedelta(days=1)
    bad_start = span[0] + (span[1] - span[0] - 3 * day) * rng.random()
    outage_start = span[0] + (span[1] - span[0] - 8 * timedelta(hours=1)) * rng.random()
    xpass = {n.node: rng.randrange(len(history)) for n in nodes if n.xfail and rng.random() < 0.5}
    return World(files, world_mod.jobs(files), world_mod.windows(history, files, rng), prone, downloads, comms,
                 (rng.choice([f"ci-gpu-sm86-od-{i:02d}" for i in range(1, 13)]), bad_start, bad_start + 3 * day),
                 (outage_start, outage_start + timedelta(hours=8)), xpass, scale.rates)


def _all_jobs(world: World) -> list[tuple[str, int]]:
    return [("h100", 0)] + [("a10g", i) for i in range(len(world.jobs.shards["a10g"]))] + [("t4", 0)]


@dataclass
class _Ctx:
    world: World
    history: list[world_mod.Commit]
    rng: random.Random
    runs: list[Run] = field(default_factory=list)
    next_id: int = RUN_ID0


def _run(ctx: _Ctx, event: str, sha: str, code: Code, start: datetime, cancel_at: datetime | None,
         pr: world_mod.PullRequest | None) -> None:
    """One CI run and its re-runs, each attempt a `Run` when it wrote any JUnit."""
    run_id = str(ctx.next_id)
    ctx.next_id += 1
    subjects = [c.subject for c in ctx.history]
    todo = _all_jobs(ctx.world)
    when = start
    for number in range(1, MAX_ATTEMPT + 1):
        jobs = attempt(ctx.world, code, todo, when, cancel_at, ctx.rng, subjects)
        _emit(ctx, event, sha, code, run_id, number, when, jobs, pr)
        if cancel_at is not None and any(j.status == "cancelled" and j.end >= cancel_at for j in jobs):
            return  # superseded by a newer run of its group
        failed = [(j.tier, j.shard) for j in jobs if j.status != "success"]
        if not failed or pr is None or ctx.rng.random() >= RERUN:
            return
        when = max(j.end for j in jobs) + timedelta(minutes=ctx.rng.uniform(15, 240))
        if (cancel_at is not None and when >= cancel_at) or when >= ctx.history[pr.merged].time:
            return
        todo = _all_jobs(ctx.world) if ctx.rng.random() < RERUN_ALL else failed


def _emit(ctx: _Ctx, event: str, sha: str, code: Code, run_id: str, number: int, start: datetime,
          jobs: list[JobResult], pr: world_mod.PullRequest | None) -> None:
    reports = [r for j in jobs for r in j.reports]
    if not reports:
        return
    base = ctx.history[code.base]
    ctx.runs.append(Run(event, sha, code.base, start, max(j.end for j in jobs), run_id, number,
                        pr=pr.number if pr else None, base_sha=base.sha if pr else "",
                        author=pr.author if pr else ctx.history[code.base].author, reports=reports))


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The labelled history of ``seed``: every push and pull request run, in the order they finish."""
    history = world_mod.commits(scale.commits)
    rng = random.Random(f"gen11-{seed}")
    world = build_world(seed, scale, history)
    prs = world_mod.pull_requests(history, rng, scale.commits < 100)
    ctx = _Ctx(world, history, rng)
    for c in history:  # push to main; the next push cancels a run still in progress
        nxt = history[c.index + 1].time if c.index + 1 < len(history) else None
        _run(ctx, "push", c.sha, Code(c.index), c.time + timedelta(seconds=30), nxt, None)
    for pr in prs:
        tested = [k for k, t in enumerate(pr.tested) if t]
        for pos, k in enumerate(tested):
            when, base = pr.pushes[k]
            later = pr.pushes[tested[pos + 1]][0] if pos + 1 < len(tested) else None
            _run(ctx, "pull_request", world_mod.head_sha(pr.number, k), Code(base, pr.merged),
                 when + timedelta(seconds=20), later, pr)
    ctx.runs.sort(key=lambda r: (r.finished, r.run_id, r.attempt))
    return History(seed, ctx.runs, world, history, prs)
