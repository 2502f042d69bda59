"""``python -m ci observe``'s known gaps of issue #46, closed (docs/depmaps.md, "Known gaps"):
an observed pytest without the recorder, generated code taken for a repository file, and
children the recorder cannot hear that run no repository code. Real processes on a tiny project
(`tests.ci.test_observe_command`'s), nothing mocked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.ci.depmap_support import write_project
from tests.ci.test_observe_command import FILES, PY312, _observe

GEN = """\
import importlib.util
import sys

SOURCE = "def three():\\n    return 3\\n\\n\\nVALUE = three()\\n"


class StringLoader:  # torch's remote module template loader: the code's file name is "<name>.py"
    def create_module(self, spec):
        return None

    def exec_module(self, module):
        exec(compile(SOURCE, f"<{module.__name__}>.py", "exec", dont_inherit=True), module.__dict__)


def load(name):
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, StringLoader()))
    sys.modules[name] = module
    module.__spec__.loader.exec_module(module)
    exec(compile("VALUE = 4", "<string>", "exec"), {})
    return module
"""
GEN_TEST = """\
import subprocess
import sys

from pkg.gen import load


def test_here():
    assert load("_generated_here").VALUE == 3


def test_in_a_child():
    subprocess.run([sys.executable, "-c", "from pkg.gen import load; assert load('_generated_child').VALUE == 3"],
                   check=True)
"""
PYTEST = ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write_project(root, {**FILES, "pkg/gen.py": GEN, "tests/test_gen.py": GEN_TEST})
    return root


@pytest.mark.parametrize("plugins", [["-p", "no:ci-registry"], ["-p", "no:ci.pytest_plugin"]])
def test_an_observed_pytest_without_the_recorder_is_refused_before_it_runs_a_test(
        project: Path, plugins: list[str]) -> None:
    """It ran every test unrecorded and left an empty map, status 0 (9.5 min on a real tree)."""
    proc, facts = _observe(sys.executable, project, *PYTEST, *plugins, "tests/test_add.py")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error, passed through
    assert f"`{' '.join(plugins)}` turns it off" in proc.stderr
    assert "passed" not in proc.stdout and facts["tests"] == {}
    assert "no test file was recorded" in proc.stderr


def test_a_command_that_succeeds_without_recording_a_test_file_fails(project: Path) -> None:
    proc, facts = _observe(sys.executable, project, "python3", "-c", "import pkg.work")
    assert (proc.returncode, facts["tests"]) == (1, {}), proc.stderr
    assert "no test file was recorded" in proc.stderr


@pytest.mark.parametrize("python", [sys.executable, PY312], ids=["3.11-slipcover", "3.12-sysmon"])
def test_generated_code_is_no_repository_file_in_the_process_or_a_child(project: Path, python: Path) -> None:
    """torch's ``<_remote_module_non_scriptable>.py`` reached ``executed``: a relative name,
    resolved against the working directory, the root."""
    if not Path(python).exists():
        pytest.skip("no .venv-py312: run python3 ci/bootstrap.py")
    proc, facts = _observe(python, project, *PYTEST, "tests/test_gen.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gen = facts["tests"]["tests/test_gen.py"]
    assert (gen["complete"], gen["ran"]) == (True, 2)
    assert "pkg/gen.py" in gen["executed"]
    assert sorted(f for f in [*gen["executed"], *facts["shared"]] if "<" in f) == []
