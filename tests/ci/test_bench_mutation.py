"""``bench mutation``'s parts: the mutant generator, the JUnit -> failing files reader (real pytest
runs are the oracle), the resumable results file, and the selectors' rules on hand-made trees."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench._mutation_gen import Mutant, apply_edit, generate, sites, unified_diff
from bench._mutation_quick import build_quick_tree
from bench._mutation_report import score
from bench._mutation_run import failing_files, run_suite
from bench._mutation_runtime import runtime_selection
from bench._mutation_select import SelectionTree, module_name, path_prefix_selection, static_selection
from bench._mutation_store import MutantResult, ResultsError, append_result, load_results
from bench._mutation_tree import TreeError, make_copy, write_registry
from ci.registry import load_registry
from ci.selection.depmap_format import DepMap, TestMap, dump_depmap

# -- the generator ------------------------------------------------------------------------------

# (snippet, operator, line the edit must change, that line afterwards)
CASES = [
    ("import os\n\n\ndef f(a, b):\n    return a < b\n", "comparison", 5, "    return a >= b"),
    ("def f(a):\n    x = 1\n    if a == x:\n        return 1\n", "comparison", 3, "    if a != x:"),
    ("def f(a):\n    if a in (\n        1, 2):\n        return 0\n", "comparison", 2, "    if a not in ("),
    ("def f(a):\n    if a is not None:\n        a.close()\n", "comparison", 2, "    if a is None:"),
    ("def f(a):\n    s = 'é'\n    return s, a <= 0.5\n", "comparison", 3, "    return s, a > 0.5"),
    ("LIMIT = 10\n", "constant", 1, "LIMIT = 11"),
    ("def f():\n    return 2.5\n", "constant", 2, "    return 3.5"),
    ("def f():\n    return True\n", "boolean", 2, "    return False"),
    ("def f(a, b):\n    return a and b\n", "boolop", 2, "    return a or b"),
    ("def f(a, b):\n    return (a\n            or b)\n", "boolop", 3, "            and b)"),
    ("def f(a):\n    return not a\n", "not", 2, "    return a"),
    ("def f(a):\n    '''doc'''\n    a.append(1)\n", "pass", 3, "    pass"),
    ("def f(a):\n    return [a, a]\n", "return", 2, "    return None"),
]


def _only(source: str, operator: str):
    edits = [e for s in sites(source) for e in s.edits.get(operator, ())]
    assert len(edits) == 1, (operator, edits)
    return edits[0]


@pytest.mark.parametrize(("source", "operator", "line", "after"), CASES)
def test_each_operator_rewrites_one_line_keeps_line_count_and_compiles(
        source: str, operator: str, line: int, after: str) -> None:
    mutant = apply_edit("pkg/m.py", source, _only(source, operator))
    assert mutant is not None
    assert mutant.source.count("\n") == source.count("\n")
    compile(mutant.source, "pkg/m.py", "exec")
    assert mutant.source.splitlines()[line - 1] == after
    assert mutant.line == line and mutant.operator == operator
    assert mutant.diff.startswith("--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -")
    assert re.search(rf"^@@ -{line}(,\d+)? \+{line}(,\d+)? @@$", mutant.diff, re.M), mutant.diff
    assert f"+{after}\n" in mutant.diff
    # every other line is untouched
    assert [ln for i, ln in enumerate(source.splitlines(), 1) if i != line] == \
        [ln for i, ln in enumerate(mutant.source.splitlines(), 1) if i != line]


def test_a_multi_line_statement_replaced_by_pass_keeps_its_line_count() -> None:
    source = "def f(a):\n    a.extend([1,\n              2])\n    return a\n"
    mutant = apply_edit("m.py", source, _only(source, "pass"))
    assert mutant is not None
    assert mutant.source == "def f(a):\n    pass\n\n    return a\n"


def test_a_multi_line_return_value_becomes_none_and_keeps_its_line_count() -> None:
    source = "def f(a):\n    return [a,\n            a]  # both\n"
    mutant = apply_edit("m.py", source, _only(source, "return"))
    assert mutant is not None
    assert mutant.source == "def f(a):\n    return None\n  # both\n"
    assert mutant.line == 2


def test_imports_defs_classes_docstrings_and_pass_are_never_pass_targets() -> None:
    source = ('"""Module doc."""\nimport os\nimport a.b as c\nfrom x import (y,\n    z)\n\n\n'
              'class K:\n    """doc"""\n    pass\n\n\ndef g():\n    """doc"""\n')
    assert sites(source) == []


def test_an_import_is_never_a_target_even_beside_mutable_code() -> None:
    source = "import os\nfrom sys import argv\nX = 1 < 2\n"
    found = sites(source)
    assert [s.line for s in found] == [3]
    for site in found:
        for edits in site.edits.values():
            for edit in edits:
                mutant = apply_edit("m.py", source, edit)
                assert mutant is not None
                tree = ast.parse(mutant.source)
                assert [type(n).__name__ for n in tree.body[:2]] == ["Import", "ImportFrom"]


def test_generate_is_seeded_and_only_at_executed_lines() -> None:
    source = "def f(a, b):\n    if a < b:\n        return 1\n    return a == b\n"
    sources = {"pkg/m.py": source, "pkg/n.py": source}
    executed = {"pkg/m.py": frozenset({1, 2, 3})}  # line 4 never ran; pkg/n.py never ran
    first = generate(sources, executed, 10, seed=7)
    assert first and [m.id for m in first] == [m.id for m in generate(sources, executed, 10, seed=7)]
    assert {(m.path, m.line) for m in first} <= {("pkg/m.py", 1), ("pkg/m.py", 2), ("pkg/m.py", 3)}
    assert len({m.id for m in first}) == len(first)


def test_generate_draws_operators_evenly_not_by_how_common_they_are() -> None:
    """20 statements offer only ``pass``, one offers only ``comparison`` (``a < b`` in an ``if``):
    drawn by operator first, the comparison is among the first three mutants in most seeds
    (7 in 8 expected); drawn by statement it would be about 1 in 7."""
    body = "    a.append(b)\n" * 20
    source = f"def f(a, b):\n{body}    if a < b:\n        pass\n"
    lines = frozenset(range(2, 23))
    found = [generate({"m.py": source}, {"m.py": lines}, 3, seed=seed) for seed in range(40)]
    assert all(len(mutants) == 3 for mutants in found)
    early = sum(any(m.operator == "comparison" for m in mutants) for mutants in found)
    assert early >= 28, early


# -- JUnit -> failing files, from real pytest runs ---------------------------------------------

SUITE = {
    "test_ok.py": "def test_ok():\n    assert True\n",
    "test_fails.py": "def test_ok():\n    pass\n\n\ndef test_bad():\n    assert 1 == 2\n",
    "test_collect.py": "import no_such_module_here\n\n\ndef test_x():\n    pass\n",
    "test_teardown.py": ("import pytest\n\n\n@pytest.fixture\ndef broken():\n    yield 1\n    raise RuntimeError('td')\n\n\n"
                         "def test_passes(broken):\n    assert broken == 1\n"),
}


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    for name, text in SUITE.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("workers", [0, 2])
def test_failing_files_from_a_real_run(suite: Path, workers: int) -> None:
    run = run_suite(sys.executable, suite, sorted(SUITE), suite / "junit.xml", workers=workers, limit=120,
                    extra_env={})
    assert run.broken == "" and run.exit == 1, run.tail
    assert run.failing == {"test_fails.py", "test_collect.py", "test_teardown.py"}
    assert set(run.durations) == set(SUITE)


def test_missing_or_garbled_junit_reads_as_no_verdict(tmp_path: Path) -> None:
    assert failing_files(tmp_path / "absent.xml", tmp_path, ()) is None
    (tmp_path / "cut.xml").write_text('<?xml version="1.0"?><testsuites><testsuite tests="1"><testcase')
    assert failing_files(tmp_path / "cut.xml", tmp_path, ()) is None


def test_usage_error_nothing_collected_and_timeout_are_runs_without_a_verdict(suite: Path) -> None:
    usage = run_suite(sys.executable, suite, ["test_ok.py", "--no-such-option"], suite / "j.xml", workers=0,
                      limit=120, extra_env={})
    assert usage.failing is None and usage.exit == 4 and "exit 4" in usage.broken
    (suite / "test_empty.py").write_text("X = 1\n")
    empty = run_suite(sys.executable, suite, ["test_empty.py"], suite / "j.xml", workers=0, limit=120, extra_env={})
    assert empty.failing is None and empty.exit == 5 and "no tests" in empty.broken
    (suite / "test_slow.py").write_text("import time\n\n\ndef test_slow():\n    time.sleep(60)\n")
    slow = run_suite(sys.executable, suite, ["test_slow.py"], suite / "j.xml", workers=0, limit=3, extra_env={})
    assert slow.failing is None and slow.exit is None and slow.broken.startswith("timed out after 3 s")


# -- the results file ----------------------------------------------------------------------------

def _result(i: int) -> MutantResult:
    return MutantResult(f"id{i}", "src/m.py", i, "constant", f"@@ -{i} +{i} @@\n", ("t/test_a.py",), 1.5, 1)


def test_resume_drops_a_torn_last_line_and_appends_after_it(tmp_path: Path) -> None:
    path = tmp_path / "mutants.jsonl"
    append_result(path, _result(1))
    append_result(path, _result(2))
    with open(path, "a") as fh:
        fh.write('{"id": "id3", "path": "src/m')  # killed mid-write
    results, warnings = load_results(path)
    assert list(results) == ["id1", "id2"] and results["id1"] == _result(1)
    assert len(warnings) == 1 and f"{path}:3: dropped a torn last line" in warnings[0]
    append_result(path, _result(3))
    results, warnings = load_results(path)
    assert list(results) == ["id1", "id2", "id3"] and warnings == []


def test_a_corrupt_line_before_the_last_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "mutants.jsonl"
    append_result(path, _result(1))
    with open(path, "a") as fh:
        fh.write("not json\n")
    append_result(path, _result(2))
    with pytest.raises(ResultsError, match=r"mutants\.jsonl:2: not a mutant result line"):
        load_results(path)


# -- selectors -----------------------------------------------------------------------------------

UNIVERSE = frozenset({"testing/test_junitxml.py", "testing/test_terminal.py", "testing/python/fixtures.py",
                      "testing/test_mark.py", "testing/test_mark_expression.py"})


@pytest.mark.parametrize(("changed", "expected"), [
    ("src/_pytest/junitxml.py", {"testing/test_junitxml.py"}),
    ("src/_pytest/mark/__init__.py", {"testing/test_mark.py", "testing/test_mark_expression.py"}),
    ("src/_pytest/mark/expression.py", {"testing/test_mark_expression.py"}),
    ("src/_pytest/python.py", {"testing/python/fixtures.py"}),  # a folder of that name counts: a substring
    ("src/_pytest/fixtures.py", {"testing/python/fixtures.py"}),
    ("src/_pytest/capture.py", set()),
])
def test_path_prefix_rule(changed: str, expected: set[str]) -> None:
    assert path_prefix_selection(UNIVERSE, changed) == expected


def test_module_name_of_a_package_is_its_folder() -> None:
    assert (module_name("src/a/b/__init__.py"), module_name("src/a/b/c.py")) == ("b", "c")


def test_runtime_selection_uses_the_map_and_falls_back_to_the_static_graph(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    spec = build_quick_tree(tmp_path / "repo")
    tree = make_copy(tmp_path / "repo", spec, tmp_path)
    universe = ["tests/test_area.py", "tests/test_names.py", "tests/test_other.py", "tests/test_report.py"]
    write_registry(tree, spec, universe, {})
    view = SelectionTree(tree, load_registry(tree / "registry.yaml"), frozenset(universe))
    depmap = tmp_path / "depmap.json"
    # test_report.py has no map: the static graph decides it (shapes/__init__ imports area.py)
    depmap.write_text(dump_depmap(DepMap("cpu", "2026-12-04T10:00:00+00:00", {
        "tests/test_area.py": TestMap(frozenset({"src/shapes/area.py"}), items=3, ran=3),
        "tests/test_names.py": TestMap(frozenset({"src/shapes/names.py"}), items=1, ran=1),
        "tests/test_other.py": TestMap(frozenset(), items=1, ran=1)})))
    mutant = generate({"src/shapes/area.py": (tree / "src/shapes/area.py").read_text()},
                      {"src/shapes/area.py": frozenset(range(1, 20))}, 1, seed=1)[0]
    # importing shapes.names runs shapes/__init__.py, which imports area.py: the graph takes test_names too
    assert static_selection(view, mutant.path) == {"tests/test_area.py", "tests/test_names.py", "tests/test_report.py"}
    # a version-1 map judges by file: it can add to the graph, never drop an importer
    assert runtime_selection(depmap, view, mutant) == {"tests/test_area.py", "tests/test_names.py", "tests/test_report.py"}
    # a version-2 map of the copy's commit judges by line: area()'s body ran in test_area only
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True).stdout.strip()
    lines = DepMap("cpu", "2026-12-04T10:00:00+00:00", {
        "tests/test_area.py": TestMap(frozenset({"src/shapes/area.py"}), items=3, ran=3,
                                      lines={"src/shapes/area.py": frozenset(range(1, 12))}),
        "tests/test_names.py": TestMap(frozenset({"src/shapes/names.py"}), items=1, ran=1,
                                       lines={"src/shapes/names.py": frozenset(range(1, 9))}),
        "tests/test_other.py": TestMap(frozenset(), items=1, ran=1, lines={})}, {}, head)
    (tmp_path / "lines.json").write_text(dump_depmap(lines))
    old = (tree / "src/shapes/area.py").read_text()
    assert old.splitlines()[4] == '    if kind == "square":'
    new = old.replace('if kind == "square"', 'if kind != "square"')
    body = Mutant("m1", "src/shapes/area.py", 5, "comparison", unified_diff("src/shapes/area.py", old, new), new)
    assert runtime_selection(tmp_path / "lines.json", view, body) == {"tests/test_area.py", "tests/test_report.py"}


def test_generated_registry_covers_files_collected_by_a_folder_rule(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    spec = build_quick_tree(tmp_path / "repo")
    tree = make_copy(tmp_path / "repo", spec, tmp_path)
    (tree / "tests/python").mkdir()
    (tree / "tests/python/collect.py").write_text("def test_x():\n    pass\n")
    write_registry(tree, spec, ["tests/test_area.py", "tests/python/collect.py"], {"tests/test_area.py": 2.6})
    registry = load_registry(tree / "registry.yaml")
    assert registry.project.test_patterns == ("test_*.py", "collect.py")
    assert registry.project.first_party == ("shapes",) and registry.project.source_roots == ("src",)
    assert {p: e.est_time for p, e in registry.tests.items()} == {"tests/test_area.py": 3.0,
                                                                  "tests/python/collect.py": 1.0}


def test_a_tree_importing_from_its_root_keeps_its_tests_of_the_mutated_code_whatever_their_seconds(
        tmp_path: Path) -> None:
    """--tree self's shape: mutate ``src/`` code imported from the root; the tree's own registry
    prunes slow files before the baselines, except the ``keep`` ones, and so do the baselines."""
    from bench._mutation_baseline import Baseline, _prefilter, _within_budget
    from bench._mutation_tree import TreeSpec, pythonpath, registry_seconds

    (tmp_path / "repo").mkdir()
    quick = build_quick_tree(tmp_path / "repo")
    spec = TreeSpec("rooted", quick.commit, "src/shapes", "tests", import_root="src", keep=("tests/test_area.py",))
    tree = make_copy(tmp_path / "repo", spec, tmp_path)
    assert pythonpath(tree, spec, Path("/ci"))["PYTHONPATH"] == f"{(tree / 'src').resolve()}:/ci"
    assert registry_seconds(tree) == {}  # no registry of its own: nothing pruned before running
    files = ["tests/test_area.py", "tests/test_names.py", "tests/test_other.py", "tests/test_report.py"]
    assert _prefilter(files, tree, spec, 5.0) == (files, {})
    write_registry(tree, spec, files, {"tests/test_area.py": 9.0, "tests/test_names.py": 5.0,
                                       "tests/test_other.py": 5.4, "tests/test_report.py": 2.0})
    registry = load_registry(tree / "registry.yaml")
    assert registry.project.first_party == ("shapes",) and registry.project.source_roots == ("src",)
    assert registry_seconds(tree)["tests/test_area.py"] == 9.0
    kept, slow = _prefilter(files, tree, spec, 5.0)  # 5 s exactly stays; 5.4 rounds to 5 in the registry
    assert (kept, slow) == (files, {})
    kept, slow = _prefilter(files, tree, spec, 4.0)
    assert kept == ["tests/test_area.py", "tests/test_report.py"]
    assert slow == {f: f"est_time 5 s in the tree's registry.yaml, over --max-file-seconds 4"
                    for f in ("tests/test_names.py", "tests/test_other.py")}
    base = Baseline(files, {}, {"tests/test_area.py": 9.0, "tests/test_names.py": 4.0, "tests/test_other.py": 4.01,
                                "tests/test_report.py": 1.0}, {"baseline run 1": 1.0})
    pruned = _within_budget(base, 4.0, spec)
    assert pruned.universe == ["tests/test_area.py", "tests/test_names.py", "tests/test_report.py"]
    assert pruned.excluded == {"tests/test_other.py": "4.0 s in the baselines, over --max-file-seconds 4"}
    (tree / "registry.yaml").write_text("version: 1\ntiers: [\n")
    with pytest.raises(TreeError, match=r"registry\.yaml: "):
        registry_seconds(tree)


def test_a_tree_that_tracks_its_own_registry_keeps_it(tmp_path: Path) -> None:
    from bench._mutation_baseline import _ensure_registry
    from bench._mutation_tree import has_own_registry

    (tmp_path / "repo").mkdir()
    spec = build_quick_tree(tmp_path / "repo")
    tree = make_copy(tmp_path / "repo", spec, tmp_path)
    assert not has_own_registry(tree)
    _ensure_registry(tree, spec, ["tests/test_area.py"], {})
    assert "tests/test_area.py" in (tree / "registry.yaml").read_text()  # generated: the tree had none
    own = "version: 1\n# the tree's own\n"
    (tree / "registry.yaml").write_text(own)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "add",
                    "registry.yaml"], cwd=tree, check=True)
    assert has_own_registry(tree)
    _ensure_registry(tree, spec, ["tests/test_area.py"], {})
    assert (tree / "registry.yaml").read_text() == own


def test_score_counts_pairs_and_lists_every_miss() -> None:
    source = "X = 1\nY = 2\n"
    mutants = generate({"src/m.py": source}, {"src/m.py": frozenset({1, 2})}, 2, seed=3)
    assert len(mutants) == 2
    results = {mutants[0].id: MutantResult(mutants[0].id, "src/m.py", mutants[0].line, mutants[0].operator,
                                           mutants[0].diff, ("t/a.py", "t/b.py"), 1.0, 1),
               mutants[1].id: MutantResult(mutants[1].id, "src/m.py", mutants[1].line, mutants[1].operator,
                                           mutants[1].diff, (), 1.0, 0)}
    universe = frozenset({"t/a.py", "t/b.py", "t/c.py", "t/d.py"})
    durations = {"t/a.py": 1.0, "t/b.py": 1.0, "t/c.py": 2.0, "t/d.py": 4.0}
    only_a = score({"a": lambda m: {"t/a.py"}}, mutants, results, universe, durations)[0]
    assert (only_a.selected_pairs, only_a.failing_pairs, only_a.recall) == (1, 2, 0.5)
    assert [(m.mutant.id, m.test) for m in only_a.misses] == [(mutants[0].id, "t/b.py")]
    assert only_a.mean_files == 0.25 and only_a.mean_time == 1 / 8
    nothing_failed = score({"a": lambda m: set()}, mutants[1:], results, universe, durations)[0]
    assert nothing_failed.recall is None
    # a run without a verdict (pytest's internal error) names no failing file: no pair, listed apart
    crashed = {mutants[0].id: MutantResult(mutants[0].id, "src/m.py", mutants[0].line, mutants[0].operator,
                                           mutants[0].diff, tuple(sorted(universe)), 1.0, 3, "internal error (exit 3)")}
    apart = score({"a": lambda m: {"t/a.py"}}, mutants[:1], crashed, universe, durations)[0]
    assert (apart.failing_pairs, apart.misses, apart.recall) == (0, [], None)
    assert [(r.id, n) for r, n in apart.unjudged] == [(mutants[0].id, 1)] and apart.mean_files == 0.25


# -- the command's bad input ---------------------------------------------------------------------

def test_a_missing_repository_or_interpreter_is_one_line_and_exit_2(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from bench.mutation import main

    assert main(["--pytest-repo", str(tmp_path / "nowhere"), "--python", sys.executable,
                 "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--pytest-repo {tmp_path / 'nowhere'}: no git repository there" in err
    (tmp_path / "repo").mkdir()
    build_quick_tree(tmp_path / "repo")
    assert main(["--pytest-repo", str(tmp_path / "repo"), "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "give --python PY" in err


def test_results_from_an_earlier_run_are_kept_unless_resumed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.mutation import main

    (tmp_path / "repo").mkdir()
    build_quick_tree(tmp_path / "repo")
    (tmp_path / "w").mkdir()
    append_result(tmp_path / "w" / "mutants.jsonl", _result(1))
    assert main(["--pytest-repo", str(tmp_path / "repo"), "--python", sys.executable,
                 "--workdir", str(tmp_path / "w")]) == 2
    assert "mutants.jsonl exists: pass --resume to continue it" in capsys.readouterr().err
    assert load_results(tmp_path / "w" / "mutants.jsonl")[0] == {"id1": _result(1)}


def test_the_bench_dispatcher_passes_a_flag_and_its_value_through() -> None:
    from bench.__main__ import split_args

    assert split_args(["mutation", "--tree", "pytest", "--mutants", "3", "--resume"]) == (
        ["mutation"], ["--tree", "pytest", "--mutants", "3", "--resume"])
    assert split_args(["quant", "--quick", "pool"]) == (["quant", "pool"], ["--quick"])  # a name stays a name
    assert split_args(["--mutants=3", "nosuch"]) == (["nosuch"], ["--mutants=3"])  # still refused as unknown


def test_observed_durations_score_est_time_and_the_baselines_fill_the_rest(tmp_path: Path) -> None:
    from bench.mutation import Baseline, Options, seconds_for_scoring

    (tmp_path / "depmap.json").write_text(dump_depmap(DepMap("cpu", "2026-12-06T10:00:00+00:00", {
        "tests/test_a.py": TestMap(frozenset(), items=1, ran=1, duration_s=0.25, outcome="passed"),
        "tests/test_b.py": TestMap(frozenset(), items=1, ran=1, outcome="passed"),
        "tests/test_gone.py": TestMap(frozenset(), items=1, ran=1, duration_s=9.0, outcome="passed")})))
    base = Baseline(["tests/test_a.py", "tests/test_b.py"], {}, {"tests/test_a.py": 3.0, "tests/test_b.py": 2.0}, {})
    observed = Options(sys.executable, tmp_path, 1, 1, 0, False, observe=True)
    assert seconds_for_scoring(observed, base) == {"tests/test_a.py": 0.25, "tests/test_b.py": 2.0}
    assert seconds_for_scoring(Options(sys.executable, tmp_path, 1, 1, 0, False), base) == base.durations


@pytest.mark.parametrize("tree", ["click", "itsdangerous", "rich"])
def test_a_tree_read_from_repo_needs_its_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str], tree: str) -> None:
    from bench.mutation import main

    assert main(["--tree", tree, "--python", sys.executable, "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--repo None: no git repository there" in err and tree in err


def test_a_mutant_of_a_suite_of_seconds_gets_time_to_finish(tmp_path: Path) -> None:
    from bench.mutation import Baseline, Options, run_mutant

    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "m.py").write_text("def f():\n    return 1\n")
    (tree / "test_m.py").write_text("from pkg.m import f\n\n\ndef test_f():\n    assert f() == 1\n")
    for argv in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *argv], cwd=tree, check=True)
    mutant = Mutant("m1", "pkg/m.py", 2, "constant", "", "def f():\n    return 2\n")
    # baselines of a tenth of a second: 3x that is less than pytest's own start
    base = Baseline(["test_m.py"], {}, {"test_m.py": 0.01}, {"baseline run 1": 0.1, "baseline run 2": 0.1})
    opts = Options(sys.executable, tmp_path, 1, 0, 0, False)
    result = run_mutant(opts, tree, mutant, base, {"PYTHONPATH": str(tree)})
    assert result.broken == "" and result.failing == ("test_m.py",), result
    assert (tree / "pkg" / "m.py").read_text() == "def f():\n    return 1\n"
