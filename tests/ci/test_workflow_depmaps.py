"""Runtime dependency maps through the workflows: every gpu.yml shard records its map and uploads it
in its JUnit artifact, the nightly's history job ingests it with the JUnit, and pr-gpu.yml's plan
selects with the maps of that same store, or, with no store, warns and selects by the static
graph; its shards run exactly the files the plan chose. The steps' scripts run here as the runner
runs them (`ci plan`, `ci history ingest` and the ingest script for real; `ci run` as a stand-in
whose argv `ci run`'s own parser reads)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ci.history.store import open_store
from tests.ci.history_support import Case, junit_xml
from workflow_support import (ROOT, WORKFLOW_DIR, ci_run_args, git, load_workflow, plan_repo, run_step,
                              runner_workspace, step_named, uses, venv_python3)

NIGHTLY = load_workflow(WORKFLOW_DIR / "gpu.yml")
PR_GPU = load_workflow(WORKFLOW_DIR / "pr-gpu.yml")
BASH = "bash --noprofile --norc -eo pipefail {0}"  # `shell: bash`, as GitHub runs it
HEAVY = "tests/quant/test_nvfp4.py"  # on gpu_h100, gpu_h200, gpu_b200; plan_repo's change selects it
MATRIX = {"${{ matrix.tier }}": "gpu_h100", "${{ matrix.shard }}": "2", "${{ matrix.shards }}": "3"}
RUN = {"REPO": "acme/gpu", "SHA": "abcdef1234567", "RUN_URL": "https://github.com/acme/gpu/actions/runs/77",
       "GITHUB_RUN_ID": "77", "GITHUB_RUN_ATTEMPT": "1", "CI_HISTORY_URL": ""}


def _expand(text: str, values: dict[str, str]) -> str:
    for expression, value in values.items():
        text = text.replace(expression, value)
    assert "${{" not in text, text
    return text


def _map(tests: dict[str, list[str]], tier: str = "gpu_h100") -> str:
    when = (datetime.now(timezone.utc) - timedelta(hours=5)).isoformat(timespec="seconds")
    return json.dumps({"format": "ci-depmap", "version": 1, "tier": tier, "recorded_at": when,
                       "tests": {t: {"complete": True, "items": 1, "ran": 1, "executed": executed, "opened": []}
                                 for t, executed in tests.items()}})


def _artifact(reports: Path, tier: str, shard: str, shards: str, depmap: str | None, case: Case) -> Path:
    """reports/junit-<tier>-<i>-of-<n>/ holding the files gpu.yml's upload step names."""
    names = {"${{ matrix.tier }}": tier, "${{ matrix.shard }}": shard, "${{ matrix.shards }}": shards}
    upload = step_named(NIGHTLY["jobs"]["gpu"], "Upload JUnit XML")["with"]
    folder = reports / _expand(upload["name"], names)
    folder.mkdir(parents=True)
    for path in _expand(upload["path"], names).split():
        name = Path(path).name
        if name.startswith("junit-"):
            (folder / name).write_text(junit_xml([case]), encoding="utf-8")
        elif name.startswith("depmap-") and depmap is not None:
            (folder / name).write_text(depmap, encoding="utf-8")
        elif name == "runner.txt":
            (folder / name).write_text("h100-07\n")
    return folder


def _nightly_ingest(work: Path, scratch: Path) -> object:
    venv_python3(scratch)
    job = NIGHTLY["jobs"]["history"]
    step = step_named(job, "Ingest every tier's JUnit and dependency maps")
    assert step["shell"] == "bash"
    env = {**RUN, "EVENT": "nightly", "AUTHOR": "", "SQLITE_STORE": job["env"]["SQLITE_STORE"]}
    return run_step(step["run"], env, work, scratch, shell=BASH)


def _stored(store: Path, sql: str) -> list[tuple]:
    with open_store(str(store), create=False) as opened:
        return opened.fetchall(sql)


# -- recording and uploading (gpu.yml's shards) ----------------------------------------------------

