"""`Search(confirm=True)`: a confident answer waits while a single run decides it.

The oracle for "a single run decides it" is the brute-force posterior of `test_culprit_core`
(every hypothesis, every attempt sequence, no logs) recomputed with that run left out.
"""

from __future__ import annotations

import random

import pytest

from ci.culprit.model import NoiseModel, Outcome, Probe, StopReason
from ci.culprit.search import Search, run_search
from tests.ci.test_culprit_core import brute_posterior

NOISE = NoiseModel(0.01, 0.001, 0.5)


def _top(probs: list[float]) -> int:
    return max(range(len(probs)), key=probs.__getitem__)


def test_the_old_rule_stops_on_a_lone_pass_the_new_one_runs_it_again() -> None:
    """Two commits, the prior 2:1 for the first; one pass at the first makes the second 0.998
    likely (p 0.001 against 1 - f 0.99), and without that pass the first is on top: the pass
    alone decides. The old rule answers; the new one repeats the run, then answers."""
    weights = [2.0, 1.0]
    old, new = Search(weights, NOISE), Search(weights, NOISE, confirm=True)
    for search in (old, new):
        search.record(Outcome(0, False))
        assert search.best()[0] == 1 and search.best()[1] == pytest.approx(0.99 / (0.99 + 0.002))
    assert old.stop_reason() is StopReason.CONFIDENT and old.next_batch() == []
    assert new.lone_deciders() == [Outcome(0, False)]
    assert new.stop_reason() is None
    assert new.next_batch(runners=4) == [Probe(0, 1)]  # the run again, once: one commit decides
    new.record(Outcome(0, False))
    assert new.lone_deciders() == [] and new.stop_reason() is StopReason.CONFIDENT


def test_both_rules_stop_where_no_single_run_decides() -> None:
    """The prior already favours the answer (1:3); one pass at the first commit only adds to it, so
    without the pass the answer is the same: both rules stop after the one run."""
    for confirm in (False, True):
        search = Search([1.0, 3.0], NOISE, confirm=confirm)
        assert search.next_batch() == [Probe(0, 1)]
        search.record(Outcome(0, False))
        assert search.lone_deciders() == []
        assert search.stop_reason() is StopReason.CONFIDENT


def test_a_confirming_run_that_disagrees_reopens_the_search() -> None:
    """The repeat fails: the two runs at the first commit now contradict each other and the
    answer drops below the confidence, so the search goes on choosing probes by their gain."""
    search = Search([2.0, 1.0], NOISE, confirm=True)
    search.record(Outcome(0, False))
    search.record(Outcome(0, True))
    assert search.best()[1] < 0.99 and search.stop_reason() is None
    assert search.next_batch() == [Probe(0, 1)]  # the only commit a run can tell anything at


def test_confirming_stops_at_the_budget_and_says_so() -> None:
    search = Search([2.0, 1.0], NOISE, confirm=True, budget=1)
    search.record(Outcome(0, False))
    assert search.best()[1] >= 0.99
    assert search.stop_reason() is StopReason.BUDGET and search.next_batch() == []
    assert search.result().stop is StopReason.BUDGET


@pytest.mark.parametrize("seed", range(12))
def test_lone_deciders_match_the_brute_force_posterior_without_each_run(seed: int) -> None:
    rng = random.Random(seed)
    noise = NoiseModel(rng.uniform(0.02, 0.3), rng.uniform(0.001, 0.05), rng.uniform(0.3, 0.8))
    n = rng.randint(2, 6)
    weights = [rng.uniform(0.01, 1.0) for _ in range(n)]  # no two equal: no tie for the top
    search = Search(weights, noise, attempts=2, detail=True)
    for _ in range(rng.randint(1, 6)):
        failures = rng.randint(0, 2)
        search.record(Outcome(rng.randrange(n), failures == 2, 2, failures))
    top = _top(brute_posterior(weights, noise, search.outcomes))
    expected = [o for k, o in enumerate(search.outcomes)
                if _top(brute_posterior(weights, noise, search.outcomes[:k] + search.outcomes[k + 1:])) != top]
    assert search.posterior.top() == top
    assert search.lone_deciders() == expected


def test_a_noiseless_confirmed_search_still_finds_every_culprit() -> None:
    """Runs that never lie: every answer is right, and the search spends at most one run per lone
    decider over the unconfirmed search."""
    for culprit in range(8):
        plain, confirmed = (run_search(Search([1.0] * 8, NoiseModel(0.0, 0.0), confirm=c),
                                       lambda b: [p.index >= culprit for p in b])[0] for c in (False, True))
        assert plain.culprit == confirmed.culprit == culprit
        assert plain.runs <= confirmed.runs <= 2 * plain.runs


def test_every_lone_decider_is_run_again_within_the_runners_and_the_budget() -> None:
    """Three commits, the outer two 4:1 over the middle one; a pass at the first and a failure at
    the second make the second 0.992 likely (f = p = 0.001), and each run alone decides it: without
    the pass the first is on top, without the failure the third. Both are run again when two
    runners are free; with one run left in the budget, only one."""
    noise = NoiseModel(0.001, 0.001, 0.5)
    runs = (Outcome(0, False), Outcome(1, True))
    for budget, expected in ((None, [Probe(0, 1), Probe(1, 1)]), (3, [Probe(0, 1)])):
        search = Search([4.0, 1.0, 4.0], noise, confirm=True, budget=budget)
        for outcome in runs:
            search.record(outcome)
        assert search.best()[0] == 1 and search.best()[1] >= 0.99
        assert search.lone_deciders() == list(runs)
        assert search.next_batch(runners=4) == expected
