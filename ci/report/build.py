"""Fold the history, the registry and the plans into the HUD's `Report`.

Contract:
- Rows: every (tier, file) the registry names, in the registry's tier order then by path, plus
  every (tier, file) the shown runs hold that the registry does not (``unregistered``); then
  ordered by `ci.report.triage`: rows failing now first (with the commit their failure streak
  began at), then recently flaky rows, then the rest.
- A column is a commit of the default branch; a cell is the file's result at that commit. When
  the commit has several runs, or a run several attempts (GitHub's ``run_attempt``), they are
  ordered (runs as ingested, then attempts) and the file's latest attempt decides: a final failure is ``fail`` (``broken``
  when a final attempt was broken), a pass after any failure in the run (a pytest-rerunfailures
  retry, or an earlier run attempt) is ``flaky``, all passed is ``pass``, all skipped is
  ``skipped`` (the machine lacked the hardware). A final failure (fail or broken) whose every
  failing test names a runner-level cause (the store's infra kind) is ``infra``. No result: ``quarantined`` or ``manual`` when the
  registry says so, else ``not-run``. A failing or flaky cell carries its `Failure`: the first
  failing test by node id and its error line (`failure_of`); the latest failure of a row failing
  now, and each failure of the pull request, carry their verdict (`ci.report.verdicts`).
- Durations: a run's sample is the file's seconds in its latest attempt (reruns included), never
  a run where every test skipped; p50 and p90 are nearest-rank. Drift is the rule of
  ``ci durations``: p90 off est_time by more than 25 % and 5 s.
- Runners: every runner with infra failures in `ci.history.runners.runner_health` (its record),
  at fault only when `ci.history.runners.pool_review` finds it out of line with its pool on a tier
  of the page (the verdicts' rule and numbers, never re-derived here), those first; the tests
  failing on a tier's whole pool as the pool's; none on a store older than the verdicts' schema.
- Plans become timelines as given (the caller plans; nothing here reads git or the tree).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Iterable, Sequence

from ci.history.culprits import CulpritState, culprit_searches
from ci.history.flaky import DEFAULT_LEVEL, flaky_scores
from ci.history.runners import OutOfLine, RunnerHealth, pool_review, runner_health
from ci.history.store import Store
from ci.registry import Registry, Status, TestEntry
from ci.report.grid import safe_url
from ci.report.model import (BROKEN, FAIL, FAILING_ROW, FLAKY, INFRA, MANUAL, NOT_RUN, PASS, QUARANTINED, SKIPPED, Bar,
                             Culprit, DurationRow, Failure, FileRow, FlakyRow, PoolRow, PullTest, PullView, Report, Run,
                             RunnerRow, ShardLane, TierPlan)
from ci.report.query import (CommitRuns, FailureLine, FileResult, commit_authors, default_branch_commits, failure_lines,
                             file_results, has_verdicts, newest_repo, pull_request_reports)
from ci.report.triage import days_between, ordered, triage
from ci.report.verdicts import CellFailure, judge_cells, pull_verdicts
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
    """The whole `Report`: the last ``runs`` default-branch commits of ``repo`` (else of the newest
    report's repository), the flaky ranking, durations, a timeline per plan in ``plans``, and
    with ``pr`` the pull request's view (its selection from ``pr_plans``, planned with the
    change ``changed``)."""
    repo = repo or newest_repo(store) or ""
    commits = default_branch_commits(store, repo, runs) if repo else []
    where: dict[int, tuple[int, int]] = {}  # report id -> (column, the ordinal of its run attempt in the commit)
    tier_of: dict[int, str] = {}
    for column, commit in enumerate(commits):
        keys = sorted({(pos, r.attempt) for pos, run in enumerate(commit.runs) for r in run.reports})
        ordinal = {key: i for i, key in enumerate(keys)}
        for pos, run in enumerate(commit.runs):
            for r in run.reports:
                where[r.id], tier_of[r.id] = (column, ordinal[(pos, r.attempt)]), r.tier
    grouped: dict[tuple[str, str], list[list[tuple[int, FileResult]]]] = defaultdict(
        lambda: [[] for _ in commits])
    failing: set[int] = set()
    for result in file_results(store, list(where)):
        column, attempt = where[result.report_id]
        grouped[(tier_of[result.report_id], result.file)][column].append((attempt, result))
        if result.failed or result.retried or result.broken:
            failing.add(result.report_id)
    lines: dict[tuple[str, str, int], list[tuple[int, FailureLine]]] = defaultdict(list)
    for line in failure_lines(store, sorted(failing)):
        column, attempt = where[line.report_id]
        lines[(tier_of[line.report_id], line.file, column)].append((attempt, line))
    authors = commit_authors(store, repo) if commits else {}
    shown = tuple(_run(i, commit, authors.get(commit.sha, "")) for i, commit in enumerate(commits))
    rows, durations = _rows(registry, grouped, lines, shown)
    rows = _judged(store, repo, rows, lines, shown)
    rows = _with_culprits(store, repo, rows, shown)
    runners, pools = _runners(store, repo, sorted({r.tier for r in rows}))
    return Report(
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"), repo=repo,
        runs=shown, rows=tuple(ordered(rows)),
        flaky=_flaky(store, registry, level, min_trials), durations=tuple(durations),
        plans=tuple(timeline(p) for p in plans),
        pull=_pull(store, registry, repo, pr, pr_plans, changed) if pr is not None else None, level=level,
        runners=runners, pools=pools)


def _runners(store: Store, repo: str, tiers: Sequence[str]) -> tuple[tuple[RunnerRow, ...], tuple[PoolRow, ...]]:
    """``runners`` and ``pools`` of the `Report` (see the module docstring): the runners out of
    line first (the smallest p), then by infra reports."""
    if not has_verdicts(store) or not repo:
        return (), ()
    flagged: dict[str, tuple[str, OutOfLine]] = {}
    pools: list[PoolRow] = []
    for tier in tiers:
        review = pool_review(store, repo, tier)
        pools += [PoolRow(s.tier, s.node, s.text) for s in review.spells]
        for o in review.out_of_line:
            if o.runner not in flagged or o.p < flagged[o.runner][1].p:
                flagged[o.runner] = (tier, o)
    health = runner_health(store)
    found = [h for h in health.values() if h.infra_reports]
    found += [RunnerHealth(name, 0, 0, 0, ()) for name in flagged if name not in health]
    found.sort(key=lambda h: (h.runner not in flagged, flagged[h.runner][1].p if h.runner in flagged else 0.0,
                              -h.infra_reports, h.runner))
    return tuple(RunnerRow(h.runner, h.reports, h.infra_reports, h.infra_failures, h.kinds, h.runner in flagged,
                           h.describe(), _why(flagged.get(h.runner))) for h in found), tuple(pools)


def _why(found: tuple[str, OutOfLine] | None) -> str:
    return f"on {found[0]}, {found[1].describe()}" if found is not None else ""


def _run(index: int, commit: CommitRuns, author: str) -> Run:
    first = commit.runs[0].reports[0]
    newest = commit.runs[-1].reports[0]
    url = next((r.run_url for run in reversed(commit.runs) for r in run.reports if r.run_url), "")
    pr = next((r.pr for run in commit.runs for r in run.reports if r.pr is not None), None)  # ingested with --pr
    return Run(index, commit.sha, first.event, newest.run_id, url, first.ingested_at, author, pr, len(commit.runs))


def _judged(store: Store, repo: str, rows: list[FileRow], lines: dict[tuple[str, str, int], list[tuple[int, FailureLine]]],
            runs: Sequence[Run]) -> list[FileRow]:
    """``rows`` with the verdict on each failing row's latest failure (`ci.report.verdicts`)."""
    asks: list[tuple[int, CellFailure]] = []
    for i, row in enumerate(rows):
        if row.state != FAILING_ROW or not row.failures:
            continue
        last = row.failures[-1]  # by column: the latest result, which fails
        mine = [(attempt, line) for attempt, line in lines.get((row.tier, row.file, last.run), ()) if line.node == last.node]
        line = max(mine, key=lambda pair: (pair[0], pair[1].final))[1]
        asks.append((i, CellFailure(row.tier, runs[last.run].sha, line, len(mine))))
    out = list(rows)
    for (i, _), detail in zip(asks, judge_cells(store, repo, [ask for _, ask in asks])):
        row = out[i]
        out[i] = replace(row, failures=row.failures[:-1] + (replace(row.failures[-1], verdict=detail),))
    return out


