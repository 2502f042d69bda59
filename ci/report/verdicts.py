"""The verdicts the HUD shows ("is this red mine?"), as `ci.history.verdict` gives them: judged
there, never here.

Contract:
- `judge_cells` judges one failure per matrix cell asked for (the page asks for the latest
  failing cell of each row failing now: what is broken on the default branch) and returns each
  verdict's one-line ``detail`` (``broken on main since abc1234 (...)``, ``flaky: ...``,
  ``infra: ...``, ``new: ...``), in the order asked.
- `pull_verdicts` is the pull request's: its newest commit's failures (`ci.history.run_results.
  load_run`), judged against its merge base and the history as of its newest report (the answer
  does not change as later main runs arrive); (tier, node) -> detail.
- A store older than the verdicts' schema (`ci.report.query.has_verdicts`) gives no verdict: ""
  for each cell, {} for the pull request; the HUD never migrates a store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ci.history.run_results import load_run
from ci.history.store import Store
from ci.history.verdict import Failure as Judged
from ci.history.verdict import judge
from ci.report.query import FailureLine, has_verdicts


@dataclass(frozen=True)
class CellFailure:
    """One cell's failure to judge: the test's failing line at commit ``sha`` on ``tier``, and how
    many of its attempts failed there."""

    tier: str
    sha: str
    line: FailureLine
    failed_attempts: int


def judge_cells(store: Store, repo: str, cells: Sequence[CellFailure]) -> list[str]:
    """Each cell's verdict detail, in order ("" for all on a store without verdicts)."""
    if not cells or not has_verdicts(store):
        return [""] * len(cells)
    failures = [Judged(c.line.node, c.tier, c.sha, repo, c.line.message, c.line.fingerprint, c.line.infra,
                       c.line.runner, failures=max(1, c.failed_attempts)) for c in cells]
    return [v.detail for v in judge(store, failures)]


def pull_verdicts(store: Store, repo: str, pr: int) -> dict[tuple[str, str], str]:
    """(tier, node) -> verdict detail for pull request ``pr``'s newest commit (see the module docstring)."""
    if not has_verdicts(store):
        return {}
    try:
        run = load_run(store, pr=pr, repo=repo or None)
    except LookupError:
        return {}
    return {(v.tier, v.node): v.detail
            for v in judge(store, run.failures, merge_base=run.base_sha, as_of=run.report_id)}
