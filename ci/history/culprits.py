"""Culprit searches in the history: which windows were requested, and what each search answered.

Contract (table ``culprits``, migration 6; docs/culprit.md#automatic-requests-ci-culprit-requests):
- `breakage_requests` turns the default branch's verdicts into `CulpritRequest` s: one per (tier,
  test file, good, bad) of a ``broken_on_main`` verdict (on a default-branch run: its open streak)
  that has a last pass (good) and more than one candidate commit, on a tier whose `ci.registry.CulpritPolicy` has
  ``auto``. good is the streak's last pass, bad its first failing commit: the window does not move
  as the breakage goes on, so a later run of the same breakage names the same window.
- `record_requests` writes requests in one transaction and returns only those no earlier call
  recorded (the window is unique in the table): a re-run of the report job requests nothing twice.
- `record_answer` writes a search's `CulpritAnswer` in one transaction onto its request's row (a
  request whose good / bad are prefixes of the answer's full commits is the same window), else a
  row of its own; writing the same answer again changes nothing.
- `found_culprits` is the newest answered searches of a tier that reached their confidence, for the
  prior learned from them (`ci.culprit.learned`); [] on a store older than migration 6.
- `culprit_searches` is every search of each (tier, test file) of a repository, oldest first, for
  the HUD (which shows the newest whose window is of the row's current streak); `culprit_states`
  the newest of each. Both {} on a store older than migration 6 (the HUD never migrates a store).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping, Sequence

from ci.history.store import Store, now
from ci.history.verdict import BROKEN_ON_MAIN, Verdict
from ci.registry import CulpritPolicy

CULPRITS_VERSION = 6  # the migration that adds the table
_KEY = "repo = ? AND tier = ? AND test = ? AND substr(?, 1, length(good)) = good AND substr(?, 1, length(bad)) = bad"


@dataclass(frozen=True)
class CulpritRequest:
    """A search to run: ``test`` on ``tier`` between ``good`` and ``bad`` (``candidates`` commits),
    at most ``budget`` runs, ``runners`` at once."""

    repo: str
    tier: str
    test: str
    good: str
    bad: str
    budget: int
    runners: int
    candidates: int


@dataclass(frozen=True)
class CulpritAnswer:
    """What a search answered: ``culprit`` with its ``probability`` after ``runs`` runs in the
    window, why it stopped, ``found`` when the confidence was reached; ``run_url`` the search's own
    run and ``links`` each probe's run, where known."""

    repo: str
    tier: str
    test: str
    good: str
    bad: str
    culprit: str
    probability: float
    runs: int
    stop: str
    found: bool
    budget: int = 0
    runners: int = 1
    candidates: int = 0
    run_url: str = ""
    links: tuple[str, ...] = ()


@dataclass(frozen=True)
class CulpritState:
    """The newest search of a test file on a tier: ``culprit`` is "" while it is searching."""

    tier: str
    test: str
    good: str
    bad: str
    requested_at: str
    culprit: str = ""
    probability: float | None = None
    runs: int = 0
    stop: str = ""
    found: bool = False
    run_url: str = ""


def breakage_requests(repo: str, verdicts: Sequence[Verdict], policies: Mapping[str, CulpritPolicy]) -> list[CulpritRequest]:
    """The searches ``verdicts`` call for (see the module docstring), one per window, in order."""
    out: dict[tuple[str, str, str, str], CulpritRequest] = {}
    for v in verdicts:
        policy = policies.get(v.tier)
        if (policy is None or not policy.auto or v.verdict != BROKEN_ON_MAIN or not v.last_pass
                or v.candidate_count <= 1):
            continue
        test = v.node.split("::", 1)[0]
        out.setdefault((v.tier, test, v.last_pass, v.since), CulpritRequest(
            repo, v.tier, test, v.last_pass, v.since, policy.budget, policy.runners, v.candidate_count))
    return list(out.values())


def record_requests(store: Store, requests: Sequence[CulpritRequest]) -> list[CulpritRequest]:
    """Record ``requests``; the ones not recorded before, in order (see the module docstring)."""
    new = []
    with store.transaction():
        for r in requests:
            cur = store.execute(
                "INSERT INTO culprits (repo, tier, test, good, bad, budget, runners, candidates, requested_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (repo, tier, test, good, bad) DO NOTHING",
                (r.repo, r.tier, r.test, r.good, r.bad, r.budget, r.runners, r.candidates, now()))
            if cur.rowcount == 1:
                new.append(r)
            cur.close()
    return new


