"""Selecting node ids, not files (issue #46, docs/depmaps.md "By test id"): `ci observe --by-test`
records a tiny committed project's pytest run in a real subprocess, `ci plan` narrows each
selected file on a branch, and the command it emits runs in a real pytest: a changed line one test
ran selects that id; a module-level change, a module-scoped fixture's line, and a line a session
fixture ran select the whole file (and so does a module fixture's teardown); parametrised ids with brackets, spaces and unicode run through
the ids file; a listed id that no longer exists runs its file whole."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from ci.registry import load_registry
from ci.selection.depmap_format import ByTest, DepMap, DepmapError, TestMap, dump_depmap, parse_depmap
from ci.__main__ import main as ci_main
from ci.history.depmaps import latest_maps
from ci.history.store import open_store
from ci.selection.plan import plan
from ci.selection.shard_ids import IDS_ENV, MAX_SHARD_IDS_BYTES, carried_ids
from tests.ci.depmap_support import clean_env, git, write_project
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.test_depmap_plan import IDENTITY

REPO = Path(__file__).resolve().parents[2]
PY312 = REPO / ".venv-py312" / "bin" / "python"
CALC = """\
RATE = 2


def double(x):
    return x * RATE


def triple(x):
    return x * 3


def setup_value():
    return 40


def label(x):
    return f"<{x}>"


def session_value():
    return 7


def teardown_value():
    return 0
"""
TEST_CALC = """\
import pytest

from pkg.calc import double, label, setup_value, teardown_value, triple


@pytest.fixture(scope="module")
def base():
    yield setup_value()
    teardown_value()


def test_double():
    assert double(2) == 4


def test_triple():
    assert triple(2) == 6


@pytest.mark.parametrize("x", [1, "a b", "e"], ids=["one", "sp ace [x]", "\\u00fc[n\\u00ef]"])
def test_param(x, base):
    assert label(x).startswith("<") and base == 40
"""
CONFTEST = """\
import pytest

from pkg.calc import session_value


@pytest.fixture(scope="session")
def shared():
    return session_value()
"""
TEST_OTHER = """\
from pkg.calc import double


def test_session(shared):
    assert shared == 7


def test_other_double():
    assert double(1) == 2
