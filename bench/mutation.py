"""Recall of change-based test selection, measured with seeded mutations on a real tree:
``python -m bench mutation --tree pytest|self|click|itsdangerous|rich --python PY --workdir DIR [--mutants N] [--seed S] [--resume]
[--observe] [--by-test [--by-test-budget S]]``.

``--tree click`` is pallets/click at `CLICK_COMMIT` from ``--repo`` (a clone or mirror; its tests
need only pytest); ``--tree itsdangerous`` likewise is pallets/itsdangerous at `ITSDANGEROUS_COMMIT`
(its tests need pytest and freezegun); ``--tree rich`` is Textualize/rich at `RICH_COMMIT` (its
package at the top level; tests need pytest, pygments, markdown-it-py and attrs). ``--observe`` records step 2's map with ``ci observe`` around the tree's own
pytest command (the path adopters use) instead of ``CI_DEPMAP``, and scores est-time with each
file's observed ``duration_s`` (the baselines' seconds only for a file the map has none for; the
report says how many).

``--tree self`` is this repository at HEAD (resuming: at the commit its copy holds), run with this
interpreter unless ``--python`` says otherwise: the mutants are of ``fp4kv/`` (the system under
test), the universe is the test files its own configuration collects. With
``--max-file-seconds S`` a file whose est_time in the copy's registry.yaml exceeds S is left out
before the baselines run, named, and so is one slower than S in them; the tests of fp4kv
(`SELF_KEEP`) stay whatever their seconds.

Setup for ``--tree pytest`` (pytest's own repository at `PYTEST_COMMIT`; its git directory is
``--pytest-repo``, default `PYTEST_MIRROR`), an interpreter with the tree's test dependencies::

    git clone /work/.mirror/pytest-dev+pytest/repo /work/scratch/pytest
    git -C /work/scratch/pytest checkout df87db7b0462fb764ef73fa00561adf8ad047572
    python3 -m venv /work/scratch/pyvenv
    cd /work/scratch/pytest && SETUPTOOLS_SCM_PRETEND_VERSION=9.1.0.dev0 \\
        /work/scratch/pyvenv/bin/pip install -e '.[dev]' pytest-xdist coverage pyyaml
    python -m bench mutation --tree pytest --python /work/scratch/pyvenv/bin/python --workdir /work/scratch/mut

What one run does, in ``--workdir``:

1. ``tree/``: a ``git clone --shared`` of the repository at the commit (`bench._mutation_tree`),
   run with ``PYTHONPATH`` = the copy's source root, then this repository (so ``ci`` imports).
   The universe is the test files the tree's pytest configuration collects, run twice at the base
   commit (``-n 2``, JUnit); a file failing in either run is left out and named. Per-file
   seconds come from those runs. A minimal ``registry.yaml`` is written into the copy.
2. ``depmap.json``: the universe run once more with ``-p ci.pytest_plugin --tier cpu`` and
   ``CI_DEPMAP`` (the runtime map the selector reads); ``executed.json``: executed lines from a
   plain ``coverage run --parallel-mode -m pytest`` of the universe (coverage.py's own data).
3. ``--mutants N`` seeded behaviour mutations of the source root's files, at executed statements
   (`bench._mutation_gen`). Each is applied, its ``__pycache__`` entry removed, the universe run
   (``-n 2``, a limit of 3x the slowest baseline, at least `MIN_MUTANT_LIMIT` s; a timeout or a run without a usable JUnit has no
   per-file verdict: it is stored with every file, kept out of the failing pairs and listed), and
   the file restored from git. One line per
   mutant goes to ``mutants.jsonl`` (flushed, fsynced); ``--resume`` skips the mutants done and
   reuses steps 1-2.
4. Three selectors on the same mutants: the runtime map (`bench._mutation_runtime`), the static
   import graph (``ci plan`` on the generated registry) and the path-prefix rule
   (`bench._mutation_select`). Recall = selected failing (mutant, test file) pairs / failing pairs
   (goal >= 99.5 %, a MISSED line when not met); mean fraction of universe files and of est-time
   selected, each as a ratio to the static graph's. Every miss is listed.

``--flake-runs K``: each failing pair is told mutant-broken or flake-broken
(`bench._mutation_flakes`: its file's tests rerun K times unmutated and, where a test failed
unmutated, K times under the mutant); flake pairs are counted apart from recall, in a column of
their own, each listed with its evidence.

``--by-test``: a fifth table, selection by test id instead of file, a measured potential
(`bench._mutation_bytest`: one contexts run, reruns of each mutant's failing files).

``--quick``: a tiny tree made in a temp dir (`bench._mutation_quick`), this interpreter, 5 mutants,
``-n 0``. Exit 0 when the tables are complete; 2 for bad usage or a missing repository; 1 when
the tree could not be prepared.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from bench import _mutation_bytest as bytest
from bench._mutation_flakes import PairVerdict, flake_check
from bench._mutation_baseline import PREFILTERED, Baseline, Options, baseline, say
from bench._mutation_gen import Mutant, generate
from bench._mutation_quick import build_quick_tree
from bench._mutation_report import GOAL_RECALL, miss_lines, score, selector_table, unjudged_lines
from bench._mutation_run import drop_bytecode, run_suite
from bench._mutation_runtime import runtime_selection
from bench._mutation_select import SelectionTree, path_prefix_selection, static_selection
from bench._mutation_store import MutantResult, ResultsError, append_result, load_results
from bench._mutation_tree import TreeError, TreeSpec, coverage_lines, make_copy, pythonpath, read_executed
from bench.table import format_table, ratio
from ci.atomic_write import atomic_write_text
from ci.registry import load_registry
from ci.selection.depmap_format import parse_depmap

PYTEST_COMMIT = "df87db7b0462fb764ef73fa00561adf8ad047572"
PYTEST_MIRROR = Path("/work/.mirror/pytest-dev+pytest/repo")
_PYTEST_VERSION = ('__version__ = version = "9.1.0.dev0"\n__version_tuple__ = version_tuple = (9, 1, 0, "dev0")\n'
                   "__commit_id__ = commit_id = None\n")
PYTEST = TreeSpec("pytest", PYTEST_COMMIT, "src", "testing", ("test_*.py", "*_test.py"),
                  {"src/_pytest/_version.py": _PYTEST_VERSION})
CLICK_COMMIT = "2c8cd3ac958a7eb316d67f2d316c27086c4c0369"  # 2026-08-20
CLICK = TreeSpec("click", CLICK_COMMIT, "src", "tests", ("test_*.py",))
ITSDANGEROUS_COMMIT = "672971d66a2ef9f85151e53283113f33d642dabd"  # 2025-06-14
ITSDANGEROUS = TreeSpec("itsdangerous", ITSDANGEROUS_COMMIT, "src", "tests", ("test_*.py",))
RICH_COMMIT = "42899d8a0a96b121a514516f4be9db44ff7aeaf3"  # 2026-02-19, the commit of rich's other measurements
RICH = TreeSpec("rich", RICH_COMMIT, "rich", "tests", ("test_*.py",), import_root=".")
REPO_TREES = {"click": CLICK, "itsdangerous": ITSDANGEROUS, "rich": RICH}  # trees read from --repo
CI_ROOT = Path(__file__).resolve().parents[1]
# a suite of a few seconds, run on a loaded machine, took over 3x its baseline under mutants that
# fail most of its tests (itsdangerous: 4 of 14 timed out at 16 s)
MIN_MUTANT_LIMIT = 60.0
# This repository: mutate the system under test (fp4kv/); its own tests are the universe, every
# test of fp4kv kept whatever its seconds.
SELF_KEEP = ("tests/quant", "tests/mem_cache")


def self_spec(workdir: Path, resume: bool) -> TreeSpec:
    """This repository at HEAD, or, resuming, at the commit its copy in ``workdir`` holds."""
    copy = workdir / "tree"
    where = copy if resume and (copy / ".git").exists() else CI_ROOT
    proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True)
    if proc.returncode != 0:
        raise TreeError(f"{where}: not a git checkout ({proc.stderr.strip()})")
    return TreeSpec("self", proc.stdout.strip(), "fp4kv", "tests", import_root=".", keep=SELF_KEEP)


_ORACLE = "failing files themselves (the oracle)"


def record_and_cover(opts: Options, tree: Path, spec: TreeSpec, env: dict[str, str],
                     base: Baseline) -> dict[str, frozenset[int]]:
    """Step 2: the runtime map (``depmap.json``) and coverage.py's executed lines."""
    depmap, executed = opts.workdir / "depmap.json", opts.workdir / "executed.json"
    limit = 6 * max(base.walls.values())
    if not (opts.resume and depmap.is_file()):
        say("bench mutation: recording the runtime map "
             + ("(ci observe)" if opts.observe else "(CI_DEPMAP, -p ci.pytest_plugin --tier cpu)"))
        # the start-up hook in the tree's interpreter, as `ci run --record-depmap` installs it: the
        # pytest process is measured from its first line (ci.observe.child)
        subprocess.run([opts.python, "-c", "from ci.observe.startup import install; install()"], cwd=tree,
                       env={**os.environ, **env}, capture_output=True, timeout=60)
        if opts.observe:  # the adopter's path: the tree's own pytest command, wrapped
            run = run_suite(opts.python, tree, base.universe, opts.workdir / "recording.xml", workers=opts.workers,
                            limit=limit, extra_env=env,
                            prefix=("-m", "ci", "observe", "--out", str(depmap), "--", opts.python, "-m"))
        else:
            run = run_suite(opts.python, tree, base.universe, opts.workdir / "recording.xml", workers=opts.workers,
                            limit=limit, extra_env={**env, "CI_DEPMAP": str(depmap)},
                            plugin_args=("-p", "ci.pytest_plugin", "--tier", "cpu"))
        if not depmap.is_file():
            raise TreeError(f"the recording run wrote no map ({run.broken or f'exit {run.exit}'}): {run.tail[-300:]!r}")
        base.walls["recording (ci observe)" if opts.observe else "recording (CI_DEPMAP)"] = run.wall
    if not (opts.resume and executed.is_file()):
        say("bench mutation: coverage run for executed lines")
        base.walls["coverage run (coverage.py)"] = coverage_lines(
            opts.python, tree, spec, base.universe, opts.workdir, workers=opts.workers, limit=limit, env=env)[1]
    atomic_write_text(opts.workdir / "baseline.json", json.dumps(asdict(base), indent=1))
    return read_executed(executed)


