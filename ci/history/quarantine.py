"""What `ci quarantine` should change, from the history and the registry's policy.

Contract (`ci.registry.model.QuarantinePolicy` holds the numbers):

- `to_quarantine`: every registered, not yet quarantined (node, tier) whose flakiness score
  (`ci.history.flaky`: flaky evidence only, breakage never counts) rests on at least
  ``min_runs`` trials and whose ``level`` interval's lower end is at or above ``threshold``. One
  decision per node (its most certain tier). When every test id the history knows for a file is
  to be quarantined, the file is (``status: quarantined``); else each node is, on its own. A node
  registry.yaml cannot hold (`unwritable`) comes with its ``problem``: the caller reports it and
  writes the others.
- `to_release`: every quarantine `ci quarantine` wrote (one with ``evidence``; a hand-written
  quarantine is never lifted here) whose runs since ``evidence.since`` on its tier end with at
  least ``release_runs`` clean runs in a row (a run of a report that holds the test: every attempt
  passed, none retried) *and* whose interval over those runs has its upper end below
  ``threshold``. One green run, or many green runs that cannot yet rule the rate out, lift nothing.
- Both are pure reads; idempotent by construction (a quarantined node is never proposed again, a
  released one is no longer in the registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ci.history.flaky import evidence, flaky_scores, posterior
from ci.history.model import BROKEN, FAIL, PASS, EvidenceRow, FlakyScore, Interval
from ci.history.store import Store
from ci.registry import QuarantineEvidence, QuarantinePolicy, Registry, Status, TestEntry
from ci.registry.rules import node_id_problem


@dataclass(frozen=True)
class Quarantine:
    """Quarantine ``node`` (a test id, or the file itself when ``whole_file``) of ``file``."""

    file: str
    node: str
    whole_file: bool
    score: FlakyScore
    evidence: QuarantineEvidence
    reason: str
    problem: str = ""  # why registry.yaml cannot hold ``node``: then it is reported, never written


@dataclass(frozen=True)
class Release:
    """Lift the quarantine of ``node`` (the file itself when ``whole_file``): ``clean_runs`` in a
    row since it, the interval over ``trials`` trials since it."""

    file: str
    node: str
    whole_file: bool
    tier: str
    clean_runs: int
    failures: int
    trials: int
    interval: Interval
    ready: bool = True  # False: held, `clean_runs` or `interval.high` not there yet


def newest_ingest(store: Store) -> str:
    """The newest report's ``ingested_at`` ("" for an empty store): a quarantine's ``since``."""
    rows = store.fetchall("SELECT MAX(ingested_at) FROM reports")
    return str(rows[0][0] or "")


def describe_score(score: float, interval: Interval, trials: int, tier: str) -> str:
    """``9 % [6 %, 13 %] over 120 runs on gpu_h200``."""
    return (f"{score:.0%} [{interval.low:.0%}, {interval.high:.0%}] over {trials} runs on {tier}"
            .replace("%", " %"))


def to_quarantine(store: Store, registry: Registry) -> list[Quarantine]:
    """See the module docstring."""
    policy = registry.quarantine
    since = newest_ingest(store)
    best: dict[str, FlakyScore] = {}
    for s in flaky_scores(store, min_trials=policy.min_runs, level=policy.level):
        entry = registry.tests.get(s.file)
        if (s.interval.low < policy.threshold or entry is None or entry.status is not Status.ACTIVE
                or s.tier not in entry.tiers or entry.quarantined_node(s.node) is not None or s.node == s.file):
            continue
        if s.node not in best:  # flaky_scores ranks by the lower end: the first is the most certain
            best[s.node] = s
    by_file: dict[str, list[FlakyScore]] = {}
    for s in best.values():
        by_file.setdefault(s.file, []).append(s)
    out: list[Quarantine] = []
    for file, scores in sorted(by_file.items()):
        whole = not registry.tests[file].quarantined_nodes and set(_known_nodes(store, file)) == {s.node for s in scores}
        # node order for node entries; for a whole file its most certain node's evidence first
        for s in sorted(scores, key=lambda s: (-s.interval.low, s.node) if whole else (0.0, s.node)):
            ev = _evidence_of(s, since)
            reason = f"flaky {describe_score(s.score, s.interval, s.trials, s.tier)} (ci quarantine)"
            problem = "" if whole else unwritable(s.node, file)
            out.append(Quarantine(file, file if whole else s.node, whole, s, ev, reason, problem))
            if whole:
                break  # one decision for the file: its most certain node's evidence
    return out


def unwritable(node: str, file: str) -> str:
    """Why registry.yaml cannot hold ``node`` among ``file``'s ``quarantined_nodes`` (its parser's
    rule, `ci.registry.rules.node_id_problem`), or "". A tab, a character YAML reads as a line
    break (U+2028, U+2029, NEL) or a BOM in a test id is enough: pytest allows them in parameters."""
    if node_id_problem(node, file) is None:
        return ""
    if not node.isprintable():
        return "registry.yaml cannot hold a test id with unprintable characters"
    return "registry.yaml cannot hold a test id with a blank or padded name part"


def _evidence_of(s: FlakyScore, since: str) -> QuarantineEvidence:
    """The record kept in the registry: the most frequent fingerprint with text (a retried
    attempt has none), the newest example run."""
    return QuarantineEvidence(s.tier, round(s.score, 4), (round(s.interval.low, 4), round(s.interval.high, 4)),
                              s.runs, s.failures, s.trials, next((fp for fp, _, _ in s.fingerprints if fp), ""),
                              s.examples[0] if s.examples else "", since)


def _known_nodes(store: Store, file: str) -> list[str]:
    """Every test id of ``file`` the history has seen (not the file's own collection-error id)."""
    return [str(r[0]) for r in store.fetchall("SELECT node FROM nodes WHERE file = ? AND node <> ?", (file, file))]


# A whole file's test ids are selected by the file, in the query itself: a file may hold more ids
# than a query may take parameters (65,535 on PostgreSQL, 32,766 in SQLite's default build).
_SINCE = """SELECT n.node, r.tier, r.repo, r.sha, r.event, r.id, c.attempt, c.kind, c.fingerprint, c.message,
    r.run_url, r.ingested_at, c.infra
    FROM reports r CROSS JOIN cases c JOIN nodes n ON n.id = c.node_id
    WHERE c.report_id = r.id AND r.scored = 1 AND {which} AND r.tier = ? AND r.ingested_at > ?
    ORDER BY r.id, c.attempt"""
_FILE_NODES = "n.file = ? AND n.node <> n.file"  # `_known_nodes`: not the file's collection-error id
_ONE_NODE = "n.node = ?"


def _rows_since(store: Store, entry: TestEntry, node: str, whole: bool, tier: str, since: str) -> list[EvidenceRow]:
    """The runs since ``since`` on ``tier`` of ``node``, or of every test id of the file when ``whole``."""
    which, key = (_FILE_NODES, entry.path) if whole else (_ONE_NODE, node)
    rows = store.fetchall(_SINCE.format(which=which), [key, tier, since])
    return [EvidenceRow(str(node), str(t), str(repo), str(sha), str(event), int(rid), int(attempt), str(kind),
                        str(fp), str(msg), str(url), str(seen), str(infra))
            for node, t, repo, sha, event, rid, attempt, kind, fp, msg, url, seen, infra in rows]


def clean_streak(rows: Iterable[EvidenceRow]) -> int:
    """Clean runs in a row at the end of ``rows`` (ordered by report): a report is clean when every
    attempt of every node in it passed (skips aside) and at least one ran."""
    reports: dict[int, set[str]] = {}
    for row in rows:
        reports.setdefault(row.report_id, set()).add(row.kind)
    streak = 0
    for report_id in sorted(reports):
        kinds = reports[report_id]
        if FAIL in kinds or BROKEN in kinds:
            streak = 0
        elif PASS in kinds:
            streak += 1
    return streak


def _release(store: Store, policy: QuarantinePolicy, entry: TestEntry, node: str, whole: bool,
             ev: QuarantineEvidence) -> Release | None:
    nodes = _known_nodes(store, entry.path) if whole else [node]
    rows = _rows_since(store, entry, node, whole, ev.tier, ev.since)
    streak = clean_streak(rows)
    by_node: dict[str, list[EvidenceRow]] = {}
    for row in rows:
        by_node.setdefault(row.node, []).append(row)
    worst: tuple[float, int, int, Interval] | None = None
    intervals: dict[tuple[int, int], Interval] = {}  # a big file's nodes share a few (failures, trials)
    for name in nodes:  # a node with no run since has the prior's interval: it holds the release
        e = evidence(by_node.get(name, ()))
        interval = intervals.get((e.failures, e.trials))
        if interval is None:
            interval = intervals[e.failures, e.trials] = posterior(e.failures, e.trials, policy.level)[1]
        if worst is None or interval.high > worst[0]:
            worst = (interval.high, e.failures, e.trials, interval)
    if worst is None:
        return None
    ready = streak >= policy.release_runs and worst[0] < policy.threshold
    return Release(entry.path, node, whole, ev.tier, streak, worst[1], worst[2], worst[3], ready)


def to_release(store: Store, registry: Registry, *, held: bool = False) -> list[Release]:
    """See the module docstring; with ``held``, the quarantines not ready yet too (``ready``
    False), so a caller can say why each is still held."""
    policy = registry.quarantine
    out: list[Release] = []
    for entry in registry.tests.values():
        if entry.status is Status.QUARANTINED and entry.evidence is not None:
            found = _release(store, policy, entry, entry.path, True, entry.evidence)
            if found is not None and (found.ready or held):
                out.append(found)
        for q in entry.quarantined_nodes:
            if q.evidence is not None:
                found = _release(store, policy, entry, q.node, False, q.evidence)
                if found is not None and (found.ready or held):
                    out.append(found)
    return out


__all__ = ["Quarantine", "Release", "clean_streak", "describe_score", "newest_ingest", "to_quarantine", "to_release",
           "unwritable"]