def test_every_nightly_shard_records_its_map_into_its_junit_artifact(tmp_path: Path) -> None:
    gpu = NIGHTLY["jobs"]["gpu"]
    run = step_named(gpu, "Run shard")
    assert run["env"]["RECORD_DEPMAP"] == \
        ("${{ github.event_name == 'schedule' || "
        "github.ref == format('refs/heads/{0}', github.event.repository.default_branch) }}")
    env = {"TIER": "gpu_h100", "SHARD": "2", "SHARDS": "3", "USE_DURATIONS": "false", "RECORD_DEPMAP": "true"}
    args = ci_run_args(run["run"], env, tmp_path)
    assert (args.tier, args.shard, args.paths) == ("gpu_h100", "2/3", [])
    # a dispatch on another branch runs code nobody merged: no map
    other = ci_run_args(run["run"], {**env, "RECORD_DEPMAP": "false"}, tmp_path / "branch")
    assert other.record_depmap is None and (other.tier, other.shard, other.junit) == (args.tier, args.shard, args.junit)
    upload = step_named(gpu, "Upload JUnit XML")
    assert upload["if"] == "${{ !cancelled() }}"  # a failing shard's map is uploaded too
    paths = _expand(upload["with"]["path"], MATRIX).split()
    assert args.record_depmap in paths and args.junit in paths
    # one common folder, no hidden part: the artifact is flat, as the ingest script expects
    # (upload-artifact leaves hidden files out unless told otherwise)
    assert {str(Path(p).parent) for p in paths} == {"reports"}
    assert not any(part.startswith(".") for p in paths for part in Path(p).parts)
    assert "include-hidden-files" not in upload["with"]
    # the quarantined run records nothing: its map would be of quarantined files only, non-blocking
    assert "--record-depmap" not in step_named(gpu, "Quarantined tests")["run"]


def test_no_workflow_restores_or_saves_a_cache_the_recorder_reads() -> None:
    """pr-gpu.yml and rerun-test-dispatch.yml run approved pull-request code in the default
    branch's cache scope: a cache of the recorder's bytecode edits that a recording shard restored
    would let that code decide what main's recording executes (#49)."""
    for path in sorted(WORKFLOW_DIR.glob("*.yml")):
        for job in load_workflow(path)["jobs"].values():
            for step in job.get("steps", []):
                if uses(step, "actions/cache") or uses(step, "actions/cache/restore") or uses(step, "actions/cache/save"):
                    cached = str(step["with"]["path"])
                    assert ".ci-cache" not in cached and "depmap" not in cached and "probes" not in cached, \
                        (path.name, step.get("name"), cached)


def test_no_pull_request_run_records_a_map() -> None:
    for name in ("pr-gpu.yml", "pr.yml", "rerun-test.yml", "rerun-test-dispatch.yml"):
        text = (WORKFLOW_DIR / name).read_text(encoding="utf-8")
        assert "--record-depmap" not in text and "CI_DEPMAP" not in text, name


# -- ingesting (gpu.yml's history job) -------------------------------------------------------------

def test_the_nightly_ingests_each_map_with_its_junit_and_identity(tmp_path: Path) -> None:
    work = runner_workspace(tmp_path)
    _artifact(work / "reports", "gpu_h100", "1", "2", _map({HEAVY: [HEAVY]}), Case(HEAVY, "test_a"))
    _artifact(work / "reports", "gpu_h100", "2", "2", None, Case("tests/a/test_b.py", "test_b"))  # no map
    _artifact(work / "reports", "gpu_b200", "1", "1", _map({HEAVY: [HEAVY]}, "gpu_b200"), Case(HEAVY, "test_a"))
    result = _nightly_ingest(work, tmp_path / "scratch")
    assert result.returncode == 0, result.stderr + result.stdout
    store = work / NIGHTLY["jobs"]["history"]["env"]["SQLITE_STORE"]
    assert _stored(store, "SELECT source, tier, shard, event, repo, sha, run_id FROM depmaps ORDER BY tier") == [
        ("depmap-gpu_b200-1-of-1.json", "gpu_b200", "1/1", "nightly", "acme/gpu", "abcdef1234567", "77"),
        ("depmap-gpu_h100-1-of-2.json", "gpu_h100", "1/2", "nightly", "acme/gpu", "abcdef1234567", "77")]
    assert _stored(store, "SELECT tier, shard FROM reports ORDER BY tier, shard") == [
        ("gpu_b200", "1/1"), ("gpu_h100", "1/2"), ("gpu_h100", "2/2")]
    again = _nightly_ingest(work, tmp_path / "scratch")
    assert again.returncode == 0 and again.stdout.count("already stored") == 5


