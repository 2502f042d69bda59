"""Every run is history: pr-gpu.yml's and rerun-test-dispatch.yml's `history` jobs ingest the pull
request's JUnit (unscored, with its number, author, merge base and each shard's runner) from the
base branch's code only, and write the verdicts into the run's summary, reading the change's files
that pr-gpu.yml's plan job listed. The steps' scripts run here as the runner runs them, on
artifacts laid out as download-artifact lays them."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from tests.ci.history_support import (Case, fresh_database, junit_xml, pg_server, store_location,  # noqa: F401
                                      write_report)
from workflow_support import (WORKFLOW_DIR, checkouts, git, load_workflow, run_step, runner_workspace, step_named,
                              uses, venv_python3)

PR_GPU = load_workflow(WORKFLOW_DIR / "pr-gpu.yml")
RERUN = load_workflow(WORKFLOW_DIR / "rerun-test-dispatch.yml")
NIGHTLY = load_workflow(WORKFLOW_DIR / "gpu.yml")
BASH = "bash --noprofile --norc -eo pipefail {0}"
HEAD = "00000ff1234567"
BOOM = Case("tests/a/test_a.py", "test_bad", "failed", "AssertionError: expected 3 tokens, got 4",
            "E   AssertionError: expected 3 tokens, got 4")


def test_history_jobs_run_only_the_base_branch_code_with_read_only_rights() -> None:
    for wf, needed in ((PR_GPU, ["approval", "plan", "gpu"]), (RERUN, "run")):
        job = wf["jobs"]["history"]
        assert job["needs"] == needed and job["permissions"] == {"contents": "read"}
        assert job["runs-on"] == "ubuntu-latest" and job["env"]["CI_HISTORY_URL"] == "${{ secrets.CI_HISTORY_URL }}"
        (checkout,) = checkouts(job)
        assert checkout["with"] == {"persist-credentials": False}  # no `ref`: never the PR's code
        assert not [s for s in job["steps"] if uses(s, "actions/cache/save")], "a PR's run never writes the cache"
    assert PR_GPU["jobs"]["history"]["if"] == \
        "${{ !cancelled() && needs.approval.outputs.run == 'true' && needs.gpu.result != 'skipped' }}"
    assert PR_GPU["jobs"]["plan"]["outputs"]["base_sha"] == "${{ steps.base.outputs.sha }}"
    ingest = step_named(PR_GPU["jobs"]["history"], "Ingest the pull request's JUnit")
    assert ingest["env"]["EVENT"] == "pull_request" and ingest["env"]["UNSCORED"] == "1"
    assert ingest["env"]["SHA"] == "${{ needs.approval.outputs.sha }}"
    assert ingest["env"]["BASE_SHA"] == "${{ needs.plan.outputs.base_sha }}"
    rerun = step_named(RERUN["jobs"]["history"], "Ingest the rerun's JUnit")
    assert rerun["env"]["EVENT"] == "rerun" and rerun["env"]["UNSCORED"] == "1" and rerun["env"]["SHA"] == "${{ inputs.sha }}"
    # every shard names its runner beside its report, in the artifact
    for wf in (PR_GPU, NIGHTLY):
        upload = step_named(wf["jobs"]["gpu"], "Upload JUnit XML")
        assert "reports/runner.txt" in upload["with"]["path"].split()
        assert "$RUNNER_NAME" in step_named(wf["jobs"]["gpu"], "Name the runner for the history")["run"]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    work = runner_workspace(tmp_path)
    layout = {"junit-gpu_h100-1-of-2": [BOOM, Case("tests/a/test_a.py", "test_ok")],
              "junit-gpu_h100-2-of-2": [Case("tests/a/test_b.py", "test_ok")]}
    for name, cases in layout.items():
        (work / "reports" / name).mkdir(parents=True)
        (work / "reports" / name / "junit.xml").write_text(junit_xml(cases), encoding="utf-8")
    (work / "reports" / "junit-gpu_h100-1-of-2" / "runner.txt").write_text("h100-07\nignored second line\n")
    return work


def _step_env(step: dict, values: dict[str, str]) -> dict[str, str]:
    """The step's env with its `${{ }}` expressions replaced by what GitHub would give."""
    env = {}
    for key, value in step["env"].items():
        env[key] = values.get(key, value)
        assert "${{" not in env[key], key
    return env