def mutants_of(tree: Path, spec: TreeSpec, executed: dict[str, frozenset[int]], opts: Options) -> list[Mutant]:
    listed = subprocess.run(["git", "ls-files", "--", f"{spec.source_root}/*.py"], cwd=tree, capture_output=True,
                            text=True, check=True).stdout.split()
    sources = {p: (tree / p).read_text(encoding="utf-8") for p in listed}
    return generate(sources, executed, opts.mutants, opts.seed)


def mutant_limit(base: Baseline) -> float:
    """Seconds one run of the universe under a mutant may take (module docstring, step 3)."""
    return max(MIN_MUTANT_LIMIT, 3 * max(v for k, v in base.walls.items() if k.startswith("baseline")))


def run_mutant(opts: Options, tree: Path, mutant: Mutant, base: Baseline, env: dict[str, str]) -> MutantResult:
    """Step 3 for one mutant: apply, run the universe, restore from git (module docstring)."""
    target = tree / mutant.path
    limit = mutant_limit(base)
    try:
        atomic_write_text(target, mutant.source)
        drop_bytecode(target)
        run = run_suite(opts.python, tree, base.universe, opts.workdir / "mutant.xml", workers=opts.workers,
                        limit=limit, extra_env=env)
    finally:
        subprocess.run(["git", "checkout", "-q", "--", mutant.path], cwd=tree, check=True)
        drop_bytecode(target)
    universe = set(base.universe)
    failing = sorted(universe if run.failing is None else run.failing & universe)
    return MutantResult(mutant.id, mutant.path, mutant.line, mutant.operator, mutant.diff, tuple(failing), run.wall,
                        run.exit, run.broken)


