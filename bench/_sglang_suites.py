"""`ci import-suites` on SGLang's real tree against SGLang's own per-commit selection (for
`bench.adoption`).

The oracle is SGLang's code at that commit (`bench/_sglang_oracle.py`, run in its own
interpreter): its ``test/run_suite.py`` picking each suite of ``PER_COMMIT_SUITES`` through its own
globs, ``collect_tests`` and ``filter_tests``. SGLang's default pull-request run is those suites
less the ``extra-*`` ones, which its run_suite.py says are label-gated ("extra-a / extra-b:
label-gated PR opt-in suites in pr-test-extra.yml"); that statement, not our workflow reading, is
the oracle's. Ours: ``fp4kv-ci import-suites`` with `TIER_MAP` into a registry with `TIERS`; a
tier's files are its active entries.

GPU time of a pull request: the sum over per-commit GPU tiers of est_time x gpu_count of every
active entry on the tier; SGLang's: the sum over its default CUDA suites of est_time x the GPU
count in the suite's name (``-4-gpu-``). Both are what the registrations say, not measured runs.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ci.registry import Status, load_registry

# GPU shape in the suite name -> tier (SGLang's runner names), CPU suites -> cpu. The globs also match
# SGLang's nightly-/weekly- suites of those shapes: the import refuses those on per-commit tiers.
TIER_MAP = ("*-1-gpu-small=gpu_1_small", "*-1-gpu-large=gpu_1_large", "*-2-gpu-large=gpu_2_large",
            "*-4-gpu-h100=gpu_4_h100", "*-4-gpu-b200=gpu_4_b200", "*-4-gpu-gb300=gpu_4_gb300",
            "*-8-gpu-h20=gpu_8_h20", "*-8-gpu-h200=gpu_8_h200", "*-8-gpu-b200=gpu_8_b200",
            "*-8-gpu-b300=gpu_8_b300", "*-1-gpu-b200=gpu_1_b200", "*-4-gpu-gb200=gpu_4_gb200", "base-*-test-cpu=cpu",
            "stage-*-test-cpu=cpu")
TIERS = {  # name: (gpu_count, arch, schedule)
    "cpu": (0, "cpu", "per-commit"), "gpu_1_small": (1, "sm_90", "per-commit"),
    "gpu_1_large": (1, "sm_90", "per-commit"), "gpu_2_large": (2, "sm_90", "per-commit"),
    "gpu_4_h100": (4, "sm_90", "per-commit"), "gpu_4_b200": (4, "sm_100", "per-commit"),
    "gpu_4_gb300": (4, "sm_103", "per-commit"), "gpu_8_h20": (8, "sm_90", "per-commit"),
    "gpu_8_h200": (8, "sm_90", "per-commit"), "gpu_8_b200": (8, "sm_100", "per-commit"),
    "gpu_8_b300": (8, "sm_103", "per-commit"), "gpu_1_b200": (1, "sm_100", "per-commit"),
    "gpu_4_gb200": (4, "sm_100", "per-commit"),
}
LABEL_GATED_PREFIX = "extra-"  # SGLang's run_suite.py: "extra-a / extra-b: label-gated PR opt-in suites"
RUNS = (  # (label, extra import-suites flags)
    ("default", ()),
    ("--include-label-gated", ("--include-label-gated",)),
    ("as before (whole test root, label-gated mapped)", ("--registered-in", "test", "--include-label-gated")),
)
_REGISTERS = re.compile(rb"^register_\w+_ci\(", re.M)


def _registry_text() -> str:
    lines = ["version: 1", "project:", "  source_roots: [python]", "  test_roots: [test]",
             "  test_patterns: [\"test_*.py\"]", "  unique_basenames: false", "tiers:"]
    for name, (gpus, arch, schedule) in TIERS.items():
        lines += [f"  {name}:", f"    description: {name}", f"    runner_labels: [{name}]", f"    gpu_count: {gpus}",
                  f"    arch: {arch}"] + ([f"    schedule: {schedule}"] if schedule != "per-commit" else [])
    return "\n".join(lines + ["tests: {}"]) + "\n"


@dataclass(frozen=True)
class Selection:
    """SGLang's own: the files its run_suite.py globbed, and (hw, suite) -> {file: est_time}."""

    globbed: frozenset[str]
    suites: dict[tuple[str, str], dict[str, float]]

    def default_pr(self, hw: str) -> dict[str, dict[str, float]]:
        """suite -> {file: est_time} of the suites a default PR runs on ``hw`` (no ``extra-*``)."""
        return {s: f for (h, s), f in self.suites.items() if h == hw and not s.startswith(LABEL_GATED_PREFIX)}