def test_the_pull_request_is_ingested_unscored_and_judged(store_location: str, work: Path, tmp_path: Path) -> None:
    postgres = store_location.startswith("postgresql://")
    job = PR_GPU["jobs"]["history"]
    base = {"CI_HISTORY_URL": store_location if postgres else "", "SQLITE_STORE": job["env"]["SQLITE_STORE"],
            "GITHUB_RUN_ID": "91", "GITHUB_RUN_ATTEMPT": "1"}
    venv_python3(tmp_path / "scratch")
    ingest = step_named(job, "Ingest the pull request's JUnit")
    env = _step_env(ingest, {"REPO": "acme/gpu", "SHA": HEAD, "PR": "42", "AUTHOR": "bob", "BASE_SHA": "0000001",
                             "RUN_URL": "https://github.com/acme/gpu/actions/runs/91"})
    result = run_step(ingest["run"], {**base, **env}, work, tmp_path / "scratch", shell=BASH)
    assert result.returncode == 0, result.stderr
    location = store_location if postgres else str(work / "ci-history" / "history.sqlite")
    with open_store(location, create=False) as store:
        rows = store.fetchall("SELECT shard, event, pr, author, base_sha, scored, runner, sha FROM reports ORDER BY shard")
    assert rows == [("1/2", "pull_request", 42, "bob", "0000001", 0, "h100-07", HEAD.lower()),
                    ("2/2", "pull_request", 42, "bob", "0000001", 0, "", HEAD.lower())]
    summary = tmp_path / "summary.md"
    verdicts = step_named(job, "Verdicts into the run's summary")
    env = _step_env(verdicts, {"REPO": "acme/gpu", "SHA": HEAD})
    result = run_step(verdicts["run"], {**base, **env, "GITHUB_STEP_SUMMARY": str(summary)}, work,
                      tmp_path / "scratch", shell=BASH)
    assert result.returncode == 0, result.stderr
    text = summary.read_text()
    # the store holds no run of main: the failure is not judged, never called the PR's own
    assert text.startswith("### Is this red mine?\n```\nPR #42 at 00000ff (gpu_h100): 2 passed, 1 failed: "
                           "not judged (no history to compare with)")
    assert "tests/a/test_a.py::test_bad [gpu_h100]" in text and "AssertionError: expected 3 tokens, got 4" in text


def test_the_rerun_is_ingested_as_a_rerun(pg_server: str, tmp_path: Path) -> None:
    """Only into a shared PostgreSQL (CI_HISTORY_URL): the rerun never writes the SQLite cache."""
    store_location = fresh_database(pg_server)
    work = runner_workspace(tmp_path)
    (work / "reports" / "junit-gpu_h100-rerun").mkdir(parents=True)
    (work / "reports" / "junit-gpu_h100-rerun" / "junit-rerun.xml").write_text(junit_xml([BOOM]), encoding="utf-8")
    (work / "reports" / "junit-gpu_h100-rerun" / "runner.txt").write_text("h100-03\n")
    download = [s for s in RERUN["jobs"]["history"]["steps"] if uses(s, "actions/download-artifact")][0]
    assert download["with"]["path"] == "reports/junit-${{ inputs.tier }}-rerun"
    venv_python3(tmp_path / "scratch")
    step = step_named(RERUN["jobs"]["history"], "Ingest the rerun's JUnit")
    env = _step_env(step, {"REPO": "acme/gpu", "SHA": HEAD, "PR": "42", "RUN_URL": "https://x/runs/5"})
    result = run_step(step["run"], {**env, "CI_HISTORY_URL": store_location, "GITHUB_RUN_ID": "5",
                                    "GITHUB_RUN_ATTEMPT": "1"}, work, tmp_path / "scratch", shell=BASH)
    assert result.returncode == 0, result.stderr
    with open_store(store_location, create=False) as store:
        rows = store.fetchall("SELECT tier, shard, event, pr, scored, runner FROM reports")
    assert rows == [("gpu_h100", "", "rerun", 42, 0, "h100-03")]


def _pr_base_history(location: str, directory: Path) -> None:
    """Main ran test_bad once, at 0000000 (a nightly); pull requests of five other authors based at
    0000001-0000005 ran it, those based from 0000003 on failing it with BOOM; pull request 42 (at
    `HEAD`, based at 0000005) fails it so too: main's from those bases, unless its change touched
    the test's file (`ci.history.pr_base_evidence`)."""
    with open_store(location) as store:
        def put(case: Case, sha: str, event: str, **identity: object) -> None:
            ident = RunIdentity("acme/gpu", sha, event, "gpu_h100", **identity)  # type: ignore[arg-type]
            assert ingest(store, prepare(write_report(directory, [case]), ident)).added

        put(Case(BOOM.file, BOOM.name), "0000000", "nightly")
        for base in range(1, 6):
            put(BOOM if base >= 3 else Case(BOOM.file, BOOM.name), f"{base:05x}ee", "pull_request", pr=20 + base,
                author=f"dev{base}", base_sha=f"{base:07x}", scored=False)
        put(BOOM, HEAD, "pull_request", pr=42, author="bob", base_sha="0000005", scored=False)


