"""The README's two commands are what users and CI run: keep them true.

CI (`.ci/run`) must call exactly the README's test command, and both commands must name things
that exist, so a README edit or a renamed command cannot silently diverge from what CI tests.
"""

from __future__ import annotations

import importlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    """The lines of the README's first fenced code block."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^```[a-z]*\n(.*?)^```", text, flags=re.M | re.S)
    if match is None:
        raise AssertionError("README.md has no fenced code block")
    return [line for line in match.group(1).splitlines() if line.strip()]


def ci_run_commands() -> list[str]:
    """Substantive lines of .ci/run: not comments, shell options or the cd to the repo root."""
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith(("#", "set ", 'cd "$(dirname'))]


def test_readme_opens_with_exactly_two_one_line_commands() -> None:
    commands = readme_commands()
    assert len(commands) == 2, commands
    assert all(command.startswith("python3 ci/bootstrap.py && ") for command in commands), commands


def test_ci_run_calls_exactly_the_readme_test_command() -> None:
    assert ci_run_commands() == [readme_commands()[1]]


def test_readme_commands_name_existing_entry_points() -> None:
    from ci.__main__ import COMMANDS

    for command in readme_commands():
        words = shlex.split(command.split("&&", 1)[1])
        assert words[0] == ".venv/bin/python" and words[1] == "-m", words
        module = words[2]
        if module == "ci":
            assert words[3] in COMMANDS, f"README runs unknown `python -m ci {words[3]}`"
            importlib.import_module(f"ci.commands.{words[3]}")
        else:
            assert module == "pytest", words
    assert (ROOT / "ci" / "bootstrap.py").is_file()


def test_bootstrap_is_idempotent_when_nothing_changed(tmp_path: Path) -> None:
    """A second bootstrap with an unchanged pyproject.toml reuses the environment."""
    from ci import bootstrap

    fingerprint = bootstrap.project_fingerprint(ROOT / "pyproject.toml", constraints=bootstrap.CONSTRAINTS)
    assert fingerprint == bootstrap.project_fingerprint(ROOT / "pyproject.toml", constraints=bootstrap.CONSTRAINTS)
    changed = tmp_path / "pyproject.toml"
    changed.write_bytes((ROOT / "pyproject.toml").read_bytes() + b"\n# changed\n")
    assert bootstrap.project_fingerprint(changed, constraints=bootstrap.CONSTRAINTS) != fingerprint
    pins = tmp_path / "constraints.txt"
    pins.write_bytes(bootstrap.CONSTRAINTS.read_bytes() + b"numpy==2.0.0\n")
    assert bootstrap.project_fingerprint(ROOT / "pyproject.toml", constraints=pins) != fingerprint


def test_bootstrap_reports_up_to_date_in_this_checkout() -> None:
    """The README command ran bootstrap before pytest, so the stamp must match now."""
    result = subprocess.run([sys.executable, "ci/bootstrap.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "up to date" in result.stdout
