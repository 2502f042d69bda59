"""Runner health: how many of a runner's reports hold infrastructure failures, against the fleet.

Contract: `runner_health(store)` counts, per runner name, the scored reports (a pull request's own
JUnit could forge failures on any runner, so it never counts) and those with at least one infra
failure (``cases.infra``, read through its partial index). A runner is *bad* when at least
`BAD_MIN_REPORTS` of its reports hold infra failures and they are at least `BAD_SHARE` of its
reports: one CUDA error is bad luck, a third of a machine's runs is a bad machine.

`runner_only(store, ...)` finds a test failing on one runner only: its reports on that runner, from
the newest back to the runner's last pass of it, all failed (at least `ONLY_MIN_FAILED`, from
runs of at least `ONLY_MIN_SOURCES` other pull requests or main commits than the judged one),
while since the first of them it passed on other runners at least `ONLY_MIN_PASSES` times and
failed on none. Code fails on every machine; one machine failing what the others pass is that
machine (an image or driver update), whatever its error says.
"""

from __future__ import annotations

from dataclasses import dataclass

from ci.history.store import Store

BAD_MIN_REPORTS = 3
BAD_SHARE = 0.2
ONLY_MIN_FAILED = 3
ONLY_MIN_SOURCES = 2
ONLY_MIN_PASSES = 2
_ONLY_LOOKBACK = 400  # reports of the test read, newest first: a runner's trouble is recent


@dataclass(frozen=True)
class RunnerHealth:
    """One runner's infra record over the history."""

    runner: str
    reports: int
    infra_reports: int
    infra_failures: int
    kinds: tuple[tuple[str, int], ...]  # (infra kind, reports with it), most first

    @property
    def bad(self) -> bool:
        return self.infra_reports >= BAD_MIN_REPORTS and self.infra_reports >= BAD_SHARE * max(1, self.reports)

    def describe(self) -> str:
        """``gpu-7 has infra failures in 5 of 9 reports (cuda 4, nccl 1): a bad machine?``"""
        kinds = ", ".join(f"{k} {n}" for k, n in self.kinds)
        text = f"{self.runner} has infra failures in {self.infra_reports} of {self.reports} reports"
        text += f" ({kinds})" if kinds else ""
        return text + (": a bad machine?" if self.bad else "")


_INFRA = """SELECT r.runner, c.infra, COUNT(DISTINCT r.id), COUNT(*) FROM cases c JOIN reports r ON r.id = c.report_id
    WHERE c.infra <> '' AND r.scored = 1{until} GROUP BY r.runner, c.infra"""


def runner_health(store: Store, *, as_of: int | None = None) -> dict[str, RunnerHealth]:
    """Every runner with scored reports: {runner name: its `RunnerHealth`} (the empty name included);
    with ``as_of``, over the reports up to that id only."""
    until, limit = (" AND r.id <= ?", [as_of]) if as_of is not None else ("", [])
    totals = {str(r): int(n) for r, n in store.fetchall(f"SELECT r.runner, COUNT(*) FROM reports r WHERE r.scored = 1"
                                                         f"{until} GROUP BY r.runner", limit)}
    kinds: dict[str, dict[str, int]] = {}
    failures: dict[str, int] = {}
    for runner, kind, reports, count in store.fetchall(_INFRA.format(until=until), limit):
        kinds.setdefault(str(runner), {})[str(kind)] = int(reports)
        failures[str(runner)] = failures.get(str(runner), 0) + int(count)
    per_report = {str(r): int(n) for r, n in store.fetchall(
        "SELECT r.runner, COUNT(DISTINCT r.id) FROM cases c JOIN reports r ON r.id = c.report_id "
        f"WHERE c.infra <> '' AND r.scored = 1{until} GROUP BY r.runner", limit)}
    out = {}
    for runner, reports in totals.items():
        found = kinds.get(runner, {})
        out[runner] = RunnerHealth(runner, reports, per_report.get(runner, 0), failures.get(runner, 0),
                                   tuple(sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))))
    return out


@dataclass(frozen=True)
class RunnerOnly:
    """A test failing on ``runner`` only: ``failed`` reports there since ``since`` (a commit), none
    passing, ``sources`` of them other runs than the judged one's; ``passed_elsewhere`` passing
    reports on other runners since, none failing."""

    runner: str
    since: str
    failed: int
    sources: int
    passed_elsewhere: int

    def describe(self) -> str:
        """``fails on gpu-3 only: 5 reports there since abc1234 failed it, 4 on other runners passed``"""
        return (f"fails on {self.runner} only: {self.failed} reports there since {self.since[:7]} failed it, "
                f"{self.passed_elsewhere} on other runners passed (a runner image or driver update?)")


_BY_REPORT = """SELECT r.id, r.runner, r.sha, r.pr, r.event,
    SUM(CASE WHEN c.kind = 'pass' THEN 1 ELSE 0 END), SUM(CASE WHEN c.kind IN ('fail', 'broken') THEN 1 ELSE 0 END)
    FROM reports r JOIN cases c ON c.report_id = r.id WHERE {repo}r.tier = ? AND c.node_id = ?{until}
    GROUP BY r.id, r.runner, r.sha, r.pr, r.event ORDER BY r.id DESC LIMIT {limit}"""


def runner_only(store: Store, repo: str, tier: str, node_id: int | None, runner: str, sha: str, *,
                as_of: int | None = None) -> RunnerOnly | None:
    """The `RunnerOnly` record of the test ``node_id`` on ``tier`` if it fails on ``runner`` only
    (see the module docstring), judged for a run at ``sha``; None otherwise. Reports of every event
    count (a machine fails everyone's runs alike); the runs of ``sha``'s own pull request, or of
    ``sha`` itself, never count towards ``sources``."""
    if node_id is None or not runner:
        return None
    where, params = ("r.repo = ? AND ", [repo]) if repo else ("", [])
    until, limit = (" AND r.id <= ?", [as_of]) if as_of is not None else ("", [])
    rows = store.fetchall(_BY_REPORT.format(repo=where, until=until, limit=_ONLY_LOOKBACK),
                          (*params, tier, node_id, *limit))
    own_prs = {int(pr) for _, _, s, pr, _, _, _ in rows if s == sha.lower() and pr is not None}
    failed, sources, first = 0, set(), None
    for rid, name, commit, pr, _event, passes, fails in rows:  # newest first
        if name != runner:
            continue
        if int(passes):
            break
        if int(fails):
            failed += 1
            first = (int(rid), str(commit))
            if commit != sha.lower() and (pr is None or int(pr) not in own_prs):
                sources.add(("pr", int(pr)) if pr is not None else ("sha", str(commit)))
    if first is None or failed < ONLY_MIN_FAILED or len(sources) < ONLY_MIN_SOURCES:
        return None
    elsewhere = [(int(p), int(f)) for rid, name, _, _, _, p, f in rows if name != runner and int(rid) > first[0]]
    if any(f and not p for p, f in elsewhere) or sum(1 for p, _ in elsewhere if p) < ONLY_MIN_PASSES:
        return None
    return RunnerOnly(runner, first[1], failed, len(sources), sum(1 for p, _ in elsewhere if p))
