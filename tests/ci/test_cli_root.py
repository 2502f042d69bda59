"""One root rule for every command (``--root DIR``, else the nearest registry.yaml at or above the
working directory; outside any: say so, exit 2), the ``fp4kv-ci`` console script, and the
plugin's ``pytest11`` entry point (registered once, however many ways ask for it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.registry import RepoRootNotFound, explicit_repo_root, find_repo_root, set_repo_root

CONSOLE_SCRIPT = Path(sys.executable).with_name("fp4kv-ci")
REGISTRY = """\
version: 1
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
tests:
  tests/test_one.py: {tiers: [cpu], est_time: 3, owner: t, status: active}
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "tests" / "deep").mkdir(parents=True)
    (root / "registry.yaml").write_text(REGISTRY)
    (root / "tests" / "test_one.py").write_text("def test_one():\n    pass\n")
    return root


def test_find_repo_root_starts_at_the_working_directory(repo, monkeypatch):
    monkeypatch.chdir(repo / "tests" / "deep")
    assert find_repo_root() == repo.resolve()
    assert find_repo_root(repo / "tests") == repo.resolve()
    set_repo_root(repo.parent)
    try:
        assert find_repo_root() == repo.parent.resolve() == explicit_repo_root()  # --root wins
        assert find_repo_root(repo / "tests") == repo.resolve()  # an explicit start still searches
    finally:
        set_repo_root(None)
    monkeypatch.chdir(repo.parent)
    with pytest.raises(RepoRootNotFound, match="no registry.yaml in .* or any directory above it"):
        find_repo_root()


@pytest.mark.parametrize("argv", [["lint"], ["plan", "--tier", "cpu"], ["run", "--tier", "cpu"],
                                  ["durations", "r.xml"], ["job"], ["import-suites"]])
def test_every_command_outside_a_repository_says_so_and_exits_2(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    if argv[0] == "import-suites":  # it may start a registry, but not from an empty map into a missing tier
        argv = [*argv, "--tier-map", "s=gpu_x"]
    assert ci_main(argv) == 2
    err = capsys.readouterr().err
    expected = "not defined" if argv[0] == "import-suites" else f"no registry.yaml in {tmp_path.resolve()}"
    assert expected in err and "Traceback" not in err


def test_root_option_errors(tmp_path, capsys):
    assert ci_main(["--root", str(tmp_path / "nope"), "plan", "--tier", "cpu"]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert ci_main(["--root"]) == 2
    assert "--root needs a directory" in capsys.readouterr().err
    assert explicit_repo_root() is None  # nothing leaks out of a call


def test_root_option_from_an_unrelated_directory(repo, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert ci_main(["--root", str(repo), "plan", "--tier", "cpu"]) == 0
    assert "tests/test_one.py" in capsys.readouterr().out
    assert ci_main([f"--root={repo}", "lint"]) == 0
    assert explicit_repo_root() is None


def test_console_script_runs_from_a_subdirectory(repo):
    result = subprocess.run([str(CONSOLE_SCRIPT), "plan", "--tier", "cpu", "--format", "json"], cwd=repo / "tests" / "deep",
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert '"tests/test_one.py"' in result.stdout
    usage = subprocess.run([str(CONSOLE_SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and usage.stdout.startswith("usage: fp4kv-ci [--root DIR] <command>")
    assert "import-suites" in usage.stdout and "init" in usage.stdout


CONFTEST = """\
pytest_plugins = ["ci.pytest_plugin"]


def pytest_configure(config):
    import ci.pytest_plugin as plugin

    names = [name for name, p in config.pluginmanager.list_name_plugin() if p is plugin]
    print("CI-PLUGIN", names, flush=True)
"""


def test_entry_point_conftest_and_p_option_register_the_plugin_once(repo):
    """This repository's way (conftest) plus the entry point plus `-p` (what `ci run` passes)."""
    (repo / "conftest.py").write_text(CONFTEST)
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "-p", "no:cacheprovider",
                             "-s", "-q"], cwd=repo, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CI-PLUGIN ['ci.pytest_plugin']" in result.stdout
    assert "1 passed" in result.stdout


def test_the_entry_point_alone_loads_the_plugin(repo):
    """Another repository: no conftest, no flag, only the installed package."""
    (repo / "tests" / "test_stray.py").write_text("def test_stray():\n    pass\n")
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "."], cwd=repo / "tests",
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr  # a collection error
    assert "tests/test_stray.py is not registered in" in result.stdout


@pytest.mark.parametrize("command", [["plan", "--tier", "cpu"], ["lint", "--format", "json"], ["--help"]])
def test_a_reader_that_left_ends_the_command_quietly(repo: Path, command: list[str]) -> None:
    """``python -m ci plan | head -1``: the reader closes the pipe before the command writes. The
    command must stop with 141 (what a shell shows for SIGPIPE) and no traceback on stderr."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte
    try:
        result = subprocess.run([sys.executable, "-m", "ci", "--root", str(repo), *command], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write_end)
    assert result.stderr == ""
    assert result.returncode == 141
