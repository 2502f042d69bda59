"""Every benchmark runs: ``python -m bench NAME --quick`` for each name `bench.__main__.available`
lists (a new benchmark is run here without editing this file, and `test_every_benchmark_has_a_spec`
fails until its table is described in `SPECS`), as a subprocess from the repository root.

Each must exit 0 and print its tables: the header row of every table in its spec, the rows named
there, and numbers in its ratio column. Three benchmarks exit 1 when a wall-clock goal is missed
(history, lint, plan: e.g. "warm ci plan under 0.5 s"); on a loaded 2-core CI machine that is not
a bug of the code, so exit 1 passes only with that goal's verdict line saying ``MISSED`` and every
table printed (a crash prints no verdict). ``bench report`` needs headless Chromium, as
test_report_browser.py does: without it this fails. ``bench adoption`` needs a git repository with
SGLang's history: without ``--repo`` it must say so and exit 0 (so ``python -m bench`` runs the
others), and test_bench_adoption.py runs it on one made there. The rerun bot benchmark's own
checks (its checkout, its dispatch count) are test_bench_rerun_bot.py's.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bench.__main__ import available

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600  # quick runs take 1-10 s alone; generous for a loaded CI machine


@dataclass(frozen=True)
class Table:
    """One `bench.table.format_table` table read back: header cells, then rows of cells."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    def column(self, name: str) -> list[str]:
        i = self.header.index(name)
        return [row[i] for row in self.rows]

    def row(self, label: str) -> dict[str, str]:
        """The row whose first cell is ``label``, as {header: cell}; KeyError if none."""
        for row in self.rows:
            if row[0] == label:
                return dict(zip(self.header, row))
        raise KeyError(f"no row {label!r} in the table {self.header}; rows: {[r[0] for r in self.rows]}")


def read_tables(text: str) -> list[Table]:
    """Every table in ``text``: a header line over a line of dash runs (one per column, the
    columns' extents), then its rows, each cut at those extents: the lines up to the first that
    is blank or has text in a gap between columns (a sentence printed right after the table)."""
    lines = text.splitlines()
    tables = []
    for i, line in enumerate(lines):
        if i == 0 or not re.fullmatch(r"-+(  -+)*", line):
            continue
        spans = [m.span() for m in re.finditer(r"-+", line)]
        gaps = [(end, start) for (_, end), (start, _) in zip(spans, spans[1:])]

        def cells(row: str) -> tuple[str, ...]:
            return tuple(row[a:b].strip() for a, b in spans[:-1]) + (row[spans[-1][0]:].strip(),)

        body = []
        for row in lines[i + 1:]:
            if not row.strip() or any(row[a:b].strip() for a, b in gaps):
                break
            body.append(cells(row))
        tables.append(Table(cells(lines[i - 1]), tuple(body)))
    return tables


@dataclass(frozen=True)
class TableSpec:
    """A table a benchmark must print: its exact header, row labels it must have, and the column
    holding ratios (every non-empty cell there a positive number, optionally ending in ``x``)."""

    header: tuple[str, ...]
    labels: tuple[str, ...]
    ratio: str


@dataclass(frozen=True)
class Spec:
    """What ``python -m bench NAME --quick`` must print: exactly ``tables``, in order; every one of
    ``lines``; each of ``cells``. ``exact`` instead, for a benchmark with nothing to measure here."""

    tables: tuple[TableSpec, ...]
    lines: tuple[str, ...] = ()  # regular expressions, each matching a whole line of stdout
    goal: str | None = None  # a wall-clock goal's verdict line (regex); with MISSED there, exit 1 passes
    exact: str | None = None  # the whole stdout, for a benchmark that measures nothing here
    cells: dict[tuple[int, str, str], str] = field(default_factory=dict)  # (table, row, column) -> cell


