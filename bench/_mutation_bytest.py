"""The by-test-id selector row of ``bench mutation --by-test``: what selecting test ids, not files,
would select and miss (a measured potential; ``ci plan`` selects files).

Contract:
- `record_contexts`: one extra run of the universe under coverage.py with pytest-cov's per-test
  contexts (``--cov-context=test``, ``-n 0``; the interpreter needs pytest-cov), JUnit beside it,
  data in ``<workdir>/contexts/.coverage``; kept and reused when present.
- `read_contexts`: per source file (repo-relative) and line, the pytest node ids whose setup,
  call or teardown ran it; a line run outside every test (import, collection) has the context
  ``""``.
- `junit_tests`: per node id of one JUnit report, its seconds and whether it failed or errored;
  a collection error is the file itself as the id. `mean_seconds` is the mean over reports.
- `mutant_failing_tests`: each stored mutant's failing node ids, from a rerun of its failing files
  alone under the mutant (``<workdir>/mutant_tests.jsonl``, one line per mutant, resumable).
- `by_test_selection`: the node ids whose context ran a line the mutant's diff touches (the file
  selector's change detection), plus every test of each file the file selector chose that holds
  no such test (its reason is module level, import time, shared code or the cache walk: the file
  is taken whole, as the file rules take it). ``whole_files`` says which.
- `score_by_test`: recall on failing node ids and on failing files (a file is caught when one of
  its failing ids is selected), and the mean share of the universe's test seconds selected.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Callable, Iterable, Mapping, Sequence

from bench._mutation_gen import Mutant
from bench._mutation_run import case_failed, clean_env, drop_bytecode, read_report, run_suite
from bench._mutation_store import MutantResult
from bench._mutation_tree import TreeError
from bench.table import format_table
from ci.atomic_write import atomic_write_text
from ci.selection.diff_hunks import file_diffs, touched_old_lines

Contexts = dict[str, dict[int, frozenset[str]]]
_PHASES = ("|setup", "|run", "|teardown")


def record_contexts(python: str, tree: Path, source_root: str, universe: Sequence[str], workdir: Path, *,
                    limit: float, env: Mapping[str, str]) -> float | None:
    """The contexts run (module docstring); its wall seconds, None when the data were reused."""
    data = workdir / "contexts" / ".coverage"
    if data.is_file():
        return None
    check = subprocess.run([python, "-c", "import pytest_cov"], cwd=tree, env=clean_env(env), capture_output=True)
    if check.returncode != 0:
        raise TreeError(f"{python}: pytest-cov is not importable; install it there for --by-test")
    data.parent.mkdir(exist_ok=True)
    rc = workdir / "contexts.rc"
    atomic_write_text(rc, f"[run]\ndata_file = {data}\nsource = {tree / source_root}\n")
    run = run_suite(python, tree, universe, workdir / "contexts.xml", workers=0, limit=limit, extra_env=env,
                    plugin_args=("-p", "pytest_cov", "--cov", f"--cov-config={rc}", "--cov-context=test",
                                 "--cov-report="))
    if not data.is_file():
        raise TreeError(f"{tree}: the contexts run wrote no data ({run.broken or f'exit {run.exit}'}): {run.tail[-300:]!r}")
    return run.wall


def read_contexts(data: Path, root: Path) -> Contexts:
    """Node ids per line per source file, through coverage.py's own data API."""
    from coverage import CoverageData  # the bench's venv has it; the CI half does not import the bench

    cov = CoverageData(basename=str(data))
    cov.read()
    out: Contexts = {}
    for measured in cov.measured_files():
        lines = cov.contexts_by_lineno(measured)
        out[_relative(measured, root)] = {line: frozenset(_node(c) for c in ctxs) for line, ctxs in lines.items()}
    return out


def _node(context: str) -> str:
    for phase in _PHASES:
        if context.endswith(phase):
            return context[: -len(phase)]
    return context


def _relative(path: str, root: Path) -> str:
    p = Path(path)
    return p.relative_to(root).as_posix() if p.is_absolute() and p.is_relative_to(root) else p.as_posix()


