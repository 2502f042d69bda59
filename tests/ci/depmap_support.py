"""The registry of the small projects the runtime-map tests record: package ``pkg``, tests under
``tests/``, one cpu tier; ``{entries}`` takes the test entries."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from ci.__main__ import main as ci_main

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]

REGISTRY = """\
version: 1
project:
  first_party: [pkg, tests]
  source_roots: ["."]
  test_roots: [tests]
  test_patterns: ["test_*.py"]
tiers:
  cpu:
    description: cpu
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
tests:
{entries}
"""


def write_project(root: Path, files: dict[str, str]) -> None:
    """Writes ``files`` (repo-relative path: text) under ``root``, and a registry.yaml registering
    every ``tests/test_*`` among them on the cpu tier."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    tests = sorted(r for r in files if r.startswith("tests/test_"))
    entries = "".join(f"  {t}:\n    tiers: [cpu]\n    est_time: 1\n    owner: '@x'\n    status: active\n" for t in tests)
    (root / "registry.yaml").write_text(REGISTRY.format(entries=entries))


def clean_env() -> dict[str, str]:
    """This environment without any recording's variables, with this checkout importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CI_DEPMAP", "COVERAGE_")) and k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


def record_committed_project(root: Path, files: dict[str, str], uncommitted: dict[str, str] | None = None) -> Path:
    """`write_project`, commit it on ``main`` of a new git repository, and record its cpu tier
    with ``ci run --workers 0`` (files in name order, one process); returns the map's path,
    beside ``root``. ``uncommitted`` (path -> text) is written after the commit, before recording."""
    write_project(root, files)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run([*GIT, *args], cwd=root, check=True, capture_output=True)
    for rel, text in (uncommitted or {}).items():
        (root / rel).write_text(text)
    depmap = root.parent / f"{root.name}.json"
    proc = subprocess.run([sys.executable, "-m", "ci", "run", "--registry", str(root / "registry.yaml"), "--tier", "cpu",
                           "--workers", "0", "--record-depmap", str(depmap)],
                          cwd=root, env=clean_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return depmap


def git(root: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=root, check=True, capture_output=True, text=True).stdout


def recorded_project(files: dict[str, str], label: str) -> Callable[..., Path]:
    """A module-scoped fixture: ``files`` recorded by `record_committed_project` in a fresh
    folder named after ``label``; it gives the project's root."""

    @pytest.fixture(scope="module")
    def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
        root = tmp_path_factory.mktemp(label)
        record_committed_project(root, files)
        return root

    return recorded


def plan_on_branch(root: Path, capsys: pytest.CaptureFixture[str], edits: dict[str, str], *maps: str,
                   on_branch: Callable[[], None] | None = None, not_run: dict[str, str] | None = None) -> dict[str, str]:
    """Branch off main, apply ``edits`` (path -> new text), commit, and plan the cpu tier against
    main with ``maps`` (default: the map `record_committed_project` wrote); ``on_branch`` runs
    there before main is checked out again. Returns the selected tests' reasons; ``not_run`` gets
    the other tests' reasons."""
    git(root, "checkout", "-q", "-B", f"b{abs(hash(json.dumps(edits, sort_keys=True)))}", "main")
    for rel, text in edits.items():
        (root / rel).write_text(text)
    git(root, "commit", "-q", "-am", "change")
    capsys.readouterr()
    cwd = os.getcwd()
    os.chdir(root)
    try:
        rc = ci_main(["plan", "--registry", str(root / "registry.yaml"), "--tier", "cpu", "--base", "main",
                      "--format", "json", *(maps or ["--depmap", str(root.parent / f"{root.name}.json")])])
        if on_branch is not None:
            on_branch()
    finally:
        os.chdir(cwd)
        git(root, "checkout", "-q", "main")
    assert rc == 0
    out = json.loads(capsys.readouterr().out)["plans"][0]
    if not_run is not None:
        not_run.update({t["path"]: t["reason"] for t in out["not_run"]})
    return {t["path"]: t["why"] for t in out["selected"]}
