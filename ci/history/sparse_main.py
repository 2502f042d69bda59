"""Broken on main when main's own record is sparse: read from other pull requests that fail alike.

A default branch whose runs are cancelled by the next push (``cancel-in-progress`` on main too)
and whose matrix fails fast reports a breakage seldom or never: its runs end before the broken
test runs, or are cancelled. A cancelled run and a fail-fast skip are absence of evidence, not a
pass. The pull requests based after the breaking commit hold its code, and they fail the test the
same way. `peer_break` reads them for one failure: test N on tier T, signature F, merge base B,
which the other rules called ``new``.

Contract. Each other pull request's run of N on T is a point at its merge base's position in the
branch's order (`ci.history.pr_base_evidence.PrBases.order`): it *passes* when any attempt passed,
it *fails alike* when every attempt failed and one failed with F (an infra-tagged attempt counts
only when its kind is ``kind``, the judged failure's own infra-looking kind that the runner rules
found to follow the test, such as a CUDA error a kernel raises); other outcomes say nothing.
Main's runs count only as passes (a failing main run is rule 3's streak; a missing one says
nothing). Walking back from B, the first commit with a pass is the newest clean pass, except once:
one pull request's pass (not main's) between failing points, at a commit where or after which
points failed alike and whose nearest older commit with points only failed, is the breakage's fix
(based on the broken code, it passes: ``ci.history.held_code`` says the same) and the walk goes
on. The verdict is ``broken_on_main`` since C, the oldest failing commit after the newest clean
pass, when:

- the failing points after that pass come from `MIN_SOURCES` or more sources: pull requests of
  distinct authors (a pull request's number where the store knows no author), never the judged
  pull request or its author's others. Two, because the judged failure is a third: three changes
  by different people, based on the same code, failing the same test with the same error, while
  code before it passed. One other could be the breaking change's own run, or a change stacked on
  the judged one;
- a flake cannot explain them: with q the rate at which the points outside the window failed
  alike (Laplace's (k + 1) / (n + 2)), q ** K is below `ALPHA` for K sources;
- F is a signature that can be shared breakage evidence: not generic, not of an environmental
  class (`ci.history.errors.environment_kind`: a port, a server start, a timeout), and none of N's
  known flaky signatures (``flaky_prints``): a flake firing in two pull requests is not a breakage;
- the judged pull request did not itself touch what N runs (``changed``, as
  `ci.history.pr_base_evidence` reads it).

The store does not hold other pull requests' changed files, so "changing different files" is read
as "by different authors". `PeerBreak.describe` names the pull requests that were the evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence

from ci.history.errors import environment_kind, is_generic
from ci.history.held_code import HELD_SOURCES
from ci.history.mainline import MAX_CANDIDATES, MainRun, position
from ci.history.model import PASS
from ci.history.pr_base_evidence import ALPHA, PrBases
from ci.history.store import Store
from ci.history.verdict_queries import cut, repo_condition
from ci.history.verdict_tally import short

MIN_SOURCES = 2
SHOWN = 5  # pull requests named in the detail
_FAILED = ("fail", "broken")

# One row per attempt of the node in other pull requests' runs of the tier that have a merge base.
_OTHERS = """SELECT r.pr, r.author, r.base_sha, c.kind, c.fingerprint, c.infra
    FROM reports r JOIN cases c ON c.report_id = r.id
    WHERE {repo}r.tier = ? AND r.event = 'pull_request' AND r.base_sha <> '' AND r.sha <> ? AND c.node_id = ?
    AND (r.pr IS NULL OR r.pr NOT IN (SELECT o.pr FROM reports o WHERE o.sha = ? AND o.pr IS NOT NULL)){until}
    ORDER BY r.id, c.attempt"""


@dataclass(frozen=True)
class PeerBreak:
    """N broken on main since ``since`` as other pull requests show it: ``prs`` (their numbers,
    oldest base first) based at or after it failed N with the signature, from ``sources`` distinct
    authors; the newest clean pass before it was at ``last_pass``; ``candidates`` the commits after
    it up to ``since`` (at most `MAX_CANDIDATES`, ``candidate_count`` all of them)."""

    since: str
    last_pass: str
    candidates: tuple[str, ...]
    candidate_count: int
    prs: tuple[str, ...]
    sources: int
    flake_chance: float

    def describe(self) -> str:
        """The verdict's detail: since when, the candidates, the last pass and the evidence."""
        n, shown = self.candidate_count, ", ".join(short(c) for c in self.candidates)
        more = f" and {n - len(self.candidates)} more" if n > len(self.candidates) else ""
        named = ", ".join(self.prs[:SHOWN]) + (f" and {len(self.prs) - SHOWN} more" if len(self.prs) > SHOWN else "")
        return (f"broken on main since {short(self.since)} ({n} candidate commit{'s' if n != 1 else ''}: {shown}{more}, "
                f"last passed at {short(self.last_pass)}); main has not reported it, but pull requests of "
                f"{self.sources} other authors based at or after it failed it with this error: {named}")


@dataclass(frozen=True)
class _Point:
    at: int
    source: str  # the author, or the pull request where none is stored; main's passes: "main"
    pr: str
    passed: bool


