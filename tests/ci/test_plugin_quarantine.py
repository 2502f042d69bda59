"""Quarantine in the plugin, through a real pytest process: a node in ``quarantined_nodes`` runs and
its failure does not fail the job; the failure is still in the JUnit and the history reads it back
as a failure (or as breakage); the file's other tests still block; a quarantined file runs
non-blocking only under ``--run-quarantined``."""

from __future__ import annotations

from pathlib import Path

from ci.history.ingest import case_rows
from ci.results.junit import parse_junit
from tests.ci.test_plugin_reruns import run_pytest
from tests.ci.tree_testutil import CPU_REGISTRY_HEAD

ENTRY = """\
  tests/test_q.py:
    tiers: [cpu]
    est_time: 1
    owner: me
    status: active
    quarantined_nodes:
      - node: tests/test_q.py::test_flaky
        reason: "flaky: accuracy threshold"
      - node: tests/test_q.py::TestGroup::test_param[2]
        reason: one parameter flakes
      - node: tests/test_q.py::test_import
        reason: quarantined, yet breakage stays breakage
"""

TESTS = """\
import pytest


def test_flaky():
    assert 0.81 > 0.85, "accuracy 0.81 below 0.85"


def test_import():
    from os import KVFP4QuantizeUtil  # noqa: F401


def test_passes():
    pass


class TestGroup:
    @pytest.mark.parametrize("n", [1, 2])
    def test_param(self, n):
        assert n == 1
"""


def kinds(junit: Path, root: Path) -> dict[str, tuple[list[str], str]]:
    report = parse_junit(junit, root=root)
    out = {}
    for case in report.cases:
        rows = case_rows(case)
        out[rows[0].node.split("::", 1)[1]] = ([r.kind for r in rows], rows[-1].message)
    return out


def test_quarantined_nodes_run_without_blocking_and_are_remembered_as_failures(tmp_path: Path) -> None:
    proc, junit = run_pytest(tmp_path, CPU_REGISTRY_HEAD + ENTRY, {"tests/test_q.py": TESTS})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed, 3 xfailed" in proc.stdout, proc.stdout
    found = kinds(junit, tmp_path)
    assert found["test_flaky"] == (["fail"], "AssertionError: accuracy <n> below <n>")
    assert found["test_import"][0] == ["broken"]
    assert found["TestGroup::test_param[2]"][0] == ["fail"]
    assert found["TestGroup::test_param[1]"][0] == ["pass"] and found["test_passes"][0] == ["pass"]


def test_the_files_other_tests_still_block(tmp_path: Path) -> None:
    entry = ENTRY.replace("      - node: tests/test_q.py::TestGroup::test_param[2]\n        reason: one parameter flakes\n", "")
    proc, _ = run_pytest(tmp_path, CPU_REGISTRY_HEAD + entry, {"tests/test_q.py": TESTS})
    assert proc.returncode == 1
    assert "1 failed, 2 passed, 2 xfailed" in proc.stdout, proc.stdout


def test_a_quarantined_node_that_passes_is_a_pass(tmp_path: Path) -> None:
    entry = ENTRY.replace("test_q.py::test_flaky", "test_q.py::test_passes")
    proc, junit = run_pytest(tmp_path, CPU_REGISTRY_HEAD + entry, {"tests/test_q.py": TESTS})
    assert "xpassed" in proc.stdout, proc.stdout
    assert kinds(junit, tmp_path)["test_passes"][0] == ["pass"]


def test_a_quarantined_file_is_skipped_unless_run_quarantined(tmp_path: Path) -> None:
    entry = ("  tests/test_q.py:\n    tiers: [cpu]\n    est_time: 1\n    owner: me\n    status: quarantined\n"
             "    reason: flaky accuracy\n    issue: https://example.org/i/1\n")
    files = {"tests/test_q.py": TESTS}
    proc, _ = run_pytest(tmp_path, CPU_REGISTRY_HEAD + entry, files)
    assert proc.returncode == 0 and "5 skipped" in proc.stdout, proc.stdout
    proc, junit = run_pytest(tmp_path, CPU_REGISTRY_HEAD + entry, files, "--run-quarantined")
    assert proc.returncode == 0, proc.stdout
    assert "3 xfailed, 2 xpassed" in proc.stdout, proc.stdout
    assert kinds(junit, tmp_path)["test_flaky"][0] == ["fail"]
    # what `python -m ci run` passes on: the environment (the nightly job sets it)
    proc, _ = run_pytest(tmp_path, CPU_REGISTRY_HEAD + entry, files, env={"CI_RUN_QUARANTINED": "1"})
    assert proc.returncode == 0 and "3 xfailed, 2 xpassed" in proc.stdout, proc.stdout
