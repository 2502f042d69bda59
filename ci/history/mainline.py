"""The default branch's story of one test on one tier: when it last passed, since when it fails.

Contract:
- Commit order is git's first-parent history of the default branch when a checkout is at hand
  (`first_parent_order`, oldest first), else the order in which the branch's commits were first
  ingested (`ingest_order`: the push and nightly reports of the repository, by report id).
- `fail_streaks(runs, order)` groups a test's default-branch attempts by commit, in that order.
  Skips and infra failures (`ci.history.errors.infra_kind`: the runner's fault, not the code's) say
  nothing about the code and are left out; a commit with any pass is a pass (a pass next to a
  failure on one commit is a flake, not a breakage); a commit whose attempts all failed (``fail`` or
  ``broken``) is a fail. Each maximal run of fail commits is a `Streak`, with the last passing
  commit before it, the commit that ended it (``fixed_at``, ``""`` while it is open) and its
  candidate commits: every commit of the order after the last pass up to the first fail (the
  change that broke it is among them), at most `MAX_CANDIDATES` kept and all counted.
- `place(order, full_order, sha)`: where a merge base sits in one tier's order; a commit that did
  not run the tier (pushes run the tiers they touch) sits at the tier's newest commit before it.
- With a git order, commits the order does not hold (a branch since rewritten) are left out; if
  none of the test's commits is in it, the ingest order is used instead.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ci.history.model import BROKEN, DEFAULT_BRANCH_EVENTS, FAIL, PASS
from ci.history.store import Store

MAX_CANDIDATES = 20
GIT_TIMEOUT_S = 60


@dataclass(frozen=True)
class MainRun:
    """One attempt of a test on the default branch (a push or nightly report, or a merge queue
    run's, which `fail_streaks` places only at a commit the order holds), in ingest order."""

    sha: str
    report_id: int
    kind: str
    fingerprint: str = ""
    infra: str = ""
    message: str = ""  # the failure's signature text (`ci.history.errors.normalise`)


@dataclass(frozen=True)
class Streak:
    """Consecutive default-branch commits on which a test only failed."""

    first_fail: str
    last_fail: str
    last_pass: str  # "" when it never passed before
    fixed_at: str  # the first passing commit after it; "" while the streak is open
    commits: int
    failing_attempts: int
    runs: int  # distinct reports with a failing attempt in the streak
    fingerprints: tuple[str, ...]  # distinct, in first-seen order
    messages: tuple[str, ...]  # their signature texts, distinct, in first-seen order
    candidates: tuple[str, ...]  # at most MAX_CANDIDATES, oldest first
    candidate_count: int
    first_index: int  # positions in the order used
    end_index: int  # fixed_at's position, or one past the last commit known

    @property
    def open(self) -> bool:
        return not self.fixed_at


def first_parent_order(checkout: str | Path, ref: str) -> tuple[str, ...] | None:
    """``ref``'s first-parent history in ``checkout``, oldest first; None when git cannot say
    (no checkout, no such ref, git missing)."""
    if not ref or ref.startswith("-"):
        return None  # never an option to git
    try:
        done = subprocess.run(["git", "-C", str(checkout), "rev-list", "--first-parent", "--reverse", ref, "--"],
                              capture_output=True, text=True, timeout=GIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    shas = tuple(line.strip().lower() for line in done.stdout.splitlines() if line.strip())
    return shas or None


def ingest_order(store: Store, repo: str, tier: str | None = None, *, as_of: int | None = None) -> tuple[str, ...]:
    """The default branch's commits in the order they were first ingested (of ``repo``, every
    repository's when it is ""; on ``tier`` when given; from reports up to id ``as_of`` when given)."""
    marks = ", ".join("?" * len(DEFAULT_BRANCH_EVENTS))
    where = ("repo = ? AND " if repo else "") + f"scored = 1 AND event IN ({marks})" + (" AND tier = ?" if tier else "")
    where += " AND id <= ?" if as_of is not None else ""
    params = ([repo] if repo else []) + [*DEFAULT_BRANCH_EVENTS] + ([tier] if tier else []) + (
        [as_of] if as_of is not None else [])
    rows = store.fetchall(f"SELECT sha, MIN(id) AS first FROM reports WHERE {where} GROUP BY sha ORDER BY first",
                          params)
    return tuple(str(sha) for sha, _ in rows)


class _Positions:
    """Where a (possibly abbreviated) sha sits in an order."""

    def __init__(self, order: Sequence[str]):
        self.order = tuple(order)
        self.exact = {sha: i for i, sha in enumerate(self.order)}
        self.by_prefix: dict[str, list[int]] = {}
        for i, sha in enumerate(self.order):
            self.by_prefix.setdefault(sha[:7], []).append(i)

    def find(self, sha: str) -> int | None:
        sha = sha.lower()
        if sha in self.exact:
            return self.exact[sha]
        hits = [i for i in self.by_prefix.get(sha[:7], ()) if self.order[i].startswith(sha) or sha.startswith(self.order[i])]
        return hits[0] if len(hits) == 1 else None


def position(order: Sequence[str], sha: str) -> int | None:
    """``sha``'s index in ``order`` (an abbreviation matches one full sha), None if absent or ambiguous."""
    return _Positions(order).find(sha)


def place(order: Sequence[str], full_order: Sequence[str], sha: str) -> int | None:
    """``sha``'s index in ``order`` (one tier's default-branch commits); when ``order`` lacks it,
    the index of ``order``'s newest commit before it in ``full_order`` (every tier's commits of the
    branch, oldest first). Pushes run only the tiers they touch, so a commit that did not run the
    tier has, for that tier, the code of the last commit that did. None when neither order places it."""
    found = position(order, sha)
    if found is not None or not full_order:
        return found
    at = position(full_order, sha)
    if at is None:
        return None
    ran = _Positions(order)
    before = [i for c in full_order[:at] if (i := ran.find(c)) is not None]
    return max(before) if before else None


def fail_streaks(runs: Sequence[MainRun], order: Sequence[str]) -> list[Streak]:
    """The test's fail streaks on the default branch, oldest first (see the module docstring)."""
    positions = _Positions(order)
    status: dict[int, str] = {}
    attempts: dict[int, list[MainRun]] = {}
    for run in runs:
        if run.infra or run.kind not in (PASS, FAIL, BROKEN):
            continue
        index = positions.find(run.sha)
        if index is None:
            continue
        attempts.setdefault(index, []).append(run)
        status[index] = PASS if run.kind == PASS or status.get(index) == PASS else FAIL
    commits = sorted(status)
    streaks: list[Streak] = []
    i = 0
    while i < len(commits):
        if status[commits[i]] == PASS:
            i += 1
            continue
        end = i
        while end < len(commits) and status[commits[end]] == FAIL:
            end += 1
        first = commits[i]
        last_pass = commits[i - 1] if i > 0 else None
        fixed = commits[end] if end < len(commits) else None
        start = last_pass + 1 if last_pass is not None else max(0, first - MAX_CANDIDATES + 1)
        span = positions.order[start:first + 1]
        failing = [run for c in commits[i:end] for run in attempts[c]]
        prints = tuple(dict.fromkeys(r.fingerprint for r in failing if r.fingerprint))
        texts = tuple(dict.fromkeys(r.message for r in failing if r.fingerprint))
        streaks.append(Streak(
            positions.order[first], positions.order[commits[end - 1]],
            positions.order[last_pass] if last_pass is not None else "",
            positions.order[fixed] if fixed is not None else "", end - i, len(failing),
            len({r.report_id for r in failing}), prints, texts,
            tuple(span[-MAX_CANDIDATES:]), first - last_pass if last_pass is not None else first + 1,
            first, fixed if fixed is not None else len(positions.order)))
        i = end
    return streaks


def main_order(store: Store, repo: str, tier: str, runs: Sequence[MainRun],
               git_order: Sequence[str] | None, *, as_of: int | None = None) -> tuple[str, ...]:
    """The order to read ``runs`` in: ``git_order`` when it holds any of their commits, else ingest order."""
    if git_order:
        positions = _Positions(git_order)
        if any(positions.find(run.sha) is not None for run in runs):
            return tuple(git_order)
    return ingest_order(store, repo, tier, as_of=as_of)
