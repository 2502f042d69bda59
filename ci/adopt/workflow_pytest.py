"""The pytest commands of a GitHub Actions workflow's ``run:`` steps, read as YAML, never run.

Each job whose steps run pytest is one suite, named ``<workflow file stem>/<job id>`` (a job is
one machine, so it fits one tier). A step's script is read by `ci.adopt.pytest_argv.pytest_commands`
in its ``working-directory`` (the step's, else the job's or the workflow's ``defaults.run``, else
the root). A word holding a ``${{ ... }}`` expression or a ``$VAR`` is known only when the job
runs: `selected_files` reports such a path as missing, never guesses it.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ci.adopt.pytest_argv import PytestCommand, pytest_commands
from ci.adopt.pytest_config import read_config_text


class WorkflowError(ValueError):
    """A workflow or step file that is not YAML or not shaped like one (the message names the file)."""


@dataclass
class WorkflowJob:
    """Suite ``name`` (``ci/tests``) and the pytest commands of the job's steps."""

    name: str
    commands: list[PytestCommand] = field(default_factory=list)


def _working_directory(node: object) -> str | None:
    run = node.get("defaults", {}).get("run", {}) if isinstance(node, dict) else {}
    value = run.get("working-directory") if isinstance(run, dict) else None
    return value if isinstance(value, str) else None


def read_yaml(root: Path, file: Path) -> tuple[str, object]:
    """(``file``'s repo-relative name, its YAML content). Raises WorkflowError when it is not YAML,
    or OSError / UnicodeDecodeError when it cannot be read (`ci.regular_file`)."""
    display = file.relative_to(root).as_posix()
    try:
        return display, yaml.safe_load(read_config_text(file))
    except yaml.YAMLError as exc:
        raise WorkflowError(f"{display}: not YAML ({exc.__class__.__name__}); fix it or leave it out") from None


def pytest_jobs(root: Path, workflow: Path) -> list[WorkflowJob]:
    """Every job of ``workflow`` (under ``root``) with a step running pytest, in file order.
    Raises WorkflowError, or OSError / UnicodeDecodeError when the file cannot be read."""
    display, data = read_yaml(root, workflow)
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(jobs, dict):
        raise WorkflowError(f"{display}: no 'jobs:' mapping; is it a GitHub Actions workflow?")
    stem = posixpath.splitext(workflow.name)[0]
    out: list[WorkflowJob] = []
    for job_id, job in jobs.items():
        steps = job.get("steps") if isinstance(job, dict) else None
        if not isinstance(steps, list):
            continue
        found = WorkflowJob(f"{stem}/{job_id}")
        default = _working_directory(job) or _working_directory(data) or "."
        for index, step in enumerate(steps, 1):
            script = step.get("run") if isinstance(step, dict) else None
            if not isinstance(script, str):
                continue
            folder = step.get("working-directory")
            cwd = posixpath.normpath(folder if isinstance(folder, str) else default)
            label = step.get("name") or f"step {index}"
            found.commands += pytest_commands(script, cwd, f"{display} (job {job_id}, {label})")
        if found.commands:
            out.append(found)
    return out


__all__ = ["WorkflowError", "WorkflowJob", "pytest_jobs", "read_yaml"]
