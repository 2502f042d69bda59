"""``bench mutation --by-test``: the by-test-id selector row (`bench._mutation_bytest`), on data
coverage.py writes through its own API and on JUnit from real pytest runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench._mutation_bytest import (
    ByTestInputs, by_test_selection, by_test_table, junit_tests, mutant_failing_tests, read_contexts, score_by_test,
)
from bench._mutation_gen import Mutant, unified_diff
from bench._mutation_quick import build_quick_tree
from bench._mutation_run import run_suite
from bench._mutation_store import MutantResult
from bench._mutation_tree import make_copy, pythonpath


def _contexts_data(path: Path, source: Path, lines_by_context: dict[str, set[int]]) -> Path:
    """A coverage.py data file written through coverage's own API, as pytest-cov's
    ``--cov-context=test`` writes it (node id plus ``|setup``/``|run``/``|teardown``)."""
    from coverage import CoverageData

    data = CoverageData(basename=str(path))
    for context, lines in lines_by_context.items():
        data.set_context(context)
        data.add_lines({str(source): sorted(lines)})
    data.write()
    return path


def test_by_test_selection_takes_the_ids_whose_context_ran_the_line_and_files_chosen_for_other_reasons(
        tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    spec = build_quick_tree(tmp_path / "repo")
    tree = make_copy(tmp_path / "repo", spec, tmp_path)
    area = tree / "src/shapes/area.py"
    data = _contexts_data(tmp_path / ".coverage", area, {
        "": {1, 4, 12},  # import time: the module's defs
        "tests/test_area.py::test_square|run": {5, 6},
        "tests/test_area.py::test_circle|run": {5, 7, 8},
        "tests/test_area.py::test_big|run": {13},
        "tests/test_area.py::test_big|setup": {5},  # a fixture's setup counts for its test
        "tests/test_report.py::test_report|run": {5, 6}})
    contexts = read_contexts(data, tree)
    assert contexts["src/shapes/area.py"][5] == frozenset({
        "tests/test_area.py::test_square", "tests/test_area.py::test_circle", "tests/test_area.py::test_big",
        "tests/test_report.py::test_report"})
    old = area.read_text()
    new = old.replace('return 3 * size * size', 'return 2 * size * size')
    body = Mutant("m1", "src/shapes/area.py", 8, "constant", unified_diff("src/shapes/area.py", old, new), new)
    tests_of = {"tests/test_area.py": ("tests/test_area.py::test_square", "tests/test_area.py::test_circle",
                                       "tests/test_area.py::test_big"),
                "tests/test_names.py": ("tests/test_names.py::test_label",),
                "tests/test_report.py": ("tests/test_report.py::test_report",)}
    # the file rules chose test_names.py for a reason no test's context shows (module level, the walk)
    chosen = by_test_selection(contexts, body, {"tests/test_area.py", "tests/test_names.py"}, tests_of)
    assert chosen.tests == {"tests/test_area.py::test_circle", "tests/test_names.py::test_label"}
    assert chosen.whole_files == {"tests/test_names.py"}
    seconds = {"tests/test_area.py::test_square": 1.0, "tests/test_area.py::test_circle": 2.0,
               "tests/test_area.py::test_big": 3.0, "tests/test_names.py::test_label": 1.0,
               "tests/test_report.py::test_report": 3.0}
    failing = {"m1": frozenset({"tests/test_area.py::test_circle"}),
               "m2": frozenset({"tests/test_report.py", "tests/test_area.py::test_big"})}
    other = Mutant("m2", "src/shapes/area.py", 13, "comparison", unified_diff(
        "src/shapes/area.py", old, old.replace("value >= limit", "value < limit")), "")
    results = {m.id: MutantResult(m.id, m.path, m.line, m.operator, m.diff, files, 1.0, 1) for m, files in
               ((body, ("tests/test_area.py",)), (other, ("tests/test_area.py", "tests/test_report.py")))}
    s = score_by_test([body, other], results, failing, lambda m: by_test_selection(contexts, m, {"tests/test_area.py"}, tests_of),
                      lambda m: {"tests/test_area.py"}, lambda m: set(tests_of), seconds)
    # m2: test_big ran line 13 and is caught; test_report.py's collection error (the file as its id)
    # is not: no selected test of that file
    assert (s.selected_tests, s.failing_tests, s.selected_files, s.failing_files) == (2, 3, 2, 3)
    assert s.misses == [("m2", "tests/test_report.py")]
    assert (s.with_ids, s.reached_files, s.judged_files) == (2, 2, 3)
    assert s.time_fractions == [2.0 / 10, 3.0 / 10] and s.file_time_fractions == [0.6, 0.6]
    assert s.x_static(s.time_fractions) == pytest.approx(0.25)
    inputs = ByTestInputs(contexts, failing, seconds, tests_of)
    table = by_test_table(inputs, [body, other], results, lambda m: {"tests/test_area.py"}, lambda m: set(tests_of))
    row = next(line for line in table.splitlines() if line.startswith("runtime map, by test id"))
    assert "66.7% (2/3)" in row and row.rstrip().endswith("0.25"), table
    assert table.splitlines()[-1] == "miss (by test id): m2 -> tests/test_report.py not selected"


def test_junit_node_ids_are_pytests_own(tmp_path: Path) -> None:
    (tmp_path / "test_ids.py").write_text(
        "import pytest\n\n\nclass TestA:\n    @pytest.mark.parametrize('x', [1, 2])\n    def test_p(self, x):\n"
        "        assert x == 1\n\n\ndef test_ok():\n    pass\n")
    (tmp_path / "test_collect.py").write_text("import no_such_module_here\n\n\ndef test_x():\n    pass\n")
    files = ["test_ids.py", "test_collect.py"]
    run_suite(sys.executable, tmp_path, files, tmp_path / "j.xml", workers=0, limit=120, extra_env={})
    report = junit_tests(tmp_path / "j.xml", tmp_path, files)
    assert report is not None
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "test_ids.py"], cwd=tmp_path,
                            capture_output=True, text=True).stdout.split()
    assert set(report.seconds) == {n for n in listed if "::" in n} | {"test_collect.py"}
    assert report.failing == {"test_ids.py::TestA::test_p[2]", "test_collect.py"}
    assert junit_tests(tmp_path / "absent.xml", tmp_path, files) is None


def test_failing_ids_come_from_a_real_rerun_of_the_failing_files_restored_and_resumable(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    spec = build_quick_tree(tmp_path / "repo")
    tree = make_copy(tmp_path / "repo", spec, tmp_path)
    old = (tree / "src/shapes/area.py").read_text()
    new = old.replace("return 3 * size * size", "return 4 * size * size")
    mutant = Mutant("m1", "src/shapes/area.py", 8, "constant", unified_diff("src/shapes/area.py", old, new), new)
    other = Mutant("m2", "src/shapes/area.py", 8, "constant", mutant.diff, new)
    results = {m.id: MutantResult(m.id, m.path, m.line, m.operator, m.diff, ("tests/test_area.py",), 1.0, 1)
               for m in (mutant, other)}
    said: list[str] = []
    env = pythonpath(tree, spec, Path(__file__).resolve().parents[2])
    first = mutant_failing_tests(sys.executable, tree, [mutant], results, tmp_path, limit=120, env=env,
                                 say=said.append, file_seconds={})
    assert first == {"m1": {"tests/test_area.py::test_circle"}}, said
    assert (tree / "src/shapes/area.py").read_text() == old
    # resumed: m1 is read back, not rerun; a spent budget starts no rerun and says how many are left
    again = mutant_failing_tests(sys.executable, tree, [mutant, other], results, tmp_path, limit=120, env=env,
                                 say=said.append, file_seconds={}, budget=0)
    assert again == first and said[-1].endswith("1 rerun(s) left")


def test_the_built_rows_recall_counts_failing_ids_the_selected_run_saw_fail_and_wall_clock_is_its_ratio(
        tmp_path: Path) -> None:
    import json

    from bench._mutation_bytest_built import _ids_file, table
    from ci.selection.bytest_select import Narrowed
    from ci.selection.depmap_select import MapSelection, MapVerdict

    rows = [{"id": "a", "static_failing": ["t/x.py::f", "t/y.py::g"], "selected_failing": ["t/x.py::f"],
             "selected_wall": 2.0, "static_wall": 10.0, "selected_est": 1.0, "static_est": 10.0},
            {"id": "b", "static_failing": ["t/x.py::h"], "selected_failing": ["t/x.py::h", "t/x.py::flaky"],
             "selected_wall": 6.0, "static_wall": 10.0, "selected_est": 3.0, "static_est": 2.0}]
    (tmp_path / "bytest_built.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = table(tmp_path)
    # est-time: mean of ratios (0.1 + 1.5) / 2, median the same of two, sum over sum 4 / 12
    assert text.splitlines()[-1].split()[-9:] == ["2", "2/3", "2/3", "0.40", "0.40", "0.40", "0.80", "0.80", "0.33"], text
    chosen = MapSelection({"t/x.py": MapVerdict("executed", "m", (), Narrowed(("t/x.py::f",), "1 of 3")),
                           "t/y.py": MapVerdict("executed", "m", (), Narrowed(None, "whole file: module level"))})
    assert _ids_file(chosen, {"t/x.py", "t/y.py", "t/z.py"}, tmp_path / "ids.txt") == (1, 1)
    assert (tmp_path / "ids.txt").read_text() == "t/x.py::f\nt/y.py\nt/z.py\n"


def test_est_time_is_what_plan_gives_narrowed_ids_by_their_seconds_other_files_by_observed_duration(
        tmp_path: Path) -> None:
    import json

    from bench._mutation_bytest_built import EstTime, observed_durations, plan_est, table

    (tmp_path / "map.json").write_text(json.dumps({"tests": {"t/a.py": {"duration_s": 4.0}, "t/b.py": {"duration_s": 2.0},
                                                             "t/c.py": {"duration_s": 3.0}, "t/d.py": {}}}))
    durations = observed_durations(tmp_path / "map.json")
    assert durations == {"t/a.py": 4.0, "t/b.py": 2.0, "t/c.py": 3.0}  # no duration: no placeholder
    # t/a.py narrowed to ids of 1.5 s, t/b.py whole; the static graph runs all three whole
    assert plan_est({"t/a.py", "t/b.py"}, {"t/a.py": 1.5}, ["t/a.py", "t/b.py", "t/c.py"], durations) == EstTime(3.5, 9.0)
    with pytest.raises(KeyError, match="t/d.py"):
        plan_est({"t/d.py"}, {}, [], durations)
    # --est-only rows: judged over the built runs' mutants; a failing id counts when listed or its file is whole
    built = [{"id": "a", "static_failing": ["t/x.py::f", "t/y.py::g"], "selected_failing": [], "selected_wall": 1.0,
              "static_wall": 2.0}]
    est = [{"id": "a", "selection": ["t/x.py::f", "t/y.py"], "selected_est": 3.5, "static_est": 9.0},
           {"id": "z", "selection": [], "selected_est": 9.0, "static_est": 9.0}]
    (tmp_path / "bytest_built.jsonl").write_text("".join(json.dumps(r) + "\n" for r in built))
    (tmp_path / "bytest_est.jsonl").write_text("".join(json.dumps(r) + "\n" for r in est))
    last = table(tmp_path).splitlines()[-1]
    assert "2/2 (of the built runs')" in last and last.split()[-3:] == ["0.39", "0.39", "0.39"], last
