"""The built by-test-id selection measured on a mutation workdir: `ci observe --by-test`, `ci plan`'s
narrowing (`ci.selection.bytest_select`) and `ci.pytest_ids`, timed as wall-clock.

    python -m bench._mutation_bytest_built --workdir W --python PY [--budget S] [--report-only]

W is a ``bench mutation --observe`` workdir (its ``tree``, ``baseline.json`` and ``mutants.jsonl``).
Steps: (1) the universe is recorded once with ``ci observe --by-test`` into ``W/bytest-map.json``
(kept; the wall seconds of a plain run, ``ci observe`` and ``ci observe --by-test`` are printed);
(2) for each mutant with a verdict, applied to the tree (``git apply --unidiff-zero``), the
selection `bench._mutation_runtime.runtime_maps` gives with that map: a file narrowed to ids runs
those ids, any other selected file (whole by the narrowing's reason, or the static graph's
fallback) runs whole; the selected command (``-p ci.pytest_ids --ci-ids``) and the static graph's
files (every universe file the graph selects) run back to back, in alternating order, each timed
from start-up to exit; one JSON line per mutant in ``W/bytest_built.jsonl`` (resumable);
a run past `LIMIT` or without a report leaves its mutant without a verdict (``broken``), out of the table;
(3) the table (then the same rows by mutant class, `bench._mutation_bytest_classes`): recall of the failing ids (the static run's failing ids that the selected run also
ran and saw fail) and of failing files, the selected run's wall-clock over the static run's, and
the est-time `ci plan` gives each side (`plan_est`) from the same observation (the by-test map):
a file narrowed to ids by their recorded seconds summed, any other file by its ``duration_s``.
``--est-only`` computes that selection and est-time for every mutant with a verdict and runs no
test (``W/bytest_est.jsonl``, rewritten), and checks its ids cover the failing ids a built run saw.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from statistics import fmean, median

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

from bench._mutation_bytest import junit_tests
from bench._mutation_bytest_classes import class_table
from bench._mutation_gen import Mutant
from bench._mutation_run import clean_env, drop_bytecode, run_suite
from bench._mutation_runtime import runtime_maps
from bench._mutation_select import SelectionTree, static_selection
from bench._mutation_store import load_results
from bench.table import format_table
from ci.registry import load_registry

CI_ROOT = Path(__file__).resolve().parents[1]
LIMIT = 240.0  # seconds per run: 3x the universe's wall at load 8; a mutant past it has no verdict


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, cwd=cwd, env=clean_env(env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   timeout=LIMIT)
    return time.monotonic() - start


def record(python: str, tree: Path, universe: list[str], workdir: Path, env: dict[str, str]) -> Path:
    """Step 1; the map's path (kept when present)."""
    out = workdir / "bytest-map.json"
    if out.is_file():
        return out
    pytest = [python, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:slipcover", "-q", "-n", "0", *universe]
    plain = _timed(pytest, tree, env)
    per_file = _timed([python, "-m", "ci", "observe", "--out", str(workdir / "perfile-map.json"), "--", *pytest],
                      tree, env)
    by_test = _timed([python, "-m", "ci", "observe", "--by-test", "--out", str(out), "--", *pytest], tree, env)
    print(f"record: plain pytest {plain:.1f} s, ci observe {per_file:.1f} s ({per_file / plain:.2f}x), "
          f"ci observe --by-test {by_test:.1f} s ({by_test / plain:.2f}x)", flush=True)
    if not out.is_file():
        raise SystemExit(f"{out}: ci observe --by-test wrote no map")
    return out


@dataclass(frozen=True)
class EstTime:
    """Seconds `ci plan` estimates for the by-id selection and for the static graph's files."""

    selected: float
    static: float


def observed_durations(map_path: Path) -> dict[str, float]:
    """Each test file's ``duration_s`` in the map at ``map_path`` (files without one are left out)."""
    tests = json.loads(map_path.read_text(encoding="utf-8"))["tests"]
    return {test: float(entry["duration_s"]) for test, entry in tests.items() if entry.get("duration_s") is not None}


def plan_est(files: Iterable[str], id_seconds: Mapping[str, float], static: Iterable[str],
             durations: Mapping[str, float]) -> EstTime:
    """As `ci.selection.plan` times a selection: a file in ``id_seconds`` (narrowed to ids whose
    seconds are all recorded) by that sum, any other file by ``durations``; the static side by
    ``durations`` alone. A file without a duration is a `KeyError` naming it: no placeholder time."""
    selected = sum(id_seconds[f] if f in id_seconds else durations[f] for f in files)
    return EstTime(selected, sum(durations[f] for f in static))


def _selection(chosen, files: set[str]) -> tuple[list[str], dict[str, float], int]:
    """(ids file lines: node ids, or a whole file's path; narrowed files' recorded seconds; files narrowed)."""
    lines, seconds, narrowed = [], {}, 0
    for test in sorted(files):
        ids = chosen.narrowed(test)
        if ids is not None and ids.ids is not None:
            narrowed += 1
            lines += ids.ids
            if ids.seconds is not None:
                seconds[test] = ids.seconds
        else:
            lines.append(test)
    return lines, seconds, narrowed


def _ids_file(chosen, files: set[str], path: Path) -> tuple[int, int]:
    """Write the ids file; (files narrowed to ids, ids listed)."""
    lines, _, narrowed = _selection(chosen, files)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return narrowed, sum("::" in line for line in lines)


def _choose(map_path: Path, view: SelectionTree, result, tree: Path, universe: list[str]):
    """(the plan's verdicts, selected files, static graph's files) for ``result`` applied to ``tree``."""
    mutant = Mutant(result.id, result.path, result.line, result.operator, result.diff, (tree / result.path).read_text())
    chosen = runtime_maps(map_path, view, mutant)
    static = sorted(static_selection(view, result.path))
    files = {t for t, v in chosen.decided.items() if v.why} | (set(chosen.fallback) & set(static))
    return chosen, files & set(universe), static


@contextmanager
def _applied(tree: Path, result) -> Iterator[None]:
    """``result``'s diff applied to ``tree`` for the block, the file restored after."""
    subprocess.run(["git", "checkout", "-q", "--", result.path], cwd=tree, check=True)  # after a killed run
    subprocess.run(["git", "apply", "--unidiff-zero", "-"], input=result.diff.encode(), cwd=tree, check=True)
    try:
        drop_bytecode(tree / result.path)
        yield
    finally:
        subprocess.run(["git", "checkout", "-q", "--", result.path], cwd=tree, check=True)
        drop_bytecode(tree / result.path)


def estimate(tree: Path, workdir: Path, map_path: Path, universe: list[str]) -> None:
    """``--est-only``: each mutant's selection and `plan_est`, no test run (``W/bytest_est.jsonl``)."""
    results, _ = load_results(workdir / "mutants.jsonl")
    view = SelectionTree(tree, load_registry(tree / "registry.yaml"), frozenset(universe))
    durations, rows = observed_durations(map_path), []
    for result in sorted(results.values(), key=lambda r: r.id):
        if result.broken:
            continue
        with _applied(tree, result):
            chosen, files, static = _choose(map_path, view, result, tree, universe)
        lines, seconds, narrowed = _selection(chosen, files)
        est = plan_est(files, seconds, static, durations)
        rows.append({"id": result.id, "files": len(files), "narrowed": narrowed, "selected_est": est.selected,
                     "static_est": est.static, "selection": lines,
                     "whole": {t: chosen.narrowed(t).why for t in sorted(files)
                               if chosen.narrowed(t) is not None and chosen.narrowed(t).ids is None}})
    (workdir / "bytest_est.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def measure(python: str, tree: Path, workdir: Path, map_path: Path, universe: list[str], env: dict[str, str],
            budget: float | None) -> None:
    """Step 2 (see the module docstring)."""
    results, _ = load_results(workdir / "mutants.jsonl")
    out = workdir / "bytest_built.jsonl"
    done = {json.loads(line)["id"] for line in out.read_text().splitlines()} if out.is_file() else set()
    view = SelectionTree(tree, load_registry(tree / "registry.yaml"), frozenset(universe))
    durations = observed_durations(map_path)
    start = time.monotonic()
    for i, result in enumerate(sorted(results.values(), key=lambda r: r.id)):
        if result.broken or result.id in done:
            continue
        if budget is not None and time.monotonic() - start > budget:
            print(f"budget spent: {len(results) - i} of {len(results)} mutant(s) not started", flush=True)
            return
        with _applied(tree, result):
            chosen, files, static = _choose(map_path, view, result, tree, universe)
            narrowed, listed = _ids_file(chosen, files, workdir / "bytest_ids.txt")
            est = plan_est(files, _selection(chosen, files)[1], static, durations)
            runs, broken = {}, ""
            for kind in (("selected", "static") if i % 2 else ("static", "selected")):
                chosen_files = sorted(files) if kind == "selected" else static
                extra = ("-p", "ci.pytest_ids", "--ci-ids", str(workdir / "bytest_ids.txt")) if kind == "selected" else ()
                junit = workdir / f"bytest_{kind}.xml"
                run = run_suite(python, tree, chosen_files, junit, workers=0, limit=LIMIT, extra_env=env,
                                plugin_args=extra) if chosen_files else None
                read = junit_tests(junit, tree, chosen_files) if run is not None else None
                runs[kind] = (run.wall if run is not None else 0.0, sorted(read.failing) if read else [],
                              len(read.seconds) if read else 0)
                broken = broken or (f"{kind}: {run.broken}" if run is not None and run.broken else "")
        row = {"id": result.id, "files": len(files), "static_files": len(static), "narrowed": narrowed,
               "listed_ids": listed,
               "selected_wall": runs["selected"][0], "static_wall": runs["static"][0],
               "selected_ran": runs["selected"][2], "static_ran": runs["static"][2],
               "selected_failing": runs["selected"][1], "static_failing": runs["static"][1], "broken": broken,
               "selected_est": est.selected, "static_est": est.static}
        with out.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"{result.id}: {len(files)} file(s), {narrowed} narrowed, ran {runs['selected'][2]} of "
              f"{runs['static'][2]} ids, {runs['selected'][0]:.1f} s vs {runs['static'][0]:.1f} s", flush=True)


