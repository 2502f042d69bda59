"""What `ci.history.verdict` reads from the store, each query cut at one report (``as_of``).

Contract: every function here reads only reports whose id is at most ``as_of`` (none when it is
None): a verdict is about the history known when the judged run was reported, so a question asked
again later, after more default-branch runs arrived, reads the same rows. ``repo`` "" means the
store's every repository (one repository's store).
"""

from __future__ import annotations

from typing import Sequence

from ci.history.errors import SIGNAL
from ci.history.mainline import MainRun
from ci.history.model import BROKEN, DEFAULT_BRANCH_EVENTS, FAIL, MAIN_EVIDENCE_EVENTS, PASS
from ci.history.store import Store

_CHUNK = 500

# CROSS JOIN: walk the reports, look each node up by the primary key (as `ci.history.flaky` does).
_MAIN = """SELECT c.node_id, r.sha, r.id, c.kind, c.fingerprint, c.infra, c.message
    FROM reports r CROSS JOIN cases c
    WHERE c.report_id = r.id AND r.scored = 1 AND {repo}r.tier = ? AND r.event IN ({events})
    AND c.node_id IN ({marks}) ORDER BY r.id, c.attempt"""


def cut(as_of: int | None, column: str = "r.id") -> tuple[str, list[int]]:
    """The condition `` AND <column> <= ?`` and its parameter, or nothing without a cut."""
    return (f" AND {column} <= ?", [as_of]) if as_of is not None else ("", [])


def source_of(pr: int | None, sha: str) -> tuple[str, int | str]:
    """The source a report's run counts for: its pull request (all its pushes and retries are one
    change), else its default-branch commit."""
    return ("pr", int(pr)) if pr is not None else ("sha", str(sha))


def repo_condition(repo: str) -> tuple[str, list[str]]:
    """The repository condition: none when the failure does not say which (one repository's store)."""
    return ("r.repo = ? AND ", [repo]) if repo else ("", [])


def main_runs(store: Store, repo: str, tier: str, ids: dict[str, int], as_of: int | None) -> dict[str, list[MainRun]]:
    """Each node's default-branch attempts on ``tier``, in ingest order, and its merge queue runs'
    (`ci.history.merge_queue`: they count only at a commit the branch's order holds)."""
    names = {i: n for n, i in ids.items()}
    out: dict[str, list[MainRun]] = {}
    values = sorted(names)
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    for start in range(0, len(values), _CHUNK):
        chunk = values[start:start + _CHUNK]
        query = _MAIN.format(repo=where, events=", ".join("?" * len(MAIN_EVIDENCE_EVENTS)),
                             marks=", ".join("?" * len(chunk))).replace(" ORDER BY", until + " ORDER BY")
        for node_id, sha, rid, kind, fp, infra, message in store.fetchall(
                query, [*params, tier, *MAIN_EVIDENCE_EVENTS, *chunk, *limit]):
            out.setdefault(names[int(node_id)], []).append(MainRun(str(sha), int(rid), str(kind), str(fp), str(infra),
                                                                   str(message or "")))
    return out


def has_main_history(store: Store, repo: str, tier: str, as_of: int | None) -> bool:
    """Whether the store holds any scored default-branch report of ``tier`` (of ``repo``)."""
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    events = ", ".join("?" * len(DEFAULT_BRANCH_EVENTS))
    return bool(store.fetchall(f"SELECT 1 FROM reports r WHERE {where}r.tier = ? AND r.scored = 1 "
                               f"AND r.event IN ({events}){until} LIMIT 1", (*params, tier, *DEFAULT_BRANCH_EVENTS,
                                                                             *limit)))


def same_commit(store: Store, repo: str, tier: str, sha: str, node_id: int | None,
                as_of: int | None) -> tuple[int, list[int]]:
    """(passes, failed attempts of each report that failed it) of the node on ``tier`` at ``sha``,
    every event counted, reports in ingest order."""
    if node_id is None:
        return 0, []
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    rows = store.fetchall("SELECT r.id, c.kind, COUNT(*) FROM reports r JOIN cases c ON c.report_id = r.id "
                          f"WHERE {where}r.tier = ? AND r.sha = ? AND c.node_id = ?{until} GROUP BY r.id, c.kind "
                          "ORDER BY r.id", (*params, tier, sha.lower(), node_id, *limit))
    passes = sum(int(n) for _, kind, n in rows if kind == PASS)
    failed: dict[int, int] = {}
    for rid, kind, n in rows:
        if kind in ("fail", "broken"):
            failed[int(rid)] = failed.get(int(rid), 0) + int(n)
    return passes, list(failed.values())


