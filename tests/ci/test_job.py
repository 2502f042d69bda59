"""`ci job`: lint gates the run; plan and summary are printed; failures give a non-zero exit.
Runs on a tiny temporary repository (never on this repository's own suite)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from ci.commands import job as job_cmd

REGISTRY = textwrap.dedent("""\
    version: 1
    tiers:
      cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
    tests:
      tests/test_one.py: {tiers: [cpu], est_time: 1, owner: t, status: active}
      tests/test_two.py: {tiers: [cpu], est_time: 1, owner: t, status: active}
    """)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    # Child pytest loads only what it needs (plugin autoload costs ~2 s per child here).
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p xdist -p pytest_rerunfailures")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    (root / "registry.yaml").write_text(REGISTRY)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "tests" / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    (root / "tests" / "test_two.py").write_text("def test_two():\n    pass\n")
    return root


def run_job(root: Path, capfd) -> tuple[int, str, str]:
    rc = job_cmd.main(["--registry", str(root / "registry.yaml"), "--workers", "0",
                       "--junit", str(root / "reports" / "j.xml")])
    captured = capfd.readouterr()
    return rc, captured.out, captured.err


def test_lint_failure_stops_before_running(repo, capfd):
    (repo / "tests" / "test_stray.py").write_text("def test_stray():\n    pass\n")  # not registered
    rc, out, err = run_job(repo, capfd)
    assert rc == 1
    assert "tests/test_stray.py" in out
    assert "lint found" in err and "tests not run" in err
    assert not (repo / "reports").exists()


def test_clean_repo_plans_runs_and_summarises(repo, capfd):
    rc, out, err = run_job(repo, capfd)
    assert rc == 0, out + err
    assert "lint: ok" in out
    assert "tier cpu: 2 selected, 0 not run" in out
    assert "2 passed" in out
    assert "TOTAL                  2       2       0" in out
    assert "== job passed" in out


def test_failing_test_fails_the_job(repo, capfd):
    (repo / "tests" / "test_two.py").write_text("def test_two():\n    assert False, 'broken'\n")
    rc, out, _ = run_job(repo, capfd)
    assert rc == 1
    assert "tests/test_two.py      1       0       1" in out
    assert "== job FAILED (exit 1)" in out
