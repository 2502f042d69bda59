"""A flake's first failure on one tier, known from the test's runs on the others.

A CI matrix (CUDA versions, torch versions, GPU pools) runs the same test on several tiers, and a
new tier (a torch release, a new CUDA image) starts with no history of its own. A test that
flakes does so on every tier it runs on: its intermittent failure is a property of the test, not
of one tier's machines. So when N has no flake evidence on the judged tier T, its runs on the
other tiers may still show the failure's signature F as a flake's.

Contract. `on_other_tiers` is `ci.history.recurring.recurring` read over every tier of the
repository together (the judged commit's runs and its pull request's left out): F *recurs* when
runs of at least `ci.history.recurring.MIN_SOURCES` other sources (pull requests, default-branch
commits) failed N with it, one of them also passed N, the default branch passed N after F first
showed, and most runs failing with F were followed by one that did not (a breakage fails run after
run until it is fixed). None when ``touched`` (the judged change touched what N runs: its own
change explains its own failure at least as well), when nothing recurs, and when the judged pull
request's merge base lies inside a streak of main's on another tier that failed N with F at two or
more commits, or in two or more attempts (`base_in_streak`: the base's code failed it there, so
the failure may be main's, which rule 3 and the second opinions judge, never a flake). The
verdict's detail says the evidence is from other tiers and that a rerun settles it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

from ci.history.mainline import fail_streaks, ingest_order, main_order, place
from ci.history.recurring import Recurrence, recurring
from ci.history.store import Store
from ci.history.verdict_queries import cut, main_runs, repo_condition


@dataclass(frozen=True)
class OtherTiers(Recurrence):
    """A `Recurrence` read from the test's runs on every tier, the judged one included."""

    def describe(self) -> str:
        """``failed so on this CI's tiers in 6 of 80 runs of 5 other pull requests and commits ...``"""
        return (f"failed so on this CI's tiers in {self.failed_runs} of {self.runs} runs of {self.sources} other pull "
                "requests and commits while main passes it (its flakes seen on other tiers, not yet here: "
                "rerun to be sure)")


def on_other_tiers(store: Store, repo: str, node_id: int | None, sha: str, *, as_of: int | None = None,
                   touched: bool = False, merge_base: str = "", fingerprint: str = "",
                   full: Sequence[str] = ()) -> OtherTiers | None:
    """N's flake signatures recurring across all its tiers (module docstring), or None. ``full``:
    every tier's default-branch commits, oldest first (`ci.history.mainline.ingest_order`; read
    here when empty)."""
    if touched or node_id is None:
        return None
    found = recurring(store, repo, None, node_id, sha, as_of=as_of)
    if found is None or (merge_base and base_in_streak(store, repo, node_id, merge_base, fingerprint, full, as_of)):
        return None
    return OtherTiers(**{f.name: getattr(found, f.name) for f in fields(found)})


def base_in_streak(store: Store, repo: str, node_id: int, merge_base: str, fingerprint: str, full: Sequence[str],
                   as_of: int | None) -> bool:
    """Whether, on some tier, main's fail streak of N holding ``fingerprint`` (two or more commits
    or failed attempts) covers ``merge_base`` (`place`d in that tier's order)."""
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    tiers = [str(t) for (t,) in store.fetchall(
        f"SELECT DISTINCT r.tier FROM reports r JOIN cases c ON c.report_id = r.id WHERE {where}c.node_id = ? "
        f"AND c.kind = 'fail' AND c.fingerprint = ?{until}", (*params, node_id, fingerprint, *limit))]
    full = full or ingest_order(store, repo, as_of=as_of) if tiers else full
    for tier in tiers:
        runs = main_runs(store, repo, tier, {"n": node_id}, as_of).get("n", [])
        order = main_order(store, repo, tier, runs, None, as_of=as_of)
        at = place(order, full, merge_base)
        if at is not None and any(s.first_index <= at < s.end_index and fingerprint in s.fingerprints and (
                s.commits >= 2 or s.failing_attempts >= 2) for s in fail_streaks(runs, order)):
            return True
    return False