def test_a_corrupt_map_fails_the_step_and_writes_nothing_of_its_artifact_only(tmp_path: Path) -> None:
    work = runner_workspace(tmp_path)
    _artifact(work / "reports", "gpu_b200", "1", "1", '{"format": "ci-depmap", "version": 1}', Case(HEAVY, "t"))
    _artifact(work / "reports", "gpu_h100", "1", "1", _map({HEAVY: [HEAVY]}), Case(HEAVY, "test_a"))
    result = _nightly_ingest(work, tmp_path / "scratch")
    assert result.returncode == 2
    (said,) = [line for line in result.stderr.splitlines() if line.strip()]
    assert "depmap-gpu_b200-1-of-1.json" in said and "nothing was written" in said and "Traceback" not in said
    store = work / NIGHTLY["jobs"]["history"]["env"]["SQLITE_STORE"]
    assert _stored(store, "SELECT tier FROM depmaps") == [("gpu_h100",)]  # the next artifact still went in
    assert _stored(store, "SELECT tier FROM reports") == [("gpu_h100",)]


def test_a_pull_requests_history_job_never_stores_a_map(tmp_path: Path) -> None:
    """Even if a map reached a pull request's artifact, its history job stores the JUnit alone."""
    work = runner_workspace(tmp_path)
    _artifact(work / "reports", "gpu_h100", "1", "1", _map({HEAVY: []}), Case(HEAVY, "test_a"))
    venv_python3(tmp_path / "scratch")
    job = PR_GPU["jobs"]["history"]
    step = step_named(job, "Ingest the pull request's JUnit")
    env = {**RUN, "EVENT": "pull_request", "PR": "5", "AUTHOR": "someone", "BASE_SHA": "1234567abc",
           "UNSCORED": step["env"]["UNSCORED"], "SQLITE_STORE": job["env"]["SQLITE_STORE"]}
    result = run_step(step["run"], env, work, tmp_path / "scratch", shell=BASH)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "::warning::not ingesting" in result.stdout and "depmap-gpu_h100-1-of-1.json" in result.stdout
    store = work / job["env"]["SQLITE_STORE"]
    assert _stored(store, "SELECT COUNT(*) FROM depmaps") == [(0,)]
    assert _stored(store, "SELECT event, scored FROM reports") == [("pull_request", 0)]


# -- using (pr-gpu.yml's plan and shards) ----------------------------------------------------------

def _pr_plan(repo: Path, tmp_path: Path, repo_name: str = "acme/gpu"):
    step = step_named(PR_GPU["jobs"]["plan"], "Plan GPU tiers for this change")
    env = {k: _expand(v, {"${{ github.base_ref }}": "main", "${{ github.repository }}": repo_name})
           for k, v in step["env"].items()}
    tmp_path.mkdir(exist_ok=True)
    output = tmp_path / "github_output"
    output.write_text("", encoding="utf-8")
    result = run_step(step["run"], {**env, "GITHUB_OUTPUT": str(output)}, repo, tmp_path / "scratch")
    assert result.returncode == 0, result.stderr
    out = dict(line.split("=", 1) for line in output.read_text(encoding="utf-8").splitlines())
    selected: dict[str, set[str]] = {}
    for entry in json.loads(out["matrix"])["include"]:
        selected.setdefault(entry["tier"], set()).update(entry["tests"].split())
    return result, selected


@pytest.fixture
def pr_repo(tmp_path: Path) -> Path:
    repo = plan_repo(tmp_path)
    os.symlink(ROOT / ".github", repo / ".github")  # the nightly's ingest script, for the store
    return repo


