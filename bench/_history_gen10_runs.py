"""One GPU job of the tenth history (`bench._history_gen10`): which of its tests fail and why, its
runner, its JUnit and its labels. A test fails for the first cause that holds, in this order: a
breakage window (``new`` on the breaker's own pull request, ``broken_on_main`` where main's code
has it), the torch nightly's own break (``broken_on_main``), the H100 pool's outage, the bad host,
the hub (``infra``), a flake (``flaky``). The job's script stops after its first failing command.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timezone

from bench import _history_gen10_text as text
from bench._history_gen10_causes import (BAD_HOST_RATE, LOST_RUNNER_RATE, OUTAGE_POOL, Causes, flake,
                                         hub_error)
from bench._history_gen10_world import Job, Window, World
from bench._verdicts_records import Label, Report

# minutes a job's tests take (before a spread of -15 % to +20 %)
MINUTES = {"regression": 95, "pt2e": 40, "1xL4": 35, "1xH100": 55, "4xH100": 25, "smoke": 100}


@dataclass(frozen=True)
class WorkflowRun:
    """One workflow run: ``commit`` the index of the main commit it stands for (a pull request's
    merge commit), ``base`` the index of main's commit its code holds; ``started`` Unix seconds."""

    event: str
    sha: str
    commit: int
    base: int
    pr: int | None
    author: str
    started: int
    workflow: str
    run_id: str
    base_sha: str = ""

    @staticmethod
    def when(seconds: float) -> datetime:
        return datetime.fromtimestamp(int(seconds), tz=timezone.utc)


@dataclass(frozen=True)
class JobPlan:
    run: WorkflowRun
    job: Job
    attempt: int
    started: int


@dataclass(frozen=True)
class JobResult:
    """What one job left: its report (None when its runner was lost), whether it failed, when it ended."""

    job: Job
    report: Report | None
    failed: bool
    finished: int


def _broken(node: str, plan: JobPlan, wins: list[Window], causes: Causes, t: float) -> tuple[str, str, tuple[str, str]] | None:
    """(label, why, (error line, text)) when ``node`` fails for a real breakage or the torch nightly's own break."""
    run, job = plan.run, plan.job
    for key, w in enumerate(wins):
        if node not in w.tests or (w.nightly_only and job.torch != "nightly"):
            continue
        error = text.broken_error(key)
        failed = error, f"{node.split('::')[0]}:{40 + key}: in {node.rsplit('::', 1)[1]}\nE   {error}"
        if run.event == "pull_request" and run.commit == w.start and w.kind != "nightly":
            return "new", f"{w.why}; this is the breaker's pull request", failed
        if w.start <= run.base < w.end and not (run.event == "pull_request" and run.commit == w.end):
            return "broken_on_main", f"{w.why}; main's code at {run.base} has it", failed
    if job.torch == "nightly" and node in causes.nightly_tests and causes.nightly_span.holds(t):
        day = run.when(causes.nightly_span.start).strftime("%Y%m%d")
        return "broken_on_main", f"torch nightly {day} broke it (no torchao commit)", \
            text.failure("nightly", random.Random(node), day)
    return None


def simulate_job(plan: JobPlan, world: World, wins: list[Window], causes: Causes, rng: random.Random) -> JobResult:
    """Run one job of one attempt: its report and labels, or no report when its runner is lost."""
    job = plan.job
    minutes = MINUTES[job.tier.split("-")[0]] * rng.uniform(0.85, 1.2)
    started = plan.started + rng.randint(60, 20 * 60)  # the pool's queue
    finished = started + int(minutes * 60)
    runner = rng.choice(causes.hosts[job.pool])
    if rng.random() < LOST_RUNNER_RATE:  # "The self-hosted runner: ... lost communication with the server"
        return JobResult(job, None, True, started + int(rng.uniform(0.1, 0.9) * minutes * 60))
    outage = job.pool == OUTAGE_POOL and causes.outage.holds(started)
    bad = runner == causes.bad_host and causes.bad_span.holds(started)
    cases, labels = [], []
    seconds_each = minutes * 60 / max(1, sum(len(world.files[p].nodes) for cmd in job.commands for p in cmd))
    for command in job.commands:
        failed_here = 0
        for path in command:
            for node in world.files[path].nodes:
                t = started + len(cases) * seconds_each
                got = _cause(node, plan, wins, causes, rng, t, outage, bad, runner)
                seconds = seconds_each * rng.uniform(0.5, 1.5)
                if got is None:
                    cases.append(text.testcase(node, seconds, None))
                    continue
                label, why, failure = got
                cases.append(text.testcase(node, seconds, failure))
                labels.append(Label(node, job.tier, label, True, why))
                failed_here += 1
        if failed_here or outage:  # set -e: the script ends at its first failing command
            break
    xml = text.junit(cases, len(labels), minutes * 60, runner)
    return JobResult(job, Report(job.tier, 0, 1, runner, xml, labels), bool(labels), finished)


def _cause(node: str, plan: JobPlan, wins: list[Window], causes: Causes, rng: random.Random, t: float,
           outage: bool, bad: bool, runner: str) -> tuple[str, str, tuple[str, str]] | None:
    broken = _broken(node, plan, wins, causes, t)
    if broken is not None:
        return broken
    job = plan.job
    if outage:
        return "infra", f"{job.pool} outage: driver mismatch after a node-image roll", \
            text.failure("driver803", rng)
    if bad and rng.random() < BAD_HOST_RATE:
        return "infra", f"bad GPU host {runner}", text.failure("ecc", rng)
    hub = hub_error(causes, node, t, rng)
    if hub:
        return "infra", "Hugging Face hub failed the download", text.failure(hub, rng)
    kind = flake(causes, node, job.pool, job.tier, rng)
    if kind:
        return "flaky", f"{kind} flake", text.failure(kind, rng)
    return None
