"""Longest-processing-time-first (LPT) sharding: split weighted items across N shards.

Contract: every item lands in exactly one shard; the result depends only on the input (ties are
broken by item name, then by shard index, never by dict or hash order). Times are seconds.

LPT sorts items by descending time and puts each on the currently least-loaded shard (a heap).
Its makespan is at most ``4/3 - 1/(3N)`` times the optimum and, with many small items, sits very
close to the lower bound ``max(total / N, longest)`` that `ShardPlan.lower_bound` reports.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Mapping

# The most shards a command line may ask for: a GitHub Actions matrix holds at most 256 jobs, and
# each shard is one (a larger count only allocates a plan that nothing could run).
MAX_SHARDS = 256


@dataclass(frozen=True)
class Shard:
    """One shard: ``index`` is 1-based (as in ``--shard i/N``); ``tests`` in scheduling order."""

    index: int
    tests: tuple[str, ...]
    load: float


@dataclass(frozen=True)
class ShardPlan:
    """``shards[i].index == i + 1``; ``makespan`` is the largest load, in seconds."""

    shards: tuple[Shard, ...]
    makespan: float
    lower_bound: float

    @property
    def count(self) -> int:
        return len(self.shards)


class ShardBudgetError(ValueError):
    """An item alone is longer than the per-shard budget, so no shard count can meet it."""


def lower_bound(times: Mapping[str, float], n: int) -> float:
    """``max(total / n, longest)``: no split of ``times`` into ``n`` shards can beat it."""
    _check_n(n)
    if not times:
        return 0.0
    return max(sum(times.values()) / n, max(times.values()))


def lpt(times: Mapping[str, float], n: int) -> ShardPlan:
    """Split ``times`` (name -> seconds, each >= 0) into ``n`` shards, longest first.

    Shards may be empty when ``n`` exceeds the number of items (a CI matrix keeps its shape).
    """
    _check_n(n)
    for name, t in times.items():
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0):
            raise ValueError(f"time for {name!r} must be a finite number >= 0 seconds, got {t!r}")
    order = sorted(times, key=lambda name: (-times[name], name))
    heap: list[tuple[float, int]] = [(0.0, i) for i in range(n)]  # (load, shard index): ties -> lowest index
    members: list[list[str]] = [[] for _ in range(n)]
    loads = [0.0] * n
    for name in order:
        load, i = heapq.heappop(heap)
        members[i].append(name)
        loads[i] = load + times[name]
        heapq.heappush(heap, (loads[i], i))
    shards = tuple(Shard(i + 1, tuple(members[i]), loads[i]) for i in range(n))
    return ShardPlan(shards, max(loads), lower_bound(times, n))


def lpt_for_budget(times: Mapping[str, float], budget: float) -> ShardPlan:
    """The LPT plan with the smallest shard count whose makespan is <= ``budget`` seconds.

    Raises `ShardBudgetError` naming the item when one item alone exceeds the budget (no count
    fits; raise the budget or split the file). Empty input gives one empty shard.
    """
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(f"shard budget must be a positive number of seconds, got {budget!r}")
    if not times:
        return lpt(times, 1)
    longest = max(times, key=lambda name: (times[name], name))
    if times[longest] > budget:
        raise ShardBudgetError(
            f"{longest} alone takes {times[longest]:.1f}s, more than the shard budget of {budget:.1f}s; "
            f"raise --shard-budget or split the file")
    # LPT's makespan is not monotone in n in theory, so scan upward from the bound instead of bisecting.
    n = max(1, math.ceil(sum(times.values()) / budget - 1e-9))
    while True:
        result = lpt(times, n)
        if result.makespan <= budget + 1e-9:
            return result
        n += 1  # terminates: with n == len(times) every shard holds one item <= budget


def _check_n(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"shard count must be an integer >= 1, got {n!r}")


def parse_shard_spec(spec: str) -> tuple[int, int]:
    """``"2/4"`` -> ``(2, 4)``; 1-based, ASCII digits, N at most `MAX_SHARDS`. Raises ValueError
    on anything else."""
    parts = [p.strip() for p in spec.split("/")]
    if len(parts) != 2 or not all(p.isascii() and p.isdigit() for p in parts):
        raise ValueError(f"shard must look like i/N in ASCII digits (for example 2/4), got {spec!r}")
    i, n = (int(p) if len(p) <= 9 else MAX_SHARDS + 1 for p in parts)
    if not 1 <= i <= n <= MAX_SHARDS:
        raise ValueError(f"shard {spec!r} is out of range: need 1 <= i <= N <= {MAX_SHARDS}")
    return i, n
