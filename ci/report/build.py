"""Fold the history, the registry and the plans into the HUD's `Report`.

Contract:
- Rows: every (tier, file) the registry names, in the registry's tier order then by path, plus
  every (tier, file) the shown runs hold that the registry does not (``unregistered``).
- A cell is the file's result in one run. When a run has several attempts (GitHub's
  ``run_attempt``) the file's latest attempt decides: a final failure is ``fail`` (``broken``
  when a final attempt was broken), a pass after any failure in the run (a pytest-rerunfailures
  retry, or an earlier run attempt) is ``flaky``, all passed is ``pass``, all skipped is
  ``skipped`` (the machine lacked the hardware). No result: ``quarantined`` or ``manual`` when the
  registry says so, else ``not-run``.
- Durations: a run's sample is the file's seconds in its latest attempt (reruns included), never
  a run where every test skipped; p50 and p90 are nearest-rank. Drift is the rule of
  ``ci durations``: p90 off est_time by more than 25 % and 5 s.
- Plans become timelines as given (the caller plans; nothing here reads git or the tree).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Iterable, Sequence

from ci.history.flaky import DEFAULT_LEVEL, flaky_scores
from ci.history.store import Store
from ci.registry import Registry, Status, TestEntry
from ci.report.model import (BROKEN, FAIL, FLAKY, MANUAL, NOT_RUN, PASS, QUARANTINED, SKIPPED, Bar, DurationRow,
                             FileRow, FlakyRow, PullTest, PullView, Report, Run, ShardLane, TierPlan)
from ci.report.query import (FileResult, ReportRow, default_branch_runs, file_results, newest_repo,
                             pull_request_reports)
from ci.results.durations import p90
from ci.selection.plan import Plan

DRIFT_PCT = 25.0   # the defaults of `ci durations`: off by more than this share ...
DRIFT_MIN_S = 5.0  # ... and more than this many seconds


@dataclass(frozen=True)
class Cell:
    status: str
    time: float | None


def cell(results: Iterable[tuple[int, FileResult]]) -> Cell:
    """One file's status in one run from its (run attempt, result) pairs; see the module docstring."""
    pairs = list(results)
    if not pairs:
        return Cell(NOT_RUN, None)
    if len(pairs) == 1:  # the common case, 60,000 times a page: no folding
        r = pairs[0][1]
        time = r.time if r.skipped < r.attempts else None
        status = (BROKEN if r.broken else FAIL if r.failed else (FLAKY if r.retried else PASS) if r.passed
                  else SKIPPED if r.skipped else NOT_RUN)
        return Cell(status, None if status in (SKIPPED, NOT_RUN) else time)
    latest = max(attempt for attempt, _ in pairs)
    final = [r for attempt, r in pairs if attempt == latest]
    earlier_failed = any(r.failed or r.retried or r.broken for attempt, r in pairs if attempt != latest)
    broken, failed = sum(r.broken for r in final), sum(r.failed for r in final)
    passed, skipped = sum(r.passed for r in final), sum(r.skipped for r in final)
    attempts = sum(r.attempts for r in final)
    time = sum(r.time for r in final) if skipped < attempts else None
    if broken:
        return Cell(BROKEN, time)
    if failed:
        return Cell(FAIL, time)
    if passed and (earlier_failed or any(r.retried for r in final)):
        return Cell(FLAKY, time)
    if passed:
        return Cell(PASS, time)
    return Cell(SKIPPED, None) if skipped else Cell(NOT_RUN, None)


