"""How often a retry fails after a flaky failure: the culprit search's r (docs/culprit.md).

A *retry pair* is an attempt that `ci.history.flaky`'s rule counts as flaky evidence (a failure
on a commit where the node also passed, or in a short fail streak between passes: never
breakage) and the next attempt of the same node in the same report (pytest-rerunfailures'
reruns, stored as ``cases.attempt``), when that one is a pass or a failure and no infra failure
(for the verdicts, an infra failure that follows the test counts: `ci.history.infra_flakes`).
r is the mean of Beta(retry failures + 1/2, retry passes + 1/2) (Jeffreys, as the flaky score),
pooled over the nodes asked for on one tier. `RetryCorrelation` gives the verdicts a node's r,
shrunk towards its tier's pooled r when the node has few retries. `flaky_fingerprints`: how many of
the nodes' flaky failures carry each error signature (the culprit search's m).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from ci.history.flaky import PRIOR, candidate_nodes, evidence, node_histories
from ci.history.model import FAIL, PASS, EvidenceRow
from ci.history.store import Store


@dataclass(frozen=True)
class RetryRate:
    """``failed`` of ``retries`` retries after a flaky failure failed too; ``mean`` the posterior
    mean of P(retry fails | the attempt before it failed by flake)."""

    retries: int
    failed: int
    mean: float


POOL_WEIGHT = 4  # the tier's pooled r weighs as much as this many of the node's own retry pairs


def _pairs(store: Store, ids: list[int], tier: str, as_of: int | None = None,
           own: Callable[[EvidenceRow], bool] | None = None) -> dict[str, tuple[int, int]]:
    """{node: (retry pairs, retries that failed)} of the node ``ids`` on ``tier``; ``own`` as
    `ci.history.flaky.evidence`'s."""
    out: dict[str, tuple[int, int]] = {}
    for (node, _, _), rows in node_histories(store, ids, tier, as_of=as_of):
        flaky = {(r.report_id, r.attempt) for r in evidence(rows, own).flaky_rows}
        after = {(r.report_id, r.attempt): r for r in rows}
        retries = failed = 0
        for report_id, attempt in flaky:
            retry = after.get((report_id, attempt + 1))
            mine = not retry.infra or own is not None and own(retry) if retry is not None else False
            if retry is not None and mine and retry.kind in (PASS, FAIL):
                retries += 1
                failed += retry.kind == FAIL
        if retries:
            out[node] = (retries, failed)
    return out


def flaky_fingerprints(store: Store, *, tier: str, file: str, node: str | None) -> Counter[str]:
    """How many flaky failures of ``node`` (or every node of ``file``) on ``tier`` carry each error
    signature: the failed attempts with one that `ci.history.flaky`'s rule counts as flaky evidence."""
    wanted = {int(r[0]) for r in store.fetchall("SELECT id FROM nodes WHERE node = ?", (node,))} if node else \
        {int(r[0]) for r in store.fetchall("SELECT id FROM nodes WHERE file = ?", (file,))}
    found: Counter[str] = Counter()
    for _, rows in node_histories(store, [i for i in candidate_nodes(store) if i in wanted], tier):
        found.update(r.fingerprint for r in evidence(rows).flaky_rows
                     if r.kind == FAIL and r.fingerprint)  # a retried attempt without text: its signature is unknown
    return found


def _pooled(pairs: dict[str, tuple[int, int]]) -> RetryRate:
    """Every node's retry pairs together, with the Jeffreys posterior mean."""
    retries, failed = sum(p[0] for p in pairs.values()), sum(p[1] for p in pairs.values())
    return RetryRate(retries, failed, (failed + PRIOR) / (retries + 2 * PRIOR))


def retry_rate(store: Store, *, tier: str, file: str, node: str | None = None) -> RetryRate | None:
    """r of ``node`` (or of every node of ``file``) on ``tier``; None when the history holds no
    retry pair for them."""
    wanted = {int(r[0]) for r in store.fetchall("SELECT id FROM nodes WHERE node = ?", (node,))} if node else \
        {int(r[0]) for r in store.fetchall("SELECT id FROM nodes WHERE file = ?", (file,))}
    pooled = _pooled(_pairs(store, [i for i in candidate_nodes(store) if i in wanted], tier))
    return pooled if pooled.retries else None


class RetryCorrelation:
    """P(a retry fails | the attempt before it failed by flake) per node of one tier, for the
    verdicts' rule 4: the node's own retry pairs under a Beta prior centred on the tier's pooled r
    (Jeffreys over every node's pairs) that weighs `POOL_WEIGHT` pairs, so a node with few retries
    borrows the tier's. Read once, on first use, from reports up to ``as_of``; ``own`` as
    `ci.history.flaky.evidence`'s."""

    def __init__(self, store: Store, tier: str, as_of: int | None = None,
                 own: Callable[[EvidenceRow], bool] | None = None):
        self.store, self.tier, self.as_of, self.own = store, tier, as_of, own
        self._pairs: dict[str, tuple[int, int]] | None = None
        self._pooled = 0.0

    def rate(self, node: str) -> RetryRate:
        """The node's retries, failed retries and posterior mean r."""
        if self._pairs is None:  # read and pooled once: the verdicts ask node after node
            self._pairs = _pairs(self.store, candidate_nodes(self.store), self.tier, self.as_of, self.own)
            self._pooled = _pooled(self._pairs).mean
        own, own_failed = self._pairs.get(node, (0, 0))
        return RetryRate(own, own_failed, (own_failed + POOL_WEIGHT * self._pooled) / (own + POOL_WEIGHT))
