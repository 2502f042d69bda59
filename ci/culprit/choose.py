"""Which probes to run next: greedy maximum expected information gain per GPU-second.

One probe's gain is the mutual information between its outcome and the culprit. For R runners
the batch is chosen greedily: each further probe maximises the gain of the *joint* outcome of the
batch so far plus itself, over the cost of its run (est_time x attempts), with the earlier probes'
outcomes unknown. Joint gain is submodular here (outcomes are independent given the culprit), so
greedy is within 1 - 1/e of the best batch; quantiles of the posterior would ignore the noise.

The joint outcome's distribution is kept as one row per outcome vector of the batch so far,
``rows[y][h] = P(h) P(y | h)``; with prefix sums over h, trying a probe at i costs (outcomes per run)^|batch|.
"""

from __future__ import annotations

import math
from itertools import accumulate
from typing import Sequence

from ci.culprit.model import NoiseModel, Probe


def _h(p: float) -> float:
    return -p * math.log2(p) if p > 0 else 0.0


def _h2(p: float) -> float:
    return _h(p) + _h(1.0 - p)


def joint_gain(probs: Sequence[float], noise: NoiseModel, probes: Sequence[Probe], *, detail: bool = False) -> float:
    """Mutual information (bits) between the joint outcome of ``probes`` and the culprit; with
    ``detail`` a run's outcome is its number of failed attempts, else failed or passed."""
    rows = [list(probs)]
    for probe in probes:
        rows = _split(rows, probe, outcome_table(noise, probe.attempts, detail))
    entropy = sum(_h(sum(row)) for row in rows)
    noise_entropy = 0.0
    for probe in probes:
        broken, ok = outcome_table(noise, probe.attempts, detail)
        hb, ho = sum(map(_h, broken)), sum(map(_h, ok))
        noise_entropy += sum(p * (hb if probe.index >= h else ho) for h, p in enumerate(probs))
    return entropy - noise_entropy


def outcome_table(noise: NoiseModel, attempts: int, detail: bool) -> tuple[list[float], list[float]]:
    """P(each outcome of a run | broken), and | not broken: passed, failed; or with ``detail``
    each count of failed attempts (`NoiseModel.failures`). With the model's m (``flake_match``),
    each outcome with a failed attempt splits in two: the breakage's signature, or another."""
    if detail:
        broken, ok = noise.failures(attempts, True), noise.failures(attempts, False)
    else:
        a, b = noise.fail_if_broken(attempts), noise.fail_if_ok(attempts)
        broken, ok = [1 - a, a], [1 - b, b]
    if noise.flake_match is None:
        return broken, ok
    return _signed(noise, broken, True), _signed(noise, ok, False)


def _signed(noise: NoiseModel, table: list[float], broken: bool) -> list[float]:
    """Every entry but the first (no failed attempt: no signature) as same / other signature."""
    return table[:1] + [x * noise.signature(same, broken) for x in table[1:] for same in (True, False)]


def _split(rows: list[list[float]], probe: Probe, table: tuple[list[float], list[float]]) -> list[list[float]]:
    """Each row split by the probe's outcome: row[h] x P(outcome | h)."""
    broken, ok = table
    return [[w * (broken[j] if probe.index >= h else ok[j]) for h, w in enumerate(row)]
            for j in range(len(broken)) for row in rows]


def choose_batch(probs: Sequence[float], noise: NoiseModel, size: int, *, est_time: float = 1.0,
                 attempt_choices: Sequence[int] = (1,), detail: bool = False) -> list[Probe]:
    """Up to ``size`` probes for the runners free now, best first. A candidate may be probed twice
    in one batch (a repeat is what a noisy result can need). Candidates whose every probe would
    teach nothing (the last one is known bad) are never chosen; the list is empty when nothing
    can be learned. ``detail``: the runs will report their failed attempts (`joint_gain`)."""
    n = len(probs)
    chosen: list[Probe] = []
    rows = [list(probs)]
    cdf = list(accumulate(probs))
    for _ in range(size):
        sums = [list(accumulate(row)) for row in rows]
        totals = [s[-1] for s in sums]
        base = sum(_h(t) for t in totals)
        best: tuple[float, Probe] | None = None
        for k in attempt_choices:
            broken, ok = outcome_table(noise, k, detail)
            hb, ho = sum(map(_h, broken)), sum(map(_h, ok))
            for i in range(n - 1):
                gain = -base - cdf[i] * hb - (1 - cdf[i]) * ho
                for s, t in zip(sums, totals):
                    for a, b in zip(broken, ok):
                        gain += _h(a * s[i] + b * (t - s[i]))
                score = gain / (est_time * k)
                if gain > 1e-12 and (best is None or score > best[0]):
                    best = (score, Probe(i, k))
        if best is None:
            break
        probe = best[1]
        chosen.append(probe)
        rows = _split(rows, probe, outcome_table(noise, probe.attempts, detail))
    return chosen