@dataclass(frozen=True)
class JUnitTests:
    seconds: dict[str, float]
    failing: frozenset[str]


def junit_tests(junit: Path, root: Path, known: Iterable[str]) -> JUnitTests | None:
    """Node ids of one report (module docstring); None for a missing or unreadable report."""
    report = read_report(junit, root, known)
    if report is None:
        return None
    seconds: dict[str, float] = {}
    failing = set()
    for case in report.cases:
        node = node_id(case.file, case.classname, case.name)
        seconds[node] = seconds.get(node, 0.0) + case.time
        if case_failed(case):
            failing.add(node)
    return JUnitTests(seconds, frozenset(failing))


def node_id(file: str, classname: str, name: str) -> str:
    """pytest's node id from an xunit1 case: ``file::Class::name``; a collection error is the file."""
    module = file[:-3].replace("/", ".") if file.endswith(".py") else file
    if not classname and (name == module or not name):
        return file
    classes = classname[len(module) + 1:].split(".") if classname.startswith(module + ".") else []
    return "::".join([file, *[c for c in classes if c], name])


def mean_seconds(reports: Sequence[JUnitTests]) -> dict[str, float]:
    """Mean seconds per node id over the reports that hold it."""
    runs: dict[str, list[float]] = defaultdict(list)
    for report in reports:
        for node, seconds in report.seconds.items():
            runs[node].append(seconds)
    return {node: fmean(values) for node, values in runs.items()}


def mutant_failing_tests(python: str, tree: Path, mutants: Sequence[Mutant], results: Mapping[str, MutantResult],
                         workdir: Path, *, limit: float, env: Mapping[str, str], say: Callable[[str], None],
                         file_seconds: Mapping[str, float], budget: float | None = None) -> dict[str, frozenset[str]]:
    """Each judged mutant's failing node ids (module docstring); a rerun without a JUnit is left out.
    The cheapest reruns (by their files' ``file_seconds``) go first; none starts after ``budget`` s."""
    path = workdir / "mutant_tests.jsonl"
    done = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                done[row["id"]] = frozenset(row["failing_tests"])
    start = time.monotonic()
    todo = [m for m in mutants if m.id in results and not results[m.id].broken and m.id not in done]
    ordered = sorted(todo, key=lambda m: sum(file_seconds.get(f, 0.0) for f in results[m.id].failing))
    for i, mutant in enumerate(ordered):
        if budget is not None and time.monotonic() - start > budget:
            say(f"bench mutation: --by-test-budget {budget:g} s spent: {len(ordered) - i} rerun(s) left")
            break
        failing = sorted(results[mutant.id].failing)
        if failing:
            target = tree / mutant.path
            try:
                atomic_write_text(target, mutant.source)
                drop_bytecode(target)
                junit = workdir / "mutant_tests.xml"
                run_suite(python, tree, failing, junit, workers=0, limit=limit, extra_env=env)
            finally:
                subprocess.run(["git", "checkout", "-q", "--", mutant.path], cwd=tree, check=True)
                drop_bytecode(target)
            read = junit_tests(junit, tree, failing)
            if read is None:
                say(f"bench mutation: {mutant.id}: the rerun of its failing files gave no JUnit; left out")
                continue
            done[mutant.id] = read.failing
        else:
            done[mutant.id] = frozenset()
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"id": mutant.id, "failing_tests": sorted(done[mutant.id])}) + "\n")
        say(f"bench mutation: {mutant.id}: {len(done[mutant.id])} failing test id(s) in {len(failing)} file(s)")
    return done


@dataclass(frozen=True)
class ByTestSelection:
    tests: frozenset[str]
    whole_files: frozenset[str]


def _file_of(node: str) -> str:
    return node.split("::", 1)[0]


