"""Second opinions on a failure rules 1-5 of `ci.history.verdict` called ``new``: evidence outside
main's own streaks that the default branch was broken there after all, or that the failure is a
flake's first. `overrule_new` asks them in order; the first that holds replaces the verdict:

1. other authors' pull requests based at or after a commit failed N alike, none passed it there
   (`ci.history.pr_base_evidence`);
2. the same with two pull requests where main's record is sparse (`ci.history.sparse_main`);
3. main never ran N on the tier, no run of it passed, and 3 other authors' pull requests failed it
   alike (`ci.history.unvouched`);
4. an API mismatch with a package main's own runs failed at two or more commits
   (`ci.history.dependency_break`);
5. main stopped reaching N after it last passed (`ci.history.verdict_main_record.halted`);
6. it passed on another tier at the same commit and nothing else of its file failed: a flake's
   first failure (`ci.history.passed_beside`).

With none, and no default-branch run of the tier in the store, the detail says there was nothing
to compare with (`NO_HISTORY`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Collection

from ci.history.dependency_break import dependency_verdict
from ci.history.infra_flakes import can_follow_test
from ci.history.mainline import MainRun
from ci.history.model import FlakyScore
from ci.history.passed_beside import passed_beside
from ci.history.pr_base_evidence import PrBases
from ci.history.recurring import Recurrence
from ci.history.sparse_main import peer_break
from ci.history.store import Store
from ci.history.unvouched import unvouched
from ci.history.verdict_decide import flake_prints
from ci.history.verdict_main_record import halted
from ci.history.verdict_make import first_flake
from ci.history.verdict_model import Failure, Verdict
from ci.history.verdict_tally import BROKEN_ON_MAIN, NO_HISTORY


@dataclass(frozen=True)
class NewFailure:
    """What `judge` knew of a failure it called new: the failure as judged (``failure``; its infra
    kind cleared where the error follows the test) and the kind its error line first read as
    (``read_kind``), N's store id, the merge base, main's runs of N and their order, where the base
    sits in it (``at``), the same commit's passes and failed runs (``same``), N's flaky score and
    learned recurrence, whether the tier has no default-branch run yet, and the cut ``as_of``."""

    store: Store
    failure: Failure
    read_kind: str
    node_id: int | None
    merge_base: str
    runs: list[MainRun]
    order: tuple[str, ...]
    at: int | None
    same: tuple[int, list[int]]
    score: FlakyScore | None
    learned: Recurrence | None
    first_run: bool
    as_of: int | None

    @property
    def follow_kind(self) -> str:
        """The infra kind a peer's failure must share: the read one where it can follow the test."""
        return "" if self.failure.infra or not can_follow_test(self.read_kind) else self.read_kind


def overrule_new(v: Verdict, case: NewFailure, bases: PrBases, changed: Collection[str]) -> Verdict:
    """``v`` (a ``new`` verdict) replaced by the first second opinion that holds (module docstring)."""
    f, tier = case.failure, case.failure.tier
    if case.merge_base and (found := bases.broken_since(
            tier, f.node, case.node_id, f.sha, case.merge_base, f.fingerprint, case.runs, changed)) is not None:
        return replace(v, verdict=BROKEN_ON_MAIN, detail=found.describe(), since=found.since,
                       last_pass=found.last_pass, candidates=found.candidates, candidate_count=found.candidate_count)
    prints = flake_prints(case.score, case.learned)
    if case.merge_base and (peers := peer_break(
            bases, tier, f.node, case.node_id, f.sha, case.merge_base, f.error, f.fingerprint, main=case.runs,
            flaky_prints=prints, changed=changed, kind=case.follow_kind)) is not None:
        return replace(v, verdict=BROKEN_ON_MAIN, detail=peers.describe(), since=peers.since,
                       last_pass=peers.last_pass, candidates=peers.candidates, candidate_count=peers.candidate_count)
    if case.merge_base and (lone := unvouched(
            bases, tier, f.node, case.node_id, f.sha, case.merge_base, f.error, f.fingerprint, main=case.runs,
            main_ran_tier=not case.first_run, flaky_prints=prints, changed=changed,
            kind=case.follow_kind)) is not None:
        return replace(v, verdict=BROKEN_ON_MAIN, detail=lone.describe(tier), since=lone.since)
    if not f.infra and (dep := dependency_verdict(case.store, f, None, as_of=case.as_of)):
        return dep
    if not f.infra and (stopped := halted(case.store, f.repo, tier, f, case.runs, case.order, case.at, case.as_of,
                                          case.score)) is not None:
        return stopped
    if (beside := passed_beside(case.store, f.repo, tier, f.sha, case.node_id, case.same[1], case.read_kind,
                                case.as_of)) is not None:
        return first_flake(v, beside)
    if case.first_run:
        return replace(v, detail=f"{NO_HISTORY} (no default-branch run of tier {tier} in the history)")
    return v
