"""Broken on main before main ran the test: read from other pull requests' merge bases.

A default branch tested on a schedule (twice a day) shows a breaking commit C only at its next
scheduled run; until then pull requests based at or after C fail the test and main shows nothing.
`broken_since` reads that evidence for one failure (test N on tier T, signature F, merge base B).

Contract. Each other run of N on T is a point at a commit of the branch: a pull request's run at
its merge base (it holds main's code there plus its change), a default-branch run at its commit.
A point *fails* when every attempt of its runs there failed and one with F (no infra cause); it
*passes* when any attempt passed (a flake's retry that passed too: the code does not always fail).
Other outcomes (another signature, infra, skipped) say nothing. Walking back from B, C is the
oldest failing commit before the newest pass at or before B. The verdict is ``broken_on_main``
since C when:

- points at or after C (up to B) come from at least `MIN_SOURCES` independent sources: pull
  requests of distinct authors (a pull request's number where the store knows no author), never
  the judged pull request or its author's others (one change's retries and pushes are one
  source); main's runs count only as passes (a failing main run is rule 3's streak);
- a point before C passed (``last_pass``): the code there did not fail it, so the candidate
  window is the commits after that pass up to C;
- a flake cannot explain it: with q the rate at which runs outside the window failed N with F
  (Laplace's (k + 1) / (n + 2), so a quiet past is not taken as proof of no flake), q ** K is
  below `ALPHA` for K failing sources. With q <= 0.2 three sources do (0.8 %); a test failing
  every third run that way needs five;
- the judged pull request did not itself touch what N runs (``changed``: its diff's paths, against
  N's file and, when the store holds a runtime map, every file N's file ran or opened): its own
  change explains its own failure at least as well, and is never evidence for it.

Commit order: ``git_order`` (first-parent, oldest first) when it holds B, else the order in which
the store first saw each commit, as a default-branch run's commit or a pull request's merge base
(pull requests are based at the newest main commit when they start, so this is main's order up to
runs that overtake one another).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence

from ci.history.depmaps import LatestMaps, latest_maps
from ci.history.mainline import MAX_CANDIDATES, MainRun, position
from ci.history.model import DEFAULT_BRANCH_EVENTS, PASS
from ci.history.store import Store
from ci.history.verdict_queries import cut, repo_condition
from ci.history.verdict_tally import short

MIN_SOURCES = 3
ALPHA = 0.01
_FAILED = ("fail", "broken")


@dataclass(frozen=True)
class BaseBreak:
    """N broken on main since ``since``, read from runs based around it: ``failed`` sources based at
    or after it failed N with the signature, ``passed`` runs based before it passed, the newest at
    ``last_pass``; ``candidates`` the commits after it up to ``since`` (at most `MAX_CANDIDATES`,
    oldest first; ``candidate_count`` all of them)."""

    since: str
    last_pass: str
    candidates: tuple[str, ...]
    candidate_count: int
    failed: int
    passed: int
    flake_chance: float

    def describe(self) -> str:
        """The verdict's detail: since when, the candidates, the last pass and the evidence's counts."""
        n, shown = self.candidate_count, ", ".join(short(c) for c in self.candidates)
        more = f" and {n - len(self.candidates)} more" if n > len(self.candidates) else ""
        return (f"broken on main since {short(self.since)} ({n} candidate commit{'s' if n != 1 else ''}: {shown}"
                f"{more}, last passed at {short(self.last_pass)}; evidence: {self.failed} pull requests based at "
                f"or after it failed it with this error, {self.passed} runs based before passed)")


@dataclass(frozen=True)
class _Point:
    at: int
    source: str
    passed: bool


# One row per attempt of the node in the other runs of the tier that have a merge base.
_BASED = """SELECT r.id, r.pr, r.author, r.base_sha, c.kind, c.fingerprint, c.infra
    FROM reports r JOIN cases c ON c.report_id = r.id
    WHERE {repo}r.tier = ? AND r.event = 'pull_request' AND r.base_sha <> '' AND r.sha <> ? AND c.node_id = ?
    AND (r.pr IS NULL OR r.pr NOT IN (SELECT o.pr FROM reports o WHERE o.sha = ? AND o.pr IS NOT NULL)){until}
    ORDER BY r.id, c.attempt"""


class PrBases:
    """The reader for one `judge` call: the commit order is read once, on first use."""

    def __init__(self, store: Store, repo: str, git_order: Sequence[str] | None, as_of: int | None):
        self.store, self.repo, self.git_order, self.as_of = store, repo, git_order, as_of
        self._seen: tuple[str, ...] | None = None
        self._maps: dict[str, LatestMaps] = {}  # per tier: read once, not per failing test

    def order(self, base: str) -> tuple[str, ...]:
        """``git_order`` when it holds ``base``, else the store's first-seen order (module docstring)."""
        if self.git_order and position(self.git_order, base) is not None:
            return tuple(self.git_order)
        if self._seen is None:
            self._seen = seen_order(self.store, self.repo, self.as_of)
        return self._seen

    def broken_since(self, tier: str, node: str, node_id: int | None, sha: str, base: str, fingerprint: str,
                     main: Sequence[MainRun], changed: Collection[str] = ()) -> BaseBreak | None:
        """The `BaseBreak` of N's failure at ``sha`` (merge base ``base``, signature ``fingerprint``),
        or None when the evidence does not hold (module docstring). ``main``: N's default-branch runs."""
        if node_id is None or not base or not fingerprint or (changed and self.touches(tier, node, changed)):
            return None
        order = self.order(base)
        b = position(order, base)
        if b is None:
            return None
        points = self._points(tier, node_id, sha, fingerprint, order) + _main_points(main, fingerprint, order)
        return _walk(points, b, order)

    def touches(self, tier: str, node: str, changed: Collection[str]) -> bool:
        """Whether ``changed`` holds N's test file or, by the store's runtime map, a file it ran or opened."""
        test_file = node.split("::", 1)[0]
        paths = set(changed)
        if test_file in paths:
            return True
        if tier not in self._maps:
            self._maps[tier] = latest_maps(self.store, tier, self.repo or None)
        stored = self._maps[tier].tests.get(test_file)
        return stored is not None and bool(paths & (stored.entry.executed | stored.entry.opened))

    def _points(self, tier: str, node_id: int, sha: str, fingerprint: str, order: Sequence[str]) -> list[_Point]:
        where, params = repo_condition(self.repo)
        until, limit = cut(self.as_of)
        rows = self.store.fetchall(_BASED.format(repo=where, until=until),
                                   (*params, tier, sha.lower(), node_id, sha.lower(), *limit))
        judged = {str(a) for (a,) in self.store.fetchall("SELECT DISTINCT author FROM reports WHERE sha = ? AND "
                                                         "author <> ''", (sha.lower(),))}
        runs: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
        for _, pr, author, base, kind, fp, infra in rows:
            if author and str(author) in judged:
                continue  # the judged change's author: their other pull requests may hold the same change
            source = f"@{author}" if author else f"#{pr}" if pr is not None else f"run at {base}"
            runs.setdefault((source, str(base)), []).append((str(kind), str(fp or ""), str(infra or "")))
        return [point for (source, base), attempts in runs.items()
                if (point := _point(order, base, source, attempts, fingerprint)) is not None]


