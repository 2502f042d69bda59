"""Which probes to run next: greedy maximum expected information gain per GPU-second.

One probe's gain is the mutual information between its outcome and the culprit. For R runners
the batch is chosen greedily: each further probe maximises the gain of the *joint* outcome of the
batch so far plus itself, over the cost of its run (est_time x attempts), with the earlier probes'
outcomes unknown. Joint gain is submodular here (outcomes are independent given the culprit), so
greedy is within 1 - 1/e of the best batch; quantiles of the posterior would ignore the noise.

The joint outcome's distribution is kept as one row per outcome vector of the batch so far,
``rows[y][h] = P(h) P(y | h)``; with prefix sums over h, trying a probe at i costs 2^|batch|.
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


def joint_gain(probs: Sequence[float], noise: NoiseModel, probes: Sequence[Probe]) -> float:
    """Mutual information (bits) between the joint outcome of ``probes`` and the culprit."""
    rows = _rows(probs, noise, probes)
    entropy = sum(_h(sum(row)) for row in rows)
    noise_entropy = sum(p * sum(_h2(_fail(noise, pr, h)) for pr in probes) for h, p in enumerate(probs))
    return entropy - noise_entropy


def _fail(noise: NoiseModel, probe: Probe, h: int) -> float:
    return noise.fail_if_broken(probe.attempts) if probe.index >= h else noise.fail_if_ok(probe.attempts)


def _rows(probs: Sequence[float], noise: NoiseModel, probes: Sequence[Probe]) -> list[list[float]]:
    rows = [list(probs)]
    for probe in probes:
        fails = [_fail(noise, probe, h) for h in range(len(probs))]
        rows = [[w * f for w, f in zip(row, fails)] for row in rows] + \
               [[w * (1 - f) for w, f in zip(row, fails)] for row in rows]
    return rows


def choose_batch(probs: Sequence[float], noise: NoiseModel, size: int, *, est_time: float = 1.0,
                 attempt_choices: Sequence[int] = (1,)) -> list[Probe]:
    """Up to ``size`` probes for the runners free now, best first. A candidate may be probed twice
    in one batch (a repeat is what a noisy result can need). Candidates whose every probe would
    teach nothing (the last one is known bad) are never chosen; the list is empty when nothing
    can be learned."""
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
            a, b = noise.fail_if_broken(k), noise.fail_if_ok(k)
            ha, hb = _h2(a), _h2(b)
            for i in range(n - 1):
                gain = -base - cdf[i] * ha - (1 - cdf[i]) * hb
                for s, t in zip(sums, totals):
                    fail = a * s[i] + b * (t - s[i])
                    gain += _h(fail) + _h(t - fail)
                score = gain / (est_time * k)
                if gain > 1e-12 and (best is None or score > best[0]):
                    best = (score, Probe(i, k))
        if best is None:
            break
        probe = best[1]
        chosen.append(probe)
        fails = [_fail(noise, probe, h) for h in range(n)]
        rows = [[w * f for w, f in zip(row, fails)] for row in rows] + \
               [[w * (1 - f) for w, f in zip(row, fails)] for row in rows]
    return chosen