def held_passes(store: Store, repo: str, tier: str, node_id: int | None, bases: Sequence[str], sha: str,
                as_of: int | None) -> int:
    """Reports of other commits than ``sha`` whose merge base is one of ``bases`` (they hold that
    code) and that passed the node on ``tier``: main's failure there is not what the code always does."""
    if node_id is None or not bases:
        return 0
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    chosen = list(bases)[-_CHUNK:]
    rows = store.fetchall(f"SELECT COUNT(DISTINCT r.id) FROM reports r JOIN cases c ON c.report_id = r.id WHERE {where}"
                          f"r.tier = ? AND c.node_id = ? AND c.kind = '{PASS}' AND r.sha <> ? "
                          f"AND r.base_sha IN ({', '.join('?' * len(chosen))}){until}",
                          (*params, tier, node_id, sha.lower(), *chosen, *limit))
    return int(rows[0][0]) if rows else 0


def based_runs(store: Store, repo: str, tier: str, node_id: int | None, sha: str, as_of: int | None) -> list[MainRun]:
    """The node's first attempt on ``tier`` in each pull request report of other commits than
    ``sha`` that has a merge base, as a `MainRun` at that base (``sha`` is the base): the code
    such a run tests is main's at its base plus its change. Oldest report first."""
    if node_id is None:
        return []
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    rows = store.fetchall("SELECT r.base_sha, r.id, c.kind, c.fingerprint, c.infra, c.message, c.attempt "
                          f"FROM reports r JOIN cases c ON c.report_id = r.id WHERE {where}r.tier = ? "
                          "AND r.event = 'pull_request' AND r.base_sha <> '' AND r.sha <> ? AND c.node_id = ?"
                          f"{until} ORDER BY r.id, c.attempt", (*params, tier, sha.lower(), node_id, *limit))
    first: dict[int, MainRun] = {}
    for base, rid, kind, fp, infra, message, _ in rows:
        first.setdefault(int(rid), MainRun(str(base), int(rid), str(kind), str(fp or ""), str(infra or ""),
                                           str(message or "")))
    return list(first.values())


def crashed_elsewhere(store: Store, repo: str, tier: str, node_id: int | None, sha: str, base: str,
                      as_of: int | None) -> bool:
    """Whether runs at the same code as ``sha``'s base saw the node on ``tier`` killed by a signal
    (``cases.infra`` ``signal``): main's at ``base`` (any main run without one) or another pull
    request's based there (``sha``'s own pull request's other heads are its own). Another pull
    request's crash at another base is its own change's."""
    if node_id is None:
        return False
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    at = "(r.pr IS NULL AND r.sha = ? OR r.pr IS NOT NULL AND r.base_sha = ?)" if base else "r.pr IS NULL"
    rows = store.fetchall(f"SELECT 1 FROM reports r JOIN cases c ON c.report_id = r.id WHERE {where}r.tier = ? "
                          f"AND c.node_id = ? AND c.infra = '{SIGNAL}' AND r.sha <> ? AND {at} AND (r.pr IS NULL "
                          "OR r.pr NOT IN (SELECT o.pr FROM reports o WHERE o.sha = ? AND o.pr IS NOT NULL))"
                          f"{until} LIMIT 1",
                          (*params, tier, node_id, sha.lower(), *([base.lower()] * 2 if base else []), sha.lower(),
                           *limit))
    return bool(rows)


def tier_reports(store: Store, repo: str, tier: str, shas: Sequence[str], as_of: int | None) -> dict[str, tuple[bool, bool]]:
    """For each of ``shas`` whose default-branch reports hold ``tier``: whether any of them failed a
    test there (``fail`` or ``broken``; infra failures count, they stop a job as well) and whether
    any passed one."""
    if not shas:
        return {}
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    chosen = [s.lower() for s in shas][-_CHUNK:]
    events = ", ".join("?" * len(DEFAULT_BRANCH_EVENTS))
    rows = store.fetchall(f"SELECT r.sha, MAX(CASE WHEN c.kind IN ('{FAIL}', '{BROKEN}') THEN 1 ELSE 0 END), "
                          f"MAX(CASE WHEN c.kind = '{PASS}' THEN 1 ELSE 0 END) "
                          f"FROM reports r JOIN cases c ON c.report_id = r.id WHERE {where}r.tier = ? "
                          f"AND r.event IN ({events}) AND r.sha IN ({', '.join('?' * len(chosen))}){until} "
                          "GROUP BY r.sha", (*params, tier, *DEFAULT_BRANCH_EVENTS, *chosen, *limit))
    return {str(sha): (bool(failed), bool(passed)) for sha, failed, passed in rows}