def measure(opts: Options, repo: Path, spec: TreeSpec) -> int:
    opts.workdir.mkdir(parents=True, exist_ok=True)
    results_path = opts.workdir / "mutants.jsonl"
    if results_path.exists() and not opts.resume:
        print(f"bench mutation: {results_path} exists: pass --resume to continue it, or another --workdir",
              file=sys.stderr)
        return 2
    tree = make_copy(repo, spec, opts.workdir)
    env = pythonpath(tree, spec, CI_ROOT)
    base = baseline(opts, tree, spec, env)
    executed = record_and_cover(opts, tree, spec, env, base)
    mutants = mutants_of(tree, spec, executed, opts)
    results, warnings = load_results(results_path)
    for warning in warnings:
        say(f"bench mutation: warning: {warning}")
    for i, mutant in enumerate(mutants, 1):
        if mutant.id in results or opts.report_only:
            continue
        result = run_mutant(opts, tree, mutant, base, env)
        append_result(results_path, result)
        results[mutant.id] = result
        say(f"bench mutation: mutant {i}/{len(mutants)} {mutant.id} {mutant.path}:{mutant.line} {mutant.operator}: "
             f"{len(result.failing)} failing file(s), {result.wall:.0f} s{' ' + result.broken if result.broken else ''}")
    flakes = (flake_check(opts.python, tree, mutants, results, opts.workdir, runs=opts.flake_runs,
                          workers=opts.workers, limit=mutant_limit(base), env=env, say=say)
              if opts.flake_runs else None)
    by_test = (bytest.prepare(opts.python, tree, spec.source_root, base.universe, opts.workdir, env=env, say=say,
                              limit=6 * max(base.walls.values()), mutants=mutants, results=results,
                              budget=opts.by_test_budget)
               if opts.by_test else None)
    report(opts, tree, spec, base, mutants, results, by_test, flakes)
    return 0


