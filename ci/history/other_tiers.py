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
change explains its own failure at least as well) and when nothing recurs. The verdict's detail
says the evidence is from other tiers and that a rerun settles it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from ci.history.recurring import Recurrence, recurring
from ci.history.store import Store


@dataclass(frozen=True)
class OtherTiers(Recurrence):
    """A `Recurrence` read from the test's runs on every tier, the judged one included."""

    def describe(self) -> str:
        """``failed so on this CI's tiers in 6 of 80 runs of 5 other pull requests and commits ...``"""
        return (f"failed so on this CI's tiers in {self.failed_runs} of {self.runs} runs of {self.sources} other pull "
                "requests and commits while main passes it (its flakes seen on other tiers, not yet here: "
                "rerun to be sure)")


def on_other_tiers(store: Store, repo: str, node_id: int | None, sha: str, *, as_of: int | None = None,
                   touched: bool = False) -> OtherTiers | None:
    """N's flake signatures recurring across all its tiers (module docstring), or None."""
    if touched:
        return None
    found = recurring(store, repo, None, node_id, sha, as_of=as_of)
    return None if found is None else OtherTiers(**{f.name: getattr(found, f.name) for f in fields(found)})
