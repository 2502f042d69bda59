"""A recording measures its pytest process from the first line, not from the recorder's first hook.

A plugin that ``-p`` loads from the tree's own ``addopts`` registers before the recorder's
plugin, and pytest runs its ``pytest_addoption`` at registration: before this, no map saw that
body run, and a change there (pytest's own ``--runpytest`` option, in its mutation run) selected
nothing. The oracle is pytest: with the change made, the test that reads the option fails.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.observe.child import runs_pytest
from ci.selection.line_ranges import parse_lines
from tests.ci.depmap_support import clean_env, plan_on_branch, recorded_project

PLUGIN = textwrap.dedent("""\
    import pytest


    def pytest_addoption(parser):
        parser.addoption("--limit", default="3")


    @pytest.fixture
    def limit(request):
        return int(request.config.getoption("--limit"))
    """)
FILES = {
    "pkg/__init__.py": "",
    "pkg/plug.py": PLUGIN,
    # filterwarnings = error: measuring from the start imports slipcover and ci before pytest marks
    # installed plugins for assertion rewriting, which must not warn
    "pytest.ini": "[pytest]\naddopts = -p pkg.plug\nfilterwarnings = error\n",
    "tests/test_limit.py": "def test_limit(limit):\n    assert limit == 3\n",
    "tests/test_other.py": "def test_other():\n    assert True\n",
}
recorded = recorded_project(FILES, "session")


def test_the_plugin_s_addoption_ran_before_the_recorder_and_is_in_the_map(recorded: Path) -> None:
    depmap = json.loads((recorded.parent / f"{recorded.name}.json").read_text())
    assert 5 in parse_lines(depmap["shared"]["pkg/plug.py"])  # pytest_addoption's body: the session's
    assert depmap["tests"]["tests/test_limit.py"]["complete"]


def test_a_change_to_it_selects_the_test_that_reads_the_option(recorded: Path, capsys) -> None:
    runs: list[subprocess.CompletedProcess[str]] = []
    selected = plan_on_branch(recorded, capsys, {"pkg/plug.py": PLUGIN.replace('default="3"', 'default="4"')},
                              on_branch=lambda: runs.append(subprocess.run(
                                  [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
                                  cwd=recorded, env=clean_env(), capture_output=True, text=True, timeout=120)))
    assert "1 failed, 1 passed" in runs[0].stdout, runs[0].stdout  # the oracle: test_limit breaks
    assert set(selected) == {"tests/test_limit.py"}, selected
    assert "ran outside a test" in selected["tests/test_limit.py"]


def test_a_recording_started_in_a_subfolder_measures_the_whole_repository(recorded: Path, tmp_path: Path) -> None:
    # the start-up hook measured the working directory (tests/), the recorder wants the repository:
    # that measurement is dropped and the tracer measures instead of a second slipcover
    out = tmp_path / "sub.json"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "--tier", "cpu", "-q",
                           "-p", "no:cacheprovider"], cwd=recorded / "tests",
                          env={**clean_env(), "CI_DEPMAP": str(out), "PYTHONPATH": f"{clean_env()['PYTHONPATH']}:{recorded}"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = json.loads(out.read_text())["tests"]["tests/test_limit.py"]
    assert entry["complete"] and "pkg/plug.py" in entry["executed"]  # the fixture's lines, outside tests/


@pytest.mark.parametrize("argv, expected", [
    (["python", "-m", "pytest", "-q"], True),
    (["python", "-mpytest"], True),
    (["/venv/bin/python", "/venv/bin/pytest", "-x"], True),
    (["python", "-X", "importtime", "-W", "error", "-m", "pytest"], True),
    (["python", "/venv/bin/py.test"], True),
    (["python", "-m", "ci", "run", "--tier", "cpu"], False),
    (["python", "-c", "import pytest; pytest.main()"], False),
    (["python", "script.py", "pytest"], False),
    (["python", "-", "pytest"], False),  # a program from standard input, "pytest" its argument
    (["python"], False),
    ([], False),
])
def test_which_command_lines_run_pytest(argv: list[str], expected: bool) -> None:
    assert runs_pytest(argv) is expected
