"""LPT sharding: hand-made cases, brute-force optimum on tiny inputs, partition property, budget."""

from __future__ import annotations

import hashlib
import itertools
import random

import pytest

from bench import _split_baselines as baselines
from ci.selection.shard import ShardBudgetError, lower_bound, lpt, lpt_for_budget, parse_shard_spec


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


@pytest.mark.parametrize("spec", ["0/2", "3/2", "1/0", "a/b", "2", "1/2/3", "²/4", "1/٣", "1/257", "1/1000000000000"])
def test_parse_shard_spec_rejects(spec):
    with pytest.raises(ValueError, match="shard"):
        parse_shard_spec(spec)


# -- the other splitters, as bench/_split_baselines.py restates them (issue 14) ---------------------

def test_pytest_split_least_duration_is_lpt_with_the_same_choices():
    """pytest-split's least_duration sorts longest first: it is LPT, and it breaks ties as ours does."""
    for seed in range(40):
        rng = random.Random(seed)
        times = {f"t{rng.randrange(10_000):04d}_{i}": float(rng.choice([1, 2, 2, 3, 5, 8, rng.randint(1, 50)]))
                 for i in range(rng.randint(1, 30))}
        n = rng.randint(1, 6)
        ours = [set(s.tests) for s in lpt(times, n).shards]
        theirs = [set(g) for g in baselines.pytest_split_least_duration(times, n)]
        assert ours == theirs, (seed, times, n)


def test_pytest_split_least_duration_keeps_collection_order_within_a_group():
    # longest first: a -> 1, b -> 2, m -> 2 (4 < 5), z -> 1 (5 = 5: the lower group index)
    times = {"z": 1.0, "a": 5.0, "m": 1.0, "b": 4.0}
    assert baselines.pytest_split_least_duration(times, 2) == [["z", "a"], ["m", "b"]]


def test_pytest_split_duration_based_chunks_cuts_contiguous_runs_at_total_over_n():
    assert baselines.pytest_split_duration_based_chunks({"a": 1, "b": 1, "c": 1, "d": 1}, 2) == [["a", "b"], ["c", "d"]]
    # the first group reaches 3 = 6/2 with "a" alone; the rest is one contiguous run
    assert baselines.pytest_split_duration_based_chunks({"a": 3, "b": 1, "c": 1, "d": 1}, 2) == [["a"], ["b", "c", "d"]]
    # not balanced by design: 5 >= 4.5 closes group 1 late
    assert baselines.pytest_split_duration_based_chunks({"a": 4, "b": 1, "c": 4}, 2) == [["a", "b"], ["c"]]
    # items left over after the last boundary stay in the last group (upstream would index past it)
    assert baselines.pytest_split_duration_based_chunks({"a": 2, "b": 2, "c": 0.0}, 2) == [["a"], ["b", "c"]]


def test_pytest_split_gives_unknown_items_the_mean_of_the_collected_ones():
    assert baselines.with_defaults(["a", "b", "c"], {"a": 2.0, "b": 4.0, "gone": 100.0}) == {"a": 2.0, "b": 4.0, "c": 3.0}
    assert baselines.with_defaults(["a"], {}) == {"a": 1.0}


def test_pytest_shard_hashes_the_id_little_endian():
    ids = [f"tests/test_{i}.py::test_{i}" for i in range(200)]
    groups = baselines.pytest_shard(dict.fromkeys(ids, 1.0), 7)
    for g, members in enumerate(groups):
        for item in members:  # the digest's bytes reversed, read big-endian: the same integer
            assert int(bytes(reversed(hashlib.sha256(item.encode()).digest())).hex(), 16) % 7 == g
    assert sorted(i for group in groups for i in group) == sorted(ids)
