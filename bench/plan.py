"""Sharding quality and planning speed: LPT vs round-robin, hash split and unsorted greedy.

``python -m bench plan [--quick]``. Synthetic suite: 10,000 test files (2,000 with --quick) whose
durations are lognormal (median 20 s, sigma 1.2: a heavy tail of multi-minute files), seeded.
For each shard count N the table gives makespan / lower bound, where the bound is
``max(total / N, longest)``; 1.00 is optimal. Baselines measured in the same run:
- round-robin: file i goes to shard i mod N, in registry order;
- hash: sha256(file path) mod N, as pytest-shard splits node ids;
- greedy: least-loaded shard in registry order without sorting (pytest-split's least_duration
  walks files in collection order the same way).
Planning time is the best of 5 for the full `ci.plan.plan` (selection + LPT) at N = 64.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import sys

from bench.table import best_of, format_table
from ci.plan import plan
from ci.registry import Registry, TestEntry, Tier
from ci.shard import lower_bound, lpt

SEED = 20240601


def synthetic(n: int, seed: int = SEED) -> dict[str, float]:
    rng = random.Random(seed)
    return {f"tests/area{i % 37}/test_{i:05d}.py": round(rng.lognormvariate(3.0, 1.2), 2) for i in range(n)}


def round_robin(times: dict[str, float], n: int) -> float:
    loads = [0.0] * n
    for i, t in enumerate(times.values()):
        loads[i % n] += t
    return max(loads)


def hash_split(times: dict[str, float], n: int) -> float:
    loads = [0.0] * n
    for name, t in times.items():
        loads[int(hashlib.sha256(name.encode()).hexdigest(), 16) % n] += t
    return max(loads)


def greedy_unsorted(times: dict[str, float], n: int) -> float:
    heap = [(0.0, i) for i in range(n)]
    for t in times.values():
        load, i = heapq.heappop(heap)
        heapq.heappush(heap, (load + t, i))
    return max(load for load, _ in heap)


def registry_of(times: dict[str, float]) -> Registry:
    tier = Tier("gpu_h100", "synthetic", ("self-hosted",), 1, "sm_90")
    tests = {p: TestEntry(p, ("gpu_h100",), t, "bench") for p, t in times.items()}
    return Registry("synthetic.yaml", {"gpu_h100": tier}, tests)


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    count = 2_000 if quick else 10_000
    times = synthetic(count)
    registry = registry_of(times)
    total = sum(times.values())
    rows = []
    worst_lpt = 0.0
    for n in (8, 16, 64, 256):
        bound = lower_bound(times, n)
        lpt_ratio = lpt(times, n).makespan / bound
        worst_lpt = max(worst_lpt, lpt_ratio)
        rows.append([n, f"{bound:.0f}", f"{lpt_ratio:.4f}", f"{greedy_unsorted(times, n) / bound:.3f}",
                     f"{round_robin(times, n) / bound:.3f}", f"{hash_split(times, n) / bound:.3f}"])
    print(format_table(["shards", "bound s", "LPT", "greedy", "round-robin", "hash"], rows,
                       f"makespan / lower bound, {count} files, total {total / 3600:.1f} h, "
                       f"longest {max(times.values()):.0f}s (1.00 = optimal)"))
    print()
    t_plan = best_of(lambda: plan(registry, "gpu_h100", shards=64), repeat=5, warmup=1)
    t_lpt = best_of(lambda: lpt(times, 64), repeat=5, warmup=1)
    t_rr = best_of(lambda: round_robin(times, 64), repeat=5, warmup=1)
    print(format_table(["step (N=64)", "ms", "x round-robin"], [
        ["round-robin split (baseline)", f"{t_rr * 1e3:.2f}", "1.0"],
        ["LPT only", f"{t_lpt * 1e3:.2f}", f"{t_lpt / t_rr:.1f}"],
        ["ci.plan.plan (select + LPT)", f"{t_plan * 1e3:.2f}", f"{t_plan / t_rr:.1f}"],
    ], "planning time, best of 5"))
    verdict = "OK" if worst_lpt <= 1.02 else "MISSED"
    print(f"\ntarget LPT within 2% of the bound: worst {100 * (worst_lpt - 1):.2f}% -> {verdict}")
    return 0 if worst_lpt <= 1.02 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