def test_the_verdicts_read_the_pull_requests_changed_files(tmp_path: Path) -> None:
    """Issue 47: the plan job lists the change's files by git (before any of the pull request's code
    runs) into an artifact; the history job's verdict step passes it as `--changed-files`. The same
    failure is main's without the list and the change's own with it."""
    plan, job = PR_GPU["jobs"]["plan"], PR_GPU["jobs"]["history"]
    names = [s.get("name", "") for s in plan["steps"]]
    assert names.index("Keep the changed files for the verdicts") < names.index("Plan GPU tiers for this change")
    upload = step_named(plan, "Keep the changed files for the verdicts")
    download = step_named(job, "The pull request's changed files")
    assert uses(upload, "actions/upload-artifact") and uses(download, "actions/download-artifact")
    assert upload["with"]["name"] == download["with"]["name"] and upload["with"]["path"] == "changed.txt"
    # the plan job's step in a pull request's clone: what the change touched since the merge base
    repo = tmp_path / "pr"
    (repo / "tests" / "a").mkdir(parents=True)
    (repo / "tests" / "a" / "test_a.py").write_text("def test_bad():\n    pass\n")
    (repo / "README.md").write_text("base\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
    (repo / "tests" / "a" / "test_a.py").write_text("def test_bad():\n    assert False\n")
    git(repo, "commit", "-qam", "the change")
    listed = step_named(plan, "The pull request's changed files")
    assert listed["env"]["BASE_SHA"] == "${{ steps.base.outputs.sha }}"
    result = run_step(listed["run"], {"BASE_SHA": base}, repo, tmp_path / "scratch-plan")
    assert result.returncode == 0, result.stderr
    assert (repo / "changed.txt").read_text().split() == [BOOM.file]
    # the history job, on a store where other pull requests' runs say main broke the test
    without, with_list = _verdict_headlines(job, "Verdicts into the run's summary", download, repo / "changed.txt",
                                            tmp_path)
    assert without.endswith("1 failed: broken on main since 0000003")  # no list: the maps decide
    assert with_list.startswith("PR #42 at 00000ff (gpu_h100): 0 passed, 1 failed: ")
    assert "new" in with_list and "broken" not in with_list


def test_a_queued_batchs_verdicts_read_the_batchs_changed_files(tmp_path: Path) -> None:
    """gpu.yml on a merge_group: the push plan's changed.txt (what the batch changed since main before
    it) goes to the batch's verdict step the same way."""
    plan, job = NIGHTLY["jobs"]["plan"], NIGHTLY["jobs"]["history"]
    names = [s.get("id", s.get("name", "")) for s in plan["steps"]]
    assert names.index("pushplan") < names.index("Keep the batch's changed files for the verdicts")
    upload = step_named(plan, "Keep the batch's changed files for the verdicts")
    download = step_named(job, "The batch's changed files")
    assert upload["if"] == download["if"] == "${{ github.event_name == 'merge_group' }}"
    assert upload["with"]["name"] == download["with"]["name"] and upload["with"]["path"] == "changed.txt"
    listed = tmp_path / "changed.txt"
    listed.write_text(f"{BOOM.file}\n", encoding="utf-8")
    without, with_list = _verdict_headlines(job, "Verdicts of the queued batch", download, listed, tmp_path)
    assert without.endswith("1 failed: broken on main since 0000003")
    assert "new" in with_list and "broken" not in with_list


def _verdict_headlines(job: dict, step: str, download: dict, listed: Path, tmp_path: Path) -> tuple[str, str]:
    """The verdict headline ``step`` of ``job`` writes into the summary on `_pr_base_history`, without
    and then with ``listed`` where ``download`` puts the changed files."""
    work = runner_workspace(tmp_path)
    _pr_base_history(str(work / job["env"]["SQLITE_STORE"]), tmp_path)
    venv_python3(tmp_path / "scratch")
    verdicts = step_named(job, step)
    env = _step_env(verdicts, {"REPO": "acme/gpu", "SHA": HEAD})
    assert env["CHANGED"] == f"{download['with']['path']}/changed.txt"  # where download-artifact puts it

    def headline(summary: Path) -> str:
        result = run_step(verdicts["run"], {"CI_HISTORY_URL": "", "SQLITE_STORE": job["env"]["SQLITE_STORE"], **env,
                                            "GITHUB_STEP_SUMMARY": str(summary)}, work, tmp_path / "scratch", shell=BASH)
        assert result.returncode == 0, result.stderr
        return summary.read_text().splitlines()[2]

    without = headline(tmp_path / "without.md")
    (work / download["with"]["path"]).mkdir()
    shutil.copy(listed, work / env["CHANGED"])
    return without, headline(tmp_path / "with.md")