def test_the_pr_plan_reads_the_same_store_the_nightly_writes() -> None:
    nightly = NIGHTLY["jobs"]["history"]
    (save,) = [s for s in nightly["steps"] if uses(s, "actions/cache/save")]
    plan = PR_GPU["jobs"]["plan"]
    (restore,) = [s for s in plan["steps"] if uses(s, "actions/cache/restore")
                  and s["with"]["path"] == nightly["env"]["SQLITE_STORE"]]
    # the cache version hashes the path: the restore names exactly what the nightly saved
    assert restore["with"]["path"] == save["with"]["path"] == step_named(plan, "Plan GPU tiers")["env"]["STORE"]
    assert save["with"]["key"].startswith(restore["with"]["restore-keys"]) and "if" not in restore
    assert not [s for s in plan["steps"] if uses(s, "actions/cache/save")], "a PR's run never writes the store"
    assert "CI_HISTORY_URL" not in json.dumps(plan) and "secrets." not in json.dumps(plan)  # PR code: no secrets


def test_without_a_store_the_pr_plan_warns_and_selects_by_the_static_graph(pr_repo: Path, tmp_path: Path) -> None:
    result, selected = _pr_plan(pr_repo, tmp_path)
    warned = [line for line in result.stderr.splitlines() if "not read from the history store" in line]
    assert {line.split("maps of tier ")[1].split()[0] for line in warned} == {"gpu_h100", "gpu_h200", "gpu_b200",
                                                                            "gpu_b200_x4"}
    assert all("no history there yet" in line for line in warned)
    assert {tier for tier, files in selected.items() if HEAVY in files} == {"gpu_h100", "gpu_h200", "gpu_b200"}


def test_the_pr_plan_selects_by_the_maps_the_nightly_ingested(pr_repo: Path, tmp_path: Path) -> None:
    """A change to a data file no import names: the static graph selects nothing. The nightly's own
    ingest step fills the store from a gpu_h100 artifact whose map says the test opened that file:
    the plan then runs it on gpu_h100, and only there (the other tiers have no map). Maps of
    another repository in a shared store are not used."""
    data = "fp4kv/quant/scales.json"
    git(pr_repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    (pr_repo / data).write_text("{}\n", encoding="utf-8")
    git(pr_repo, "add", data)
    git(pr_repo, "commit", "-qm", "data")
    _, static = _pr_plan(pr_repo, tmp_path / "static")
    assert static == {}
    depmap = json.loads(_map({HEAVY: [HEAVY]}))
    depmap["tests"][HEAVY]["opened"] = [data]
    _artifact(pr_repo / "reports", "gpu_h100", "1", "1", json.dumps(depmap), Case(HEAVY, "test_a"))
    ingested = _nightly_ingest(pr_repo, tmp_path / "nightly")
    assert ingested.returncode == 0, ingested.stderr
    result, selected = _pr_plan(pr_repo, tmp_path / "pr")
    assert "not read from the history store" not in result.stderr, result.stderr
    assert selected == {"gpu_h100": {HEAVY}}
    _, other = _pr_plan(pr_repo, tmp_path / "other", repo_name="someone/else")
    assert other == {}


def test_a_corrupt_store_is_a_warning_and_the_static_graph_selects(pr_repo: Path, tmp_path: Path) -> None:
    store = pr_repo / step_named(PR_GPU["jobs"]["plan"], "Plan GPU tiers")["env"]["STORE"]
    store.parent.mkdir()
    store.write_bytes(b"not a database\0" * 100)
    result, selected = _pr_plan(pr_repo, tmp_path)
    assert result.stderr.count("not read from the history store") == 4 and "Traceback" not in result.stderr
    assert {tier for tier, files in selected.items() if HEAVY in files} == {"gpu_h100", "gpu_h200", "gpu_b200"}


def test_a_pr_shard_runs_exactly_the_files_the_plan_put_in_it(tmp_path: Path) -> None:
    """`ci run --shard` would plan again without the maps; the shard runs the matrix's files."""
    run = step_named(PR_GPU["jobs"]["gpu"], "Run shard")
    assert run["env"] == {"TIER": "${{ matrix.tier }}", "SHARD": "${{ matrix.shard }}", "TESTS": "${{ matrix.tests }}",
                          "IDS": "${{ matrix.ids }}"}
    files = [HEAVY, "tests/quant/test_triton_kernels.py"]
    args = ci_run_args(run["run"], {"TIER": "gpu_h100", "SHARD": "2", "TESTS": " ".join(files)}, tmp_path)
    assert (args.tier, args.shard, args.base, args.paths) == ("gpu_h100", None, None, files)
    assert args.junit == "reports/junit-gpu_h100-2.xml" and args.record_depmap is None and args.durations is None
