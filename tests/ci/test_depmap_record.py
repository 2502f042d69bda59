"""Recording a runtime dependency map: real pytest runs in a child process over a small project.

The project (`_make_project`) has a package whose modules each test reaches differently: by a
call, by a call inside a Python subprocess the test starts, by opening a data file, and one
module no test executes. The expected maps are written out by hand from that layout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.observe import slipcover_core
from ci.selection.depmap_format import DepMap, parse_depmap
from tests.ci.depmap_support import write_project

# the base install brings slipcover on CPython 3.11, this suite's interpreter; elsewhere (3.12: SGLang's) the
# tests that name the core cannot run, and the ctrace ones stand
NEEDS_SLIPCOVER = pytest.mark.skipif(not slipcover_core.available(), reason="the slipcover core does not run here")


FILES = {
    "pkg/__init__.py": "",
    "pkg/alpha.py": "def f():\n    return 1\n",
    "pkg/beta.py": "def g():\n    return 2\n",
    "pkg/gamma.py": "VALUE = 3\n",
    "pkg/unused.py": "def never():\n    return 0\n",
    "pkg/loader.py": textwrap.dedent("""\
        import json, os
        def table():
            with open(os.path.join(os.path.dirname(__file__), "table.json")) as fh:
                return json.load(fh)
        """),
    "pkg/table.json": '{"k": 1}\n',
    # import-time work: build() runs while test_alpha is collected, and serves every importer
    "pkg/built.py": "def build():\n    return {'x': 1}\n\nTABLE = build()\n",
    "pkg/session_helper.py": "def make():\n    return 5\n",
    "tests/conftest.py": textwrap.dedent("""\
        import pytest
        from pkg import session_helper

        @pytest.fixture(scope="session")
        def shared_thing():
            return session_helper.make()
        """),
    "tests/__init__.py": "",
    "tests/test_alpha.py": "from pkg import alpha, built\n\ndef test_a(shared_thing):\n    assert alpha.f() == 1\n",
    "tests/test_beta.py": "def test_b():\n    from pkg.beta import g\n    assert g() == 2\n",
    "tests/test_data.py": "from pkg.loader import table\n\ndef test_d(shared_thing):\n    assert table() == {'k': 1}\n",
    "tests/test_sub.py": textwrap.dedent("""\
        import subprocess, sys
        def test_s():
            out = subprocess.run([sys.executable, "-c", "import pkg.gamma as g; print(g.VALUE)"],
                                 capture_output=True, text=True, check=True)
            assert out.stdout.strip() == "3"
        """),
    "tests/test_skipped.py": "import pytest\n\n@pytest.mark.skip(reason='no')\ndef test_x():\n    pass\n",
    "tests/test_fails.py": "from pkg import beta\n\ndef test_f():\n    assert beta.g() == 3\n",
}


def _make_project(root: Path) -> None:
    write_project(root, FILES)


def _clean_env() -> dict[str, str]:
    """This test may itself run under a recording: its child must record its own map, not be
    measured as a subprocess of the outer one."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CI_DEPMAP", "COVERAGE_")) and k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2])])
    return env


def _record(root: Path, *args: str, workers: str = "0", **extra: str) -> subprocess.CompletedProcess[str]:
    env = _clean_env()
    env["CI_DEPMAP"] = "out/depmap.json"
    env.update(extra)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "--tier", "cpu", "-n", workers,
                           "-q", "-p", "no:cacheprovider", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("proj")
    _make_project(root)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "x"], cwd=root, check=True)
    proc = _record(root)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # test_fails fails, on purpose
    assert "depmap: wrote" in proc.stdout, proc.stdout + proc.stderr
    text = (root / "out" / "depmap.json").read_text()
    return root, json.loads(text)


