"""LPT sharding: hand-made cases, brute-force optimum on tiny inputs, partition property, budget."""

from __future__ import annotations

import itertools
import random

import pytest

from ci.shard import ShardBudgetError, lower_bound, lpt, lpt_for_budget, parse_shard_spec


def brute_force_makespan(times: dict[str, float], n: int) -> float:
    values = list(times.values())
    best = float("inf")
    for assignment in itertools.product(range(n), repeat=len(values)):
        loads = [0.0] * n
        for v, s in zip(values, assignment):
            loads[s] += v
        best = min(best, max(loads))
    return best


def test_hand_made_case_places_longest_first_on_least_loaded():
    result = lpt({"a": 7, "b": 5, "c": 4, "d": 3, "e": 1}, 2)
    # a(7)->1; b(5)->2; c(4)->2 (5<7) =9; d(3)->1 =10; e(1)->2 =10
    assert [s.tests for s in result.shards] == [("a", "d"), ("b", "c", "e")]
    assert [s.load for s in result.shards] == [10, 10]
    assert result.makespan == 10
    assert result.lower_bound == 10


def test_classic_lpt_worst_case_is_four_thirds_not_optimal():
    # Graham's example for N=2: 3,3,2,2,2 -> LPT 7, optimum 6.
    times = {"a": 3, "b": 3, "c": 2, "d": 2, "e": 2}
    assert lpt(times, 2).makespan == 7
    assert brute_force_makespan(times, 2) == 6


def test_ties_are_broken_by_name_then_shard_index_not_input_order():
    forward = lpt({"x": 1.0, "y": 1.0, "z": 1.0, "w": 1.0}, 2)
    backward = lpt(dict(reversed(list({"x": 1.0, "y": 1.0, "z": 1.0, "w": 1.0}.items()))), 2)
    assert forward == backward
    assert forward.shards[0].tests == ("w", "y")
    assert forward.shards[1].tests == ("x", "z")


@pytest.mark.parametrize("seed", range(30))
def test_lpt_against_brute_force_on_tiny_inputs(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 3)
    times = {f"t{i}": float(rng.randint(1, 20)) for i in range(rng.randint(1, 7))}
    result = lpt(times, n)
    optimum = brute_force_makespan(times, n)
    assert result.lower_bound <= optimum <= result.makespan
    assert result.makespan <= (4 / 3 - 1 / (3 * n)) * optimum + 1e-9


@pytest.mark.parametrize("n", [1, 2, 5, 13, 40])
def test_shards_partition_the_input(n):
    rng = random.Random(n)
    times = {f"tests/test_{i}.py": rng.lognormvariate(2, 1) for i in range(25)}
    result = lpt(times, n)
    assert [s.index for s in result.shards] == list(range(1, n + 1))
    flat = [t for s in result.shards for t in s.tests]
    assert sorted(flat) == sorted(times)  # union is everything, and no test twice
    assert len(flat) == len(set(flat))
    for s in result.shards:
        assert s.load == pytest.approx(sum(times[t] for t in s.tests))
    assert result.makespan == max(s.load for s in result.shards)
    assert result.makespan >= result.lower_bound - 1e-9


def test_lower_bound_is_max_of_mean_and_longest():
    assert lower_bound({"a": 10, "b": 1, "c": 1}, 3) == 10
    assert lower_bound({"a": 3, "b": 3, "c": 3}, 2) == 4.5
    assert lower_bound({}, 4) == 0.0


def test_more_shards_than_tests_leaves_empty_shards():
    result = lpt({"a": 2, "b": 1}, 4)
    assert [len(s.tests) for s in result.shards] == [1, 1, 0, 0]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_shard_count_is_rejected(bad):
    with pytest.raises(ValueError, match="shard count"):
        lpt({"a": 1}, bad)


def test_negative_or_nan_time_is_rejected_with_the_name():
    with pytest.raises(ValueError, match="'b'"):
        lpt({"a": 1, "b": float("nan")}, 2)
    with pytest.raises(ValueError, match="'a'"):
        lpt({"a": -1}, 2)


def test_budget_picks_the_smallest_fitting_count():
    times = {"a": 50, "b": 40, "c": 30, "d": 30, "e": 30}  # total 180, no exact 3-way split
    result = lpt_for_budget(times, 60)
    assert result.makespan <= 60
    assert lpt(times, result.count - 1).makespan > 60
    assert result.count == 4  # LPT on 3 shards gives 70


def test_budget_shorter_than_one_test_is_a_clear_error():
    with pytest.raises(ShardBudgetError, match=r"b alone takes 90\.0s.*budget of 60\.0s"):
        lpt_for_budget({"a": 10, "b": 90}, 60)


def test_budget_with_no_tests_gives_one_empty_shard():
    result = lpt_for_budget({}, 60)
    assert result.count == 1 and result.shards[0].tests == ()


@pytest.mark.parametrize("spec,expected", [("1/1", (1, 1)), ("3/4", (3, 4))])
def test_parse_shard_spec(spec, expected):
    assert parse_shard_spec(spec) == expected


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1/0", "a/b", "2", "1/2/3"])
def test_parse_shard_spec_rejects(spec):
    with pytest.raises(ValueError, match="shard"):
        parse_shard_spec(spec)
