"""``python -m ci observe``'s known gaps of issue #46, closed (docs/depmaps.md, "Known gaps"):
an observed pytest without the recorder. Real processes on a tiny project
(`tests.ci.test_observe_command`'s), nothing mocked.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.ci.depmap_support import write_project
from tests.ci.test_observe_command import FILES, _observe

PYTEST = ("python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write_project(root, FILES)
    return root


@pytest.mark.parametrize("plugins", [["-p", "no:ci-registry"], ["-p", "no:ci.pytest_plugin"]])
def test_an_observed_pytest_without_the_recorder_is_refused_before_it_runs_a_test(
        project: Path, plugins: list[str]) -> None:
    """It ran every test unrecorded and left an empty map, status 0 (9.5 min on a real tree)."""
    proc, facts = _observe(sys.executable, project, *PYTEST, *plugins, "tests/test_add.py")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error, passed through
    assert f"`{' '.join(plugins)}` turns it off" in proc.stderr
    assert "passed" not in proc.stdout and facts["tests"] == {}
    assert "no test file was recorded" in proc.stderr


def test_a_command_that_succeeds_without_recording_a_test_file_fails(project: Path) -> None:
    proc, facts = _observe(sys.executable, project, "python3", "-c", "import pkg.work")
    assert (proc.returncode, facts["tests"]) == (1, {}), proc.stderr
    assert "no test file was recorded" in proc.stderr
