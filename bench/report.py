"""The HUD at scale: ``python -m bench report [--quick | --no-big]``.

A seeded history of 2,000 registered test files x 30 runs of the default branch (--quick: 400 x
10), three tests a file, one cpu tier in four shards (one report per shard per run, 180,000
attempts in all): 2 % of the files flaky (a failure that passes on its rerun, p = 0.1), one
broken from two thirds of the runs on (run 20 of 30), 1 % quarantined (never run), 3 % skipped (no hardware), and durations
that drift for 5 % of the files. Reports are ingested with `ci.history.ingest.ingest` (not
timed). Then, best of 3:

- **generate**: `ci.report.build.build_report` + `ci.report.write.write_report` (the page and its
  JSON), in process, on SQLite; against a **baseline** measured in the same run: one plain
  ``SELECT report_id, node_id, kind, time FROM cases WHERE report_id IN (...)`` of the same
  reports, fetched into Python (reading the data once, nothing computed);
- the page's size and its JSON's;
- **the browser** (`bench._report_paint`): headless Chromium opening the page from file:// (first
  contentful paint, load event) and scrolling its matrix, against a one-line page and a page of the
  same matrix with every cell as markup (how the HUD drew it before); without ``--quick`` also for
  a history of `BIG_FILES` files x 30 runs (generated once, not best of 3), unless ``--no-big``.

Goals (issues 21, 30 and 32): generate < 2 s; 2,000 x 30 loads in <= 1 s and scrolls smoothly;
20,000 x 30 is a few MB at most and loads in a few seconds.
"""

from __future__ import annotations

import hashlib
from collections import Counter
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from bench._report_paint import paint
from bench.table import format_table
from ci.history.ingest import PreparedReport, ingest, report_key
from ci.history.model import CaseRow, RunIdentity
from ci.history.store import open_store
from ci.registry import load_registry
from ci.report.assets import CSS
from ci.report.build import build_report
from ci.report.grid import CLASS, esc
from ci.report.model import LETTERS, Report
from ci.report.query import default_branch_runs
from ci.report.write import write_report
from ci.selection.plan import plan

SEED = 21
GOAL_GENERATE_S = 2.0
GOAL_PAINT_MS = 1000.0
SHARDS = 4
BIG_FILES = 20_000  # the scale case (not with --quick): the page's size and load, once built


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


def _rows(path: str, kind: str, run: int, broken_from: int, rng: random.Random) -> list[CaseRow]:
    out = []
    for t in range(3):
        node = f"{path}::test_{t}"
        seconds = rng.uniform(0.5, 20.0) * (3.0 if kind == "drift" and run > 15 else 1.0)
        if kind == "skip":
            out.append(CaseRow(node, path, 0, "skipped", "skip", 0.0, False))
        elif kind == "broken" and run >= broken_from:
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
                             for r in _rows(p, kinds[p], run, runs * 2 // 3, rng))
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


def _every_cell_a_tag(report: Report, path: Path) -> None:
    """The in-run baseline page: the same matrix with every cell as markup (one ``<td>`` a cell, as
    the HUD drew it before its rows became data), and the page's style, nothing else."""
    rows = "".join(f"<tr><th>{esc(r.tier)}</th><th>{esc(r.file)}</th>"
                   + "".join(f"<td class={CLASS[c]}>{LETTERS[c]}" for c in r.cells) + "</tr>" for r in report.rows)
    path.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{CSS}</style></head><body>'
                    f"<table>{rows}</table></body></html>", encoding="utf-8")


def _scale(root: Path, files: int, runs: int) -> tuple[Path, Path, float]:
    """The history of ``files`` x ``runs`` under ``root``, its HUD and the every-cell-a-tag page;
    the seconds one generate took."""
    root.mkdir(parents=True, exist_ok=True)
    location = build(root, files, runs)
    registry = load_registry(root / "registry.yaml")
    start = time.perf_counter()
    with open_store(location, create=False) as store:
        report = build_report(store, registry, [plan(registry, "cpu", shards=SHARDS)], runs=runs)
    page, _ = write_report(report, root / "hud")
    seconds = time.perf_counter() - start
    _every_cell_a_tag(report, root / "cells.html")
    return page, root / "cells.html", seconds


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    big = not quick and "--no-big" not in argv  # --no-big: the 2,000 x 30 case only (the big one takes minutes)
    files, runs = (400, 10) if quick else (2000, 30)
    root = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        start = time.perf_counter()
        location = build(root, files, runs)
        print(f"history: {files} files x {runs} runs x {SHARDS} shards, built in {time.perf_counter() - start:.1f} s")
        registry = load_registry(root / "registry.yaml")
        out = root / "hud"
        report: list[Report] = []

        def generate() -> None:
            plans = [plan(registry, "cpu", shards=SHARDS)]
            with open_store(location, create=False) as store:
                report[:] = [build_report(store, registry, plans, runs=runs)]
                write_report(report[0], out)

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
        pages = {f"{files} x {runs}": (page, root / "cells.html")}
        _every_cell_a_tag(report[0], root / "cells.html")
        if big:
            large, cells, big_s = _scale(root / "big", BIG_FILES, runs)
            rows.append([f"ci report, {BIG_FILES} x {runs} (once)", f"{big_s:.3f}", f"{big_s / base_s:.2f}", ""])
            pages[f"{BIG_FILES} x {runs}"] = (large, cells)
        print(format_table(["generate", "s, best of 3", "x baseline", f"< {GOAL_GENERATE_S:.0f} s"], rows))
        print(f"\nsize: index.html {page.stat().st_size / 1e6:.2f} MB, report.json {data.stat().st_size / 1e6:.2f} MB")
        states = Counter(r.state for r in report[0].rows)
        first = report[0].rows[0]
        print(f"rows: {states['failing']} failing, {states['flaky']} flaky, {states['ok']} ok; the first: {first.file} "
              f"({first.state}, since column {first.since}, {first.streak} failing)")
        return paint(root, pages)
    finally:
        shutil.rmtree(root, ignore_errors=True)
