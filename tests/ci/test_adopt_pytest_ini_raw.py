"""pytest's ini files are read raw, as pytest reads them (issue #32's mutation survivors).

A ``log_format = %(asctime)s %(message)s`` line (common: pytest's own docs show it) is text to
pytest, not a configparser interpolation; `ci.adopt.pytest_config.read_pytest_config` must read it
the same way and keep the file's ``testpaths`` and ``python_files``, never report the file as
unreadable or lose its test roots.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.adopt.pytest_config import read_pytest_config
from tests.ci.tree_testutil import write

BODY = ("log_format = %(asctime)s %(levelname)s %(message)s\n"
        "log_date_format = %Y-%m-%d %H:%M:%S\n"
        "addopts = -k \"not 100%\"\n"
        "testpaths = unit integration\n"
        "python_files = check_*.py\n")


@pytest.mark.parametrize("name, section", [
    ("test/pytest.ini", "pytest"),
    ("test/tox.ini", "pytest"),
    ("test/setup.cfg", "tool:pytest"),
])
def test_percent_signs_are_text_and_the_test_roots_stay(tmp_path: Path, name: str, section: str) -> None:
    write(tmp_path, {name: f"[{section}]\n{BODY}"})
    config = read_pytest_config(tmp_path, name)
    assert config is not None and config.problem is None
    assert config.test_roots == ("test/unit", "test/integration")
    assert config.python_files == ("check_*.py",)