def _with_culprits(store: Store, repo: str, rows: list[FileRow], runs: Sequence[Run]) -> list[FileRow]:
    """``rows`` with each failing row's culprit search (`ci.history.culprits.culprit_searches`): the
    newest whose window is of the row's current streak (`_of_streak`), so the answer to a breakage
    since fixed never shows on a new one."""
    searches = culprit_searches(store, repo) if any(r.state == FAILING_ROW for r in rows) else {}
    out = []
    for row in rows:
        mine = searches.get((row.tier, row.file), []) if row.state == FAILING_ROW else []
        s = next((s for s in reversed(mine) if _of_streak(s, row, runs)), None)
        out.append(row if s is None else replace(row, culprit=Culprit(s.culprit, s.probability, s.found,
                                                                       safe_url(s.run_url), s.good, s.bad)))
    return out


def _of_streak(search: CulpritState, row: FileRow, runs: Sequence[Run]) -> bool:
    """Whether ``search``'s window is of ``row``'s current fail streak: its bad commit (the
    streak's first failure, or a later one) is a column at or after the streak's first. A bad
    commit the page does not show is older than the page: of the streak only when the streak
    reaches the page's first column (the page cannot tell more)."""
    bad = search.bad.lower()
    column = next((run.index for run in runs if run.sha.startswith(bad) or bad.startswith(run.sha)), None) if bad else None
    return row.since == 0 if column is None else column >= row.since


