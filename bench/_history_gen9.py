"""The ninth labelled history (held out): Liger-Kernel's real main branch on GitHub Actions and
Modal, with simulated flakes and infrastructure on top. ``generate(seed, scale)`` -> `History`.

Real (from `bench/_history_gen9_data.json`, made by ``python -m bench._history_gen9_extract GIT_DIR``
from linkedin/Liger-Kernel and checked by ``python -m bench._history_gen9_verify GIT_DIR``): 250
consecutive first-parent commits of main, bebe030aa681 (2025-04-02) .. 3c64eaae6440 (2026-02-09),
the last before #1069 moved the GPU tests into a merge queue; their merge times, authors, pull
request numbers, touched ``src/``/``test/`` files and added test files; the test files at the end of
the range with their real test functions, parametrization ids (the first `Scale.ids_per_test` of
each) and ``liger_kernel`` imports; the breakage windows of the real reverts and fixes
(`bench._history_gen9_world`: a revert's breaker is the commit it names, a fix's is modelled as the
latest earlier commit sharing a file with it). The CI as ``.github/workflows/nvi-ci.yml`` had it
then: on ``push`` to main and on ``pull_request``, only when ``src/**`` or ``test/**`` changed; a
daily ``schedule`` (00:00 UTC, recorded as ``nightly``) until #890 removed it; two jobs after
checkstyle, ``tests`` and ``tests-bwd`` (tiers ``nvi-tests``, ``nvi-tests-bwd``), each one Modal
H100 container running ``make test`` then ``make test-convergence`` (`bench._history_gen9_jobs`);
one concurrency group per pull request and one for main (push and schedule share ``github.ref``)
with ``cancel-in-progress: true``, so a newer push cancels the running one; no pytest reruns.

Modelled (not in the tree): that each job's pytest writes xunit1 JUnit that is ingested (Liger
uploads none); a pull request's head commits (1 push 50 %, 2 pushes 30 %, 3 pushes 20 %, between
4 days and 90 minutes before the merge; each run's merge base is main's head at the push; a
synthetic head sha); run lengths (``make test`` 22-34 min, convergence 12-20 min); a cancelled
job leaves no JUnit. Simulated, with their rates: flaky cases, `FLAKY_SHARE` of the kernel cases
failing `FLAKE_RATE` of their runs and `CONVERGENCE_FLAKY_SHARE` of convergence cases at the same
rates ("Mismatched elements: 3 / 4096"); CUDA OOM on a convergence case, `OOM_RATE` per case run
(another process holds the GPU: infra); Hugging Face hub 429/5xx for the tokenizer-building
convergence files, `HUB_RATE` per case run and 50 % during `HUB_INCIDENTS` incidents of 1-3 hours
(infra); a Modal container that never starts, `START_FAIL` per job (no JUnit); a Modal function
timeout, `TIMEOUT_RATE` per job (the running test errors, infra); one bad Modal worker among
`WORKERS`, whose jobs fail `ECC_RATE` of the time for 3 days with an ECC error from one test to the
end of ``make test`` (infra); one Modal outage of 5 hours (from up to 2 hours before some pull
request's run), in which `OUTAGE_RATE` of jobs are terminated with
`bench._history_gen9_text.MODAL_TERMINATED` (infra, a line no other history writes); GitHub's
"Re-run failed jobs" (same run id, attempt 2, the failed jobs only), by `RERUN_PR` of authors and
`RERUN_MAIN` on main, when no newer push came first.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

from bench._history_gen9_jobs import Conditions, run_job
from bench._history_gen9_text import junit
from bench._history_gen9_world import Window, World, broken_by, load, windows
from bench._verdicts_records import Report, Run

TIERS = ("nvi-tests", "nvi-tests-bwd")
FLAKY_SHARE, CONVERGENCE_FLAKY_SHARE, FLAKE_RATE = 0.02, 0.05, (0.02, 0.08)
OOM_RATE, HUB_RATE, HUB_INCIDENTS = 0.004, 0.003, 4
START_FAIL, TIMEOUT_RATE, ECC_RATE, OUTAGE_RATE = 0.02, 0.01, 0.5, 0.7
RERUN_PR, RERUN_MAIN = 0.5, 0.25
WORKERS = 12
DAY = 86400


@dataclass(frozen=True)
class Scale:
    """``commits`` the last N commits of the data file; ``pull_requests`` at most this many pull
    requests get runs (None: all); ``attempt_text`` kept for ``--stock-junit`` (with no reruns
    there is no retried attempt whose text it would drop)."""

    commits: int = 250
    pull_requests: int | None = None
    ids_per_test: int = 2
    attempt_text: bool = True


QUICK = Scale(commits=24, pull_requests=14)


@dataclass
class History:
    """One seed's history: its runs in the order they finish (the harness reads ``seed`` and
    ``runs``), and the story the tests check them against: the windows, the outage's and the bad
    worker's times, the hub incidents and each flaky case's rate."""

    seed: int
    runs: list[Run]
    world: World
    windows: list[Window]
    outage: tuple[int, int]
    bad_worker: str
    bad_period: tuple[int, int]
    hub_incidents: list[tuple[int, int]] = field(default_factory=list)
    flaky: dict[str, float] = field(default_factory=dict)  # each flaky case's failure rate per run


@dataclass
class _Plan:
    """A run attempt to simulate: ``group`` its concurrency group, ``code`` main's index it holds."""

    event: str
    sha: str
    code: int
    start: int
    group: str
    author: str
    pr: int | None = None
    lands: int | None = None  # the main index the pull request lands as
    added: tuple[str, ...] = ()


