"""A failure that the same commit passed on another tier: a flake's first sight, not the change's.

Contract (`passed_beside`): a failure of test N on tier T at commit S, about to be called ``new``
(no flake evidence for N yet, main passes it), is more likely a flake when the same code passed
N elsewhere: S's reports on another tier (another matrix entry, GPU pool or torch version of the
same push: GitHub runs every matrix entry on the same merge commit) passed N and none failed it.
A change that breaks N's code fails it wherever N runs; one that breaks it on one tier only (one
GPU architecture, one torch version) usually breaks the file's neighbouring tests with it, so the
rule holds only when
- N passed at S on one or more other tiers and failed there on none (any error, infra included);
- no other test of N's file failed on T at S (a breakage of shared code fails them together; a
  CUDA error that poisons the process does too, and is not told apart here);
- N failed on T at S once: in one report, on one attempt. A re-run of the job, or pytest's reruns
  in it, failing it again is no longer one chance failure: a breakage of that tier only reproduces;
- the failure is no crash of the test process (a signal): the file's tests after it never ran, so
  their passing says nothing.
The verdict it backs says it is not sure ("probably a flake", "rerun to be sure"). Reads only
reports up to ``as_of`` (none: all), every event, of ``repo`` ("" = the store's every repository).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ci.history.errors import SIGNAL
from ci.history.model import BROKEN, FAIL, PASS
from ci.history.store import Store
from ci.history.verdict_queries import cut, repo_condition

SHOWN = 3  # tiers a detail names before "and N more"


@dataclass(frozen=True)
class PassedBeside:
    """The other tiers that passed the test at the judged commit, sorted."""

    tiers: tuple[str, ...]

    def describe(self) -> str:
        named = ", ".join(self.tiers[:SHOWN])
        more = len(self.tiers) - SHOWN
        return f"it passed at this commit on {named}" + (f" and {more} more tier{'s' if more != 1 else ''}"
                                                         if more > 0 else "")


def passed_beside(store: Store, repo: str, tier: str, sha: str, node_id: int | None, failed: Sequence[int],
                  infra: str = "", as_of: int | None = None) -> PassedBeside | None:
    """`PassedBeside` when the conditions of the module docstring hold for node ``node_id`` failing
    on ``tier`` at ``sha`` with ``failed`` attempts in each report of that tier that failed it
    (`verdict_queries.same_commit`) and the failure's own infra kind ``infra`` (`errors.infra_kind`);
    else None."""
    if node_id is None or sum(failed) > 1 or infra == SIGNAL:
        return None
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    rows = store.fetchall(f"SELECT DISTINCT r.tier, c.kind FROM reports r JOIN cases c ON c.report_id = r.id "
                          f"WHERE {where}r.sha = ? AND c.node_id = ? AND r.tier <> ?{until}",
                          (*params, sha.lower(), node_id, tier, *limit))
    passed = sorted({str(t) for t, kind in rows if kind == PASS})
    if not passed or any(kind in (FAIL, BROKEN) for _, kind in rows):
        return None
    neighbours = store.fetchall(f"SELECT 1 FROM reports r JOIN cases c ON c.report_id = r.id JOIN nodes n "
                                f"ON n.id = c.node_id WHERE {where}r.sha = ? AND r.tier = ? AND c.node_id <> ? "
                                f"AND n.file = (SELECT file FROM nodes WHERE id = ?) AND c.kind IN (?, ?){until} "
                                "LIMIT 1", (*params, sha.lower(), tier, node_id, node_id, FAIL, BROKEN, *limit))
    return None if neighbours else PassedBeside(tuple(passed))