def _ratios(rows: list[dict], selected: str, static: str) -> list[str]:
    """Mean of the per-mutant ratios, their median, sum over sum; "-" where no row has both keys."""
    pairs = [(r[selected], r[static]) for r in rows if r.get(selected) is not None and r.get(static)]
    if not pairs:
        return ["-", "-", "-"]
    ratio = [a / b for a, b in pairs]
    return [f"{fmean(ratio):.2f}", f"{median(ratio):.2f}", f"{sum(a for a, _ in pairs) / sum(b for _, b in pairs):.2f}"]


def _covered(failing: list[str], selection: list[str]) -> int:
    """Failing ids that a selection's ids file runs (listed, or their file listed whole)."""
    chosen = set(selection)
    return sum(n in chosen or n.split("::")[0] in chosen for n in failing)


def table(workdir: Path) -> str:
    """Step 3 (see the module docstring); with ``W/bytest_est.jsonl``, a second row: that selection's
    est-time over the built runs' mutants (all, without a built run), and how many of the failing ids
    those runs saw it covers (no run of its own)."""
    built = workdir / "bytest_built.jsonl"
    every = [json.loads(line) for line in built.read_text().splitlines()] if built.is_file() else []
    rows = [r for r in every if not r.get("broken")]  # a run that timed out or crashed: no verdict
    failing = sum(len(r["static_failing"]) for r in rows)
    caught = sum(len(set(r["static_failing"]) & set(r["selected_failing"])) for r in rows)
    files = sum(len({n.split("::")[0] for n in r["static_failing"]}) for r in rows)
    files_caught = sum(len({n.split("::")[0] for n in set(r["static_failing"]) & set(r["selected_failing"])})
                       for r in rows)
    head = ["selector", "mutants", "recall (failing ids)", "recall (failing files)",
            "wall-clock x static (mean of ratios)", "median", "sum over sum",
            "est-time x static (mean of ratios)", "median", "sum over sum"]
    lines = [["by test id (built: observe --by-test, plan, pytest_ids)",
              f"{len(rows)}" + (f" ({len(every) - len(rows)} without a verdict)" if len(every) > len(rows) else ""),
              f"{caught}/{failing}", f"{files_caught}/{files}", *_ratios(rows, "selected_wall", "static_wall"),
              *_ratios(rows, "selected_est", "static_est")]] if rows else []
    est_path = workdir / "bytest_est.jsonl"
    if est_path.is_file():
        est = [json.loads(line) for line in est_path.read_text().splitlines()]
        seen = {r["id"]: r["static_failing"] for r in rows}
        judged = [r for r in est if r["id"] in seen]
        covered = sum(_covered(seen[r["id"]], r["selection"]) for r in judged)
        shown = judged if rows else est  # the built runs' mutants, when there are any
        lines.append(["by test id, selection only (--est-only, no run)", f"{len(shown)}",
                      f"{covered}/{sum(len(seen[r['id']]) for r in judged)} (of the built runs')", "-", "-", "-", "-",
                      *_ratios(shown, "selected_est", "static_est")])
    return format_table(head, lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._mutation_bytest_built", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument("--python", required=True)
    parser.add_argument("--source-root", default="src", help="the tree's import root (default src)")
    parser.add_argument("--budget", type=float, default=None, help="start no mutant after this many seconds")
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--est-only", action="store_true", help="selections and est-times only, no test run")
    args = parser.parse_args(argv)
    tree = args.workdir / "tree"
    universe = json.loads((args.workdir / "baseline.json").read_text())["universe"]
    env = {"PYTHONPATH": f"{(tree / args.source_root).resolve()}:{CI_ROOT}"}  # as `_mutation_tree.pythonpath`
    if args.est_only:
        estimate(tree, args.workdir, args.workdir / "bytest-map.json", universe)
    elif not args.report_only:
        measure(args.python, tree, args.workdir, record(args.python, tree, universe, args.workdir, env), universe,
                env, args.budget)
    print(table(args.workdir))
    built = args.workdir / "bytest_built.jsonl"
    classes = class_table([json.loads(line) for line in built.read_text().splitlines()]) if built.is_file() else ""
    if classes:
        print(classes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