def shareable(error: str, fingerprint: str, flaky_prints: Collection[str]) -> bool:
    """Whether a failure's signature can be evidence shared between changes: specific (not
    generic), not an environmental class, and none of the test's known flaky signatures."""
    return bool(fingerprint) and not is_generic(error) and not environment_kind(error) and \
        fingerprint not in flaky_prints


def peer_break(bases: PrBases, tier: str, node: str, node_id: int | None, sha: str, base: str, error: str,
               fingerprint: str, *, main: Sequence[MainRun], flaky_prints: Collection[str] = (), kind: str = "",
               changed: Collection[str] = ()) -> PeerBreak | None:
    """The `PeerBreak` of N's failure at ``sha`` (merge base ``base``), or None when the evidence
    does not hold (module docstring). ``main``: N's default-branch runs; ``bases``: the judge call's
    reader of the branch order and the judged change's reach."""
    found = peer_points(bases, tier, node, node_id, sha, base, error, fingerprint, flaky_prints, kind, changed)
    if found is None:
        return None
    order, b, points = found
    points += [_Point(at, "main", "", True) for run in main if run.kind == PASS
               and (at := position(order, run.sha)) is not None]
    return _walk(points, b, order)


def peer_points(bases: PrBases, tier: str, node: str, node_id: int | None, sha: str, base: str, error: str,
                fingerprint: str, flaky_prints: Collection[str], kind: str,
                changed: Collection[str]) -> tuple[tuple[str, ...], int, list[_Point]] | None:
    """The branch order, the merge base's position in it and other authors' points of N (module
    docstring: passes, and failures alike with ``fingerprint``), or None when the failure cannot be
    shared evidence, the judged change touched what N runs, or the base is not in the order."""
    if node_id is None or not base or not shareable(error, fingerprint, flaky_prints) or (
            changed and bases.touches(tier, node, changed)):
        return None
    order = bases.order(base)
    b = position(order, base)
    if b is None:
        return None
    return order, b, _others(bases.store, bases.repo, tier, node_id, sha, fingerprint, kind, order, bases.as_of)


def _others(store: Store, repo: str, tier: str, node_id: int, sha: str, fingerprint: str, kind: str,
            order: Sequence[str], as_of: int | None) -> list[_Point]:
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    rows = store.fetchall(_OTHERS.format(repo=where, until=until),
                          (*params, tier, sha.lower(), node_id, sha.lower(), *limit))
    judged = {str(a) for (a,) in store.fetchall("SELECT DISTINCT author FROM reports WHERE sha = ? AND author <> ''",
                                                (sha.lower(),))}
    runs: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
    for pr, author, base, case_kind, fp, infra in rows:
        if author and str(author) in judged:
            continue  # the judged change's author: their other pull requests may hold the same change
        number = f"#{pr}" if pr is not None else f"a run at {short(str(base))}"
        runs.setdefault((str(author) or number, number, str(base)), []).append(
            (str(case_kind), str(fp or ""), str(infra or "")))
    out = []
    for (source, number, base), attempts in runs.items():
        at = position(order, base)
        if at is None:
            continue
        if any(k == PASS for k, _, _ in attempts):
            out.append(_Point(at, source, number, True))
        elif all(k in _FAILED and infra in ("", kind) for k, _, infra in attempts) and any(
                fp == fingerprint for _, fp, _ in attempts):
            out.append(_Point(at, source, number, False))
    return out


def _walk(points: list[_Point], b: int, order: Sequence[str]) -> PeerBreak | None:
    """Back from position ``b``: the failing points up to the newest clean pass, and that pass."""
    by_at: dict[int, list[_Point]] = {}
    for p in points:
        if p.at <= b:
            by_at.setdefault(p.at, []).append(p)
    ats = sorted(by_at, reverse=True)
    clean: int | None = None
    failing: list[_Point] = []
    skipped = False
    for k, at in enumerate(ats):
        passed = {p.source for p in by_at[at] if p.passed}
        older = by_at[ats[k + 1]] if k + 1 < len(ats) else []
        lone_fix = (len(passed) == 1 and "main" not in passed and not skipped and bool(failing or any(
            not p.passed for p in by_at[at])) and any(not p.passed for p in older) and not any(p.passed for p in older))
        if passed and not lone_fix:
            clean = at
            break
        skipped = skipped or lone_fix
        failing += [p for p in by_at[at] if not p.passed]
    sources = {p.source for p in failing}
    if clean is None or len(sources) < MIN_SOURCES:
        return None
    outside = [p for p in points if p not in failing]
    q = (sum(not p.passed for p in outside) + 1) / (len(outside) + 2)
    chance = q ** len(sources)
    if chance >= ALPHA:
        return None
    since = min(p.at for p in failing)
    span = order[clean + 1:since + 1]
    prs = tuple(dict.fromkeys(p.pr for p in sorted(failing, key=lambda p: p.at)))
    return PeerBreak(order[since], order[clean], tuple(span[-MAX_CANDIDATES:]), len(span), prs, len(sources), chance)
