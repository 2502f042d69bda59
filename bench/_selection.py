"""Change-based selection for ``python -m bench plan``: the import index at 10,000 files, and the
selection size for one-file changes on this repository against the hand-written ``depends_on``.

Synthetic repository (`build_repo`, seeded): package ``app`` of ``modules`` modules in 20
subpackages, each importing up to 3 earlier ones; ``tests`` test files in 100 folders, each with a
conftest, importing 1-3 modules at module level and one inside the test function; every test
registered. 1,000 modules + 9,000 tests + 100 conftests + 21 package files = 10,121 files.
"""

from __future__ import annotations

import contextlib
import io
import random
import statistics
from pathlib import Path

from ci.commands import plan as plan_cmd
from ci.selection.deps import TestDependencies
from ci.imports.cache import default_cache_path
from ci.selection.plan import plan
from ci.registry import Registry, TestEntry, load_registry, run_all_rule

SEED = 20260501

# The registry's depends_on before the import graph replaced them (commit 373968b): the
# baseline for the selection-size table.
HAND_WRITTEN = {
    "tests/ci/test_readme.py": ("README.md", ".ci/run", "ci/bootstrap.py"),
    "tests/quant/test_kvfp4_quant_dequant.py": ("fp4kv/quant", "fp4kv/__init__.py"),
    "tests/quant/test_nvfp4.py": ("fp4kv/quant",),
    "tests/quant/test_triton_kernels.py": ("fp4kv/quant",),
    **{f"tests/mem_cache/test_{name}.py": ("fp4kv/mem_cache", "fp4kv/quant")
       for name in ("memory_pool", "mla_kv_pool", "hybrid_kv_pool", "kv_allocator", "host_kv_mirror")},
    "tests/ci/test_registry.py": ("ci",),
    "tests/ci/test_plugin.py": ("ci",),
    "tests/ci/test_lint.py": ("ci", "fp4kv", "tools", "bench", "tests"),
    "tests/ci/test_import_check.py": ("ci",),
    "tests/ci/test_registry_fastpath.py": ("ci", "bench/lint.py"),
    "tests/ci/test_shard.py": ("ci/selection/shard.py",),
    "tests/ci/test_plan.py": ("ci/selection/plan.py", "ci/selection/shard.py", "ci/selection/changes.py", "ci/commands/plan.py"),
    "tests/ci/test_run.py": ("ci/running/runner.py", "ci/results/junit.py", "ci/results/summary.py", "ci/commands/run.py",
                             "ci/pytest_plugin.py"),
    "tests/ci/test_durations.py": ("ci/results/durations.py", "ci/results/junit.py", "ci/commands/durations.py"),
    "tests/ci/test_workflows.py": (".github/workflows", "ci/commands", "ci/__main__.py"),
    "tests/ci/test_job.py": ("ci/commands", "ci/lint.py", "ci/running/runner.py", "ci/pytest_plugin.py"),
    **{f"tests/rerun/test_rerun_{name}.py": ("tools/rerun",)
       for name in ("commands", "handler", "github", "server", "load", "workflows")},
}


def build_repo(root: Path, modules: int = 1_000, tests: int = 9_000) -> None:
    rng = random.Random(SEED)
    (root / "app").mkdir(parents=True)
    (root / "app" / "__init__.py").write_text('"""synthetic"""\n')
    for p in range(20):
        (root / f"app/p{p}").mkdir()
        (root / f"app/p{p}/__init__.py").write_text("")
    for i in range(modules):
        uses = rng.sample(range(i), min(i, rng.randint(0, 3)))
        lines = ["import os", *(f"from app.p{d % 20} import m{d}" for d in uses), "", f"def f{i}():", "    return 1", ""]
        (root / f"app/p{i % 20}/m{i}.py").write_text("\n".join(lines))
    entries = []
    for t in range(tests):
        folder = root / f"tests/area{t % 100}"
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / "conftest.py").exists():
            (folder / "conftest.py").write_text("import pytest\n")
        used = rng.sample(range(modules), rng.randint(1, 3))
        body = "".join(f"from app.p{m % 20}.m{m} import f{m}\n" for m in used[:-1])
        last = used[-1]
        body += f"\n\ndef test_it():\n    from app.p{last % 20} import m{last}\n    assert m{last}.f{last}() == 1\n"
        (folder / f"test_t{t}.py").write_text(body)
        entries.append(f"  tests/area{t % 100}/test_t{t}.py:\n    tiers: [cpu]\n    est_time: {1 + t % 30}\n"
                       f"    owner: me\n    status: active\n")
    (root / "registry.yaml").write_text(
        "version: 1\nrun_all_paths: [registry.yaml]\ntiers:\n  cpu:\n    description: cpu\n"
        "    runner_labels: [x]\n    gpu_count: 0\n    arch: cpu\ntests:\n" + "".join(entries))
    (root / "changed.txt").write_text(f"app/p3/m{modules // 2 + 3}.py\n")


def plan_cli(root: Path, fmt: str = "text") -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        plan_cmd.main(["--registry", str(root / "registry.yaml"), "--tier", "cpu",
                       "--changed-files", str(root / "changed.txt"), "--format", fmt])


def cold_index(root: Path, registry: Registry) -> TestDependencies:
    cache = default_cache_path(root)
    if cache.exists():
        cache.unlink()
    return TestDependencies(root, registry)


def single_file_selection(root: Path) -> dict[str, list[int]]:
    """For every first-party module, helper and conftest outside ``run_all_paths``: how many of the
    hand-written baseline's tests a change to it selects, by graph (today's registry) and by the
    hand-written ``depends_on`` (plan's rules without the graph). Also how often the hand-written
    lists missed a test the graph selects."""
    registry = load_registry(root / "registry.yaml")
    deps = TestDependencies(root, registry, cache=None)
    old_tests = {p: TestEntry(**{**vars(e), "depends_on": HAND_WRITTEN.get(p, ())})
                 for p, e in registry.tests.items() if p in HAND_WRITTEN}
    old = Registry(registry.path, registry.tiers, old_tests, registry.run_all_paths)
    files = {m.rel for m in deps.index.files()} | {c for t in registry.tests for c in deps.conftests(t)}
    changes = sorted(f for f in files if f.endswith(".py") and f not in registry.tests
                     and run_all_rule(registry.run_all_paths, f) is None)
    graph_sizes, hand_sizes, missed = [], [], []
    for rel in changes:
        impact = deps.impact([rel])
        by_graph = {t.path for tier in registry.tiers
                    for t in plan(registry, tier, [rel], impact=impact).selected if t.path in HAND_WRITTEN}
        by_hand = {t.path for tier in old.tiers for t in plan(old, tier, [rel]).selected}
        graph_sizes.append(len(by_graph))
        hand_sizes.append(len(by_hand))
        missed.append(len(by_graph - by_hand))
    return {"graph": graph_sizes, "hand": hand_sizes, "missed": missed}


def summary(sizes: list[int]) -> tuple[float, int]:
    return statistics.median(sizes), max(sizes)


__all__ = ["HAND_WRITTEN", "build_repo", "cold_index", "plan_cli", "single_file_selection", "summary"]
