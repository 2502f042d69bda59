"""`ci tiers move`: files put on a tier in one edit of registry.yaml, their GPU timeout from a real
durations file (`ci durations --json` over a JUnit report) or the registry's rule, every other byte
kept; bad input changes nothing. Each run is a real `python -m ci` process in a git repository."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci.history_support import Case, junit_xml
from tests.ci.tree_testutil import write

REPO = Path(__file__).resolve().parents[2]
REGISTRY = """\
# head comment: keep me
version: 1
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  gpu_h100:
    description: one H100
    runner_labels: [gpu-h100]
    gpu_count: 1
    arch: sm_90
tests:
  # --- ops ---
  tests/ops/test_a.py:
    tiers: [cpu]
    est_time: 10   # measured 2026-01
    owner: a
    status: active
  tests/ops/test_b.py:
    tiers:
      - cpu
    est_time: 50
    owner: b
    status: active
  tests/ops/test_c.py:
    tiers: [cpu]
    est_time: 5
    timeout: 900   # slow download
    owner: c
    status: active
  tests/other/test_d.py: {tiers: [cpu], est_time: 2, owner: d, status: active}
# trailing comment
"""
MOVED = REGISTRY.replace("""\
    tiers: [cpu]
    est_time: 10   # measured 2026-01
""", """\
    tiers: [gpu_h100]
    est_time: 44   # measured 2026-01
    timeout: 176
""").replace("""\
    tiers:
      - cpu
    est_time: 50
""", """\
    tiers: [gpu_h100]
    est_time: 50
    timeout: 200
""").replace("""\
    tiers: [cpu]
    est_time: 5
""", """\
    tiers: [gpu_h100]
    est_time: 5
""")


def ci(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ci", *args], cwd=root, text=True, capture_output=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    write(tmp_path, {"registry.yaml": REGISTRY,
                     # test_a measured twice: p90 40 s (the max below 10 samples) -> est_time ceil(40 x 1.1) = 44
                     "a1.xml": junit_xml([Case("tests/ops/test_a.py", "test_x", time=40.0)]),
                     "a2.xml": junit_xml([Case("tests/ops/test_a.py", "test_x", time=38.0)])})
    for f in ("tests/ops/test_a.py", "tests/ops/test_b.py", "tests/ops/test_c.py", "tests/other/test_d.py"):
        write(tmp_path, {f: "def test_x():\n    pass\n"})
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *command], cwd=tmp_path, check=True)
    done = ci(tmp_path, "durations", "a1.xml", "a2.xml", "--json", "durations.json")
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp_path


def test_moves_files_with_measured_or_rule_timeouts_and_keeps_every_other_byte(repo: Path) -> None:
    done = ci(repo, "tiers", "move", "--to", "gpu_h100", "--durations", "durations.json", "tests/ops/*")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (repo / "registry.yaml").read_text() == MOVED
    assert done.stdout.splitlines() == [
        "tests/ops/test_a.py: [cpu] -> [gpu_h100]; timeout 176 (max(120, 4 x est_time); measured p90 40 s -> est_time 44)",
        "tests/ops/test_b.py: [cpu] -> [gpu_h100]; timeout 200 (max(120, 4 x est_time); no measurement: est_time 50 as "
        "registered)",
        "tests/ops/test_c.py: [cpu] -> [gpu_h100]; timeout 900 kept (above the rule's 120; no measurement: est_time 5 as "
        "registered)",
        "3 file(s) moved to gpu_h100, 0 already there (3 matched); registry.yaml written"]
    diff = subprocess.run(["git", "diff", "--name-only"], cwd=repo, text=True, capture_output=True, check=True)
    assert diff.stdout.split() == ["registry.yaml"]


def test_dry_run_prints_the_diff_and_writes_nothing(repo: Path) -> None:
    done = ci(repo, "tiers", "move", "--to", "gpu_h100", "--dry-run", "tests/ops/test_b.py")
    assert done.returncode == 0, done.stderr
    assert "-    tiers:\n-      - cpu\n+    tiers: [gpu_h100]\n     est_time: 50\n+    timeout: 200\n" in done.stdout
    assert done.stdout.rstrip().endswith("dry run, nothing written")
    assert (repo / "registry.yaml").read_text() == REGISTRY


def test_from_replaces_one_tier_add_keeps_them_and_a_list_names_files(repo: Path) -> None:
    (repo / "files.txt").write_text("# the slow one\n\ntests/ops/*_c.py\n")
    assert ci(repo, "tiers", "move", "--to", "gpu_h100", "--add", "--list", "files.txt").returncode == 0
    assert (repo / "registry.yaml").read_text() == REGISTRY.replace(
        "    tiers: [cpu]\n    est_time: 5\n", "    tiers: [cpu, gpu_h100]\n    est_time: 5\n")
    done = ci(repo, "tiers", "move", "--from", "gpu_h100", "--to", "cpu", "tests/*")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "tests/ops/test_c.py: [cpu, gpu_h100] -> [cpu]"
    assert (repo / "registry.yaml").read_text() == REGISTRY  # the one file on gpu_h100, back where it was


@pytest.mark.parametrize("args, error", [
    (["--to", "gpu_b200", "tests/*"], "unknown tier 'gpu_b200'; the registry's tiers are cpu, gpu_h100"),
    (["--from", "gpu_x", "--to", "cpu", "tests/*"], "unknown tier 'gpu_x'; the registry's tiers are cpu, gpu_h100"),
    (["--to", "gpu_h100", "tests/ops/*", "tests/nope/*"], "no registered file matches 'tests/nope/*'; nothing changed"),
    (["--from", "gpu_h100", "--to", "cpu", "tests/ops/*"],
     "no registered file on tier gpu_h100 matches 'tests/ops/*'; nothing changed"),
    (["--to", "gpu_h100", "--list", "missing.txt"], "cannot read the list missing.txt: No such file or directory"),
    (["--to", "gpu_h100"], "name the files: GLOB... or --list FILE"),
])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(repo: Path, args: list[str], error: str) -> None:
    done = ci(repo, "tiers", "move", *args)
    assert (done.returncode, done.stderr) == (2, f"python -m ci tiers: {error}\n")
    assert (repo / "registry.yaml").read_text() == REGISTRY


def test_a_flow_style_entry_that_needs_a_timeout_is_refused_whole(repo: Path) -> None:
    """All or nothing: the block-style file that could move does not move alone."""
    done = ci(repo, "tiers", "move", "--to", "gpu_h100", "tests/other/*", "tests/ops/test_a.py")
    assert done.returncode == 2 and "tests/other/test_d.py runs on a GPU tier and needs 'timeout: 120'" in done.stderr
    assert (repo / "registry.yaml").read_text() == REGISTRY
