"""A test's intermittent failures learned from everyone's runs, for verdicts on runs without retries.

Contract: `recurring(store, repo, tier, node_id, sha)` reads the test's reports on ``tier`` of every
event (up to ``as_of``), leaves out the runs of ``sha`` and of its own pull request, and groups the
rest by *source*: one pull request, or one default-branch commit. A signature (non-generic, never
an infra failure) *recurs* when runs of at least `MIN_SOURCES` sources failed with it and at least
one of those sources also passed the test in another run: a pull request's own bug fails in that
pull request's runs only, main's breakage fails every run until it is fixed, while a flake fails
now and then in anyone's runs, passing in between. The rate is the share of the other sources'
runs that failed with a recurring signature (Jeffreys posterior mean), the test's flake rate as
everyone's runs show it; `ci.history.verdict` uses it where the test has no flaky score of its own
or not for this signature (a CI without retries leaves no failure next to a pass in one run).
"""

from __future__ import annotations

from dataclasses import dataclass

from ci.history.errors import is_generic
from ci.history.store import Store

MIN_SOURCES = 3
_LOOKBACK = 2000  # reports of the test read, newest first

_ROWS = """SELECT r.id, r.sha, r.pr, r.event, c.kind, c.fingerprint, c.message, c.infra
    FROM reports r JOIN cases c ON c.report_id = r.id WHERE {repo}{tier}c.node_id = ?{until}
    AND r.id IN (SELECT r2.id FROM reports r2 JOIN cases c2 ON c2.report_id = r2.id
                 WHERE c2.node_id = ?{tier2}{until2} ORDER BY r2.id DESC LIMIT {limit})
    ORDER BY r.id, c.attempt"""


@dataclass(frozen=True)
class Recurrence:
    """The signatures that recur across ``sources`` other sources, and the rate of failing with
    them over ``runs`` runs of those sources."""

    fingerprints: frozenset[str]
    failed_runs: int
    runs: int
    sources: int

    @property
    def rate(self) -> float:
        return (self.failed_runs + 0.5) / (self.runs + 1.0)

    def describe(self) -> str:
        """``failed so in 6 of 80 runs of 5 other pull requests and commits``"""
        return f"failed so in {self.failed_runs} of {self.runs} runs of {self.sources} other pull requests and commits"


def recurring(store: Store, repo: str, tier: str | None, node_id: int | None, sha: str, *,
              as_of: int | None = None) -> Recurrence | None:
    """The test's `Recurrence` in other sources than ``sha``'s (see the module docstring), or None
    when no signature recurs. ``tier`` None reads every tier's runs together."""
    if node_id is None:
        return None
    where, params = ("r.repo = ? AND ", [repo]) if repo else ("", [])
    until, limit = (" AND r.id <= ?", [as_of]) if as_of is not None else ("", [])
    until2 = until.replace("r.id", "r2.id")
    on = [] if tier is None else [tier]
    sql = _ROWS.format(repo=where, tier="r.tier = ? AND " if on else "", tier2=" AND r2.tier = ?" if on else "",
                       until=until, until2=until2, limit=_LOOKBACK)
    rows = store.fetchall(sql, (*params, *on, node_id, *limit, node_id, *on, *limit))
    sha = sha.lower()
    own = {int(pr) for _, s, pr, _, _, _, _, _ in rows if s == sha and pr is not None}
    runs: dict[int, tuple[str, set[str], bool]] = {}  # report id: (source, failed signatures, passed)
    for rid, commit, pr, _event, kind, fingerprint, message, infra in rows:
        if commit == sha or (pr is not None and int(pr) in own) or infra:
            continue
        source = f"pr {int(pr)}" if pr is not None else f"commit {commit}"
        _, failed, passed = runs.setdefault(int(rid), (source, set(), False))
        if kind == "pass":
            runs[int(rid)] = (source, failed, True)
        elif kind == "fail" and fingerprint and not is_generic(str(message or "")):
            failed.add(str(fingerprint))
    passing = {source for source, _, passed in runs.values() if passed}
    by_print: dict[str, set[str]] = {}
    for source, failed, _ in runs.values():
        for fingerprint in failed:
            by_print.setdefault(fingerprint, set()).add(source)
    order = [failed for _, (_, failed, _) in sorted(runs.items())]
    main_passes = [rid for rid, (source, _, passed) in runs.items() if passed and source.startswith("commit")]
    first = {fp: min(rid for rid, (_, failed, _) in runs.items() if fp in failed) for fp in by_print}
    # main passed it after the signature first showed: no breakage that main still has
    prints = frozenset(fp for fp, sources in by_print.items() if len(sources) >= MIN_SOURCES and sources & passing
                       and any(rid > first[fp] for rid in main_passes) and _isolated(order, fp))
    if not prints:
        return None
    failed_runs = sum(1 for _, failed, _ in runs.values() if failed & prints)
    sources = len(set().union(*(by_print[fp] for fp in prints)))
    return Recurrence(prints, failed_runs, len(runs), sources)


def _isolated(order: list[set[str]], fingerprint: str) -> bool:
    """Whether most runs that failed with ``fingerprint`` were followed by a run that did not (in
    report order): a flake fires now and then, a breakage fails run after run until it is fixed."""
    hits = [i for i, failed in enumerate(order) if fingerprint in failed]
    repeated = sum(1 for i in hits if i + 1 < len(order) and fingerprint in order[i + 1])
    return repeated * 2 <= len(hits)