SPECS: dict[str, Spec] = {
    "adoption": Spec((), exact=(
        "== bench/adoption.py --quick\n"
        "bench adoption: give --repo=PATH, a git repository with SGLang's history (see the module docstring); "
        "nothing measured\n\n")),
    "culprit": Spec((TableSpec(("band / method", "breakages", "right", "right (4 runners)", "mean runs", "runs / deflaked",
        "rounds (1 runner)", "rounds (4 runners)"), ("0 % deflaked bisection", "20-30 % ci.culprit observed+attempts"), "runs / deflaked"),),
        lines=(r"goal \(ci.culprit observed\+attempts\): >= 99 % right and <= 0.5x deflaked bisection's runs in every band up to 20 %: (met|MISSED \(short: [-0-9 %,]+\))",
               r"goal \(ci.culprit observed\+attempts\+signatures 30 %\): >= 99 % right and <= 0.5x deflaked bisection's runs in every band up to 20 %: (met|MISSED \(short: [-0-9 %,]+\))")),
    "depmap": Spec((
        TableSpec(("mode", "files", "wall s (best)", "CPU s (best)", "x baseline CPU"),
                  ("no recording (baseline)", "recording: everything, slipcover core (default)",
                   "recording: everything, ctrace core"), "x baseline CPU"),
        TableSpec(("commit", "changed", "graph", "map", "graph, no run-all", "map, no run-all",
                   "x graph est (no run-all)"), ("all",), "x graph est (no run-all)")),
        goal=r"goal: recording CPU overhead <= 10%: (MET|MISSED) \(.*\)"),
    "history": Spec((
        TableSpec(("step", "wall s", "CPU s (client)", "testcases/s (wall)", "x baseline time"),
                  ("SQLite: plain executemany INSERT, no keys (baseline)", "SQLite: ci.history ingest",
                   "PostgreSQL: plain executemany INSERT, no keys (baseline)", "PostgreSQL: ci.history ingest"),
                  "x baseline time"),
        TableSpec(("query", "s (best of 3)", "x baseline", "flaky found"),
                  ("SQLite: ci.history.flaky.flaky_scores", "PostgreSQL: ci.history.flaky.flaky_scores"), "x baseline")),
        lines=(r"ingest of 24,073 testcase rows in 60 reports, one transaction per report",),
        goal=r"goal ingest >= 50,000 testcases/s and ci flaky < 1 s: (OK|MISSED)",
        cells={(1, "SQLite: ci.history.flaky.flaky_scores", "flaky found"): "9",
               (1, "PostgreSQL: ci.history.flaky.flaky_scores", "flaky found"): "9"}),
    "lint": Spec((
        TableSpec(("phase", "ms", "x CSafeLoader load"),
                  ("baseline: yaml.load CSafeLoader", "parse_registry", "lint_repo (all of the above)"),
                  "x CSafeLoader load"),
        TableSpec(("phase", "ms", "x ast.parse"), ("import check", "lint_repo"), "x ast.parse")),
        goal=r"target src-layout lint of 2000 modules under 1 s: [0-9.]+ s -> (OK|MISSED)",
        cells={(0, "baseline: yaml.load CSafeLoader", "x CSafeLoader load"): "1.00"}),
    "mutation": Spec((
        TableSpec(("run", "files", "failing files (mean)", "wall s", "x baseline run 1"),
                  ("baseline run 1", "baseline run 2", "recording (CI_DEPMAP)", "mutant runs (mean)"),
                  "x baseline run 1"),
        TableSpec(("selector", "recall", "failing pairs selected", "files selected (mean)", "est-time selected (mean)",
                   "x static graph (files)", "x static graph (est-time)", "misses", "no verdict: empty selections"),
                  ("runtime map", "static graph (baseline)", "path prefix"), "x static graph (files)")),
        # the tiny tree's mutants are seeded: 3 of 5 kill a test file, and the path-prefix rule
        # misses test_report.py (it exercises two modules); the static graph selects every test
        lines=(r"mutants: 5 run of 5, 3 killed \(>= 1 failing file\), \d+ failing \(mutant, test file\) pairs with a "
               r"verdict; 0 run\(s\) without a per-file verdict, left out of the pairs \(listed below the table\)",
               r"goal: runtime map recall >= 99\.5%: MET \(100\.00%\)",
               r"miss \(path prefix\): \w+ src/shapes/\w+\.py:\d+ \w+ `.*` -> tests/test_report\.py not selected"),
        cells={(1, "static graph (baseline)", "x static graph (files)"): "1.00",
               (1, "static graph (baseline)", "recall"): "100.0%"}),
    "plan": Spec((
        TableSpec(("shards", "bound s", "LPT (ours)", "pytest-split least_duration",
                   "pytest-split duration_based_chunks (default)", "pytest-shard (sha256 of id)", "round-robin",
                   "greedy, registry order, no sort"), ("8", "16", "64", "256"), "LPT (ours)"),
        TableSpec(("step (N=64)", "ms", "x round-robin"), ("round-robin split (baseline)", "LPT only"), "x round-robin"),
        TableSpec(("step", "ms", "x baseline"), ("plan without the graph (baseline)", "ci plan, warm, json"), "x baseline"),
        TableSpec(("selection rule", "median tests", "max tests"),
                  ("hand-written depends_on (before)", "import graph + trimmed depends_on"), "median tests")),
        lines=(r"target LPT within 2% of the bound: worst [0-9.]+% -> OK",),  # no clock in it: must hold
        goal=r"target warm ci plan under 0.5 s: [0-9.]+ s -> (OK|MISSED)"),
    "pool": Spec((
        TableSpec(("device", "dtype", "op", "ms", "GB/s", "of copy", "B/token", "vs bf16"), ("cpu",), "vs bf16"),),
        # bytes per token, 8 heads x 128, K and V: bf16 2 bytes a value, fp8 1, the FP4 formats half
        # a byte plus one scale byte per 16 values
        lines=tuple(rf"cpu +{dtype} +set_kv_buffer\(256\) +[0-9.]+ +[0-9.]+ +[0-9.]+ +{size} +{ratio}"
                    for dtype, size, ratio in (("bf16", 4096, "1.000"), ("fp8_e4m3", 2048, "0.500"),
                                               ("fp4_e2m1", 1152, "0.281"), ("nvfp4", 1152, "0.281")))),
    "quant": Spec((
        TableSpec(("op", "backend", "device", "ms", "x copy time", "GB/s", "of copy GB/s"),
                  ("copy of the input (baseline)", "mx_block16 quantize", "nvfp4 dequantize"), "x copy time"),
        TableSpec(("format", "bits/elem", "MSE", "max abs err"),
                  ("mx_block16", "nvfp4 (computed g)", "fp8 e4m3 cast", "bf16 (input)"), "bits/elem")),
        cells={(1, "mx_block16", "bits/elem"): "4.500", (1, "nvfp4 (computed g)", "bits/elem"): "4.500",
               (1, "bf16 (input)", "MSE"): "0.00000", (0, "copy of the input (baseline)", "x copy time"): "1.0x"}),
    "report": Spec((
        TableSpec(("generate", "s, best of 3", "x baseline", "< 2 s"),
                  ("plain SELECT of every attempt shown (baseline)", "ci report: build + write page and JSON"),
                  "x baseline"),
        TableSpec(("headless chromium, file://", "MB", "first paint ms", "load ms", "x baseline (paint)",
                   "load goal ms", "met"),
                  ("one-line page (baseline)", "every cell a tag, 400 x 10 (baseline)", "the HUD, 400 x 10"),
                  "x baseline (paint)"),
        TableSpec(("frames", "count", "p50 ms", "p95 ms", "max ms", "top row not drawn", "x baseline (p95)"),
                  ("idle frames, one-line page (baseline)", "scrolling every cell a tag, 400 x 10 (baseline)",
                   "scrolling the HUD, 400 x 10"), "x baseline (p95)"),
        TableSpec(("mouseover on a drawn cell", "count", "mean ms", "p95 ms", "max ms", "x baseline (mean)"),
                  ("the HUD, 400 x 10: a passing cell, no tip (baseline)", "the HUD, 400 x 10: a failing cell's tip"),
                  "x baseline (mean)")),
        lines=(r"history: 400 files x 10 runs x 4 shards, built in [0-9.]+ s",
               r"rows: 1 failing, \d+ flaky, \d+ ok; the first: tests/area7/test_mod7.py \(failing, since column 6, "
               r"4 failing\)"),
        cells={(2, "scrolling the HUD, 400 x 10", "top row not drawn"): "0",
               (2, "scrolling the HUD, 400 x 10", "count"): "120"}),
    "uses": Spec((
        TableSpec(("step", "s", "x baseline"),
                  ("ast.parse of the files holding the names (baseline)", "word index over every file",
                   "the changes: changed_definitions + DefinitionUses.of"), "x baseline"),),
        lines=(r"this repository's fp4kv/ on disk: \d+ Python files; 5 constants changed: \d narrowed to their uses "
               r"\(median [0-9.]+, max \d+\), \d module level",),
        cells={(0, "ast.parse of the files holding the names (baseline)", "x baseline"): "1.00"}),
    "verdicts": Spec((TableSpec(("truth label", "answers", "right at the time", "answers at the end", "right at the end"),
        ("broken_on_main", "new", "infra", "flaky", "flaky, failed every attempt", "overall"), "answers"),), lines=(
        r"flakes called broken_on_main at the time: \d+", r"answers changed between a commit's last ask and the end: \d+ of \d+")),
    "rerun_bot": Spec((
        TableSpec(("measure", "p50 ms", "p90 ms", "p99 ms", "p50 / baseline"),
                  ("GET /healthz (baseline)", "webhook ack (202)", "end to end (delivery -> final reply)",
                   "ack after kill -9 + restart (re-sent)"), "p50 / baseline"),),
        lines=(r"restart: killed after \d+ acknowledgements; \d+ re-sent; every acknowledged delivery handled, "
               r"400 comments dispatched exactly once; .*",)),
}