def by_test_selection(contexts: Contexts, mutant: Mutant, file_selection: set[str],
                      tests_of: Mapping[str, Sequence[str]]) -> ByTestSelection:
    """See the module docstring; ``tests_of``: the node ids of each universe file."""
    touched = touched_old_lines(file_diffs(mutant.diff))
    ran: set[str] = set()
    for path, lines in touched.items():
        by_line = contexts.get(path, {})
        for line in lines:
            ran |= {n for n in by_line.get(line, ()) if n}
    ran = {n for n in ran if _file_of(n) in tests_of}
    files_ran = {_file_of(n) for n in ran}
    whole = frozenset(f for f in file_selection if f not in files_ran and f in tests_of)
    return ByTestSelection(frozenset(ran) | {n for f in whole for n in tests_of[f]}, whole)


@dataclass
class ByTestScore:
    """The by-test row (`score_by_test`); time fractions are shares of the universe's test
    seconds, for this selector, the file selector and the static graph alike."""

    selected_tests: int = 0
    failing_tests: int = 0
    selected_files: int = 0
    failing_files: int = 0
    time_fractions: list[float] = field(default_factory=list)
    file_time_fractions: list[float] = field(default_factory=list)
    static_time_fractions: list[float] = field(default_factory=list)
    whole_files: list[int] = field(default_factory=list)
    misses: list[tuple[str, str]] = field(default_factory=list)
    file_selected_tests: int = 0
    with_ids: int = 0
    reached_files: int = 0
    judged_files: int = 0

    def x_static(self, fractions: Sequence[float]) -> float:
        """Mean of ``fractions`` as a ratio to the static graph's mean."""
        base = fmean(self.static_time_fractions) if self.static_time_fractions else 0.0
        return fmean(fractions) / base if base and fractions else 0.0


def score_by_test(mutants: Sequence[Mutant], results: Mapping[str, MutantResult],
                  failing: Mapping[str, frozenset[str]], select: Callable[[Mutant], ByTestSelection],
                  files: Callable[[Mutant], set[str]], static: Callable[[Mutant], set[str]],
                  seconds: Mapping[str, float]) -> ByTestScore:
    """Over every mutant with a verdict: test seconds selected (``files`` and ``static``, the file
    selector and the static graph, timed with the same test seconds) and the failing files that
    hold a selected test (``reached``, a bound: the test that fails may not be among them); over
    the mutants with failing ids (``failing``), recall on those ids and on their files."""
    total = sum(seconds.values()) or 1.0
    per_file: dict[str, float] = defaultdict(float)
    for node, value in seconds.items():
        per_file[_file_of(node)] += value
    out = ByTestScore()
    for mutant in mutants:
        result = results.get(mutant.id)
        if result is None or result.broken:
            continue
        chosen = select(mutant)
        reached = {_file_of(n) for n in chosen.tests} | chosen.whole_files
        out.reached_files += len(set(result.failing) & reached)
        out.judged_files += len(result.failing)
        file_choice = files(mutant)
        out.time_fractions.append(sum(seconds.get(n, 0.0) for n in chosen.tests) / total)
        out.file_time_fractions.append(sum(per_file.get(f, 0.0) for f in file_choice) / total)
        out.static_time_fractions.append(sum(per_file.get(f, 0.0) for f in static(mutant)) / total)
        out.whole_files.append(len(chosen.whole_files))
        if mutant.id not in failing:
            continue
        ids = failing[mutant.id]
        # a collection error (the file as its id) fails whichever of the file's tests runs
        caught = {n for n in ids if n in chosen.tests or (n == _file_of(n) and n in reached)}
        out.with_ids += 1
        out.failing_tests += len(ids)
        out.selected_tests += len(caught)
        out.failing_files += len({_file_of(n) for n in ids})
        out.selected_files += len({_file_of(n) for n in caught})
        out.misses += [(mutant.id, n) for n in sorted(ids - caught)]
        out.file_selected_tests += sum(1 for n in ids if _file_of(n) in file_choice)
    return out


@dataclass(frozen=True)
class ByTestInputs:
    """What the by-test row reads: contexts, failing ids per mutant, seconds and ids per file."""

    contexts: Contexts
    failing: dict[str, frozenset[str]]
    seconds: dict[str, float]
    tests_of: dict[str, tuple[str, ...]]


