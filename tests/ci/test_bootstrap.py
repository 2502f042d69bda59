"""`ci/bootstrap.py`: the decision table over stamps (pure), and the real script on a tiny
throwaway project in child processes: a real venv and a real `pip install -e`, first with this
interpreter, then with a copy of it at another path, which must recreate `.venv`, not reuse it;
and the GPU jobs' set-up step (`--venv-cache`) as gpu.yml runs it, across cleaned checkouts."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from workflow_support import WORKFLOW_DIR, git, load_workflow, run_step, step_named

from ci.bootstrap import Action, Interpreter, Stamp, decide, project_fingerprint

REPO = Path(__file__).resolve().parents[2]
PY = Interpreter("/usr/bin/python3.12", "3.12.3 (main, Apr 10 2024) [GCC 13.2.0]")
PROJECT = "a" * 64
UP_TO_DATE = "bootstrap: .venv is up to date\nbootstrap: browser: {}/stand-in-browser\n"


def stamp(interpreter: Interpreter = PY, project: str | None = PROJECT) -> Stamp:
    return Stamp(interpreter, project)


# -- the decision ----------------------------------------------------------------------------------

@pytest.mark.parametrize("recorded, current, exists, has_python, force, action, reason", [
    (None, stamp(), False, False, False, Action.CREATE, "no .venv yet"),
    (stamp(), stamp(), True, False, False, Action.RECREATE, "no working python"),
    (None, stamp(), True, True, False, Action.RECREATE, "no readable stamp"),
    # another interpreter: a new path (same version), or a new build at the same path
    (stamp(Interpreter("/opt/py/bin/python3.12", PY.version)), stamp(), True, True, False, Action.RECREATE,
     "the interpreter changed: .venv was made by /opt/py/bin/python3.12 (3.12.3), this is /usr/bin/python3.12"),
    (stamp(Interpreter(PY.path, "3.12.4 (main, Jun 6 2024) [GCC 13.2.0]")), stamp(), True, True, False,
     Action.RECREATE, "made by /usr/bin/python3.12 (3.12.4), this is /usr/bin/python3.12 (3.12.3)"),
    (stamp(Interpreter(PY.path, "3.12.3 (main, May 1 2024) [GCC 14.1.0]")), stamp(), True, True, False,
     Action.RECREATE, "the interpreter changed"),
    # --force never reinstalls into another interpreter's venv
    (stamp(Interpreter("/opt/py/bin/python3.12", PY.version)), stamp(), True, True, True, Action.RECREATE,
     "the interpreter changed"),
    (stamp(project="b" * 64), stamp(), True, True, False, Action.INSTALL, "pyproject.toml, the [fp4kv,test] extras or constraints.txt changed"),
    (stamp(project=None), stamp(), True, True, False, Action.INSTALL, "the last install did not finish"),
    (stamp(), stamp(), True, True, True, Action.INSTALL, "--force"),
    (stamp(), stamp(), True, True, False, Action.NOTHING, "matches"),
])
def test_decide(recorded, current, exists, has_python, force, action, reason):
    decision = decide(recorded, current, venv_exists=exists, venv_python_exists=has_python, force=force)
    assert decision.action is action
    assert reason in decision.reason


def test_stamp_round_trip_and_unreadable_stamps():
    for s in (stamp(), stamp(project=None)):
        assert Stamp.from_text(s.to_text()) == s
    legacy = "7908114568957f0074858fc03df6193fe5a626aa73408dd3979582c9ac19adbf\n"  # the old format
    for text in (legacy, "", "null", "[]", '{"interpreter": "x", "project": "p"}',
                 '{"interpreter": {"path": 1, "version": "v"}, "project": "p"}',
                 '{"interpreter": {"path": "p", "version": "v"}, "project": 5}',
                 '{"interpreter": {"path": "p"}, "project": "p"}', "{not json"):
        assert Stamp.from_text(text) is None, text


def test_project_fingerprint_covers_the_file_and_the_extras(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    first = project_fingerprint(tmp_path / "pyproject.toml")
    assert first == project_fingerprint(tmp_path / "pyproject.toml")
    assert first != project_fingerprint(tmp_path / "pyproject.toml", extras="dev")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'  # edited\n")
    assert first != project_fingerprint(tmp_path / "pyproject.toml")


# -- the real script on a throwaway project --------------------------------------------------------

TINY_PYPROJECT = textwrap.dedent("""\
    [build-system]
    requires = ["setuptools>=68"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "tiny-bootstrap-probe"
    version = "0"

    [project.optional-dependencies]
    test = []

    [tool.setuptools]
    packages = ["tiny"]
    """)


def base_interpreter() -> Path:
    """The real interpreter behind this test run (not the venv's copy or link)."""
    return Path(os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable))


def bootstrap(python: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The script in a child process; its browser is the project's stand-in (see `project`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["CHROMIUM"] = str(project / "stand-in-browser")
    return subprocess.run([str(python), "ci/bootstrap.py", *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=300)


def venv_says(project: Path) -> dict[str, str]:
    out = subprocess.run([str(project / ".venv" / "bin" / "python"), "-c",
                          "import json, sys, tiny; print(json.dumps({'base': sys._base_executable, "
                          "'prefix': sys.prefix, 'tiny': tiny.__file__}))"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return json.loads(out)


# The script and the modules it imports (it runs before anything is installed).
SCRIPT_FILES = ("bootstrap.py", "atomic_write.py", "regular_file.py", "browser_locate.py", "browser_provision.py", "py312_env.py")


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    (root / "ci").mkdir(parents=True)
    for name in SCRIPT_FILES:
        shutil.copy2(REPO / "ci" / name, root / "ci" / name)
    browser = root / "stand-in-browser"  # found through $CHROMIUM: these tests are about the venv
    browser.write_text("#!/bin/sh\necho Chromium 120.0.6099.224\n")
    browser.chmod(0o755)
    (root / "tiny").mkdir()
    (root / "tiny" / "__init__.py").write_text("")
    (root / "pyproject.toml").write_text(TINY_PYPROJECT)
    return root


@pytest.mark.skipif(os.name == "nt", reason="the venv layout checked here is POSIX's")
def test_a_changed_interpreter_recreates_the_venv(project, tmp_path):
    first = base_interpreter()
    proc = bootstrap(first, project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "create .venv: there is no .venv yet" in proc.stdout
    recorded = Stamp.from_text((project / ".venv" / ".bootstrap-stamp").read_text())
    assert recorded is not None and recorded.interpreter.path == str(first)
    assert recorded.project == project_fingerprint(project / "pyproject.toml")
    assert venv_says(project)["tiny"] == str(project / "tiny" / "__init__.py")  # the editable install

    # The same interpreter through a symlink is the same interpreter: nothing to do.
    (tmp_path / "link").mkdir()
    (tmp_path / "link" / "python3").symlink_to(first)
    proc = bootstrap(tmp_path / "link" / "python3", project)
    assert (proc.returncode, proc.stdout) == (0, UP_TO_DATE.format(project)), proc.stderr

    # Another interpreter (a copy of the binary at another path): --check says so and changes nothing.
    (tmp_path / "other").mkdir()
    second = tmp_path / "other" / "python{}.{}".format(*sys.version_info)  # named as installs name it
    shutil.copy2(first, second)
    old_file = project / ".venv" / "left-by-the-old-venv"
    old_file.write_text("")
    proc = bootstrap(second, project, "--check")
    assert proc.returncode == 1
    assert (f"needs a bootstrap (delete and recreate .venv): the interpreter changed: .venv was made by "
            f"{first} (") in proc.stdout and f"this is {second} (" in proc.stdout
    assert old_file.exists()

    proc = bootstrap(second, project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not old_file.exists()  # recreated, not reinstalled into the old one
    assert (project / ".venv" / "pyvenv.cfg").read_text().count(f"home = {second.parent}\n") == 1
    says = venv_says(project)
    assert says["base"] == str(second) and says["tiny"] == str(project / "tiny" / "__init__.py")
    assert Stamp.from_text((project / ".venv" / ".bootstrap-stamp").read_text()).interpreter.path == str(second)
    assert bootstrap(second, project, "--check").returncode == 0
    # ... and so does the venv's own python, which knows its base interpreter from pyvenv.cfg.
    proc = bootstrap(project / ".venv" / "bin" / "python", project, "--check")
    assert (proc.returncode, proc.stdout) == (0, UP_TO_DATE.format(project)), proc.stdout

    # A pyproject change with the same interpreter reinstalls into the existing venv.
    (project / "pyproject.toml").write_text(TINY_PYPROJECT + "# edited\n")
    old_file.write_text("")
    proc = bootstrap(second, project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "install into the existing .venv: pyproject.toml, the [fp4kv,test] extras or constraints.txt changed" in proc.stdout
    assert old_file.exists()

    # An install that fails (here: the package directory is gone) is not stamped as done.
    (project / "tiny").rename(project / "tiny-moved")
    proc = bootstrap(second, project, "--force")
    assert proc.returncode != 0 and "bootstrap: failed" in proc.stderr
    proc = bootstrap(second, project, "--check")
    assert proc.returncode == 1 and "(install into the existing .venv): the last install did not finish" in proc.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="apt-get and the Linux install places")
def test_no_browser_sets_up_without_a_browser_or_root(project, tmp_path):
    """A GPU runner: no browser anywhere bootstrap looks, and apt-get failing as without a mirror
    (or sudo refused, when not root). ``--no-browser`` sets up and says what it left out; without
    it the same machine fails, so the browser really was hidden."""
    system, log = tmp_path / "system", tmp_path / "calls"
    system.mkdir()
    for tool, body in (("apt-get", "exit 100"), ("sudo", "exit 1")):
        (system / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> "{log}"\n{body}\n')
        (system / tool).chmod(0o755)
    provision = project / "ci" / "browser_provision.py"
    provision.write_text(provision.read_text().replace('"/usr/bin/apt-get"', repr(str(system / "apt-get")))
                         .replace('"/usr/bin/sudo"', repr(str(system / "sudo"))))
    locate = project / "ci" / "browser_locate.py"
    locate.write_text(locate.read_text().replace('"linux": (', '"linux": () and ('))  # no usual install places
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "CHROMIUM")}
    env["PATH"] = str(tmp_path / "empty-bin")  # no browser on PATH either

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(base_interpreter()), "ci/bootstrap.py", *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=300)

    left_out = "bootstrap: browser: left out (--no-browser): the HUD's browser tests need one"
    proc = run("--no-browser")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "create .venv" in proc.stdout and left_out in proc.stdout
    assert venv_says(project)["tiny"] == str(project / "tiny" / "__init__.py")
    assert not log.exists()  # nothing was asked of apt-get or sudo
    proc = run("--check", "--no-browser")
    assert (proc.returncode, proc.stdout) == (0, f"bootstrap: .venv is up to date\n{left_out}; run "
                                                 "`python3 ci/bootstrap.py` without it to add one\n")

    proc = run()
    assert proc.returncode == 1 and proc.stdout.startswith("bootstrap: .venv is up to date\n")
    assert ("`apt-get update -qq` failed (exit 100)" if os.geteuid() == 0 else "installing one needs root") \
        in proc.stderr


# -- the GPU jobs' set-up: the environment outside the checkout ------------------------------------

def stand_in_torch(directory: Path) -> Path:
    """A wheel named torch 2.13.0 (one module), so that no test downloads the real one."""
    wheel = directory / "torch-2.13.0-py3-none-any.whl"
    directory.mkdir(parents=True, exist_ok=True)
    files = {"torch/__init__.py": "STAND_IN = True\n",
             "torch-2.13.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 2.13.0\n",
             "torch-2.13.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                             "Tag: py3-none-any\n"}
    files["torch-2.13.0.dist-info/RECORD"] = "".join(f"{name},,\n" for name in [*files, "torch-2.13.0.dist-info/RECORD"])
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return wheel


def gpu_setup(project: Path, tool_cache: Path, scratch: Path) -> tuple[subprocess.CompletedProcess, float]:
    """gpu.yml's set-up step, its script as the YAML has it, run as the runner does; and its time."""
    script = step_named(load_workflow(WORKFLOW_DIR / "gpu.yml")["jobs"]["gpu"], "Bootstrap")["run"]
    start = time.monotonic()
    proc = run_step(script, {"RUNNER_TOOL_CACHE": str(tool_cache)}, project, scratch,
                    shell="bash --noprofile --norc -eo pipefail {0}")
    return proc, time.monotonic() - start


def imports_in_venv(project: Path) -> dict[str, str]:
    out = subprocess.run([str(project / ".venv" / "bin" / "python"), "-c",
                          "import json, torch, tiny; print(json.dumps({'torch': torch.STAND_IN, 'tiny': tiny.__file__}))"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return json.loads(out)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="self-hosted GPU runners are Linux")
def test_gpu_setup_reuses_its_environment_across_cleaned_checkouts(project, tmp_path):
    """Shard after shard on one runner: the checkout is cleaned (`git clean -ffdx`, as
    actions/checkout does) and the step run again installs nothing, even with the torch wheel gone;
    a changed key builds anew; a build killed midway is deleted, never reused."""
    wheel = stand_in_torch(tmp_path / "wheels")
    (project / "pyproject.toml").write_text(TINY_PYPROJECT.replace(
        "test = []", f'test = []\nfp4kv = ["torch @ {wheel.as_uri()}"]'))
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "commit", "-qm", "tiny")
    tool_cache, scratch = tmp_path / "tool-cache", tmp_path / "scratch"

    first, took = gpu_setup(project, tool_cache, scratch)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "bootstrap: create .venv: there is no .venv yet" in first.stdout
    (built,) = [p for p in (tool_cache / "fp4kv-venv").iterdir() if p.is_dir()]
    assert (project / ".venv").is_symlink() and (project / ".venv").resolve() == built.resolve()
    assert imports_in_venv(project) == {"torch": True, "tiny": str(project / "tiny" / "__init__.py")}

    git(project, "clean", "-ffdx")  # the next shard's checkout
    assert not os.path.lexists(project / ".venv") and built.is_dir()
    wheel.unlink()  # any install of torch now fails
    second, took = gpu_setup(project, tool_cache, scratch)
    print(f"second shard's set-up: {took:.2f} s")
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"bootstrap: reusing {built}: the stamp matches" in second.stdout
    assert "install" not in second.stdout and (project / ".venv").resolve() == built.resolve()
    assert not (project / ".venv-py312").exists()  # --no-py312: a GPU job runs no 3.12 recorder test
    assert imports_in_venv(project)["torch"] is True

    # A changed key (the torch spec in pyproject.toml) builds a new environment beside the old one.
    stand_in_torch(tmp_path / "wheels")
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text() + "# torch spec edited\n")
    changed, _ = gpu_setup(project, tool_cache, scratch)
    assert changed.returncode == 0 and "create .venv: there is no .venv yet" in changed.stdout, changed.stderr
    new = (project / ".venv").resolve()
    assert new != built.resolve() and built.is_dir() and imports_in_venv(project)["torch"] is True

    # Killed once its venv exists and pip runs: the next run deletes it and builds it whole.
    git(project, "checkout", "-q", "pyproject.toml")
    shutil.rmtree(built)
    killed = _killed_once_pip_starts(project, tool_cache, scratch)
    assert Stamp.from_text((built / ".bootstrap-stamp").read_text()).project is None, killed
    (built / "left-by-the-killed-build").write_text("")
    again, _ = gpu_setup(project, tool_cache, scratch)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"the last install did not finish; deleted the unfinished {built.name}" in again.stdout
    assert not (built / "left-by-the-killed-build").exists() and (project / ".venv").resolve() == built.resolve()
    assert imports_in_venv(project)["torch"] is True


def _killed_once_pip_starts(project: Path, tool_cache: Path, scratch: Path) -> str:
    """Start the set-up step, SIGKILL its process group as soon as pip starts; its output so far."""
    script = step_named(load_workflow(WORKFLOW_DIR / "gpu.yml")["jobs"]["gpu"], "Bootstrap")["run"]
    (scratch / "killed.sh").write_text(script)
    env = {**os.environ, "PATH": f"{scratch / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "RUNNER_TOOL_CACHE": str(tool_cache)}
    proc = subprocess.Popen(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(scratch / "killed.sh")],
                            cwd=project, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "installing the project" in line:
            time.sleep(0.5)  # pip is running now, and the tiny install takes seconds
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.wait(timeout=60)
    return proc.stdout.read()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock and self-hosted GPU runners are Linux")
def test_two_shards_on_one_host_build_the_environment_once(project, tmp_path):
    """Two set-ups at once with the same key: one builds under the lock, the other waits and reuses."""
    (project / "pyproject.toml").write_text(TINY_PYPROJECT)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    argv = [str(base_interpreter()), "ci/bootstrap.py", "--no-browser", "--no-py312", "--venv-cache",
            str(tmp_path / "cache")]
    procs = [subprocess.Popen(argv, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    said = sorted("creating" if "creating venv-" in out else "reusing" if "reusing" in out else out
                  for out, _ in outs)
    assert said == ["creating", "reusing"]
    assert venv_says(project)["tiny"] == str(project / "tiny" / "__init__.py")


def test_venv_cache_refuses_a_relative_folder_force_and_a_real_venv(project, tmp_path):
    for args, problem in ((["--venv-cache", "rel"], "--venv-cache rel: give an absolute folder"),
                          (["--force", "--venv-cache", str(tmp_path)], "--force would rebuild")):
        proc = bootstrap(base_interpreter(), project, *args)
        assert proc.returncode == 2 and problem in proc.stderr and "Traceback" not in proc.stderr
    (project / ".venv").mkdir()
    proc = bootstrap(base_interpreter(), project, "--no-browser", "--venv-cache", str(tmp_path / "c"))
    assert proc.returncode == 2
    assert proc.stderr == (f"bootstrap: {project / '.venv'} is a directory, not the link --venv-cache makes; "
                           f"remove it and run again\n")
