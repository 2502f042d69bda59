"""Python children the recorder cannot hear leave their test's entry partial, never complete
without the modules they ran (#49 item 4). The oracle of the recorded runs is the map itself: an
entry is complete only if the child's module is in it. The judge (`unheard_reason`) is checked
on hand-picked command lines, each against what CPython does with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.observe import slipcover_core
from ci.observe.unheard import unheard_reason
from tests.ci.depmap_support import clean_env, write_project

REQUIRED = ("CI_DEPMAP_PARTS", "CI_DEPMAP_ROOT", "CI_DEPMAP_TEST")
HERE = {**os.environ, **{name: "x" for name in REQUIRED}}
PY = sys.executable
SYSTEM = "/usr/bin/python3"


def _judge(argv: list[str], env: dict[str, str] | None = None, executable: str | None = None) -> str | None:
    return unheard_reason(executable or argv[0], argv, env, HERE, PY, REQUIRED)


@pytest.mark.parametrize("argv, env, heard", [
    ([PY, "-c", "pass"], None, True),
    ([PY, "-I", "-c", "pass"], None, True),  # site still runs; the variables are not PYTHON* ones
    ([PY, "-Ic", "pass"], None, True),
    ([PY, "-c", "-S"], None, True),  # -S is the program's argument here
    ([PY, "script.py", "-S"], None, True),
    ([PY, "-W", "ignore", "-c", "pass"], None, True),
    ([PY, "-S", "-c", "pass"], None, False),
    ([PY, "-IS", "-c", "pass"], None, True),  # standard library only, and nothing that loads or reads (#46)
    ([PY, "-I", "-S", "-c", "import sys; print(sys.version_info[0])"], {"PATH": "/usr/bin"}, True),
    ([PY, "-ISc", "import os, platform; print(platform.machine(), os.cpu_count())"], None, True),
    ([PY, "-IS", "-c", "import sys; sys.path.insert(0, '.'); import pkg.mod"], None, False),
    ([PY, "-IS", "-c", "import pkg.mod"], None, False),  # not the standard library
    ([PY, "-IS", "-c", "exec(open('pkg/mod.py').read())"], None, False),
    ([PY, "-IS", "-c", "import runpy; runpy.run_path('pkg/mod.py')"], None, False),
    ([PY, "-IS", "-c", "import os, pickle; pickle.loads(os.read(0, 99))"], None, False),  # work from a pipe
    ([PY, "-IS", "-c", "getattr(__builtins__, 'exe' + 'c')('import pkg')"], None, False),
    ([PY, "-IS", "-c", "import os; os.execv('/bin/sh', ['sh'])"], None, False),
    ([PY, "-IS", "-c", "from os import environ"], None, False),
    ([PY, "-IS", "-c", "import sys; print(sys.argv)", "pkg/mod.py"], None, False),
    ([PY, "-IS", "-c", "syntax error("], None, False),
    ([PY, "-IS", "script.py"], None, False),  # a script: the repository's own, perhaps
    ([PY, "-S", "-c", "import sys"], None, False),  # -S alone: the working directory is on sys.path
    ([PY, "-I", "-X", "dev", "-S", "-c", "pass"], None, True),
    ([PY, "-I", "-S", "-m", "json.tool"], None, False),  # a module: only -c code is read
    ([PY, "-X", "dev", "-S", "-c", "pass"], None, False),
    ([PY, "-Xdev", "-S", "script.py"], None, False),
    ([PY, "-c", "pass"], {"PATH": "/usr/bin"}, False),  # a scrubbed environment
    ([PY, "-c", "pass"], {**HERE, "CI_DEPMAP_TEST": "x"}, True),
    (["true"], {"PATH": "/usr/bin"}, True),  # not Python: nothing to hear
    (["/bin/sh", "-c", f"env -i {PY} -c pass"], None, False),
    (["/bin/sh", "-c", f"A=1 exec {PY} -c pass"], None, True),
    (["/bin/sh", "-c", f"echo hi && {PY} -S x.py"], None, False),
    (["/bin/sh", "-c", "echo 'unclosed"], None, True),  # unreadable as words: not judged
])
def test_the_judge(argv: list[str], env: dict[str, str] | None, heard: bool) -> None:
    assert (_judge(argv, env) is None) is heard


def test_another_interpreter_and_scripts_by_their_shebang(tmp_path: Path) -> None:
    base = sys._base_executable  # the interpreter the virtual environment was made from
    assert base != PY, "this suite runs in a virtual environment"
    assert "another interpreter" in _judge([base, "-c", "pass"])
    assert _judge([base, "-I", "-S", "-c", "import sys"]) is None  # runs no repository code anywhere
    if os.path.exists(SYSTEM):
        assert "another interpreter" in _judge([SYSTEM, "-c", "pass"])
    own = tmp_path / "own-tool"
    own.write_text(f"#!{PY}\nprint(1)\n")
    foreign = tmp_path / "foreign-tool"
    foreign.write_text(f"#!/usr/bin/env {base}\nprint(1)\n")
    shell = tmp_path / "shell-tool"
    shell.write_text("#!/bin/sh\necho 1\n")
    for script in (own, foreign, shell):
        script.chmod(0o755)
    assert _judge([str(own)]) is None
    assert "another interpreter" in _judge([str(foreign)])
    assert _judge([str(shell)]) is None
    env = {**HERE, "PATH": f"{tmp_path}{os.pathsep}{HERE['PATH']}"}
    assert _judge(["own-tool", "-q"], env) is None and _judge(["foreign-tool"], env) is not None


CHILD = "import sys; sys.path.insert(0, '.'); import pkg.mod; pkg.mod.f()"
CALLS = {
    "plain": "[sys.executable, '-c', CHILD]",
    "isolated": "[sys.executable, '-I', '-c', CHILD]",
    "nosite": "[sys.executable, '-S', '-c', CHILD]",
    "scrubbed": "[sys.executable, '-c', CHILD], env={'PATH': os.environ['PATH']}",
    "base": "[sys._base_executable, '-c', CHILD]",  # the venv's base interpreter: no hook there
    "shell": "f'env -i {sys.executable} -c \"{CHILD}\"', shell=True",
    "noprog": "['true']",
    "inert": "[sys.executable, '-I', '-S', '-c', 'import sys; print(sys.version_info[0])']",  # #46: ignored
    "isolated_nosite": "[sys.executable, '-I', '-S', '-c', CHILD]",  # imports the repository's module
}


def _project() -> dict[str, str]:
    files = {"pkg/__init__.py": "", "pkg/mod.py": "def f():\n    return 1\n"}
    for name, call in CALLS.items():
        files[f"tests/test_{name}.py"] = textwrap.dedent(f"""\
            import os, subprocess, sys
            CHILD = {CHILD!r}

            def test_child():
                subprocess.run({call}, check=True)
            """)
    return files


@pytest.mark.parametrize("core", [pytest.param("slipcover", marks=pytest.mark.skipif(
    not slipcover_core.available(), reason="the slipcover core does not run here")), "ctrace"])
def test_an_unheard_child_leaves_its_entry_partial_and_a_heard_one_is_in_the_map(tmp_path: Path, core: str) -> None:
    write_project(tmp_path, _project())
    env = {**clean_env(), "CI_DEPMAP": "out/depmap.json", "CI_DEPMAP_CORE": core}
    proc = subprocess.run([PY, "-m", "pytest", "-p", "ci.pytest_plugin", "--tier", "cpu", "-n", "0", "-q",
                           "-p", "no:cacheprovider"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tests = json.loads((tmp_path / "out" / "depmap.json").read_text())["tests"]
    ran_it = {name: "pkg/mod.py" in tests[f"tests/test_{name}.py"]["executed"] for name in CALLS}
    complete = {name: tests[f"tests/test_{name}.py"]["complete"] for name in CALLS}
    assert complete == {"plain": True, "isolated": True, "nosite": False, "scrubbed": False, "base": False,
                        "shell": False, "noprog": True, "inert": True, "isolated_nosite": False}
    assert ran_it["plain"] and ran_it["isolated"]
    assert all(ran_it[name] for name in CALLS if complete[name] and name not in ("noprog", "inert"))  # never without it


def test_a_judge_that_fails_marks_the_child_unheard_and_never_breaks_the_program(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from ci.observe import unheard
    from ci.observe.files import OpenedLog, RepoFiles
    from ci.observe.live import unsaved_tests

    def broken(*args: object) -> str | None:
        raise RuntimeError("a bug in the judge")

    monkeypatch.setattr(unheard, "unheard_reason", broken)
    log = OpenedLog(RepoFiles(str(tmp_path)), tmp_path)
    log.active, log.context = True, "tests/test_x.py"
    log._hook("subprocess.Popen", (PY, [PY, "-c", "pass"], None, None))  # no exception reaches the program
    assert unsaved_tests(tmp_path) == {"tests/test_x.py"} and log.active
