"""Sharding quality, planning speed and change-based selection: ``python -m bench plan [--quick]``.

1. Sharding: 10,000 synthetic test files (2,000 with --quick), lognormal durations (median
   20 s, sigma 1.2: a heavy tail), seeded. For each shard count N, makespan / lower bound
   ``max(total / N, longest)`` (1.00 is optimal) for ours (`ci.selection.shard.lpt`) and what other
   splitters do, restated from their source in `bench._split_baselines`: pytest-split's
   ``least_duration`` (also LPT) and its default ``duration_based_chunks``, pytest-shard's hash,
   and two naive references (round-robin, least-loaded in registry order without sorting).
2. Planning time, best of 5, for `ci.selection.plan.plan` (selection + LPT) at N = 64.
3. The import index at 10,121 files (`bench._selection.build_repo`): building it cold (every
   file parsed) and warm (records from the content-hash cache), and a warm ``ci plan`` for a
   one-file change (in process, text and JSON output), against planning the same change
   without the graph. Target: warm ``ci plan`` under 0.5 s.
4. This repository: how many tests a one-file change selects, graph vs the hand-written
   ``depends_on`` the registry had before (median and max over every module, helper and
   conftest outside ``run_all_paths``).
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

from bench import _selection
from bench import _split_baselines as split
from bench.table import best_of, format_table
from ci.selection.plan import plan
from ci.registry import Registry, TestEntry, Tier, find_repo_root, load_registry
from ci.selection.shard import lower_bound, lpt

SEED = 20240601
TARGET_WARM_PLAN_S = 0.5


def synthetic(n: int, seed: int = SEED) -> dict[str, float]:
    rng = random.Random(seed)
    return {f"tests/area{i % 37}/test_{i:05d}.py": round(rng.lognormvariate(3.0, 1.2), 2) for i in range(n)}


def registry_of(times: dict[str, float]) -> Registry:
    tier = Tier("gpu_h100", "synthetic", ("self-hosted",), 1, "sm_90")
    tests = {p: TestEntry(p, ("gpu_h100",), t, "bench") for p, t in times.items()}
    return Registry("synthetic.yaml", {"gpu_h100": tier}, tests)


SPLITTERS = {
    "LPT (ours)": lambda times, n: [list(s.tests) for s in lpt(times, n).shards],
    "pytest-split least_duration": split.pytest_split_least_duration,
    "pytest-split duration_based_chunks (default)": split.pytest_split_duration_based_chunks,
    "pytest-shard (sha256 of id)": split.pytest_shard,
    "round-robin": split.round_robin,
    "greedy, registry order, no sort": split.greedy_unsorted,
}


def sharding(times: dict[str, float]) -> float:
    rows, worst = [], 0.0
    for n in (8, 16, 64, 256):
        bound = lower_bound(times, n)
        ratios = [split.makespan(times, f(times, n)) / bound for f in SPLITTERS.values()]
        worst = max(worst, ratios[0])
        rows.append([n, f"{bound:.0f}", *(f"{r:.4f}" if k < 2 else f"{r:.3f}" for k, r in enumerate(ratios))])
    print(format_table(["shards", "bound s", *SPLITTERS], rows,
                       f"makespan / lower bound, {len(times)} files, total {sum(times.values()) / 3600:.1f} h, "
                       f"longest {max(times.values()):.0f}s (1.00 = optimal)"))
    return worst


def planning_time(times: dict[str, float]) -> None:
    registry = registry_of(times)
    t_plan = best_of(lambda: plan(registry, "gpu_h100", shards=64), repeat=5, warmup=1)
    t_lpt = best_of(lambda: lpt(times, 64), repeat=5, warmup=1)
    t_rr = best_of(lambda: split.round_robin(times, 64), repeat=5, warmup=1)
    print(format_table(["step (N=64)", "ms", "x round-robin"], [
        ["round-robin split (baseline)", f"{t_rr * 1e3:.2f}", "1.0"],
        ["LPT only", f"{t_lpt * 1e3:.2f}", f"{t_lpt / t_rr:.1f}"],
        ["ci.selection.plan.plan (select + LPT)", f"{t_plan * 1e3:.2f}", f"{t_plan / t_rr:.1f}"],
    ], "planning time, best of 5"))


def import_index(quick: bool) -> float:
    modules, tests = (200, 1_800) if quick else (1_000, 9_000)
    repeat = 3 if quick else 5
    with tempfile.TemporaryDirectory(prefix="bench-graph-") as tmp:
        root = Path(tmp)
        _selection.build_repo(root, modules, tests)
        registry = load_registry(root / "registry.yaml")
        changed = (root / "changed.txt").read_text().split()
        files = len(_selection.cold_index(root, registry).index.files())
        timings = {
            "plan without the graph (baseline)": best_of(lambda: plan(registry, "cpu", changed), repeat),
            "index + graph, cold (parse all)": best_of(lambda: _selection.cold_index(root, registry), repeat),
        }
        _selection.plan_cli(root)  # leaves a warm cache
        timings["index + graph, warm (cache)"] = best_of(
            lambda: _selection.TestDependencies(root, registry), repeat)
        timings["ci plan, warm, text"] = best_of(lambda: _selection.plan_cli(root), repeat)
        timings["ci plan, warm, json"] = best_of(lambda: _selection.plan_cli(root, "json"), repeat)
    base = timings["plan without the graph (baseline)"]
    print(format_table(["step", "ms", "x baseline"],
                       [[name, f"{t * 1e3:.1f}", f"{t / base:.1f}"] for name, t in timings.items()],
                       f"import graph of {files} files, {tests} registered tests, one changed module, "
                       f"best of {repeat}"))
    return timings["ci plan, warm, text"]


def this_repository() -> None:
    sizes = _selection.single_file_selection(find_repo_root())
    graph, hand = _selection.summary(sizes["graph"]), _selection.summary(sizes["hand"])
    missed = sum(1 for m in sizes["missed"] if m)
    print(format_table(["selection rule", "median tests", "max tests"], [
        ["hand-written depends_on (before)", f"{hand[0]:g}", hand[1]],
        ["import graph + trimmed depends_on", f"{graph[0]:g}", graph[1]],
    ], f"tests selected by a one-file change, over {len(sizes['graph'])} modules/helpers/conftests of this "
       f"repository ({len(_selection.HAND_WRITTEN)} tests)"))
    print(f"changes where the graph selects a test the hand-written lists did not: {missed} "
          f"of {len(sizes['graph'])} ({sum(sizes['missed'])} tests in all)")


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    times = synthetic(2_000 if quick else 10_000)
    worst = sharding(times)
    print()
    planning_time(times)
    print()
    warm = import_index(quick)
    print()
    this_repository()
    ok_lpt, ok_plan = worst <= 1.02, warm <= TARGET_WARM_PLAN_S
    print(f"\ntarget LPT within 2% of the bound: worst {100 * (worst - 1):.2f}% -> {'OK' if ok_lpt else 'MISSED'}")
    print(f"target warm ci plan under {TARGET_WARM_PLAN_S:.1f} s: {warm:.3f} s -> {'OK' if ok_plan else 'MISSED'}")
    return 0 if ok_lpt and ok_plan else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
