"""The pytest commands of Buildkite step files shaped like vLLM's ``.buildkite/test_areas/*.yaml``.

Each file is ``{group: ..., steps: [{label, key, commands, working_dir, num_devices,
source_file_dependencies, optional, device, ...}]}``; vLLM's pipeline generator turns it into the
real pipeline. A step whose commands run pytest is one suite, named by its ``key`` (else its
label, lower-cased, non-alphanumerics as ``-``). Its commands are read by
`ci.adopt.pytest_argv.pytest_commands` in its ``working_dir``: an absolute one is inside the
image's checkout, so its first folder is that checkout (``/vllm-workspace/tests`` -> ``tests``);
without one, ``default_dir`` (the generator's default, ``/vllm-workspace/tests``). ``num_devices``
(or ``num_gpus``) is the step's GPU count; ``source_file_dependencies`` are the path prefixes whose
change runs it (Buildkite matches them as string prefixes). Read as YAML, never run.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from ci.adopt.pytest_argv import PytestCommand, pytest_commands
from ci.adopt.workflow_pytest import read_yaml


class BuildkiteError(ValueError):
    """A step file with no ``steps:`` list (the message names the file)."""


@dataclass(frozen=True)
class BuildkiteStep:
    """One step running pytest: suite ``name``, its ``commands``, ``devices`` (None: not said),
    ``depends`` (``source_file_dependencies`` as written), ``optional`` (run only when unblocked),
    ``device`` (the machine label it asks for, if any)."""

    name: str
    commands: tuple[PytestCommand, ...]
    devices: int | None
    depends: tuple[str, ...]
    optional: bool
    device: str | None


def _folder(working_dir: object, default_dir: str) -> str:
    if not isinstance(working_dir, str) or not working_dir.strip():
        return default_dir
    path = working_dir.strip()
    if path.startswith("/"):
        path = path.lstrip("/").partition("/")[2]
    return posixpath.normpath(path or ".")


def _name(step: dict[str, object]) -> str:
    key = step.get("key")
    if isinstance(key, str) and key:
        return key
    return re.sub(r"[^a-z0-9]+", "-", str(step.get("label", "step")).lower()).strip("-") or "step"


def pytest_steps(root: Path, file: Path, default_dir: str = "tests") -> list[BuildkiteStep]:
    """Every step of step file ``file`` (under ``root``) that runs pytest, in file order. Raises
    BuildkiteError, `ci.adopt.workflow_pytest.WorkflowError` (not YAML), or OSError / UnicodeDecodeError when the file cannot be read."""
    display, data = read_yaml(root, file)
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list):
        raise BuildkiteError(f"{display}: no 'steps:' list; is it a Buildkite step file?")
    out: list[BuildkiteStep] = []
    for index, step in enumerate(steps, 1):
        if not isinstance(step, dict):
            continue
        commands = step.get("commands", step.get("command"))
        lines = [commands] if isinstance(commands, str) else commands if isinstance(commands, list) else []
        name = _name(step)
        cwd = _folder(step.get("working_dir"), default_dir)
        where = f"{display} (step {name})"
        found = tuple(c for line in lines if isinstance(line, str) for c in pytest_commands(line, cwd, where))
        if not found:
            continue
        devices = step.get("num_devices", step.get("num_gpus"))
        depends = step.get("source_file_dependencies")
        device = step.get("device")
        out.append(BuildkiteStep(
            name, found, devices if isinstance(devices, int) and not isinstance(devices, bool) else None,
            tuple(d for d in depends if isinstance(d, str)) if isinstance(depends, list) else (),
            step.get("optional") is True, device if isinstance(device, str) else None))
    return out


__all__ = ["BuildkiteError", "BuildkiteStep", "pytest_steps"]
