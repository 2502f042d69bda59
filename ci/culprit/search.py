"""A culprit search session: the posterior, the runs spent, when to stop, what to probe next."""

from __future__ import annotations

from typing import Callable, Sequence

from ci.culprit.choose import choose_batch
from ci.culprit.model import CulpritResult, NoiseModel, Outcome, Probe, StopReason
from ci.culprit.posterior import Posterior


class Search:
    """Find the first bad commit among n candidates (the last, the known bad one, included).

    ``weights``: prior weights (`ci.culprit.posterior.prior_weights`); ``confidence``: stop when
    the most probable candidate reaches it; ``budget``: the most runs (None: no limit);
    ``attempts``: each run's attempts (the CI's retries + 1); ``est_time``: seconds per attempt;
    ``detail``: the runs recorded will say how many attempts failed (`Outcome.failures`), and the
    probes are chosen for that. ``confirm``: an answer that has reached the confidence is given
    only once no single run decides it (`lone_deciders`): while one does, its probe is run again
    (the stop's error is then the chance that two runs lied, not one; docs/culprit.md measures
    what it costs)."""

    def __init__(self, weights: Sequence[float], noise: NoiseModel, *, confidence: float = 0.99,
                 budget: int | None = None, attempts: int = 1, est_time: float = 1.0, detail: bool = False,
                 confirm: bool = False):
        if not 0 < confidence < 1:
            raise ValueError(f"confidence {confidence} not within (0, 1)")
        if budget is not None and budget < 1:
            raise ValueError(f"budget {budget}: at least one run is needed")
        if attempts < 1:
            raise ValueError(f"attempts {attempts}: at least one")
        self.posterior = Posterior(weights, noise)
        self.noise, self.confidence, self.budget = noise, confidence, budget
        self.attempts, self.est_time, self.detail, self.confirm = attempts, est_time, detail, confirm
        self.outcomes: list[Outcome] = []
        self._stuck = False  # no probe can teach anything more (the noise drowns every outcome)

    def record(self, outcome: Outcome) -> None:
        self.posterior.update(outcome)
        self.outcomes.append(outcome)

    def lone_deciders(self) -> list[Outcome]:
        """The recorded runs each of which alone decides the answer: without it (every other run
        kept) another candidate would be the most probable. Two runs that say the same at one
        commit hold each other up, so neither is one."""
        top = self.posterior.top()
        return [o for o in self.outcomes if self.posterior.top_without(o) != top]

    def _confident(self) -> bool:
        return max(self.posterior.probabilities()) >= self.confidence

    def stop_reason(self) -> StopReason | None:
        if self._confident() and not (self.confirm and self.lone_deciders()):
            return StopReason.CONFIDENT
        if self.budget is not None and len(self.outcomes) >= self.budget:
            return StopReason.BUDGET
        return StopReason.NOTHING_TO_LEARN if self._stuck else None

    def next_batch(self, runners: int = 1) -> list[Probe]:
        """The probes to run now, at most ``runners`` and never past the budget; empty once stopped
        (and then `stop_reason` says why)."""
        if self.stop_reason() is not None:
            return []
        size = runners if self.budget is None else min(runners, self.budget - len(self.outcomes))
        if self.confirm and self._confident():  # confident, but a lone run decides: run it again
            indices = dict.fromkeys(o.index for o in self.lone_deciders())
            return [Probe(i, self.attempts) for i in list(indices)[:size]]
        batch = choose_batch(self.posterior.probabilities(), self.noise, size, est_time=self.est_time,
                             attempt_choices=(self.attempts,), detail=self.detail)
        if not batch:
            self._stuck = True
        return batch

    def best(self) -> tuple[int, float]:
        probs = self.posterior.probabilities()
        top = max(range(len(probs)), key=probs.__getitem__)
        return top, probs[top]

    def result(self) -> CulpritResult:
        culprit, probability = self.best()
        return CulpritResult(culprit, probability, tuple(self.outcomes), self.stop_reason() or StopReason.BUDGET)


Said = bool | int | tuple[int, bool | None]


def run_search(search: Search, probe: Callable[[Sequence[Probe]], Sequence[Said]],
               runners: int = 1) -> tuple[CulpritResult, int]:
    """Drive ``search`` to its stop with ``probe`` (runs a batch at once, says per run whether it
    failed, a bool, or how many attempts failed, an int, or that count with whether the failure's
    signature was the breakage's, a pair); the result and the number of rounds (batches) it took."""
    rounds = 0
    while batch := search.next_batch(runners):
        rounds += 1
        for p, said in zip(batch, probe(batch)):
            if isinstance(said, bool):
                search.record(Outcome(p.index, said, p.attempts))
                continue
            count, same = said if isinstance(said, tuple) else (said, None)
            search.record(Outcome(p.index, count == p.attempts, p.attempts, count, same if count else None))
    return search.result(), rounds
