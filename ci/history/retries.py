"""How often a retry fails after a flaky failure: the culprit search's r (docs/culprit.md).

A *retry pair* is an attempt that `ci.history.flaky`'s rule counts as flaky evidence (a failure
on a commit where the node also passed, or in a short fail streak between passes: never
breakage) and the next attempt of the same node in the same report (pytest-rerunfailures'
reruns, stored as ``cases.attempt``), when that one is a pass or a failure and no infra failure.
r is the mean of Beta(retry failures + 1/2, retry passes + 1/2) (Jeffreys, as the flaky score),
pooled over the nodes asked for on one tier.
"""

from __future__ import annotations

from dataclasses import dataclass

from ci.history.flaky import PRIOR, candidate_nodes, evidence, node_histories
from ci.history.model import FAIL, PASS
from ci.history.store import Store


@dataclass(frozen=True)
class RetryRate:
    """``failed`` of ``retries`` retries after a flaky failure failed too; ``mean`` the posterior
    mean of P(retry fails | the attempt before it failed by flake)."""

    retries: int
    failed: int
    mean: float


def retry_rate(store: Store, *, tier: str, file: str, node: str | None = None) -> RetryRate | None:
    """r of ``node`` (or of every node of ``file``) on ``tier``; None when the history holds no
    retry pair for them."""
    wanted = {int(r[0]) for r in store.fetchall("SELECT id FROM nodes WHERE node = ?", (node,))} if node else \
        {int(r[0]) for r in store.fetchall("SELECT id FROM nodes WHERE file = ?", (file,))}
    ids = [i for i in candidate_nodes(store) if i in wanted]
    retries = failed = 0
    for _, rows in node_histories(store, ids, tier):
        flaky = {(r.report_id, r.attempt) for r in evidence(rows).flaky_rows}
        after = {(r.report_id, r.attempt): r for r in rows}
        for report_id, attempt in flaky:
            retry = after.get((report_id, attempt + 1))
            if retry is not None and not retry.infra and retry.kind in (PASS, FAIL):
                retries += 1
                failed += retry.kind == FAIL
    if not retries:
        return None
    return RetryRate(retries, failed, (failed + PRIOR) / (retries + 2 * PRIOR))
