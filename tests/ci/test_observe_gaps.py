"""Known gaps of the recorder, issue #46, closed (docs/depmaps.md): an observed pytest without
the recorder (refused before it runs), generated code taken for a repository file, and what
``torch.compile`` runs on CPython 3.12, where ``sys.monitoring`` sees no line of a compiled frame
(a stand-in that calls dynamo's one bytecode reader, recorded under ``.venv-py312``, each plan
checked against pytest on the changed branch). Real processes on tiny projects, nothing mocked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ci.selection.line_ranges import parse_lines
from tests.ci.depmap_support import clean_env, git, plan_on_branch, write_project
from tests.ci.test_observe_command import FILES, PY312, _observe, _pkg

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
ENV_TEST = "import os\n\n\ndef test_env():\n    assert os.environ.get('PYTEST_PLUGINS') is None\n"
PYTEST = ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write_project(root, {**FILES, "pkg/gen.py": GEN, "tests/test_gen.py": GEN_TEST, "tests/test_env.py": ENV_TEST})
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


def test_an_observed_pytest_whose_entry_point_did_not_load_is_recorded(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ci on PYTHONPATH only (a runner image) or plugin autoload off: the ``ci-registry`` entry
    point never loads, and the run was refused; the guard loads it as the entry point would."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    proc, facts = _observe(sys.executable, project, *PYTEST, "tests/test_add.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = facts["tests"]["tests/test_add.py"]
    assert entry["complete"] is True and _pkg(entry), entry
    # the user's own `-p no:ci-registry` still wins: refused as before
    proc, facts = _observe(sys.executable, project, *PYTEST, "-p", "no:ci-registry", "tests/test_add.py")
    assert proc.returncode == 4 and facts["tests"] == {}, proc.stdout + proc.stderr


def test_the_guard_leaves_pytest_plugins_as_it_found_them(project: Path) -> None:
    proc, facts = _observe(sys.executable, project, *PYTEST, "tests/test_env.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the test and its children never see the guard
    assert facts["tests"]["tests/test_env.py"]["complete"] is True


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


# -- #46 (4): torch.compile on CPython 3.12: sys.monitoring sees no line of what dynamo compiled ------

READER = """\
import dis


def _cached_cleaned_instructions(code, safe=False):  # dynamo's one reader of a code object's bytecode
    return list(dis.get_instructions(code))
"""
DYNAMO = '''\
import ast
import builtins
import inspect
import textwrap

from torch._dynamo import bytecode_transformation


def _traced(fn, names):
    bytecode_transformation._cached_cleaned_instructions(fn.__code__)
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    tree.body[0].decorator_list = []
    space = {**fn.__globals__, **names}
    exec(builtins.compile(tree, "<dynamo>", "exec"), space)
    return space[fn.__name__]


def compile(fn):
    """torch.compile as CPython 3.12 runs it: dynamo reads the code of the function and of each
    function of its module that it calls (inlined), and the frame runs a graph of no file, so
    sys.monitoring sees no line of them."""
    def run(*args):
        inlined = {name: _traced(value, {}) for name, value in fn.__globals__.items()
                   if name in fn.__code__.co_names and inspect.isfunction(value) and value.__module__ == fn.__module__}
        return _traced(fn, inlined)(*args)
    return run
'''
OPS = """\
from pkg import dynamo


def helper(x):
    return x * 2


@dynamo.compile
def scaled(x):
    y = helper(x)
    return y + 1


def raw(x):
    return x - 1


fast_raw = dynamo.compile(raw)
"""
COMPILED = {
    "pkg/__init__.py": "",
    "pkg/dynamo.py": DYNAMO,
    "pkg/ops.py": OPS,
    "torch/__init__.py": "",
    "torch/_dynamo/__init__.py": "",
    "torch/_dynamo/bytecode_transformation.py": READER,
    "tests/test_scaled.py": "from pkg import ops\n\n\ndef test_scaled():\n    assert ops.scaled(3) == 7\n",
    "tests/test_raw.py": "from pkg import ops\n\n\ndef test_raw():\n    assert ops.fast_raw(3) == 2\n",
    "tests/test_import.py": "from pkg import ops\n\n\ndef test_import():\n    assert ops.raw\n",
    "tests/test_child.py": "import subprocess\nimport sys\n\n\ndef test_child():\n    subprocess.run([sys.executable, "
                           "'-c', 'from pkg import ops; assert ops.fast_raw(3) == 2'], check=True)\n",
}
needs_312 = pytest.mark.skipif(not PY312.exists(), reason="no .venv-py312: run python3 ci/bootstrap.py")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """COMPILED committed on main and recorded under CPython 3.12 (sysmon) into ``<root>.json``."""
    root = tmp_path_factory.mktemp("compiled")
    write_project(root, COMPILED)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        git(root, *args)
    proc = subprocess.run([str(PY312), "-m", "pytest", "-p", "ci.pytest_plugin", "--tier", "cpu", "-p",
                           "no:cacheprovider", "-p", "no:randomly", "-q"], cwd=root,
                          env={**clean_env(), "CI_DEPMAP": str(root.parent / f"{root.name}.json")},
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


@needs_312
def test_sysmon_records_every_line_of_what_dynamo_reads(compiled: Path) -> None:
    tests = json.loads((compiled.parent / f"{compiled.name}.json").read_text())["tests"]
    assert {5, 10, 11} <= parse_lines(tests["tests/test_scaled.py"]["executed"]["pkg/ops.py"])  # helper, scaled
    assert 15 in parse_lines(tests["tests/test_raw.py"]["executed"]["pkg/ops.py"])  # raw
    assert 15 in parse_lines(tests["tests/test_child.py"]["executed"]["pkg/ops.py"])  # in a child (coverage's hook)
    assert all(entry["complete"] for entry in tests.values())


@needs_312
@pytest.mark.parametrize("old, new, expected", [
    ("return y + 1", "return y + 2", {"tests/test_scaled.py"}),  # the decorated function's body
    ("return x * 2", "return x * 3", {"tests/test_scaled.py"}),  # a function it inlines
    ("return x - 1", "return x - 2", {"tests/test_raw.py", "tests/test_child.py"}),  # compiled by a call
], ids=["decorated", "inlined", "by-a-call"])
def test_a_change_inside_a_compiled_function_still_selects_its_test(compiled: Path, capsys, old, new, expected) -> None:
    runs: list[subprocess.CompletedProcess[str]] = []
    text = (compiled / "pkg/ops.py").read_text()
    selected = plan_on_branch(compiled, capsys, {"pkg/ops.py": text.replace(old, new, 1)}, on_branch=lambda: runs.append(
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "tests"],
                       cwd=compiled, env=clean_env(), capture_output=True, text=True, timeout=120)))
    failing = {line.split()[1].split("::")[0] for line in runs[0].stdout.splitlines() if line.startswith("FAILED")}
    assert failing == expected, runs[0].stdout  # the oracle: pytest on the changed branch
    assert failing <= set(selected), selected
