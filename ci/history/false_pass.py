"""How often an attempt of a broken test passes all the same: the culprit search's p (docs/culprit.md).

A *known breakage window* of a node on a tier is read from its default-branch commits (push and
nightly reports, in ingest order, grouped by commit as `ci.history.flaky` groups them; infra
failures and skips left out): a run of commits on which it failed every attempt (``fail`` or
``broken``), with a pass before it and a pass after it (the fix or the revert), and at least two
failing commits (one alone may be a flip). Between two failing commits of a window, one commit
with a pass (a first-attempt pass, or a failure then a pass) belongs to the window when the
failures on both sides share an error signature (the same breakage before and after it): that
pass is a broken attempt passing. Every attempt of the window's commits is an attempt of broken
code; its passes are the false passes. A pass at a window's edge looks like the fix and is not
counted, so the count errs low.

Pooled over every node of the tier: one test breaks too rarely for its own windows to say much,
and how often a broken test passes is its tier's (races, timing) more than the test's. The rate
itself (the Beta prior, the posterior mean) is the search's: `ci.culprit.model.false_pass_rate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ci.history.flaky import node_histories
from ci.history.model import BROKEN, DEFAULT_BRANCH_EVENTS, FAIL, PASS, EvidenceRow
from ci.history.store import Store


@dataclass(frozen=True)
class FalsePasses:
    """``passes`` of ``attempts`` attempts inside ``windows`` known breakage windows passed."""

    windows: int
    attempts: int
    passes: int


def _commits(rows: Sequence[EvidenceRow]) -> list[list[EvidenceRow]]:
    """The default-branch attempts that say something about the code, one list per commit, in order."""
    groups: dict[tuple[str, str], list[EvidenceRow]] = {}
    for row in rows:
        if row.event in DEFAULT_BRANCH_EVENTS and not row.infra and row.kind in (PASS, FAIL, BROKEN):
            groups.setdefault((row.repo, row.sha), []).append(row)
    return list(groups.values())


def _failed(commit: Sequence[EvidenceRow]) -> bool:
    return all(a.kind != PASS for a in commit)


def _prints(commit: Sequence[EvidenceRow]) -> set[str]:
    return {a.fingerprint for a in commit if a.kind != PASS and a.fingerprint}


def windows(rows: Sequence[EvidenceRow]) -> list[list[list[EvidenceRow]]]:
    """One node's known breakage windows on one tier (rows in ingest order), each its commits' attempts."""
    commits = _commits(rows)
    found: list[list[list[EvidenceRow]]] = []
    i = 1  # a window needs a pass before it
    while i < len(commits):
        if not _failed(commits[i]) or _failed(commits[i - 1]):
            i += 1
            continue
        end = i + 1  # one past the window's last failing commit
        while end < len(commits):
            if _failed(commits[end]):
                end += 1
            elif end + 1 < len(commits) and _failed(commits[end + 1]) \
                    and _prints(commits[end - 1]) & _prints(commits[end + 1]):
                end += 2  # a pass inside one breakage: the same error on both sides
            else:
                break
        window = commits[i:end]
        if end < len(commits) and sum(map(_failed, window)) >= 2:  # closed by a pass, more than a flip
            found.append(window)
        i = end
    return found


def false_passes(store: Store, *, tier: str) -> FalsePasses:
    """The attempts and passes inside the known breakage windows of every node of ``tier``."""
    ids = sorted(int(r[0]) for r in store.fetchall("SELECT DISTINCT node_id FROM cases WHERE kind IN (?, ?)",
                                                   (FAIL, BROKEN)))
    count = attempts = passes = 0
    for _, rows in node_histories(store, ids, tier):
        for window in windows(rows):
            count += 1
            attempts += sum(len(commit) for commit in window)
            passes += sum(a.kind == PASS for commit in window for a in commit)
    return FalsePasses(count, attempts, passes)