def _sha(*parts: object) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


def _head(world: World, first: int, at: int) -> int:
    """Main's head at time ``at`` (-1 before the range's first commit)."""
    head = -1
    for c in world.commits[first:]:
        if c.time > at:
            break
        head = c.index
    return head


def _plans(world: World, first: int, scale: Scale, rng: random.Random) -> list[_Plan]:
    plans, prs = [], 0
    commits = world.commits[first:]
    cron_end = next((c.time for c in world.commits if "daily test cron" in c.subject), 0)
    for c in commits:
        if not c.runs_gpu:
            continue
        plans.append(_Plan("push", c.sha, c.index, c.time + rng.randint(60, 180), "main", c.author))
        if c.pr is None or (scale.pull_requests is not None and prs >= scale.pull_requests):
            continue
        prs += 1
        pushes = rng.choices((1, 2, 3), (0.5, 0.3, 0.2))[0]
        first_push = c.time - rng.randint(3 * 3600, 4 * DAY)
        last_push = c.time - rng.randint(5400, max(5401, min(DAY, c.time - first_push)))
        for k in range(pushes):
            at = first_push + (last_push - first_push) * k // max(1, pushes - 1) if pushes > 1 else last_push
            base = _head(world, first, at)
            if base < first:
                continue
            plans.append(_Plan("pull_request", _sha("liger-pr", c.pr, k), base, at + rng.randint(60, 180),
                               f"pr{c.pr}", c.author, c.pr, c.index, c.added_tests))
    day = (commits[0].time // DAY + 1) * DAY
    while day < min(cron_end, commits[-1].time):
        head = _head(world, first, day)
        if head >= first:
            plans.append(_Plan("nightly", world.commits[head].sha, head, day + rng.randint(300, 1800), "main", ""))
        day += DAY
    return sorted(plans, key=lambda p: p.start)


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The history of seed ``seed``: its runs in the order they finish."""
    rng = random.Random(seed * 7919 + 9)
    world = load(ids_per_test=scale.ids_per_test)
    first = len(world.commits) - scale.commits
    wins = [w for w in windows(world, random.Random(seed)) if w.end > first]
    begin, end = world.commits[first].time - 4 * DAY, world.commits[-1].time
    plans = _plans(world, first, scale, rng)
    # the outage and the bad worker's days begin near a pull request's run: on a quiet weekend they would meet none
    outage_at = rng.choice([p.start for p in plans if p.event == "pull_request"]) - rng.randint(0, 7200)
    bad_at = rng.choice([p.start for p in plans]) - rng.randint(0, DAY)
    hubs = [(t, t + rng.randint(3600, 3 * 3600)) for t in (rng.randint(begin, end) for _ in range(HUB_INCIDENTS))]
    workers = [f"modal-h100-{_sha('worker', seed, i)[:8]}" for i in range(WORKERS)]
    history = History(seed, [], world, wins, (outage_at, outage_at + 5 * 3600), workers[0],
                      (bad_at, bad_at + 3 * DAY), hubs)
    kernel = [c for c in world.cases if c.kernel]
    conv = [c for c in world.cases if c.convergence]
    flaky = {c.node: rng.uniform(*FLAKE_RATE) for c in rng.sample(kernel, int(len(kernel) * FLAKY_SHARE))}
    flaky.update({c.node: rng.uniform(*FLAKE_RATE) for c in rng.sample(conv, int(len(conv) * CONVERGENCE_FLAKY_SHARE))})
    history.flaky = flaky
    starts: dict[str, list[int]] = {}
    for plan in plans:
        starts.setdefault(plan.group, []).append(plan.start)
    for number, plan in enumerate(plans):
        run_id = str(14_100_000_000 + number * 53)
        later = [s for s in starts[plan.group] if s > plan.start]
        cancel_at = later[0] if later else None
        failed = _attempt(history, plan, run_id, 1, list(TIERS), flaky, workers, cancel_at, rng)
        rerun = RERUN_PR if plan.event == "pull_request" else RERUN_MAIN
        if failed and rng.random() < rerun:
            again = replace(plan, start=int(history.runs[-1].finished.timestamp()) + rng.randint(300, 7200))
            if cancel_at is None or again.start < cancel_at:  # a newer push first: nobody reruns the old run
                _attempt(history, again, run_id, 2, failed, flaky, workers, cancel_at, rng)
    history.runs = [r for r in history.runs if r.reports]
    history.runs.sort(key=lambda r: (r.finished, r.run_id, r.attempt))
    return history


def _conditions(history: History, plan: _Plan, start: int, stop: int, flaky: dict[str, float],
                worker: str, rng: random.Random) -> Conditions:
    if plan.event == "pull_request":
        code_broken = broken_by(history.windows, plan.code, fixer=plan.lands)
        own = {c.node: w for w in history.windows if w.breaker == plan.lands for c in w.cases}
    else:
        code_broken, own = broken_by(history.windows, plan.code), {}
    marks = {node: ("new", f"this pull request breaks it: {w.why}") for node, w in own.items()}
    marks.update({node: ("broken_on_main", f"broken on main at the merge base: {w.why}")
                  for node, w in code_broken.items()})
    outage = start < history.outage[1] and stop > history.outage[0] and rng.random() < OUTAGE_RATE
    terminated = "outage" if outage else ("timeout" if rng.random() < TIMEOUT_RATE else "")
    ecc = worker == history.bad_worker and history.bad_period[0] <= start < history.bad_period[1] \
        and rng.random() < ECC_RATE
    hub_down = any(a <= start < b for a, b in history.hub_incidents)
    return Conditions(marks, flaky, rng.random() < START_FAIL, terminated, ecc, hub_down, OOM_RATE, HUB_RATE)


def _attempt(history: History, plan: _Plan, run_id: str, attempt: int, tiers: list[str], flaky: dict[str, float],
             workers: list[str], cancel_at: int | None, rng: random.Random) -> list[str]:
    """Simulate one run attempt's jobs; append the `Run`; return the tiers whose job failed."""
    world = history.world
    cases = world.present(plan.code, plan.added)
    run = Run(plan.event, plan.sha, plan.code, _when(plan.start), _when(plan.start), run_id, attempt, plan.pr,
              world.commits[plan.code].sha if plan.event == "pull_request" else "", plan.author)
    failed = []
    for tier in tiers:
        start = plan.start + rng.randint(60, 150)  # checkstyle first (`needs: [checkstyle]`)
        minutes = rng.uniform(22, 34) + rng.uniform(12, 20)
        stop = start + int(minutes * 60)
        if cancel_at is not None and stop > cancel_at:
            continue  # cancelled by a newer push in its concurrency group: no JUnit
        worker = rng.choice(workers)
        job = run_job(cases, _conditions(history, plan, start, stop, flaky, worker, rng), tier, plan.sha,
                      minutes, rng)
        run.finished = max(run.finished, _when(stop))
        if job is None or job.failed:
            failed.append(tier)
        if job is None:
            continue
        run.reports.append(Report(tier, 0, 1, worker, junit(job.outcomes, tier), job.labels))
    history.runs.append(run)
    return failed


def _when(stamp: int) -> datetime:
    return datetime.fromtimestamp(stamp, tz=timezone.utc)
