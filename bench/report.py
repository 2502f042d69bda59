"""The HUD at scale: ``python -m bench report [--quick]``.

A seeded history of 2,000 registered test files x 30 runs of the default branch (--quick: 400 x
10), three tests a file, one cpu tier in four shards (one report per shard per run, 180,000
attempts in all): 2 % of the files flaky (a failure that passes on its rerun, p = 0.1), one
broken from run 20 on, 1 % quarantined (never run), 3 % skipped (no hardware), and durations
that drift for 5 % of the files. Reports are ingested with `ci.history.ingest.ingest` (not
timed). Then, best of 3:

- **generate**: `ci.report.build.build_report` + `ci.report.write.write_report` (the page and its
  JSON), in process, on SQLite; against a **baseline** measured in the same run: one plain
  ``SELECT report_id, node_id, kind, time FROM cases WHERE report_id IN (...)`` of the same
  reports, fetched into Python (reading the data once, nothing computed);
- **first paint**: headless Chromium (`ci.report.browser`) opening the page from file://, the
  first contentful paint and the load event, against the same browser opening a one-line page
  (the baseline: what any page costs);
- the page's size and its JSON's.

Goals (issue 21): generate < 2 s, first paint < 1 s, the page a few MB at most.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from bench.table import format_table
from ci.history.ingest import PreparedReport, ingest, report_key
from ci.history.model import CaseRow, RunIdentity
from ci.history.store import open_store
from ci.registry import load_registry
from ci.report.browser import Browser, BrowserError
from ci.report.build import build_report
from ci.report.query import default_branch_runs
from ci.report.write import write_report
from ci.selection.plan import plan

SEED = 21
GOAL_GENERATE_S = 2.0
GOAL_PAINT_MS = 1000.0
SHARDS = 4


def _registry(root: Path, files: int, rng: random.Random) -> tuple[list[str], dict[str, str]]:
    paths = [f"tests/area{i % 40}/test_mod{i}.py" for i in range(files)]
    kinds = {}
    lines = ["version: 1", "tiers:", "  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}",
             "tests:"]
    for path in paths:
        roll = rng.random()
        kinds[path] = ("flaky" if roll < 0.02 else "quarantined" if roll < 0.03 else "skip" if roll < 0.06
                       else "drift" if roll < 0.11 else "plain")
        status = ('status: quarantined, reason: "bench", issue: "https://example.com/i/1"'
                  if kinds[path] == "quarantined" else "status: active")
        lines.append(f'  {path}: {{tiers: [cpu], est_time: {rng.randint(2, 120)}, owner: "@team{rng.randint(0, 9)}", '
                     f"{status}}}")
    kinds[paths[7]] = "broken"
    (root / "registry.yaml").write_text("\n".join(lines) + "\n")
    return paths, kinds


def _rows(path: str, kind: str, run: int, rng: random.Random) -> list[CaseRow]:
    out = []
    for t in range(3):
        node = f"{path}::test_{t}"
        seconds = rng.uniform(0.5, 20.0) * (3.0 if kind == "drift" and run > 15 else 1.0)
        if kind == "skip":
            out.append(CaseRow(node, path, 0, "skipped", "skip", 0.0, False))
        elif kind == "broken" and run >= 20:
            out.append(CaseRow(node, path, 0, "error", "broken", 0.1, False, "f00", "ImportError: x"))
        elif kind == "flaky" and t == 0 and rng.random() < 0.1:
            out.append(CaseRow(node, path, 0, "failed", "fail", seconds, True, "abc", "AssertionError: x"))
            out.append(CaseRow(node, path, 1, "passed", "pass", seconds, False))
        else:
            out.append(CaseRow(node, path, 0, "passed", "pass", seconds, False))
    return out


def build(root: Path, files: int, runs: int) -> str:
    """The registry and the store under ``root``; the store's path."""
    rng = random.Random(SEED)
    paths, kinds = _registry(root, files, rng)
    location = str(root / "history.sqlite")
    with open_store(location) as store:
        for run in range(runs):
            sha = hashlib.sha1(f"run{run}".encode()).hexdigest()
            for shard in range(SHARDS):
                rows = tuple(r for p in paths[shard::SHARDS] if kinds[p] != "quarantined"
                             for r in _rows(p, kinds[p], run, rng))
                ident = RunIdentity("acme/big", sha, "push", "cpu", shard=f"{shard + 1}/{SHARDS}", run_id=str(run),
                                    run_url=f"https://ci.example/run/{run}")
                digest = hashlib.sha256(f"{run}/{shard}".encode()).hexdigest()
                ingest(store, PreparedReport(f"junit-{run}-{shard}.xml", ident, digest, report_key(digest, ident),
                                             len({r.node for r in rows}), rows))
    return location