def record_answer(store: Store, a: CulpritAnswer) -> None:
    """Write ``a`` onto its window's row, or a new one (see the module docstring)."""
    answer = (a.culprit, a.probability, a.runs, a.stop, int(a.found), a.run_url, json.dumps(list(a.links)), now())
    with store.transaction():
        cur = store.execute("UPDATE culprits SET culprit = ?, probability = ?, runs = ?, stop = ?, found = ?, "
                            f"run_url = ?, run_links = ?, answered_at = ? WHERE {_KEY}",
                            (*answer, a.repo, a.tier, a.test, a.good, a.bad))
        updated = cur.rowcount
        cur.close()
        if not updated:
            store.execute("INSERT INTO culprits (repo, tier, test, good, bad, budget, runners, candidates, requested_at, "
                          "culprit, probability, runs, stop, found, run_url, run_links, answered_at) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, ?, ?)",
                          (a.repo, a.tier, a.test, a.good, a.bad, a.budget, a.runners, a.candidates, *answer)).close()


@dataclass(frozen=True)
class FoundCulprit:
    """A search's answer that reached its confidence: ``culprit`` broke ``test`` in (good, bad]."""

    test: str
    good: str
    bad: str
    culprit: str


def found_culprits(store: Store, tier: str, limit: int) -> list[FoundCulprit]:
    """The newest ``limit`` found culprits of ``tier`` (any repository, any test), newest first."""
    if limit < 1:
        raise ValueError(f"a limit of {limit} found culprits")
    if store.schema_version() < CULPRITS_VERSION:
        return []
    rows = store.fetchall("SELECT test, good, bad, culprit FROM culprits WHERE tier = ? AND found = 1 AND culprit <> '' "
                          "ORDER BY id DESC LIMIT ?", (tier, limit))
    return [FoundCulprit(str(test), str(good), str(bad), str(culprit)) for test, good, bad, culprit in rows]


def window_repos(store: Store, good: str, bad: str) -> list[str]:
    """The repositories whose reports (or recorded searches) name commit ``good`` or ``bad``; when
    none do, every repository of the store's reports (a history of one repository names it). Sorted."""
    rows = store.fetchall("SELECT repo FROM reports WHERE sha IN (?, ?) UNION "
                          "SELECT repo FROM culprits WHERE good = ? AND bad = ?", (good, bad, good, bad))
    found = {str(r[0]) for r in rows if r[0]} or {str(r[0]) for r in store.fetchall("SELECT DISTINCT repo FROM reports")
                                                   if r[0]}
    return sorted(found)


def culprit_searches(store: Store, repo: str) -> dict[tuple[str, str], list[CulpritState]]:
    """(tier, test file) -> its searches in ``repo``, oldest first (a search of one test counts for its file)."""
    if store.schema_version() < CULPRITS_VERSION:
        return {}
    rows = store.fetchall("SELECT tier, test, good, bad, requested_at, culprit, probability, runs, stop, found, run_url "
                          "FROM culprits WHERE repo = ? ORDER BY id", (repo,))
    out: dict[tuple[str, str], list[CulpritState]] = {}
    for tier, test, good, bad, requested, culprit, probability, runs, stop, found, url in rows:
        file = str(test).split("::", 1)[0]
        out.setdefault((str(tier), file), []).append(CulpritState(
            str(tier), str(test), str(good), str(bad), str(requested), str(culprit),
            None if probability is None else float(probability), int(runs), str(stop), bool(found), str(url)))
    return out


def culprit_states(store: Store, repo: str) -> dict[tuple[str, str], CulpritState]:
    """(tier, test file) -> its newest search in ``repo``."""
    return {key: searches[-1] for key, searches in culprit_searches(store, repo).items()}


__all__ = ["CulpritAnswer", "CulpritRequest", "CulpritState", "FoundCulprit", "breakage_requests", "culprit_searches",
           "culprit_states", "found_culprits",
           "window_repos",
           "record_answer", "record_requests"]
