"""Build and run the pytest subprocess for a set of test files.

The child is ``<python> -m pytest -p ci.pytest_plugin --registry R [--tier T] -n W
--junitxml J -o junit_family=xunit1 FILES... EXTRA...`` run in the repository root, with the repo
and this package on ``PYTHONPATH``. Its output streams straight through (progress for long runs).
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

PLUGIN = "ci.pytest_plugin"
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PytestInvocation:
    """``argv`` to execute in ``cwd``; ``junit`` is where the JUnit XML will be written."""

    argv: tuple[str, ...]
    cwd: Path
    junit: Path


def parse_workers(value: str) -> str:
    """``auto``, ``0`` or a positive integer of up to 4 ASCII digits (for ``-n``); raises
    ValueError otherwise (``int`` would take ``٣``; ``str.isdigit`` takes ``²``, which ``int`` refuses)."""
    if value == "auto" or (value.isascii() and value.isdigit() and len(value) <= 4):
        return value
    raise ValueError(f"--workers must be 'auto' or a whole number from 0 to 9999 in ASCII digits, got {value!r}")


def build_invocation(files: Sequence[str], *, root: Path, registry_path: Path, junit: Path,
                     tier: str | None = None, workers: str = "auto", extra: Sequence[str] = (),
                     use_plugin: bool = True, python: str = sys.executable) -> PytestInvocation:
    argv = [python, "-m", "pytest"]
    if use_plugin:
        argv += ["-p", PLUGIN, "--registry", str(registry_path)]
        if tier is not None:
            argv += ["--tier", tier]
    argv += ["-n", parse_workers(workers), f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    argv += list(files)
    argv += list(extra)
    return PytestInvocation(tuple(argv), root, junit)


def child_env(root: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``root`` and this package importable; PYTEST_ADDOPTS untouched."""
    env = dict(os.environ if base is None else base)
    paths = [str(root), str(_PACKAGE_PARENT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def run_invocation(inv: PytestInvocation, env: Mapping[str, str] | None = None) -> int:
    """Run it, streaming output; returns pytest's exit status."""
    inv.junit.parent.mkdir(parents=True, exist_ok=True)
    if inv.junit.exists():
        inv.junit.unlink()  # a stale report from an earlier run must never be summarised as this one
    proc = subprocess.run(inv.argv, cwd=inv.cwd, env=child_env(inv.cwd, env), check=False)
    return proc.returncode
