"""The nightly's history wiring (gpu.yml): every tier's JUnit artifact is ingested with its tier,
shard and run identity, into an SQLite file carried by actions/cache or into PostgreSQL when the
CI_HISTORY_URL secret is set; quarantined files run once per tier, non-blocking. The steps'
scripts run here as the runner runs them, on artifacts laid out as download-artifact lays them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ci.history.store import open_store
from tests.ci.history_support import Case, junit_xml, pg_server, store_location  # noqa: F401 (fixtures)
from workflow_support import (ROOT, WORKFLOW_DIR, load_workflow, run_step, runner_workspace, step_named, uses,
                              venv_python3)

NIGHTLY = load_workflow(WORKFLOW_DIR / "gpu.yml")
BASH = "bash --noprofile --norc -eo pipefail {0}"  # `shell: bash`, as GitHub runs it


def test_the_history_job_ingests_after_the_tiers_with_read_only_rights() -> None:
    job = NIGHTLY["jobs"]["history"]
    assert job["needs"] == "gpu" and job["if"] == "${{ !cancelled() && needs.gpu.result != 'skipped' }}"
    assert job["permissions"] == {"contents": "read"} and job["runs-on"] == "ubuntu-latest"
    assert job["env"]["CI_HISTORY_URL"] == "${{ secrets.CI_HISTORY_URL }}"
    (restore,) = [s for s in job["steps"] if uses(s, "actions/cache/restore")]
    (save,) = [s for s in job["steps"] if uses(s, "actions/cache/save")]
    (download,) = [s for s in job["steps"] if uses(s, "actions/download-artifact") and "pattern" in s["with"]]
    # the cache version hashes the path: restore names exactly what save saved, under one prefix
    assert restore["with"]["path"] == save["with"]["path"] == job["env"]["SQLITE_STORE"]
    prefix = restore["with"]["restore-keys"]
    assert save["with"]["key"].startswith(prefix) and restore["with"]["key"].startswith(prefix)
    assert restore["with"]["key"] != save["with"]["key"] and "github.run_attempt" in save["with"]["key"]
    assert restore["if"] == "${{ env.CI_HISTORY_URL == '' }}" and save["if"].startswith("${{ env.CI_HISTORY_URL == '' &&")
    assert download["with"] == {"pattern": "junit-*", "path": "reports"}
    # every shard's artifact and the quarantined run's match that pattern
    gpu = NIGHTLY["jobs"]["gpu"]
    names = [s["with"]["name"] for s in gpu["steps"] if uses(s, "actions/upload-artifact")]
    assert names == ["junit-${{ matrix.tier }}-${{ matrix.shard }}-of-${{ matrix.shards }}",
                     "junit-${{ matrix.tier }}-quarantined"]


def _artifacts(root: Path) -> None:
    """reports/<artifact>/<file>, as download-artifact with a pattern writes them."""
    layout = {"junit-gpu_h100-1-of-2/junit-gpu_h100-1.xml": [Case("tests/a/test_a.py", "test_ok"),
                                                             Case("tests/a/test_a.py", "test_bad", "failed", "AssertionError: 1")],
              "junit-gpu_h100-2-of-2/junit-gpu_h100-2.xml": [Case("tests/a/test_b.py", "test_ok")],
              "junit-gpu_b200_x4-1-of-1/junit-gpu_b200_x4-1.xml": [Case("tests/a/test_c.py", "test_tp")],
              "junit-gpu_h100-quarantined/quarantined-gpu_h100.xml": [Case("tests/a/test_q.py", "test_q")]}
    for rel, cases in layout.items():
        (root / "reports" / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / "reports" / rel).write_text(junit_xml(cases), encoding="utf-8")
    (root / "reports" / "junit-gpu_h200-1-of-1").mkdir()  # a shard that died before its report


def _ingest(work: Path, scratch: Path, url: str, **event: str) -> object:
    """Run the step; its ``python3`` is this virtual environment's (psycopg and all), as the
    step's install gives the runner."""
    venv_python3(scratch)
    step = step_named(NIGHTLY["jobs"]["history"], "Ingest every tier's JUnit")
    assert step["shell"] == "bash"
    assert step["env"]["EVENT"] == ("${{ (github.event_name == 'push' || github.event_name == 'merge_group') "
                                    "&& github.event_name || 'nightly' }}")
    assert step["env"]["BASE_SHA"] == "${{ github.event.merge_group.base_sha }}"
    assert step["env"]["HEAD_REF"] == "${{ github.event.merge_group.head_ref }}"
    env = {"REPO": "acme/gpu", "SHA": "abcdef1234567", "RUN_URL": "https://github.com/acme/gpu/actions/runs/77",
           "EVENT": "nightly", "AUTHOR": "", "BASE_SHA": "", "HEAD_REF": "", **event,
           "CI_HISTORY_URL": url, "SQLITE_STORE": NIGHTLY["jobs"]["history"]["env"]["SQLITE_STORE"],
           "GITHUB_RUN_ID": "77", "GITHUB_RUN_ATTEMPT": "2"}
    return run_step(step["run"], env, work, scratch, shell=BASH)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A runner's workspace: the ci package (no registry: xunit1 reports carry their files)."""
    work = runner_workspace(tmp_path)
    _artifacts(work)
    return work