def sglang_selection(tree: Path) -> Selection:
    """What SGLang's own run_suite.py at ``tree`` runs for each per-commit suite (`bench._sglang_oracle`)."""
    run = subprocess.run([sys.executable, str(Path(__file__).with_name("_sglang_oracle.py")), str(tree)],
                         capture_output=True, text=True, timeout=600)
    if run.returncode != 0:
        raise RuntimeError(f"SGLang's run_suite.py failed: {run.stderr[-2000:]}")
    data = json.loads(run.stdout)
    suites = {tuple(key.split(" ", 1)): {p: float(e) for p, e in files} for key, files in data["suites"].items()}
    return Selection(frozenset(data["globbed"]), suites)  # type: ignore[arg-type]


def _gpus(suite: str) -> int:
    match = re.search(r"-(\d+)-gpu", suite)
    return int(match.group(1)) if match else 0


def _import(tree: Path, flags: tuple[str, ...]) -> tuple[dict, float, list[str]]:
    argv = [sys.executable, "-m", "ci", "--root", str(tree), "import-suites", "--owner", "@sglang",
            "--output", str(tree / "imported.yaml"), "--force", *flags]
    for pair in TIER_MAP:
        argv += ["--tier-map", pair]
    start = time.perf_counter()
    run = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    seconds = time.perf_counter() - start
    if run.returncode != 0:
        raise RuntimeError(f"import-suites failed: {run.stderr[-2000:]}")
    lines = run.stdout.strip().splitlines()
    summary = [line for i, line in enumerate(lines) if i > 0]  # after "wrote ...": the closing summary
    return load_registry(tree / "imported.yaml").tests, seconds, [lines[0]] + summary


def _gpu_seconds(tests: dict) -> float:
    return sum(e.est_time * TIERS[t][0] for e in tests.values() if e.status is Status.ACTIVE
               for t in e.tiers if t in TIERS and TIERS[t][2] == "per-commit")


@dataclass(frozen=True)
class Comparison:
    """Per-tier rows, the per-run rows, the default run's seconds and its closing lines."""

    tier_rows: list[list[object]]
    run_rows: list[list[object]]
    seconds: float
    closing: list[str]


def compare(tree: Path) -> Comparison:
    """Imports the tree three ways (`RUNS`) and compares with SGLang's own selection."""
    (tree / "registry.yaml").write_text(_registry_text())
    selection = sglang_selection(tree)
    cuda_default = selection.default_pr("cuda")
    default_files = {p for (h, s), f in selection.suites.items() if not s.startswith(LABEL_GATED_PREFIX) for p in f}
    gated_only = {p for (h, s), f in selection.suites.items() if s.startswith(LABEL_GATED_PREFIX)
                  for p in f} - default_files
    parked = {p.relative_to(tree).as_posix() for p in (tree / "test").rglob("*.py")
              if p.is_file() and _REGISTERS.search(p.read_bytes())} - selection.globbed
    sglang_gpu = sum(e * _gpus(s) for s, files in cuda_default.items() for e in files.values())
    runs = {label: _import(tree, flags) for label, flags in RUNS}
    tests, seconds, closing = runs["default"]
    tier_rows: list[list[object]] = []
    for tier, (_, arch, schedule) in TIERS.items():
        hw = "cpu" if arch == "cpu" else "cuda"
        suites = [s for s in selection.default_pr(hw) if any(
            fnmatch.fnmatchcase(s, pattern) for pattern, _, target in (p.partition("=") for p in TIER_MAP)
            if target == tier)]
        theirs = set().union(*(selection.suites[(hw, s)] for s in suites))
        ours = {p for p, e in tests.items() if e.status is Status.ACTIVE and tier in e.tiers}
        tier_rows.append([tier, len(suites), len(theirs), len(ours), len(theirs - ours), len(ours - theirs)])
    run_rows: list[list[object]] = []
    for label, (imported, _, _) in runs.items():
        active = {p for p, e in imported.items() if e.status is Status.ACTIVE}
        gpu = _gpu_seconds(imported)
        run_rows.append([label, len(imported), len(active), f"{len(parked & active)} of {len(parked)}",
                         f"{len(gated_only & active)} of {len(gated_only)}", f"{gpu:,.0f}", f"{gpu / sglang_gpu:.2f}x"])
    run_rows.append(["SGLang's default PR run", "", "", "", "", f"{sglang_gpu:,.0f}", "1.00x"])
    return Comparison(tier_rows, run_rows, seconds, closing)


__all__ = ["Comparison", "TIER_MAP", "TIERS", "compare", "sglang_selection"]
