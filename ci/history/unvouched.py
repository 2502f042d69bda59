"""Broken on main where main has no run of the test: a tier's first day, or a tier main never runs.

A workflow that runs on ``pull_request`` only (DeepSpeed's nv-a6000: ``on: pull_request,
workflow_dispatch``), or a store on its first day (a tier just added; the pull request runs that
finished before main's first run of the tier), leaves the default branch without a record of the
test: rule 3 has no streak, and the readers of other pull requests' merge bases
(`ci.history.pr_base_evidence`, `ci.history.sparse_main`) need a clean pass before the break to
date it, which a break older than the store's first run of the tier does not have. What is left
is what several other changes show: when pull requests of different people, based on the same or
older main commits, all fail the test the same way and no run of it on the tier has ever passed,
the code they share is what fails.

Contract. `unvouched(bases, tier, node, node_id, sha, base, error, fingerprint, main=...)` judges
test N's failure on tier T at ``sha`` (merge base B, signature F) that the other rules called
``new``; it is ``broken_on_main`` (an `Unvouched`) when all of these hold:

- main has no run of N on T up to the judged report (``main`` is empty);
- no run of N on T in the store passed it, by anyone, at any base (a pass is a commit that does not
  always fail N: the other rules date a break from it);
- runs of other pull requests based at or before B (they hold no code that B lacks) failed N
  alike (every attempt failed, one with F; `ci.history.sparse_main`'s points) from `MIN_SOURCES`
  or more distinct authors, never the judged pull request's author. Three, one more than
  `ci.history.sparse_main` needs, because no pass bounds a flake's rate here: with the judged
  failure that is four changes by different people, every one of their runs failing one specific
  error, and none passing; a flake of even 1 in 3 runs does that under 1 % of the time;
- F can be shared evidence (`ci.history.sparse_main.shareable`: not generic, not environmental,
  none of N's flaky signatures) and the judged change did not touch what N runs (``changed``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Sequence

from ci.history.mainline import MainRun
from ci.history.pr_base_evidence import PrBases
from ci.history.verdict_queries import cut, repo_condition
from ci.history.sparse_main import SHOWN, peer_points

MIN_SOURCES = 3

_PASSED = """SELECT 1 FROM reports r JOIN cases c ON c.report_id = r.id
    WHERE {repo}r.tier = ? AND c.node_id = ? AND c.kind = 'pass'{until} LIMIT 1"""


@dataclass(frozen=True)
class Unvouched:
    """N broken on main at ``since`` or before (the oldest merge base of the failing runs), as the
    pull requests ``prs`` of ``sources`` other authors show; ``main_ran_tier``: whether main has run
    the tier at all (else it never has, so far)."""

    since: str
    prs: tuple[str, ...]
    sources: int
    main_ran_tier: bool

    def describe(self, tier: str) -> str:
        """The verdict's detail: why main's record is silent, and the evidence."""
        named = ", ".join(self.prs[:SHOWN]) + (f" and {len(self.prs) - SHOWN} more" if len(self.prs) > SHOWN else "")
        silent = (f"main has not run this test on {tier}" if self.main_ran_tier
                  else f"the default branch has no run of {tier} in the history (its first runs, or a tier that runs "
                  "on pull requests only)")
        return (f"broken on main at {self.since[:7]} or before, not this change's: {silent}, but pull requests of "
                f"{self.sources} other authors based there or on older commits failed it with this error and no run of "
                f"it on {tier} has passed: {named}")


def unvouched(bases: PrBases, tier: str, node: str, node_id: int | None, sha: str, base: str, error: str,
              fingerprint: str, *, main: Sequence[MainRun], main_ran_tier: bool, flaky_prints: Collection[str] = (),
              kind: str = "", changed: Collection[str] = ()) -> Unvouched | None:
    """The `Unvouched` break of N's failure at ``sha`` (merge base ``base``), or None (module
    docstring). ``main``: N's default-branch runs on the tier; ``main_ran_tier``: whether main has
    any run of the tier; ``kind``: the judged failure's infra-looking kind that follows the test."""
    found = None if main else peer_points(bases, tier, node, node_id, sha, base, error, fingerprint, flaky_prints,
                                          kind, changed)
    if found is None or node_id is None:
        return None
    order, b, points = found
    if any(p.passed for p in points) or _ever_passed(bases, tier, node_id):
        return None
    failing = sorted((p for p in points if p.at <= b), key=lambda p: p.at)
    sources = {p.source for p in failing}
    if len(sources) < MIN_SOURCES:
        return None
    prs = tuple(dict.fromkeys(p.pr for p in failing))
    return Unvouched(order[failing[0].at], prs, len(sources), main_ran_tier)


def _ever_passed(bases: PrBases, tier: str, node_id: int) -> bool:
    """Whether any run of the tier, of any event and author, passed the test up to the cut."""
    where, params = repo_condition(bases.repo)
    until, limit = cut(bases.as_of)
    return bool(bases.store.fetchall(_PASSED.format(repo=where, until=until), (*params, tier, node_id, *limit)))