def nearest_rank(samples: Sequence[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def drifted(p90_s: float, est_time: float) -> bool:
    return abs(p90_s - est_time) > max(DRIFT_PCT / 100.0 * est_time, DRIFT_MIN_S)


def build_report(store: Store, registry: Registry, plans: Sequence[Plan] = (), *, runs: int = 30,
                 repo: str | None = None, pr: int | None = None, pr_plans: Sequence[Plan] = (),
                 changed: Sequence[str] = (), level: float = DEFAULT_LEVEL, min_trials: int = 5) -> Report:
    """The whole `Report`: the last ``runs`` default-branch runs of ``repo`` (else of the newest
    report's repository), the flaky ranking, durations, a timeline per plan in ``plans``, and
    with ``pr`` the pull request's view (its selection from ``pr_plans``, planned with the
    change ``changed``)."""
    repo = repo or newest_repo(store) or ""
    shown = default_branch_runs(store, repo, runs) if repo else []
    run_of = {report.id: (i, report.attempt) for i, run in enumerate(shown) for report in run.reports}
    tier_of = {report.id: report.tier for run in shown for report in run.reports}
    grouped: dict[tuple[str, str], list[list[tuple[int, FileResult]]]] = defaultdict(
        lambda: [[] for _ in shown])
    for result in file_results(store, list(run_of)):
        index, attempt = run_of[result.report_id]
        grouped[(tier_of[result.report_id], result.file)][index].append((attempt, result))
    rows, durations = _rows(registry, grouped, len(shown))
    return Report(
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"), repo=repo,
        runs=tuple(_run(i, run.reports) for i, run in enumerate(shown)), rows=tuple(rows),
        flaky=_flaky(store, registry, level, min_trials), durations=tuple(durations),
        plans=tuple(timeline(p) for p in plans),
        pull=_pull(store, registry, repo, pr, pr_plans, changed) if pr is not None else None, level=level)


def _run(index: int, reports: Sequence[ReportRow]) -> Run:
    first = reports[0]
    url = next((r.run_url for r in reports if r.run_url), "")
    return Run(index, first.sha, first.event, first.run_id, url, first.ingested_at)


def _rows(registry: Registry, grouped: dict[tuple[str, str], list[list[tuple[int, FileResult]]]],
          n_runs: int) -> tuple[list[FileRow], list[DurationRow]]:
    keys = [(tier, entry.path) for tier in registry.tiers
            for entry in sorted(registry.tests_for_tier(tier, include_inactive=True), key=lambda e: e.path)]
    known = set(keys)
    order = {tier: i for i, tier in enumerate(registry.tiers)}
    keys += sorted((k for k in grouped if k not in known), key=lambda k: (order.get(k[0], len(order)), k[0], k[1]))
    rows, durations = [], []
    empty = [[] for _ in range(n_runs)]
    for tier, path in keys:
        entry = registry.tests.get(path)
        cells = [cell(results) for results in grouped.get((tier, path), empty)]
        if entry is not None and not entry.is_active:
            cells = [Cell(_inactive(entry), None) if c.status == NOT_RUN else c for c in cells]
        owner = entry.owner if entry else ""
        rows.append(FileRow(tier, path, owner, entry.status.value if entry else "unregistered",
                            tuple(c.status for c in cells), tuple(c.time for c in cells)))
        samples = [c.time for c in cells if c.time is not None]
        if samples:
            est = entry.est_time if entry else None
            timeout = entry.timeout if entry else None
            high = p90(samples)
            durations.append(DurationRow(tier, path, owner, len(samples), nearest_rank(samples, 0.5), high, est,
                                         timeout, est is not None and drifted(high, est),
                                         timeout is not None and high > timeout))
    return rows, durations


def _inactive(entry: TestEntry) -> str:
    return QUARANTINED if entry.status is Status.QUARANTINED else MANUAL


def _flaky(store: Store, registry: Registry, level: float, min_trials: int) -> tuple[FlakyRow, ...]:
    scores = flaky_scores(store, min_trials=min_trials, level=level)
    owners = {path: entry.owner for path, entry in registry.tests.items()}
    return tuple(FlakyRow(i + 1, s.tier, s.node, s.file, owners.get(s.file, ""), s.score, s.interval.low,
                          s.interval.high, s.failures, s.trials, s.examples) for i, s in enumerate(scores))


def timeline(plan: Plan) -> TierPlan:
    """A plan's shards as bars: each shard's tests back to back, in the plan's (LPT) order."""
    times = {t.path: t.time for t in plan.selected}
    lanes = []
    for shard in plan.shards:
        start, bars = 0.0, []
        for path in shard.tests:
            bars.append(Bar(path, start, times[path]))
            start += times[path]
        lanes.append(ShardLane(shard.index, shard.est_time, tuple(bars)))
    return TierPlan(plan.tier.name, tuple(lanes), plan.makespan, plan.lower_bound, len(plan.selected),
                    len(plan.not_run))


def rerun_command(path: str, tier: str) -> str:
    """The bot's comment that runs one file on one tier (docs/rerun.md)."""
    return f"/rerun-test {path} --tier {tier}"


def _pull(store: Store, registry: Registry, repo: str, pr: int, plans: Sequence[Plan], changed: Sequence[str]) -> PullView:
    reports = pull_request_reports(store, repo, pr) if repo else []
    sha = reports[-1].sha if reports else ""
    latest = [r for r in reports if r.sha == sha]
    attempt_of = {r.id: r.attempt for r in latest}
    tier_of = {r.id: r.tier for r in latest}
    grouped: dict[tuple[str, str], list[tuple[int, FileResult]]] = defaultdict(list)
    for result in file_results(store, list(attempt_of)):
        grouped[(tier_of[result.report_id], result.file)].append((attempt_of[result.report_id], result))
    tests = []
    for p in plans:
        tier = p.tier.name
        entries = ([(t.path, True, t.why, True) for t in p.selected]
                   + [(n.path, False, n.reason, bool(n.command)) for n in p.not_run])
        for path, selected, why, runnable in entries:
            status = cell(grouped.get((tier, path), ())).status
            entry = registry.tests.get(path)
            if status == NOT_RUN and entry is not None and not entry.is_active:
                status = _inactive(entry)  # no rerun command: the bot refuses manual and quarantined files
            tests.append(PullTest(tier, path, entry.owner if entry else "", selected, why, status,
                                  rerun_command(path, tier) if status == NOT_RUN and runnable else ""))
    return PullView(pr, sha, tuple(changed), tuple(tests))