def _best(fn: Callable[[], None], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    files, runs = (400, 10) if quick else (2000, 30)
    root = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        start = time.perf_counter()
        location = build(root, files, runs)
        print(f"history: {files} files x {runs} runs x {SHARDS} shards, built in {time.perf_counter() - start:.1f} s")
        registry = load_registry(root / "registry.yaml")
        out = root / "hud"

        def generate() -> None:
            plans = [plan(registry, "cpu", shards=SHARDS)]
            with open_store(location, create=False) as store:
                write_report(build_report(store, registry, plans, runs=runs), out)

        def baseline() -> None:
            with open_store(location, create=False) as store:
                ids = [r.id for run in default_branch_runs(store, "acme/big", runs) for r in run.reports]
                store.fetchall(f"SELECT report_id, node_id, kind, time FROM cases WHERE report_id IN "
                               f"({', '.join('?' * len(ids))})", ids)

        gen_s, base_s = _best(generate), _best(baseline)
        page, data = out / "index.html", out / "report.json"
        rows = [["plain SELECT of every attempt shown (baseline)", f"{base_s:.3f}", "1.00", ""],
                ["ci report: build + write page and JSON", f"{gen_s:.3f}", f"{gen_s / base_s:.2f}",
                 "yes" if gen_s < GOAL_GENERATE_S else "NO"]]
        print(format_table(["generate", "s, best of 3", "x baseline", f"< {GOAL_GENERATE_S:.0f} s"], rows))
        print(f"\nsize: index.html {page.stat().st_size / 1e6:.2f} MB, report.json {data.stat().st_size / 1e6:.2f} MB")
        return _paint(root, page)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _paint(root: Path, page: Path) -> int:
    blank = root / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body><h1>one line</h1></body></html>")
    results: dict[str, list[tuple[float, float]]] = {"blank": [], "hud": []}
    try:
        with Browser() as browser:
            for _ in range(3):
                for name, path in (("blank", blank), ("hud", page)):
                    start = time.perf_counter()
                    tab = browser.open(path)
                    loaded = (time.perf_counter() - start) * 1000
                    results[name].append((tab.first_paint_ms() or float("nan"), loaded))
                    tab.close()
    except BrowserError as exc:
        print(f"\nfirst paint: not measured ({exc})", file=sys.stderr)
        return 1
    best = {name: (min(p for p, _ in r), min(l for _, l in r)) for name, r in results.items()}
    rows = [["one-line page (baseline)", f"{best['blank'][0]:.0f}", f"{best['blank'][1]:.0f}", "1.00", ""],
            ["the HUD", f"{best['hud'][0]:.0f}", f"{best['hud'][1]:.0f}", f"{best['hud'][0] / best['blank'][0]:.2f}",
             "yes" if best["hud"][0] < GOAL_PAINT_MS else "NO"]]
    print()
    print(format_table(["headless chromium, file://", "first paint ms", "open + load ms", "x baseline (paint)",
                        f"< {GOAL_PAINT_MS:.0f} ms"], rows, title="best of 3, interleaved"))
    return 0