def report(opts: Options, tree: Path, spec: TreeSpec, base: Baseline, mutants: list[Mutant],
           results: dict[str, MutantResult], by_test: bytest.ByTestInputs | None = None,
           flakes: list[PairVerdict] | None = None) -> None:
    """Print the runs table, the universe's exclusions, the selector table, the goal and every miss
    (and with ``--by-test`` the by-test-id table, `bench._mutation_bytest`; with ``--flake-runs``
    recall over the mutant-broken pairs, each flake pair listed apart with its evidence)."""
    universe = frozenset(base.universe)
    done = [results[m.id] for m in mutants if m.id in results]
    first = base.walls["baseline run 1"]
    candidates = len(universe) + sum(1 for why in base.excluded.values() if not why.startswith(PREFILTERED))
    rows = [(name, candidates if name.startswith("baseline") else len(universe), "", f"{wall:.1f}", ratio(wall / first))
            for name, wall in base.walls.items()]
    if done:
        mean = sum(r.wall for r in done) / len(done)
        rows.append(("mutant runs (mean)", len(universe), f"{sum(len(r.failing) for r in done) / len(done):.1f}",
                     f"{mean:.1f}", ratio(mean / first)))
    print(format_table(("run", "files", "failing files (mean)", "wall s", "x baseline run 1"), rows,
                       title=f"tree {spec.name} at {spec.commit[:12]} ({tree}), -n {opts.workers}"))
    print()
    for path, why in base.excluded.items():
        print(f"left out of the universe: {path} ({why})")
    broken = [r for r in done if r.broken]
    print(f"mutants: {len(done)} run of {len(mutants)}, {sum(1 for r in done if r.failing)} killed (>= 1 failing file), "
          f"{sum(len(r.failing) for r in done if not r.broken)} failing (mutant, test file) pairs with a verdict; "
          f"{len(broken)} run(s) without a per-file verdict, left out of the pairs (listed below the table)")
    tree_view = SelectionTree(tree, load_registry(tree / "registry.yaml"), universe)
    selectors = {"runtime map": lambda m: runtime_selection(opts.workdir / "depmap.json", tree_view, m),
                 "runtime map, by function body": lambda m: runtime_selection(opts.workdir / "depmap.json", tree_view,
                                                                              m, by_statement=False),
                 "runtime map, no cache walk": lambda m: runtime_selection(opts.workdir / "depmap.json", tree_view, m,
                                                                           walk=False),
                 "runtime map, module level whole": lambda m: runtime_selection(opts.workdir / "depmap.json", tree_view,
                                                                                m, uses=False),
                 "static graph": lambda m: static_selection(tree_view, m.path),
                 "path prefix": lambda m: path_prefix_selection(universe, m.path),
                 _ORACLE: lambda m: set(results[m.id].failing) if m.id in results else set()}
    flake_pairs = [(v.mutant, v.file) for v in flakes or () if v.flake]
    scores = score(selectors, mutants, results, universe, seconds_for_scoring(opts, base), flake_pairs)
    print(selector_table(scores, "static graph"))
    graph = next(s for s in scores if s.name == "static graph")
    print()
    recall = scores[0].recall
    verdict = "n/a (no failing pair)" if recall is None else ("MET" if recall >= GOAL_RECALL else "MISSED")
    if graph.mean_judged_time:
        print(f"over the {len(graph.judged_time_fractions)} mutants with a verdict, est-time as x the static graph's: "
              + ", ".join(f"{s.name} {s.mean_judged_time / graph.mean_judged_time:.2f}" for s in scores)
              + f" (the failing files are the least any selector that misses nothing can select)")
    print(f"goal: runtime map recall >= {GOAL_RECALL:.1%}: {verdict}" + (f" ({recall:.2%})" if recall is not None else ""))
    for line in unjudged_lines(scores) + miss_lines(scores):
        print(line)
    if flakes is not None:
        print(f"flakes ({opts.flake_runs} reruns each way): {len(flakes) - len(flake_pairs)} failing pair(s) "
              f"mutant-broken, {len(flake_pairs)} flake pair(s) counted apart (not in recall):")
        by_id = {m.id: m for m in mutants}
        for verdict in (v for v in flakes if v.flake):
            mutant = by_id[verdict.mutant]
            seen = "selected" if verdict.file in selectors["runtime map"](mutant) else "not selected"
            print(f"flake pair: {mutant.id} {mutant.path}:{mutant.line} -> {verdict.file} ({seen} by the runtime map): "
                  f"{verdict.describe()}")
    if by_test is not None:
        print()
        print(bytest.by_test_table(by_test, mutants, results, selectors["runtime map"], selectors["static graph"]))


