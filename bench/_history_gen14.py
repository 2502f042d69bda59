"""gen14: a labelled history on bitsandbytes' real skeleton, held out from the verdict rules (issue 47).

Real (from `bench._history_gen14_data.json`, written by `bench._history_gen14_extract`): 240
consecutive first-parent commits of bitsandbytes' main branch (June 2025 - August 2026) with their
times, authors, pull-request numbers and files; the test functions and parametrized case ids each
commit collects; the CUDA test jobs of its workflows as they changed (a nightly ``tests.yml``, then
from November 2025 ``tests-pr.yml`` on pull requests with path filters and ``tests-nightly.yml``,
both through ``test-runner.yml``: T4/A10/L40S pools on AWS and one self-hosted Windows machine,
``fail-fast: false``, ``cancel-in-progress``, no sharding, no rerun plugin); the breakage windows its
fixes name. Simulated on top (`bench._history_gen14_causes`, `bench._history_gen14_runs`): when each
pull request was pushed and on which base, flaky tests, infra faults, a torch nightly regression, the pull
requests' own mistakes, re-runs of failed jobs and cancels. JUnit: pytest's xunit2
(`bench._history_gen14_junit`), which names no file, so the history carries ``checkout_files``.

``generate(seed, scale)`` is deterministic per seed and scale.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


from bench._history_gen14_causes import Plan, plan
from bench._history_gen14_junit import junit
from bench._history_gen14_runs import RERUN, RERUN_NIGHTLY, JobResult, Planner
from bench._history_gen14_world import HOUR, Push, Tree, load, pushes, when
from bench._verdicts_records import Label, Report, Run

RUN_ID_BASE = 19_114_000_000
MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Scale:
    """How much of the real history to use: the newest ``commits`` of the data (at most 240),
    ``params`` cases per test function (the real suite has up to hundreds), nightly runs on days
    main did not move kept every ``nightly_quiet_every`` days (the real cron runs daily);
    ``attempt_text``: each failed attempt's text is also in the registry plugin's ``ci.attempt.*``
    testcase properties (False: stock pytest JUnit, ``--stock-junit``)."""

    commits: int = 240
    params: int = 1
    nightly_quiet_every: int = 2
    attempt_text: bool = True


QUICK = Scale(commits=24, nightly_quiet_every=3)


@dataclass
class History:
    """One seed's runs in the order they finish; ``checkout_files`` the test files and pytest
    config a checkout holds (the JUnit names no file); ``plan`` the causes planted."""

    seed: int
    runs: list[Run]
    checkout_files: tuple[str, ...] = ()
    plan: Plan | None = None
    tree: Tree | None = field(default=None, repr=False)


def _code_commit(tree: Tree, push: Push) -> int:
    """The commit whose tests and workflows a run holds: the pull request's own merged commit
    where it changed them, else its base."""
    if push.pr is None or push.merged_as is None:
        return push.base
    files = tree.commits[push.merged_as]["files"]
    touches = any(f.startswith("tests/") or f.startswith(".github/workflows/") for f in files)
    return push.merged_as if touches else push.base


def _run(tree: Tree, push: Push, results: list[JobResult], run_id: str, attempt: int, started: int,
         scale: Scale) -> Run:
    reports: list[Report] = []
    for result in sorted((r for r in results if r.reported), key=lambda r: r.finished):
        labels = [Label(node, result.job.tier, cause.label, True, cause.why) for node, cause in result.causes.items()]
        xml = junit(result.outcomes, when(result.started), result.host, scale.attempt_text)
        reports.append(Report(result.job.tier, 0, 1, result.host, xml, labels))
    finished = max((r.finished for r in results), default=started + 600)
    base_sha = tree.commits[push.base]["sha"]
    return Run(push.event, push.sha, push.base, when(started), when(finished), run_id, attempt, push.pr, base_sha,
               push.author, reports)


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The history of ``seed`` at ``scale`` (see the module docstring)."""
    rng = random.Random(seed * 7919 + 14)
    first = max(0, len(load()["commits"]) - scale.commits)
    tree = Tree(scale.params, first)
    causes = plan(tree, rng)
    planner = Planner(tree, causes, rng)
    schedule = pushes(tree, rng, scale.nightly_quiet_every)
    following = {}
    for push in schedule:
        if push.pr is not None:
            following[(push.pr, push.push - 1)] = push.time
    runs: list[Run] = []
    for number, push in enumerate(schedule):
        code = _code_commit(tree, push)
        nightly = push.event == "schedule"
        if not nightly and not tree.runs_on_pr(code, tree.commits[push.merged_as or 0]["files"]):
            continue
        jobs = tree.jobs(code, nightly)
        if not jobs:
            continue
        cases = tree.cases(code)
        run_id = str(RUN_ID_BASE + number * 97)
        cancel_at = following.get((push.pr, push.push)) if push.pr is not None else None
        started = push.time + rng.randint(5, 90)
        results = [planner.job(push, job, cases, started, set()) for job in jobs]
        for result in results:
            if cancel_at is not None and result.finished > cancel_at:
                result.reported = False
                result.finished = cancel_at
                planner.cancelled(result.job, cancel_at)
        runs.append(_run(tree, push, results, run_id, 1, started, scale))
        attempt = 1
        while attempt < MAX_ATTEMPTS:
            failed = [r for r in results if r.causes or not r.reported]
            if cancel_at is not None or not failed or rng.random() >= (RERUN_NIGHTLY if nightly else RERUN):
                break
            attempt += 1
            again = max(r.finished for r in results) + rng.randint(10 * 60, 3 * HOUR)
            before = [{f"{c.file}::{c.func}" for c in (o.case for o in r.outcomes) if
                       r.causes.get(c.node) is not None and r.causes[c.node].label == "flaky"} for r in failed]
            results = [planner.job(push, r.job, cases, again, keys) for r, keys in zip(failed, before)]
            runs.append(_run(tree, push, results, run_id, attempt, again, scale))
    runs.sort(key=lambda r: (r.finished, r.run_id, r.attempt))
    checkout = tuple(sorted(set(tree.test_files) | {"pyproject.toml", "tests/__init__.py", "tests/conftest.py"}))
    return History(seed, runs, checkout, causes, tree)


def counts(history: History) -> dict[str, int]:
    """Runs, pull-request runs, re-run attempts and labelled failures per label (for the docs)."""
    out = {"runs": len(history.runs), "pr_runs": sum(1 for r in history.runs if r.pr is not None),
           "reruns": sum(1 for r in history.runs if r.attempt > 1)}
    for run in history.runs:
        for label in run.labels:
            name = f"{label.label}{'' if run.pr is not None else ' (nightly)'}"
            out[name] = out.get(name, 0) + 1
    return out