def run_bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def is_ratio(cell: str) -> bool:
    return re.fullmatch(r"[0-9]+(\.[0-9]+)?x?", cell) is not None and float(cell.rstrip("x")) > 0


def test_every_benchmark_has_a_spec() -> None:
    assert sorted(SPECS) == available(), "describe each benchmark's --quick tables in SPECS"


@pytest.mark.parametrize("name", available())
def test_quick_run_prints_its_tables(name: str) -> None:
    result = run_bench(name, "--quick")
    out, why = result.stdout, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr[-4000:]}"
    spec = SPECS.get(name)
    if spec is None:  # a new benchmark: it must still run and print a table
        assert result.returncode == 0 and read_tables(out), why
        pytest.fail(f"bench/{name}.py ran; describe its tables in SPECS")
    if spec.exact is not None:
        assert (result.returncode, out) == (0, spec.exact), why
        return
    verdict = re.search(f"^{spec.goal}$", out, re.M) if spec.goal else None
    if spec.goal:
        assert verdict, why
    missed_goal = verdict is not None and verdict.group(verdict.re.groups) == "MISSED"
    assert result.returncode == 0 or (result.returncode == 1 and missed_goal), why
    tables = read_tables(out)
    assert [t.header for t in tables] == [t.header for t in spec.tables], why
    for table, wanted in zip(tables, spec.tables):
        assert set(wanted.labels) <= {row[0] for row in table.rows}, (wanted.labels, why)
        ratios = [c for c in table.column(wanted.ratio) if c]
        # bench depmap's history table needs git history: a copy of the tracked files (the
        # selection safety test's) has none, so its rows are all empty there, never wrong
        no_history = name == "depmap" and wanted.labels == ("all",) and not (ROOT / ".git").exists()
        assert (ratios or no_history) and all(is_ratio(c) for c in ratios), (wanted.ratio, ratios)
    for (i, label, column), cell in spec.cells.items():
        assert tables[i].row(label)[column] == cell, (label, column, why)
    for line in spec.lines:
        assert re.search(f"^{line}$", out, re.M), (line, why)


@pytest.mark.parametrize(("value", "text"), [
    (5.374, "5.37"), (1.0, "1.00"), (0.1, "0.10"), (0.05, "0.050"), (0.0123, "0.012"),
    (0.0092, "0.0092"), (0.00049, "0.00049"), (0.0, "0.00"),
])
def test_a_positive_ratio_never_prints_as_zero(value: float, text: str) -> None:
    """A phase 100+ times faster than its baseline printed ``0.00`` under load, and the ratio
    column check above (every cell a positive number) failed on a correct run."""
    from bench.table import ratio
    assert ratio(value) == text
    assert value == 0 or is_ratio(ratio(value))