def _recorded_map(root: Path, **extra: str) -> DepMap:
    """`_record` of ``root``'s whole tier, ``extra`` in its environment; it must pass."""
    proc = _record(root, **extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return parse_depmap((root / "out" / "depmap.json").read_text(), "depmap.json")


def _entry(data: dict, test: str) -> dict:
    return data["tests"][test]


def test_each_test_file_maps_exactly_what_it_executed(recorded: tuple[Path, dict]) -> None:
    _, data = recorded
    assert data["format"] == "ci-depmap" and data["version"] == 3 and data["tier"] == "cpu"  # 3: outcomes
    # the conftest imported pkg and pkg.session_helper in the session, before any test file;
    # test_alpha, collected first, imports pkg.alpha and pkg.built while being collected (its
    # context), sets up the session fixture (conftest line 6, make()'s body) and calls f()
    assert _entry(data, "tests/test_alpha.py")["executed"] == {
        "pkg/alpha.py": "1-2", "pkg/built.py": "1-2,4", "pkg/session_helper.py": "2", "tests/conftest.py": "6",
        "tests/test_alpha.py": "1,3-4"}
    # test_beta imports inside the test body; test_fails imported pkg.beta at collection, so
    # test_beta ran only g()'s body
    assert _entry(data, "tests/test_beta.py")["executed"] == {"pkg/beta.py": "2", "tests/test_beta.py": "1-3"}
    # the session fixture ran for test_alpha: test_data executed none of it
    assert _entry(data, "tests/test_data.py")["executed"] == {"pkg/loader.py": "1-4", "tests/test_data.py": "1,3-4"}


def test_shared_work_and_the_commit_are_recorded(recorded: tuple[Path, dict]) -> None:
    root, data = recorded
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    assert data["sha"] == head
    # import-time code (collection) and the session fixture's setup serve every test file
    assert data["shared"]["pkg/built.py"] == "1-2,4"
    assert data["shared"]["pkg/session_helper.py"] == "1-2"  # imported by the conftest, then the fixture
    assert data["shared"]["pkg/loader.py"] == "1-2"  # its import; table()'s body ran only in test_data's test
    assert "pkg/unused.py" not in data["shared"]


def test_opened_data_files_are_recorded_and_python_imports_are_not_confused_with_them(
        recorded: tuple[Path, dict]) -> None:
    _, data = recorded
    assert _entry(data, "tests/test_data.py")["opened"] == ["pkg/table.json"]
    assert _entry(data, "tests/test_alpha.py")["opened"] == []


def test_a_subprocess_started_by_a_test_is_attributed_to_that_test(recorded: tuple[Path, dict]) -> None:
    _, data = recorded
    sub = _entry(data, "tests/test_sub.py")
    # pkg/gamma.py runs only in the child python: coverage's start-up hook measured it there
    assert sorted(sub["executed"]) == ["pkg/__init__.py", "pkg/gamma.py", "tests/test_sub.py"]
    assert sub["opened"] == []  # Python sources are mapped by execution, not as opened files
    assert not any("gamma" in p for t, e in data["tests"].items() if t != "tests/test_sub.py" for p in e["executed"])


def test_completeness_and_skips_are_counted(recorded: tuple[Path, dict]) -> None:
    _, data = recorded
    skipped = _entry(data, "tests/test_skipped.py")
    assert (skipped["complete"], skipped["items"], skipped["ran"]) == (True, 1, 0)
    failed = _entry(data, "tests/test_fails.py")  # a failing test still ran: its map counts
    assert (failed["complete"], failed["items"], failed["ran"]) == (True, 1, 1)
    assert sorted(failed["executed"]) == ["pkg/beta.py", "tests/test_fails.py"]
    # version 3's facts: each file's outcome, pytest's skip reason, its items' time
    assert (skipped["outcome"], skipped["skip_reasons"], failed["outcome"]) == ("skipped", ["no"], "failed")
    assert _entry(data, "tests/test_alpha.py")["outcome"] == "passed"
    assert 0 < failed["duration_s"] < 60


def test_no_file_outside_the_repository_or_unexecuted_is_recorded(recorded: tuple[Path, dict]) -> None:
    root, data = recorded
    every = {p for e in data["tests"].values() for p in [*e["executed"], *e["opened"]]}
    assert "pkg/unused.py" not in every
    assert all(not p.startswith(("/", "out/")) and "__pycache__" not in p for p in every)
    assert parse_depmap((root / "out" / "depmap.json").read_text(), "depmap.json").tests.keys() == data["tests"].keys()


def test_under_xdist_the_workers_maps_are_merged(tmp_path: Path) -> None:
    _make_project(tmp_path)
    proc = _record(tmp_path, workers="2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads((tmp_path / "out" / "depmap.json").read_text())
    assert sorted(data["tests"]) == sorted(r for r in FILES if r.startswith("tests/test_"))
    assert all(e["complete"] for e in data["tests"].values())
    assert "pkg/gamma.py" in _entry(data, "tests/test_sub.py")["executed"]
    assert _entry(data, "tests/test_data.py")["opened"] == ["pkg/table.json"]


def test_without_subprocesses_in_the_measure_no_child_is_measured(tmp_path: Path) -> None:
    _make_project(tmp_path)
    proc = _record(tmp_path, "tests/test_sub.py", CI_DEPMAP_MEASURE="lines,opened")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sub = parse_depmap((tmp_path / "out" / "depmap.json").read_text(), "depmap.json").tests["tests/test_sub.py"]
    assert sub.executed == {"tests/test_sub.py"}  # pkg/gamma.py ran only in the child


def test_without_the_variable_nothing_is_recorded(tmp_path: Path) -> None:
    _make_project(tmp_path)
    env = _clean_env()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "-n", "0", "-q",
                           "-p", "no:cacheprovider", "tests/test_alpha.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "depmap" not in proc.stdout and not (tmp_path / "out").exists()


def test_ci_run_records_with_its_flag_and_refuses_it_without_the_plugin(tmp_path: Path) -> None:
    _make_project(tmp_path)
    env = _clean_env()
    base = [sys.executable, "-m", "ci", "run", "--registry", str(tmp_path / "registry.yaml"), "--tier", "cpu",
            "--workers", "0", "--record-depmap", "m.json"]
    proc = subprocess.run(base, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # test_fails fails
    data = parse_depmap((tmp_path / "m.json").read_text(), "m.json")
    assert data.tier == "cpu" and len(data.tests) == 6 and data.sha is None  # not a git checkout
    assert data.tests["tests/test_sub.py"].executed == {"pkg/__init__.py", "pkg/gamma.py", "tests/test_sub.py"}
    proc = subprocess.run(base + ["--no-plugin"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--record-depmap needs the plugin" in proc.stderr


def test_recording_under_a_coverage_already_running_is_a_usage_error(tmp_path: Path) -> None:
    _make_project(tmp_path)
    (tmp_path / "cov.ini").write_text(f"[run]\ndata_file = {tmp_path}/other.cov\n")
    env = _clean_env()
    (tmp_path / "tmp").mkdir()
    env.update(CI_DEPMAP="out/depmap.json", COVERAGE_PROCESS_START=str(tmp_path / "cov.ini"), TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "-n", "0", "-q",
                           "-p", "no:cacheprovider", "tests/test_alpha.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "coverage is already measuring" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()
    assert list((tmp_path / "tmp").iterdir()) == []  # no parts directory left behind


def test_a_measurement_started_early_and_never_taken_over_leaves_nothing(tmp_path: Path) -> None:
    # the recording starts before the conftests load, from the invocation directory's registry;
    # --rootdir elsewhere makes configure find no registry-driven tree: nothing records, nothing is left
    _make_project(tmp_path / "proj")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "tmp").mkdir()
    env = _clean_env()
    env.update(CI_DEPMAP="out/depmap.json", TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "-n", "0", "-q",
                           "-p", "no:cacheprovider", "--rootdir", str(tmp_path / "elsewhere"), "tests/test_beta.py"],
                          cwd=tmp_path / "proj", env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "depmap" not in proc.stdout and not (tmp_path / "proj" / "out").exists()
    assert list((tmp_path / "tmp").iterdir()) == []  # the parts directory the early start made is gone


@NEEDS_SLIPCOVER
def test_an_early_measurement_of_another_tree_hands_over_to_the_tracer(tmp_path: Path) -> None:
    # started early from the invocation directory's registry (tree a), configured for tree b
    # (--registry): slipcover's probes and its pytest wrapping are already in this process for a,
    # so b is recorded by coverage.py's tracer, completely, and nothing of a is in b's map
    (tmp_path / "a").mkdir()
    write_project(tmp_path / "a", {})  # a registry-driven tree of its own, without code that b would import
    _make_project(tmp_path / "b")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "b"]):
        subprocess.run([*git, *args], cwd=tmp_path / "b", check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path / "b", capture_output=True, text=True).stdout
    env = _clean_env()
    env.update(CI_DEPMAP="out/depmap.json", CI_DEPMAP_CORE="slipcover")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "--registry",
                           str(tmp_path / "b" / "registry.yaml"), "--tier", "cpu", "-n", "0", "-q", "-p",
                           "no:cacheprovider", str(tmp_path / "b" / "tests")], cwd=tmp_path / "a", env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # test_fails, and test_sub's child run from a/
    data = parse_depmap((tmp_path / "a" / "out" / "depmap.json").read_text(), "depmap.json")
    # pkg.beta's module lines ran while test_fails.py was collected (shared); test_b ran g's body
    assert data.tests["tests/test_beta.py"].lines == {"pkg/beta.py": {2}, "tests/test_beta.py": {1, 2, 3}}
    assert data.shared["pkg/beta.py"] == {1}
    assert "pkg/alpha.py" in data.tests["tests/test_alpha.py"].executed
    assert all(t.complete for t in data.tests.values()) and len(data.tests) == 6
    assert data.sha == head.strip()  # b's tree was snapshotted, not only a's


SERVER_FILES = {
    "pkg/__init__.py": "",
    "pkg/srv.py": "def serve():\n    x = 1\n    return x\n",
    "tests/__init__.py": "",
    # a test that starts a server-like child and ends it the way SGLang's tests do: SIGKILL,
    # right after the child ran new code (faster than any periodic flush)
    "tests/test_server.py": (
        "import subprocess, sys\n\n\ndef test_server():\n"
        "    code = 'import time\\nfrom pkg import srv\\nsrv.serve()\\nprint(\"ready\", flush=True)\\ntime.sleep(60)'\n"
        "    child = subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True)\n"
        "    assert child.stdout.readline().strip() == 'ready'\n"
        "    child.kill()\n"
        "    child.wait()\n"),
}


@pytest.mark.parametrize("core, armed", [pytest.param("slipcover", False, marks=NEEDS_SLIPCOVER), ("ctrace", False),
                                         pytest.param("ctrace", True, marks=NEEDS_SLIPCOVER)])
def test_a_server_child_ended_by_sigkill_from_its_test_is_recorded_whole(
        tmp_path: Path, core: str, armed: bool) -> None:
    write_project(tmp_path, SERVER_FILES)
    env = _clean_env()
    env.update(CI_DEPMAP="out/depmap.json", CI_DEPMAP_CORE=core)
    if armed:  # inherited from an outer recording: a ctrace recording disarms the slipcover hook for its children
        env["CI_DEPMAP_CHILD_CORE"] = "slipcover"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "--tier", "cpu", "-n", "0",
                           "-q", "-p", "no:cacheprovider"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = parse_depmap((tmp_path / "out" / "depmap.json").read_text(), "depmap.json").tests["tests/test_server.py"]
    # the test's SIGKILL waited for the child's flush (slipcover's flusher, or coverage.py's save in
    # the thread `ci.observe.coverage_child` starts): the body it ran just before is there
    assert entry.complete and entry.lines is not None and entry.lines["pkg/srv.py"] == {1, 2, 3}, core


NESTED_FILES = {
    "pkg/__init__.py": "",
    "pkg/leaf.py": "def leaf():\n    return 4\n",
    "tests/__init__.py": "",
    "tests/test_leaf.py": "def test_leaf():\n    from pkg.leaf import leaf\n    assert leaf() == 4\n",
    # a test that runs pytest, plugin and all, on another test file: that pytest is its subprocess
    "tests/test_nested.py": (
        "import subprocess, sys\n\n\ndef test_nested():\n"
        "    subprocess.run([sys.executable, '-m', 'pytest', '-p', 'ci.pytest_plugin', '--tier', 'cpu', '-n', '0',\n"
        "                    '-q', '-p', 'no:cacheprovider', 'tests/test_leaf.py'], check=True)\n"),
}


def test_a_pytest_that_a_recorded_test_runs_is_that_tests_subprocess_not_a_recording(tmp_path: Path) -> None:
    write_project(tmp_path, NESTED_FILES)
    tests = _recorded_map(tmp_path).tests
    nested, leaf = tests["tests/test_nested.py"], tests["tests/test_leaf.py"]
    assert nested.complete and nested.lines is not None and nested.lines["pkg/leaf.py"] == {1, 2}
    assert (leaf.complete, leaf.items, leaf.ran) == (True, 1, 1)


BETWEEN_FILES = {
    "pkg/__init__.py": "",
    "pkg/side.py": "VALUE = 3\n",
    "tests/__init__.py": "",
    # a child started after collection, outside any test file's work
    "tests/conftest.py": (
        "import subprocess, sys\n\n\ndef pytest_collection_modifyitems(items):\n"
        "    subprocess.run([sys.executable, '-c', 'import pkg.side'], check=True)\n"),
    "tests/test_a.py": "def test_a():\n    assert True\n",
    "tests/test_b.py": "def test_b():\n    assert True\n",
}


def test_a_child_started_between_test_files_is_no_test_files(tmp_path: Path) -> None:
    write_project(tmp_path, BETWEEN_FILES)
    tests = _recorded_map(tmp_path).tests
    assert {t: e.executed for t, e in tests.items()} == {"tests/test_a.py": {"tests/test_a.py"},
                                                          "tests/test_b.py": {"tests/test_b.py"}}


PACKAGE_FIXTURE_FILES = {
    "pkg/__init__.py": "",
    "pkg/helper.py": "def make():\n    return 5\n",
    "tests/__init__.py": "",
    "tests/conftest.py": (
        "import pytest\n\nfrom pkg import helper\n\n\n@pytest.fixture(scope='package')\n"
        "def made():\n    return helper.make()\n"),
    "tests/test_a.py": "def test_a(made):\n    assert made == 5\n",
    "tests/test_b.py": "def test_b(made):\n    assert made == 5\n",
}


def test_a_package_scoped_fixtures_setup_is_shared_work(tmp_path: Path) -> None:
    write_project(tmp_path, PACKAGE_FIXTURE_FILES)
    data = _recorded_map(tmp_path)
    assert data.shared["pkg/helper.py"] == {1, 2}  # its import (the conftest) and the setup, once for both files
    assert data.tests["tests/test_a.py"].lines["pkg/helper.py"] == {2}  # and the file that caused the setup


def test_the_slipcover_core_runs_wherever_cpython_3_11_has_slipcover_1_1() -> None:
    # every slipcover test skips where the core is unavailable: that must mean the interpreter or
    # slipcover's version rules it out (read here from the installed distribution), never a wrong check
    from importlib import metadata

    try:
        version = metadata.version("slipcover")
    except metadata.PackageNotFoundError:
        version = ""
    expected = sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11) and version.startswith("1.1.")
    assert slipcover_core.available() is expected, slipcover_core.unavailable_reason()
    assert (slipcover_core.unavailable_reason() is None) is expected
