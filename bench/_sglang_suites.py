"""`ci import-suites` on SGLang's real tree against SGLang's own per-commit selection (for
`bench.adoption`).

The oracle is SGLang's code at that commit: its ``python/sglang/test/ci/ci_register.py`` (loaded
from the file; it imports only the standard library) collects the ``register_*_ci`` calls of the
files its ``test/run_suite.py`` would glob, and its selection rule (``filter_tests``: backend,
suite, ``nightly`` false, not disabled) is applied to every suite of ``PER_COMMIT_SUITES``, read
from ``run_suite.py`` with `ast`. Ours: ``fp4kv-ci import-suites`` with `TIER_MAP` into a registry
with `TIERS`; a tier's files are its active entries.
"""

from __future__ import annotations

import ast
import fnmatch
import glob
import importlib.util
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

from ci.registry import Status, load_registry

# GPU shape in the suite name -> tier (SGLang's runner names), CPU suites -> cpu. The globs also match
# SGLang's nightly-/weekly- suites of those shapes: the import refuses those on per-commit tiers.
TIER_MAP = ("*-1-gpu-small=gpu_1_small", "*-1-gpu-large=gpu_1_large", "*-2-gpu-large=gpu_2_large",
            "*-4-gpu-h100=gpu_4_h100", "*-4-gpu-b200=gpu_4_b200", "*-4-gpu-gb300=gpu_4_gb300",
            "*-8-gpu-h20=gpu_8_h20", "*-8-gpu-h200=gpu_8_h200", "*-8-gpu-b200=gpu_8_b200",
            "*-8-gpu-b300=gpu_8_b300", "base-*-test-cpu=cpu")
TIERS = {  # name: (gpu_count, arch, schedule)
    "cpu": (0, "cpu", "per-commit"), "gpu_1_small": (1, "sm_90", "per-commit"),
    "gpu_1_large": (1, "sm_90", "per-commit"), "gpu_2_large": (2, "sm_90", "per-commit"),
    "gpu_4_h100": (4, "sm_90", "per-commit"), "gpu_4_b200": (4, "sm_100", "per-commit"),
    "gpu_4_gb300": (4, "sm_103", "per-commit"), "gpu_8_h20": (8, "sm_90", "per-commit"),
    "gpu_8_h200": (8, "sm_90", "per-commit"), "gpu_8_b200": (8, "sm_100", "per-commit"),
    "gpu_8_b300": (8, "sm_103", "per-commit"),
}


def _registry_text() -> str:
    lines = ["version: 1", "project:", "  source_roots: [python]", "  test_roots: [test]",
             "  test_patterns: [\"test_*.py\"]", "  unique_basenames: false", "tiers:"]
    for name, (gpus, arch, schedule) in TIERS.items():
        lines += [f"  {name}:", f"    description: {name}", f"    runner_labels: [{name}]", f"    gpu_count: {gpus}",
                  f"    arch: {arch}"] + ([f"    schedule: {schedule}"] if schedule != "per-commit" else [])
    return "\n".join(lines + ["tests: {}"]) + "\n"


def _per_commit_suites(run_suite: Path) -> dict[str, list[str]]:
    """``PER_COMMIT_SUITES`` of SGLang's run_suite.py: backend name (lower case) -> suites."""
    for node in ast.parse(run_suite.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PER_COMMIT_SUITES"
                                                for t in node.targets) and isinstance(node.value, ast.Dict):
            return {key.attr.lower(): [e.value for e in value.elts]  # type: ignore[attr-defined]
                    for key, value in zip(node.value.keys, node.value.values) if isinstance(key, ast.Attribute)}
    raise ValueError(f"{run_suite}: no PER_COMMIT_SUITES dict")


def sglang_selection(tree: Path) -> dict[tuple[str, str], set[str]]:
    """(backend, suite) -> the repo-relative files SGLang's own CI runs for that per-commit suite."""
    spec = importlib.util.spec_from_file_location("_sglang_ci_register", tree / "python/sglang/test/ci/ci_register.py")
    register = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(register)  # type: ignore[union-attr]
    test = tree / "test"
    files = [f for f in glob.glob(os.path.join(test, "registered", "**", "*.py"), recursive=True)
             if not f.endswith(("/conftest.py", "/__init__.py", "/cpu/utils.py", "/run_tests.py"))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "No CI registry found in ...": SGLang's own sanity check, off
        registered = register.collect_tests(files, sanity_check=False)
    out: dict[tuple[str, str], set[str]] = {}
    for backend, suites in _per_commit_suites(test / "run_suite.py").items():
        for suite in suites:
            out[(backend, suite)] = {os.path.relpath(t.filename, tree) for t in registered
                                     if t.backend.name.lower() == backend and t.effective_suite == suite
                                     and not t.nightly and t.disabled is None}
    return out


def compare(tree: Path) -> tuple[list[list[object]], float, str]:
    """Rows (tier, SGLang suites mapped, SGLang's files, ours, only SGLang's, only ours), the
    import's wall time, and its summary line."""
    (tree / "registry.yaml").write_text(_registry_text())
    argv = [sys.executable, "-m", "ci", "--root", str(tree), "import-suites", "--owner", "@sglang",
            "--output", str(tree / "imported.yaml"), "--force"]
    for pair in TIER_MAP:
        argv += ["--tier-map", pair]
    start = time.perf_counter()
    run = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(f"import-suites failed: {run.stderr[-2000:]}")
    tests = load_registry(tree / "imported.yaml").tests
    selection = sglang_selection(tree)
    rows: list[list[object]] = []
    for tier, (_, arch, schedule) in TIERS.items():
        if schedule != "per-commit":
            continue
        backend = "cpu" if arch == "cpu" else "cuda"
        suites = [s for (b, s) in selection if b == backend and any(
            fnmatch.fnmatchcase(s, pattern) for pattern, _, target in (p.partition("=") for p in TIER_MAP)
            if target == tier)]
        theirs = set().union(*(selection[(backend, s)] for s in suites))
        ours = {p for p, e in tests.items() if e.status is Status.ACTIVE and tier in e.tiers}
        rows.append([tier, len(suites), len(theirs), len(ours), len(theirs - ours), len(ours - theirs)])
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    return rows, seconds, summary


__all__ = ["TIER_MAP", "TIERS", "compare", "sglang_selection"]
