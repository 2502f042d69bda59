"""Reading .github/workflows/*.yml for the workflow tests: triggers, jobs, steps, checkouts, scripts."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from ci.registry import find_repo_root

ROOT = find_repo_root()
WORKFLOW_DIR = ROOT / ".github" / "workflows"
WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.y*ml"))
DEPENDABOT = ROOT / ".github" / "dependabot.yml"


def load_workflow(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise AssertionError(f"{path}: not a mapping")
    if True in data:  # YAML 1.1: a bare `on` key is the boolean true
        data["on"] = data.pop(True)
    return data


def triggers(workflow: dict[str, Any]) -> set[str]:
    on = workflow["on"]
    return {on} if isinstance(on, str) else set(on)


def run_scripts(workflow: dict[str, Any]) -> list[tuple[str, str]]:
    """(job id, run script) for every step with `run:`."""
    return [(job_id, step["run"]) for job_id, job in workflow["jobs"].items()
            for step in job.get("steps", []) if "run" in step]


def step_named(job: dict[str, Any], name: str) -> dict[str, Any]:
    (step,) = [s for s in job["steps"] if s.get("name", "").startswith(name)]
    return step


def uses(step: dict[str, Any], action: str) -> bool:
    """Whether the step uses ``action`` (``owner/name[/path]``) at any version."""
    return str(step.get("uses", "")).split("@")[0] == action


def checkouts(job: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in job.get("steps", []) if uses(s, "actions/checkout")]


def needs(job: dict[str, Any]) -> list[str]:
    value = job.get("needs", [])
    return [value] if isinstance(value, str) else list(value)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo,
                   check=True, capture_output=True, timeout=60)


def plan_repo(directory: Path) -> Path:
    """``directory/repo``: a git repository with this registry, `ci`, `fp4kv` and `tests` (selection
    follows the import graph, so the tests and what they import must be there), `origin/main` at its
    first commit, and a second commit that changes fp4kv/quant/nvfp4.py (so the GPU tiers have
    tests to plan)."""
    repo = directory / "repo"
    for package in ("ci", "fp4kv", "tests"):
        shutil.copytree(ROOT / package, repo / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "registry.yaml", repo / "registry.yaml")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    with open(repo / "fp4kv" / "quant" / "nvfp4.py", "a", encoding="utf-8") as changed:
        changed.write("# changed\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "change")
    return repo


def runner_workspace(directory: Path) -> Path:
    """``directory/work``: a runner's workspace holding this checkout's ``ci`` and ``.github`` (the
    steps' scripts), as a checkout of the default branch gives a job."""
    work = directory / "work"
    work.mkdir(parents=True)
    os.symlink(ROOT / "ci", work / "ci")
    os.symlink(ROOT / ".github", work / ".github")
    return work


def venv_python3(scratch: Path) -> None:
    """Make ``python3`` on `run_step`'s PATH this virtual environment's (psycopg and all), as a
    job's install step gives the runner: a wrapper, since a bare link to it would not find the venv."""
    (scratch / "bin").mkdir(parents=True, exist_ok=True)
    python3 = scratch / "bin" / "python3"
    python3.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python3.chmod(0o755)


def run_step(script: str, env: dict[str, str], cwd: Path, scratch: Path,
             shell: str = "bash -e {0}") -> subprocess.CompletedProcess:
    """Run a step's script as the runner does (``shell`` as GitHub documents it: ``bash -e {0}`` by
    default, ``bash --noprofile --norc -eo pipefail {0}`` for ``shell: bash``) in ``cwd``, with
    ``python3`` on PATH being this interpreter (``python3 -m ci`` imports ``cwd``'s ``ci``, which
    finds its repository root from its own location). Helper files go to ``scratch``."""
    bindir = scratch / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    python3 = bindir / "python3"
    if not python3.exists():
        python3.symlink_to(sys.executable)
    script_file = scratch / "step.sh"
    script_file.write_text(script, encoding="utf-8")
    argv = [part.replace("{0}", str(script_file)) for part in shell.split()]
    full_env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", **env}
    full_env.pop("PYTHONPATH", None)
    return subprocess.run(argv, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=120)


def ci_run_args(script: str, env: dict[str, str], directory: Path) -> argparse.Namespace:
    """Run a shard step's ``script`` (``shell: bash``) against a stand-in ``.venv/bin/python`` that
    records its argv; return what `ci run`'s own parser reads from it."""
    from ci.commands.run import build_parser

    work = directory / "work"
    (work / ".venv" / "bin").mkdir(parents=True)
    argv_file = directory / "argv.json"
    stub = work / ".venv" / "bin" / "python"
    stub.write_text(f"#!/bin/sh\nexec python3 -c 'import json, sys; json.dump(sys.argv[1:], open(\"{argv_file}\", \"w\"))' \"$@\"\n")
    stub.chmod(0o755)
    result = run_step(script, env, work, directory / "scratch", shell="bash --noprofile --norc -eo pipefail {0}")
    assert result.returncode == 0, result.stderr
    argv = json.loads(argv_file.read_text())
    assert argv[:3] == ["-m", "ci", "run"]
    return build_parser().parse_args(argv[3:])