"""
FILES = {"pkg/__init__.py": "", "pkg/calc.py": CALC, "tests/conftest.py": CONFTEST, "tests/test_calc.py": TEST_CALC,
         "tests/test_other.py": TEST_OTHER}
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project committed on ``main`` and observed with ``--by-test``; its map beside it. pytest's
    rootdir is ``tests/`` there (node ids ``test_calc.py::...``), not the root as in the runs the
    plans emit: the map's ids are repo-relative whatever the rootdir."""
    root = tmp_path_factory.mktemp("bytest") / "project"
    write_project(root, FILES)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    proc = subprocess.run([sys.executable, "-m", "ci", "observe", "--by-test", "--tier", "cpu", "--out",
                           str(root.parent / "map.json"), "--", *PYTEST, "--rootdir", "tests", "tests"],
                          cwd=root, env=clean_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def _plan(root: Path, edits: dict[str, str]) -> tuple[dict[str, dict], Path]:
    """Branch off main with ``edits``, plan against main with the observed map; (selected tests by
    path, the ids file it wrote). The branch stays checked out."""
    git(root, "checkout", "-q", "-B", f"b{abs(hash(json.dumps(edits, sort_keys=True)))}", "main")
    for rel, text in edits.items():
        (root / rel).write_text(text)
    git(root, "commit", "-q", "-am", "change")
    ids = root.parent / "ids.txt"
    proc = subprocess.run([sys.executable, "-m", "ci", "plan", "--tier", "cpu", "--base", "main", "--format", "json",
                           "--no-depmaps-from-store", "--depmap", str(root.parent / "map.json"), "--ids-out", str(ids)],
                          cwd=root, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = json.loads(proc.stdout)["plans"][0]
    return {t["path"]: t for t in plan["selected"]}, ids


def _run(root: Path, command: str) -> subprocess.CompletedProcess[str]:
    env = {**clean_env(), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(shlex.split(command.replace("python ", f"{sys.executable} ", 1)), cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_observed_map_is_version_4_with_each_ids_lines(observed: Path) -> None:
    depmap = parse_depmap((observed.parent / "map.json").read_text(), "map.json")
    by_test = depmap.tests["tests/test_calc.py"].by_test
    assert by_test is not None and by_test.complete
    assert by_test.ids["tests/test_calc.py::test_double"]["pkg/calc.py"] >= {5}
    assert 9 not in by_test.ids["tests/test_calc.py::test_double"]["pkg/calc.py"]
    assert 13 in by_test.file["pkg/calc.py"]  # the module-scoped fixture's line: the file's, no id's
    assert len(by_test.ids) == 5
    assert by_test.seconds.keys() == by_test.ids.keys() and all(s >= 0 for s in by_test.seconds.values())


@pytest.mark.skipif(not PY312.exists(), reason=".venv-py312 is missing: run python3 ci/bootstrap.py")
def test_under_python_312_the_sysmon_core_and_the_ids_recorder_give_the_same_ids_lines(observed: Path,
                                                                                    tmp_path: Path) -> None:
    git(observed, "checkout", "-q", "main")
    out = tmp_path / "map312.json"
    env = {**clean_env(), "PATH": f"{PY312.parent}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(PY312), "-m", "ci", "observe", "--by-test", "--tier", "cpu", "--out", str(out), "--",
                           str(PY312), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                          cwd=observed, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = parse_depmap(out.read_text(), "map312.json").tests["tests/test_calc.py"].by_test
    want = parse_depmap((observed.parent / "map.json").read_text(), "map.json").tests["tests/test_calc.py"].by_test
    assert got is not None and want is not None and (got.ids, got.file, got.complete) == (want.ids, want.file, True)


def test_a_recorder_that_cannot_start_leaves_no_ids_and_the_run_as_it_was(tmp_path: Path) -> None:
    """coverage.py fails at its start where $COVERAGE_DEBUG_FILE names a file in a missing folder
    (it opens it there): the observed pytest still passes, and the map has the files without
    per-id lines (`ci plan` then runs them whole), never an internal error of the observed run."""
    root = tmp_path / "project"
    write_project(root, FILES)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    env = {**clean_env(), "COVERAGE_DEBUG": "sys", "COVERAGE_DEBUG_FILE": str(tmp_path / "missing" / "debug.txt")}
    proc = subprocess.run([sys.executable, "-m", "ci", "observe", "--by-test", "--tier", "cpu", "--out",
                           str(tmp_path / "map.json"), "--", *PYTEST, "--rootdir", "tests", "tests"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and "7 passed" in proc.stdout, proc.stdout + proc.stderr
    assert "INTERNALERROR" not in proc.stdout + proc.stderr
    tests = json.loads((tmp_path / "map.json").read_text())["tests"]
    assert sorted(tests) == ["tests/test_calc.py", "tests/test_other.py"]
    assert not any("by_test" in entry for entry in tests.values()), tests


def test_a_line_one_test_ran_selects_only_that_id_and_the_command_runs_it(observed: Path) -> None:
    selected, ids = _plan(observed, {"pkg/calc.py": CALC.replace("return x * 3", "return x + x + x")})
    calc = selected["tests/test_calc.py"]
    assert calc["node_ids"] == ["tests/test_calc.py::test_triple"], calc
    assert ids.read_text() == "tests/test_calc.py::test_triple\n"
    ran = _run(observed, calc_command(observed, selected))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout and "4 deselected" in ran.stdout, ran.stdout


def calc_command(root: Path, selected: dict[str, dict]) -> str:
    proc = subprocess.run([sys.executable, "-m", "ci", "plan", "--tier", "cpu", "--base", "main",
                           "--no-depmaps-from-store", "--depmap", str(root.parent / "map.json"),
                           "--ids-out", str(root.parent / "ids.txt")],
                          cwd=root, env=clean_env(), capture_output=True, text=True, timeout=120)
    line = next(line for line in proc.stdout.splitlines() if "run by test id:" in line)
    return line.split("run by test id: ", 1)[1]


@pytest.mark.parametrize("edit, why", [
    (("RATE = 2", "RATE = 1 + 1"), "module level"),
    (("return 40", "return 20 + 20"), "outside a single id"),
    (("return 0", "return 1 - 1"), "outside a single id"),  # the module fixture's teardown, after the last id
])
def test_a_module_level_or_fixture_scoped_change_selects_the_whole_file(observed: Path, edit: tuple[str, str],
                                                                         why: str) -> None:
    selected, ids = _plan(observed, {"pkg/calc.py": CALC.replace(*edit)})
    calc = selected["tests/test_calc.py"]
    assert calc["node_ids"] is None and why in calc["ids_why"], calc
    assert "tests/test_calc.py\n" in ids.read_text()


def test_a_session_fixtures_line_selects_the_whole_file_that_shares_it(observed: Path) -> None:
    selected, _ = _plan(observed, {"pkg/calc.py": CALC.replace("return 7", "return 3 + 4")})
    other = selected["tests/test_other.py"]
    assert other["node_ids"] is None and other["ids_why"].startswith("whole file"), other


def test_parametrised_ids_with_brackets_spaces_and_unicode_run_through_the_ids_file(observed: Path) -> None:
    selected, ids = _plan(observed, {"pkg/calc.py": CALC.replace('return f"<{x}>"', 'return "<" + f"{x}>"')})
    calc = selected["tests/test_calc.py"]
    assert calc["node_ids"] == sorted(["tests/test_calc.py::test_param[one]", "tests/test_calc.py::test_param[sp ace [x]]",
                                       "tests/test_calc.py::test_param[\\xfc[n\\xef]]"]), calc
    ran = _run(observed, calc_command(observed, selected))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "3 passed, 2 deselected" in ran.stdout, ran.stdout


def test_a_listed_id_that_no_longer_exists_runs_its_file_whole(observed: Path, tmp_path: Path) -> None:
    git(observed, "checkout", "-q", "main")
    ids = tmp_path / "ids.txt"
    ids.write_text("tests/test_calc.py::test_gone\ntests/test_other.py::test_session\n")
    ran = subprocess.run([*PYTEST, "-p", "ci.pytest_ids", "--ci-ids", str(ids), "tests/test_calc.py",
                          "tests/test_other.py"], cwd=observed, env=clean_env(), capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "6 passed, 1 deselected" in ran.stdout, ran.stdout
    assert "1 listed id(s) no longer exist (tests/test_calc.py::test_gone): ran tests/test_calc.py whole" in ran.stdout


def test_an_ids_file_that_cannot_be_read_is_one_usage_error(observed: Path, tmp_path: Path) -> None:
    ran = subprocess.run([*PYTEST, "-p", "ci.pytest_ids", "--ci-ids", str(tmp_path / "none.txt"), "tests"],
                         cwd=observed, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert ran.returncode == 4 and "--ci-ids" in ran.stderr and "Traceback" not in ran.stderr, ran.stderr


def test_history_ingest_stores_the_ids_lines_and_reads_them_back(observed: Path, store_location: str) -> None:
    git(observed, "checkout", "-q", "main")
    path = observed.parent / "map.json"
    sha = git(observed, "rev-parse", "HEAD").strip()
    assert ci_main(["history", "ingest", str(path), *IDENTITY, "--sha", sha, "--run-id", "9",
                    "--store", store_location]) == 0
    with open_store(store_location, create=False) as store:
        got = latest_maps(store, "cpu").tests
        assert store.fetchall("SELECT map_version FROM depmaps") == [(4,)]
    assert got["tests/test_calc.py"].entry.by_test == parse_depmap(path.read_text(), "m").tests[
        "tests/test_calc.py"].by_test


def test_version_4_round_trips_and_a_bad_by_test_is_refused() -> None:
    entry = TestMap(frozenset({"pkg/a.py"}), complete=True, items=2, ran=2, lines={"pkg/a.py": frozenset({1, 2})},
                    by_test=ByTest({"t.py::a": {"pkg/a.py": frozenset({2})}, "t.py::b[ü]": {"pkg/a.py": frozenset({2})}},
                                   {"pkg/a.py": frozenset({1})}, seconds={"t.py::a": 0.5, "t.py::b[ü]": 2.0}))
    depmap = DepMap("cpu", "2026-12-07T00:00:00+00:00", {"tests/t.py": entry}, sha="1" * 40)
    text = dump_depmap(depmap)
    data = json.loads(text)
    assert data["version"] == 4 and data["tests"]["tests/t.py"]["by_test"]["sets"] == [{"pkg/a.py": "2"}]
    assert parse_depmap(text, "m.json") == depmap
    data["tests"]["tests/t.py"]["by_test"]["seconds"]["t.py::a"] = -1
    with pytest.raises(DepmapError, match=r"by_test.seconds\['t.py::a'\] must be seconds >= 0 .*got -1"):
        parse_depmap(json.dumps(data), "m.json")
    data["tests"]["tests/t.py"]["by_test"]["ids"]["t.py::a"] = 3
    with pytest.raises(DepmapError, match=r"m.json: .*by_test.ids\['t.py::a'\] must name a set 0..0, got 3"):
        parse_depmap(json.dumps(data), "m.json")


DOUBLE_EDIT = {"pkg/calc.py": CALC.replace("return x * RATE", "return RATE * x")}  # test_double, test_other_double
NARROWED = {"tests/test_calc.py": "tests/test_calc.py::test_double\n",
            "tests/test_other.py": "tests/test_other.py::test_other_double\n"}


def _plan_as(root: Path, fmt: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "ci", "plan", "--tier", "cpu", "--base", "main", "--shards", "2",
                           "--format", fmt, "--no-depmaps-from-store", "--depmap", str(root.parent / "map.json")],
                          cwd=root, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return proc.stdout


def test_each_matrix_entry_carries_its_shards_ids_and_the_pr_step_runs_exactly_them(observed: Path,
                                                                                  tmp_path: Path) -> None:
    """The github-matrix plan, parsed; then pr-gpu.yml's own "Run shard" step, unchanged, runs one
    entry in the project (a real `ci run` and pytest): its JUnit holds exactly the entry's ids."""
    from tests.ci.workflow_support import WORKFLOW_DIR, load_workflow, run_step, step_named

    _plan(observed, DOUBLE_EDIT)
    entries = json.loads(_plan_as(observed, "github-matrix"))["include"]
    assert sorted((e["tests"], e["ids"]) for e in entries) == sorted(NARROWED.items()), entries
    step = step_named(load_workflow(WORKFLOW_DIR / "pr-gpu.yml")["jobs"]["gpu"], "Run shard")
    python = observed / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {shlex.quote(sys.executable)} \"$@\"\n")
    python.chmod(0o755)
    entry = next(e for e in entries if e["tests"] == "tests/test_calc.py")
    env = {"TIER": "cpu", "SHARD": str(entry["shard"]), "TESTS": entry["tests"], "IDS": entry["ids"]}
    ran = run_step(step["run"], env, observed, tmp_path, shell="bash --noprofile --norc -eo pipefail {0}")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    junit = (observed / "reports" / f"junit-cpu-{entry['shard']}.xml").read_text()
    assert junit.count("<testcase ") == 1 and 'name="test_double"' in junit, junit


def test_a_narrowed_file_is_timed_by_its_ids_recorded_seconds(observed: Path) -> None:
    selected, _ = _plan(observed, DOUBLE_EDIT)
    by_test = parse_depmap((observed.parent / "map.json").read_text(), "m").tests["tests/test_calc.py"].by_test
    calc = selected["tests/test_calc.py"]
    assert by_test is not None and calc["node_ids"] == ["tests/test_calc.py::test_double"], calc
    assert (calc["time"], calc["time_source"]) == (by_test.seconds["tests/test_calc.py::test_double"], "node ids")


def test_each_pinned_buildkite_step_carries_its_shards_ids_in_its_env(observed: Path) -> None:
    _plan(observed, DOUBLE_EDIT)
    steps = yaml.safe_load(_plan_as(observed, "buildkite"))["steps"]
    paths = [next(p for p in NARROWED if p in s["command"]) for s in steps]
    assert sorted(paths) == sorted(NARROWED), steps
    for s, path in zip(steps, paths):
        assert s["env"] == {IDS_ENV: NARROWED[path]}, s
        assert s["command"].startswith("ids=$$(mktemp) && ") and s["command"].endswith(
            f'--tier cpu {path} -- -p ci.pytest_ids --ci-ids "$$ids"'), s["command"]


def test_a_shard_whose_ids_are_too_large_to_carry_runs_its_files_whole(observed: Path) -> None:
    """`carried_ids` keeps a job's value within an environment string: past the limit, whole files."""
    git(observed, "checkout", "-q", "main")
    registry = load_registry(observed / "registry.yaml")
    base = plan(registry, "cpu", shards=2)
    many = tuple(f"tests/test_calc.py::test_{i:06d}" for i in range(MAX_SHARD_IDS_BYTES // 24))
    big = replace(base, selected=tuple(replace(t, node_ids=many) if t.path == "tests/test_calc.py" else t
                                       for t in base.selected))
    carried = carried_ids([big])
    calc = next(s for s in big.shards if "tests/test_calc.py" in s.tests)
    assert carried.of(big, calc) == "" and len(carried.notes) == 1, carried.notes
    assert f"shard {calc.index}/2" in carried.notes[0] and "runs its files whole" in carried.notes[0]
    small = replace(big, selected=tuple(replace(t, node_ids=many[:3]) if t.node_ids else t for t in big.selected))
    assert carried_ids([small]).of(small, calc) == "".join(f"{n}\n" for n in many[:3])
