"""Runtime dependency maps: what recording costs, and what they select: ``python -m bench depmap [--quick]``.

1. Overhead: pytest over a subset of this repository's cpu tier (its files with est_time <= 3 s,
   51 files at the time of writing; --quick: two files), one process (``-n 0``, so the tracer's cost
   is not hidden by idle workers), alternately without and with recording (``CI_DEPMAP``:
   coverage.py's C tracer with a context per test file, the "open" audit hook, subprocesses
   measured), ``--repeat=N`` times each (2; --quick 1); best CPU time (user + system of pytest and
   its children) of each, wall time beside it. Goal: <= 10 % more CPU time.
2. Selection: the map that run wrote, against the static import graph, on this repository's last
   20 first-party commits (--quick: 3): for each commit's changed files (``git diff C^ C``), the
   recorded files each plan selects and their est_time, with the registry's ``run_all_paths`` and
   without them (ci/ is a run-all path here, so most commits select everything either way). The
   graph and the registry are this checkout's, not each commit's. A last row changes each
   non-test file some map holds, alone, and sums the est_time selected over those changes.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._depmap_history import selection_table
from bench.table import format_table
from ci.registry import Registry, find_repo_root, load_registry

GOAL = 0.10
QUICK_FILES = ("tests/ci/test_shard.py",)


def subset(registry: Registry, quick: bool) -> list[str]:
    if quick:
        return list(QUICK_FILES)
    return [e.path for e in registry.tests_for_tier("cpu") if e.est_time <= 3]


def run_pytest(root: Path, files: list[str], record: Path | None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system of pytest and every process it waited for), exit status."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CI_DEPMAP", "COVERAGE_"))}
    env.pop("PYTEST_ADDOPTS", None)
    if record is not None:
        env["CI_DEPMAP"] = str(record)
    argv = [sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "--tier", "cpu", "-n", "0", "-q",
            "-p", "no:cacheprovider", *files]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def overhead(root: Path, files: list[str], repeat: int, out: Path) -> tuple[float, float]:
    """Best CPU seconds without and with recording (the goal's measure: on a shared machine wall
    time swings with the neighbours' load, CPU time much less); wall times are shown beside."""
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    codes = set()
    for _ in range(repeat):
        for recording in (False, True):
            wall, cpu, rc = run_pytest(root, files, out if recording else None)
            runs[recording].append((wall, cpu))
            codes.add(rc)
    (bw, bc), (rw, rc_) = [(min(w for w, _ in runs[r]), min(c for _, c in runs[r])) for r in (False, True)]
    print(format_table(("mode", "files", "wall s (best)", "CPU s (best)", "x baseline CPU"), [
        ("pytest, no recording (baseline)", len(files), f"{bw:.1f}", f"{bc:.1f}", "1.00"),
        ("pytest, recording the map", len(files), f"{rw:.1f}", f"{rc_:.1f}", f"{rc_ / bc:.2f}")],
        title=f"overhead, {repeat} run(s) of each, alternating; pytest exit codes seen: {sorted(codes)}"))
    return bc, rc_


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    repeat = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--repeat=")), 1 if quick else 2)
    root = find_repo_root()
    registry = load_registry(root / "registry.yaml")
    files = subset(registry, quick)
    with tempfile.TemporaryDirectory(prefix="bench-depmap-") as tmp:
        out = Path(tmp) / "depmap.json"
        base, rec = overhead(root, files, repeat, out)
        verdict = "MET" if rec <= base * (1 + GOAL) else "MISSED"
        print(f"goal: recording CPU overhead <= {GOAL:.0%}: {verdict} ({(rec / base - 1):+.1%})")
        print()
        if not out.is_file():
            print("bench depmap: the recording run wrote no map; no selection table")
            return 1
        print(selection_table(root, registry, files, out, 3 if quick else 20))
    return 0 if verdict == "MET" else 1