def seen_order(store: Store, repo: str, as_of: int | None) -> tuple[str, ...]:
    """The branch's commits in the order the store first saw each: a default-branch run's commit or
    a pull request's merge base, by report id (up to ``as_of``)."""
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    events = ", ".join("?" * len(DEFAULT_BRANCH_EVENTS))
    rows = store.fetchall(
        f"SELECT sha, MIN(id) AS first FROM (SELECT r.sha AS sha, r.id AS id FROM reports r WHERE {where}r.scored = 1 "
        f"AND r.event IN ({events}){until} UNION ALL SELECT r.base_sha AS sha, r.id AS id FROM reports r WHERE {where}"
        f"r.event = 'pull_request' AND r.base_sha <> ''{until}) seen GROUP BY sha ORDER BY first",
        (*params, *DEFAULT_BRANCH_EVENTS, *limit, *params, *limit))
    return tuple(str(s).lower() for s, _ in rows)


def _point(order: Sequence[str], commit: str, source: str, attempts: list[tuple[str, str, str]],
           fingerprint: str) -> _Point | None:
    at = position(order, commit)
    if at is None:
        return None
    if any(kind == PASS for kind, _, _ in attempts):
        return _Point(at, source, True)
    if all(kind in _FAILED and not infra for kind, _, infra in attempts) and any(fp == fingerprint
                                                                                   for _, fp, _ in attempts):
        return _Point(at, source, False)
    return None


def _main_points(main: Sequence[MainRun], fingerprint: str, order: Sequence[str]) -> list[_Point]:
    """Main's passing commits: a commit with a pass does not always fail N."""
    by_commit: dict[str, list[tuple[str, str, str]]] = {}
    for run in main:
        by_commit.setdefault(run.sha, []).append((run.kind, run.fingerprint, run.infra))
    return [point for commit, attempts in by_commit.items()
            if (point := _point(order, commit, f"main {commit}", attempts, fingerprint)) is not None and point.passed]


def _walk(points: list[_Point], b: int, order: Sequence[str]) -> BaseBreak | None:
    """Back from position ``b``: the failing sources up to the newest pass, and that pass."""
    upto = [p for p in points if p.at <= b]
    passes = [p.at for p in upto if p.passed]
    newest_pass = max(passes, default=None)
    failing = [p for p in upto if not p.passed and (newest_pass is None or p.at > newest_pass)]
    if newest_pass is None or not failing:
        return None
    sources = {p.source for p in failing}
    since = min(p.at for p in failing)
    outside = [p for p in points if p not in failing]
    q = (sum(not p.passed for p in outside) + 1) / (len(outside) + 2)
    chance = q ** len(sources)
    if len(sources) < MIN_SOURCES or chance >= ALPHA:
        return None
    span = order[newest_pass + 1:since + 1]
    return BaseBreak(order[since], order[newest_pass], tuple(span[-MAX_CANDIDATES:]), len(span), len(sources),
                     sum(p.passed and p.at < since for p in points), chance)
