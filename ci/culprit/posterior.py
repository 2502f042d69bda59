"""The probability over the candidate commits c_1..c_n that each is the culprit (the first bad
commit, first-parent order), updated exactly in log space.

Hypothesis h (0-based) says c_1..c_h are good and c_{h+1}..c_n broken: a run at candidate i is
of broken code iff i >= h. An outcome at i multiplies every h <= i by P(outcome | broken) and
every h > i by P(outcome | not broken) (`NoiseModel`); runs are independent given h.
"""

from __future__ import annotations

import math
from typing import Sequence

from ci.culprit.model import NoiseModel, Outcome


def prior_weights(n: int, touches: Sequence[bool] | None = None, w_low: float = 0.1) -> list[float]:
    """Prior weights of n candidates: uniform, or with ``touches`` (does candidate i change a file
    the test executes?) 1 where it does and ``w_low`` where it does not. Not normalised."""
    if n < 1:
        raise ValueError("a window needs at least one candidate commit")
    if touches is None:
        return [1.0] * n
    if len(touches) != n:
        raise ValueError(f"{len(touches)} touch flags for {n} candidates")
    if not 0 < w_low <= 1:
        raise ValueError(f"w_low {w_low} not within (0, 1]")
    return [1.0 if t else w_low for t in touches]


def run_likelihood(noise: NoiseModel, outcome: Outcome, broken: bool) -> float:
    """P(this run's outcome | the code at its commit is ``broken`` or not); with the run's failed
    attempts known, P(exactly those); with its failure's signature known (and the model's m),
    times P(that signature | broken or not) (`NoiseModel.signature`)."""
    if outcome.failures is not None:
        said = noise.failures(outcome.attempts, broken)[outcome.failures]
    else:
        fail = noise.fail_if_broken(outcome.attempts) if broken else noise.fail_if_ok(outcome.attempts)
        said = fail if outcome.failed else 1.0 - fail
    if outcome.same_signature is None:
        return said
    return said * noise.signature(outcome.same_signature, broken)


class Posterior:
    """Log-space weights over the n candidates; `probabilities` normalises them."""

    def __init__(self, weights: Sequence[float], noise: NoiseModel):
        if not weights or any(not w > 0 for w in weights):
            raise ValueError("prior weights must be positive, one per candidate")
        self.noise = noise
        self._log = [math.log(w) for w in weights]

    @property
    def n(self) -> int:
        return len(self._log)

    def update(self, outcome: Outcome) -> None:
        """Fold one run's outcome in (Bayes' rule, exact up to floating point)."""
        if not 0 <= outcome.index < self.n:
            raise ValueError(f"outcome at candidate {outcome.index}, outside 0..{self.n - 1}")
        broken = math.log(run_likelihood(self.noise, outcome, True))
        ok = math.log(run_likelihood(self.noise, outcome, False))
        self._log = [w + (broken if h <= outcome.index else ok) for h, w in enumerate(self._log)]
        top = max(self._log)
        self._log = [w - top for w in self._log]  # keeps the numbers in range over long searches

    def top(self) -> int:
        """The most probable candidate (the first of equals)."""
        return max(range(self.n), key=self._log.__getitem__)

    def top_without(self, outcome: Outcome) -> int:
        """The most probable candidate had ``outcome``, one run already folded in, not been seen."""
        broken = math.log(run_likelihood(self.noise, outcome, True))
        ok = math.log(run_likelihood(self.noise, outcome, False))
        log = [w - (broken if h <= outcome.index else ok) for h, w in enumerate(self._log)]
        return max(range(self.n), key=log.__getitem__)

    def probabilities(self) -> list[float]:
        top = max(self._log)
        raw = [math.exp(w - top) for w in self._log]
        total = sum(raw)
        return [w / total for w in raw]
