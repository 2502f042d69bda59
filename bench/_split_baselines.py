"""What other test splitters do, restated from their source for the sharding benchmark.

Read from the projects' own code (pytest-split 0.11.0 ``src/pytest_split/algorithms.py``,
pytest-shard 0.1.2 ``pytest_shard/pytest_shard.py``) and written again here, not copied. Each
function takes ``times`` (test id -> seconds, in collection order) and a shard count and returns
the shards' lists of test ids. Both tools split test *items*; the benchmark feeds them files.

* `pytest_split_least_duration`: pytest-split's ``least_duration``. Items sorted by id, then
  (stable) by duration, longest first; each goes to the group with the smallest sum, ties to the
  lowest group index. That is LPT: `ci.selection.shard.lpt` makes the same choices.
* `pytest_split_duration_based_chunks`: pytest-split's default ``duration_based_chunks``.
  Contiguous runs in collection order: a group takes items until its sum reaches total / N,
  then the next group starts. (Upstream would index past the last group if rounding left
  items over; here they stay in the last group.)
* pytest-split gives an item without a recorded duration the mean of the recorded durations
  of the collected items (1 s if none): `with_defaults`.
* `pytest_shard`: pytest-shard's split: ``sha256(test id)``, digest read as a little-endian
  integer, modulo N. No durations at all.
* `round_robin` and `greedy_unsorted` are naive references (item i to shard i mod N; least
  loaded shard in collection order without sorting), neither is any tool's algorithm.
"""

from __future__ import annotations

import hashlib
import heapq
from typing import Mapping, Sequence


def with_defaults(ids: Sequence[str], durations: Mapping[str, float]) -> dict[str, float]:
    """pytest-split's durations for ``ids``: recorded, else the mean of the recorded ones."""
    known = [durations[i] for i in ids if i in durations]
    mean = sum(known) / len(known) if known else 1.0
    return {i: durations.get(i, mean) for i in ids}


def pytest_split_least_duration(times: Mapping[str, float], n: int) -> list[list[str]]:
    order = sorted(sorted(times), key=lambda i: times[i], reverse=True)  # stable: ties keep id order
    heap = [(0.0, g) for g in range(n)]
    groups: list[list[str]] = [[] for _ in range(n)]
    for item in order:
        load, g = heapq.heappop(heap)
        groups[g].append(item)
        heapq.heappush(heap, (load + times[item], g))
    position = {item: k for k, item in enumerate(times)}
    return [sorted(group, key=position.__getitem__) for group in groups]  # collection order kept


def pytest_split_duration_based_chunks(times: Mapping[str, float], n: int) -> list[list[str]]:
    per_group = sum(times.values()) / n
    groups: list[list[str]] = [[] for _ in range(n)]
    loads = [0.0] * n
    g = 0
    for item, t in times.items():
        if loads[g] >= per_group and g < n - 1:
            g += 1
        groups[g].append(item)
        loads[g] += t
    return groups


def pytest_shard(times: Mapping[str, float], n: int) -> list[list[str]]:
    groups: list[list[str]] = [[] for _ in range(n)]
    for item in times:
        groups[int.from_bytes(hashlib.sha256(item.encode()).digest(), "little") % n].append(item)
    return groups


def round_robin(times: Mapping[str, float], n: int) -> list[list[str]]:
    groups: list[list[str]] = [[] for _ in range(n)]
    for k, item in enumerate(times):
        groups[k % n].append(item)
    return groups


def greedy_unsorted(times: Mapping[str, float], n: int) -> list[list[str]]:
    heap = [(0.0, g) for g in range(n)]
    groups: list[list[str]] = [[] for _ in range(n)]
    for item, t in times.items():
        load, g = heapq.heappop(heap)
        groups[g].append(item)
        heapq.heappush(heap, (load + t, g))
    return groups


def makespan(times: Mapping[str, float], groups: list[list[str]]) -> float:
    return max(sum(times[i] for i in group) for group in groups)


__all__ = ["greedy_unsorted", "makespan", "pytest_shard", "pytest_split_duration_based_chunks",
           "pytest_split_least_duration", "round_robin", "with_defaults"]