def seconds_for_scoring(opts: Options, base: Baseline) -> dict[str, float]:
    """Each universe file's seconds for the est-time columns: with ``--observe`` the map's
    observed ``duration_s``, else (and for a file without one) the baselines' mean; says which."""
    if not opts.observe:
        say("bench mutation: est-time from the baseline runs' JUnit durations")
        return base.durations
    path = opts.workdir / "depmap.json"
    observed = {t: e.duration_s for t, e in parse_depmap(path.read_bytes(), str(path)).tests.items()
                if t in base.durations and e.duration_s is not None}
    say(f"bench mutation: est-time from the observation's duration_s for {len(observed)} of "
         f"{len(base.durations)} universe files, the baselines' for the rest")
    return {**base.durations, **observed}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench mutation", description=__doc__.splitlines()[0])
    parser.add_argument("--tree", choices=("pytest", "self", *REPO_TREES), default="pytest")
    parser.add_argument("--repo", type=Path, default=None,
                        help="--tree click|itsdangerous|rich: a clone or mirror of that repository")
    parser.add_argument("--observe", action="store_true", help="record the map with `ci observe` (module docstring)")
    parser.add_argument("--pytest-repo", type=Path, default=PYTEST_MIRROR)
    parser.add_argument("--python", default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--mutants", type=int, default=None)
    parser.add_argument("--seed", type=int, default=20261204)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--report-only", action="store_true",
                        help="with --resume: print the tables for the mutants run so far, run no more")
    parser.add_argument("--max-file-seconds", type=float, default=None,
                        help="leave out of the universe the files slower than this in the baselines (named)")
    parser.add_argument("--by-test", action="store_true",
                        help="add the by-test-id row: a contexts run and reruns of each mutant's failing files "
                             "(bench._mutation_bytest; the interpreter needs pytest-cov)")
    parser.add_argument("--by-test-budget", type=float, default=None,
                        help="with --by-test: start no rerun after this many seconds (cheapest first; resumable)")
    parser.add_argument("--flake-runs", type=int, default=0, metavar="K",
                        help="tell mutant-broken pairs from flake-broken ones with K reruns each way "
                             "(bench._mutation_flakes); flake pairs are counted apart")
    parser.add_argument("--quick", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        if args.quick:
            with tempfile.TemporaryDirectory(prefix="bench-mutation-") as tmp:
                repo = Path(tmp) / "repo"
                repo.mkdir()
                spec = build_quick_tree(repo)
                opts = Options(sys.executable, Path(tmp) / "work", args.mutants or 5, args.seed, 0, False,
                               flake_runs=args.flake_runs)
                return measure(opts, repo, spec)
        if args.tree == "self":
            if args.workdir is None:
                print("bench mutation: --tree self needs --workdir DIR", file=sys.stderr)
                return 2
            workdir = args.workdir.resolve()
            opts = Options(args.python or sys.executable, workdir, args.mutants or 100, args.seed, args.workers,
                           args.resume, args.max_file_seconds, args.report_only, args.observe, args.by_test,
                           args.by_test_budget, args.flake_runs)
            return measure(opts, CI_ROOT, self_spec(workdir, args.resume))
        spec, repo, flag = ((REPO_TREES[args.tree], args.repo, "--repo") if args.tree in REPO_TREES
                            else (PYTEST, args.pytest_repo, "--pytest-repo"))
        if repo is None or not ((repo / "HEAD").is_file() or (repo / ".git").exists()):
            print(f"bench mutation: {flag} {repo}: no git repository there (a clone or mirror "
                  f"of {spec.name}'s repository holding {spec.commit[:12]})", file=sys.stderr)
            return 2
        if args.python is None or args.workdir is None:
            print("bench mutation: give --python PY (an interpreter with the tree's test dependencies) and "
                  "--workdir DIR; see the module docstring for the setup", file=sys.stderr)
            return 2
        opts = Options(args.python, args.workdir.resolve(), args.mutants or 100, args.seed, args.workers, args.resume,
                       args.max_file_seconds, args.report_only, args.observe, args.by_test,
                       args.by_test_budget, args.flake_runs)
        return measure(opts, repo, spec)
    except (TreeError, ResultsError) as exc:
        print(f"bench mutation: {exc}", file=sys.stderr)
        return 1