def failure_of(status: str, column: int, pairs: Sequence[tuple[int, FailureLine]]) -> Failure | None:
    """Why a cell of ``status`` failed, from its commit's failed attempts (ordinal, line): for a
    final failure the latest attempt's final failures, for a flaky cell every failure; the first
    failing node by id, how many nodes failed, and the infra kind when every one names one.
    None when nothing failed."""
    if status in (FAIL, BROKEN, INFRA):
        latest = max((attempt for attempt, _ in pairs), default=0)
        chosen = [line for attempt, line in pairs if attempt == latest and line.final]
    elif status == FLAKY:
        chosen = [line for _, line in pairs]
    else:
        return None
    if not chosen:
        return None
    first = min(chosen, key=lambda line: line.node)
    infra = first.infra if all(line.infra for line in chosen) else ""
    return Failure(column, first.node, first.message, len({line.node for line in chosen}), infra=infra,
                   runner=first.runner)


def with_infra(status: str, failure: Failure | None) -> str:
    """``infra`` for a final failure whose every failing test names a runner-level cause, else ``status``."""
    return INFRA if status in (FAIL, BROKEN) and failure is not None and failure.infra else status


def _rows(registry: Registry, grouped: dict[tuple[str, str], list[list[tuple[int, FileResult]]]],
          lines: dict[tuple[str, str, int], list[tuple[int, FailureLine]]],
          runs: Sequence[Run]) -> tuple[list[FileRow], list[DurationRow]]:
    keys = [(tier, entry.path) for tier in registry.tiers
            for entry in sorted(registry.tests_for_tier(tier, include_inactive=True), key=lambda e: e.path)]
    known = set(keys)
    order = {tier: i for i, tier in enumerate(registry.tiers)}
    keys += sorted((k for k in grouped if k not in known), key=lambda k: (order.get(k[0], len(order)), k[0], k[1]))
    rows, durations = [], []
    empty: list[list[tuple[int, FileResult]]] = [[] for _ in runs]
    for tier, path in keys:
        entry = registry.tests.get(path)
        results = grouped.get((tier, path), empty)
        cells = [cell(r) for r in results]
        if entry is not None and not entry.is_active:
            cells = [Cell(_inactive(entry), None) if c.status == NOT_RUN else c for c in cells]
        owner = entry.owner if entry else ""
        found = [failure_of(c.status, i, lines.get((tier, path, i), ())) for i, c in enumerate(cells)]
        statuses = tuple(with_infra(c.status, f) for c, f in zip(cells, found))
        state = triage(statuses)
        attempts = tuple(len({a for a, _ in r}) for r in results)
        failures = tuple(f for f in found if f is not None)
        days = days_between(runs[state.since].started, runs[state.latest].started) if state.since >= 0 else 0.0
        rows.append(FileRow(tier, path, owner, entry.status.value if entry else "unregistered", statuses,
                            tuple(c.time for c in cells), state.state, state.since, state.streak, days, failures,
                            attempts if any(a > 1 for a in attempts) else ()))
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
    """The pull request's view: its newest commit's results; tests failing there first, then the
    ones its change selected, then the rest, each group in the plans' order."""
    reports = pull_request_reports(store, repo, pr) if repo else []
    sha = reports[-1].sha if reports else ""
    latest = [r for r in reports if r.sha == sha]
    attempt_of = {r.id: r.attempt for r in latest}
    tier_of = {r.id: r.tier for r in latest}
    grouped: dict[tuple[str, str], list[tuple[int, FileResult]]] = defaultdict(list)
    for result in file_results(store, list(attempt_of)):
        grouped[(tier_of[result.report_id], result.file)].append((attempt_of[result.report_id], result))
    lines: dict[tuple[str, str], list[tuple[int, FailureLine]]] = defaultdict(list)
    for line in failure_lines(store, list(attempt_of)):
        lines[(tier_of[line.report_id], line.file)].append((attempt_of[line.report_id], line))
    verdicts = pull_verdicts(store, repo, pr) if reports else {}
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
            failure = failure_of(status, 0, lines.get((tier, path), ()))
            status = with_infra(status, failure)
            if failure is not None:
                failure = replace(failure, verdict=verdicts.get((tier, failure.node), ""))
            tests.append(PullTest(tier, path, entry.owner if entry else "", selected, why, status,
                                  rerun_command(path, tier) if status == NOT_RUN and runnable else "", failure))
    tests.sort(key=lambda t: 0 if t.status in (FAIL, BROKEN, INFRA) else 1 if t.selected else 2)
    return PullView(pr, sha, tuple(changed), tuple(tests))