def prepare(python: str, tree: Path, source_root: str, universe: Sequence[str], workdir: Path, *, limit: float,
            env: Mapping[str, str], mutants: Sequence[Mutant], results: Mapping[str, MutantResult],
            say: Callable[[str], None], budget: float | None = None) -> ByTestInputs:
    """The contexts run and the failing-id reruns (each reused when stored), and the baselines'
    per-test seconds (``baseline1.xml``, ``baseline2.xml``)."""
    wall = record_contexts(python, tree, source_root, universe, workdir, limit=limit, env=env)
    if wall is not None:
        say(f"bench mutation: contexts run (pytest-cov --cov-context=test, -n 0): {wall:.1f} s")
    reports = [r for r in (junit_tests(workdir / f"baseline{i}.xml", tree, universe) for i in (1, 2)) if r]
    if not reports:
        raise TreeError(f"{workdir}: no baseline JUnit (baseline1.xml, baseline2.xml) for per-test seconds")
    seconds = {n: s for n, s in mean_seconds(reports).items() if _file_of(n) in set(universe)}
    tests_of: dict[str, list[str]] = defaultdict(list)
    for node in sorted(seconds):
        tests_of[_file_of(node)].append(node)
    per_file: dict[str, float] = defaultdict(float)
    for node, value in seconds.items():
        per_file[_file_of(node)] += value
    failing = mutant_failing_tests(python, tree, mutants, results, workdir, limit=limit, env=env, say=say,
                                   file_seconds=per_file, budget=budget)
    return ByTestInputs(read_contexts(workdir / "contexts" / ".coverage", tree), failing, seconds,
                        {f: tuple(ids) for f, ids in tests_of.items()})


def by_test_table(inputs: ByTestInputs, mutants: Sequence[Mutant], results: Mapping[str, MutantResult],
                  files: Callable[[Mutant], set[str]], static: Callable[[Mutant], set[str]]) -> str:
    """The by-test row beside the file selector and the static graph, timed by test seconds, and
    one line per missed failing id."""
    s = score_by_test(mutants, results, inputs.failing,
                      lambda m: by_test_selection(inputs.contexts, m, files(m), inputs.tests_of), files, static,
                      inputs.seconds)

    def pct(part: int, whole: int) -> str:
        return f"{part / whole:.1%} ({part}/{whole})" if whole else "n/a"

    def mean(values: Sequence[float]) -> str:
        return f"{fmean(values):.1%}" if values else "n/a"

    rows = [("runtime map, by test id (coverage contexts, measured potential)", pct(s.selected_tests, s.failing_tests),
             pct(s.selected_files, s.failing_files), pct(s.reached_files, s.judged_files), mean(s.time_fractions),
             f"{s.x_static(s.time_fractions):.2f}"),
            ("runtime map (files)", pct(s.file_selected_tests, s.failing_tests), "", "", mean(s.file_time_fractions),
             f"{s.x_static(s.file_time_fractions):.2f}"),
            ("static graph (baseline)", "", "", "", mean(s.static_time_fractions), "1.00")]
    whole = sorted(s.whole_files)
    table = format_table(("selector", "recall (failing test ids)", "recall (their files)",
                          "failing files holding a selected test", "test seconds selected (mean)", "x static graph"),
                         rows, title=f"by test id: {len(s.time_fractions)} mutants with a verdict, {s.with_ids} with "
                                     f"failing test ids; test seconds from the baselines' JUnit; files taken whole "
                                     f"per mutant: median {whole[len(whole) // 2] if whole else 0}")
    return "\n".join([table, *(f"miss (by test id): {m} -> {n} not selected" for m, n in s.misses)])


__all__ = ["ByTestInputs", "ByTestScore", "ByTestSelection", "Contexts", "JUnitTests", "by_test_selection",
           "by_test_table", "junit_tests", "mean_seconds", "mutant_failing_tests", "node_id", "prepare",
           "read_contexts", "record_contexts", "score_by_test"]