def test_the_ingest_step_stores_every_artifact_with_its_tier_and_shard(store_location: str, work: Path,
                                                                       tmp_path: Path) -> None:
    postgres = store_location.startswith("postgresql://")
    result = _ingest(work, tmp_path / "scratch", store_location if postgres else "")
    assert result.returncode == 0, result.stderr + result.stdout
    location = store_location if postgres else str(work / "ci-history" / "history.sqlite")
    with open_store(location, create=False) as store:
        rows = store.fetchall("SELECT tier, shard, event, repo, sha, run_id, attempt, run_url, cases FROM reports "
                              "ORDER BY tier, shard")
    assert rows == [("gpu_b200_x4", "1/1", "nightly", "acme/gpu", "abcdef1234567", "77", 2,
                     "https://github.com/acme/gpu/actions/runs/77", 1),
                    ("gpu_h100", "", "nightly", "acme/gpu", "abcdef1234567", "77", 2,
                     "https://github.com/acme/gpu/actions/runs/77", 1),
                    ("gpu_h100", "1/2", "nightly", "acme/gpu", "abcdef1234567", "77", 2,
                     "https://github.com/acme/gpu/actions/runs/77", 2),
                    ("gpu_h100", "2/2", "nightly", "acme/gpu", "abcdef1234567", "77", 2,
                     "https://github.com/acme/gpu/actions/runs/77", 1)]
    # a re-run of the job adds nothing
    again = _ingest(work, tmp_path / "scratch", store_location if postgres else "")
    assert again.returncode == 0 and again.stdout.count("already stored") == 4


def test_a_queued_batch_is_ingested_as_merge_group(store_location: str, work: Path, tmp_path: Path) -> None:
    """gpu.yml runs on a merge queue's checks_requested only; its ingest stores the batch's run with
    main before it and the pull request its ref names (the SQLite or the PostgreSQL store); the
    HUD is not built from a queue run."""
    assert NIGHTLY["on"]["merge_group"] == load_workflow(WORKFLOW_DIR / "pr.yml")["on"]["merge_group"] == {
        "types": ["checks_requested"]}
    assert "github.event_name != 'merge_group'" in NIGHTLY["jobs"]["hud"]["if"]
    postgres = store_location.startswith("postgresql://")
    ref = "refs/heads/gh-readonly-queue/main/pr-41-" + "ab" * 20
    result = _ingest(work, tmp_path / "scratch", store_location if postgres else "", EVENT="merge_group",
                     BASE_SHA="1234567", HEAD_REF=ref)
    assert result.returncode == 0, result.stderr + result.stdout
    location = store_location if postgres else str(work / "ci-history" / "history.sqlite")
    with open_store(location, create=False) as store:
        rows = store.fetchall("SELECT DISTINCT event, pr, base_sha, batch, scored FROM reports")
    assert rows == [("merge_group", None, "1234567", "41", 1)]


def test_a_bad_report_fails_the_step(work: Path, tmp_path: Path) -> None:
    (work / "reports" / "junit-gpu_h100-2-of-2" / "junit-gpu_h100-2.xml").write_text("<testsuites><testsuite")
    result = _ingest(work, tmp_path / "scratch", "")
    assert result.returncode == 2 and "nothing was written" in result.stderr


def test_quarantined_files_run_once_per_tier_non_blocking(tmp_path: Path) -> None:
    """The step asks `ci quarantine --list-files` (for real) and runs `ci run` on what it lists with
    CI_RUN_QUARANTINED=1, against a stand-in `ci run` that records what it was given."""
    step = step_named(NIGHTLY["jobs"]["gpu"], "Quarantined tests")
    assert step["if"] == "${{ !cancelled() && matrix.shard == 1 }}" and step["env"]["CI_RUN_QUARANTINED"] == "1"
    work = tmp_path / "work"
    (work / ".venv" / "bin").mkdir(parents=True)
    os.symlink(ROOT / "ci", work / "ci")
    (work / "registry.yaml").write_text(
        "version: 1\ntiers:\n  gpu_h100: {description: h, runner_labels: [h], gpu_count: 1, arch: sm_90}\n"
        "tests:\n  tests/test_q.py: {tiers: [gpu_h100], est_time: 1, owner: me, status: quarantined, "
        "reason: flaky, issue: 'https://i/1', timeout: 120}\n"
        "  tests/test_ok.py: {tiers: [gpu_h100], est_time: 1, owner: me, status: active, timeout: 120}\n")
    record = tmp_path / "calls.json"
    stub = work / ".venv" / "bin" / "python"
    stub.write_text(f"""#!/bin/sh
if [ "$3" = run ]; then
  exec python3 -c 'import json, os, sys; json.dump([sys.argv[1:], os.environ.get("CI_RUN_QUARANTINED")], open("{record}", "w"))' "$@"
fi
exec python3 "$@"
""")
    stub.chmod(0o755)
    env = {"TIER": "gpu_h100", "CI_RUN_QUARANTINED": "1"}
    result = run_step(step["run"], env, work, tmp_path / "scratch", shell=BASH)
    assert result.returncode == 0, result.stderr
    argv, flag = json.loads(record.read_text())
    assert argv == ["-m", "ci", "run", "--tier", "gpu_h100", "--workers", "1", "--junit", "reports/quarantined-gpu_h100.xml",
                    "tests/test_q.py"] and flag == "1"
    record.unlink()
    (work / "registry.yaml").write_text((work / "registry.yaml").read_text().replace("status: quarantined, "
                                                                                     "reason: flaky, issue: 'https://i/1'",
                                                                                     "status: active"))
    result = run_step(step["run"], env, work, tmp_path / "scratch3", shell=BASH)
    assert result.returncode == 0 and "no quarantined file on gpu_h100" in result.stdout and not record.exists()
    result = run_step(step["run"], {**env, "TIER": "gpu_nope"}, work, tmp_path / "scratch4", shell=BASH)
    assert result.returncode == 2 and "unknown tier" in result.stderr, "a failed listing fails the step"
