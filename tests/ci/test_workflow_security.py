"""The workflows pass zizmor (run offline, the pedantic persona, no config file) with no unsuppressed
finding, every suppression is inline with its reason, and the rules zizmor cannot know hold:
pull-request code never meets a write token, and a fork's code reaches a GPU runner only through
the approval job."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
import yaml

from tools.approval.gate import DEFAULT_LABEL
from workflow_support import (DEPENDABOT, ROOT, WORKFLOW_DIR, WORKFLOWS, checkouts, load_workflow, needs,
                              run_scripts, step_named, triggers)

USES = re.compile(r"^\s*(?:-\s*)?uses:\s*(\S+)(.*)$")
PINNED = re.compile(r"(?P<action>[\w.-]+/[\w./-]+)@(?P<sha>[0-9a-f]{40})")
VERSION_COMMENT = re.compile(r"^ # v\d+\.\d+\.\d+$")
SUPPRESSION = re.compile(r"#\s*zizmor:\s*ignore\[(?P<rules>[^\]]+)\](?P<reason>.*)$")
HOSTED = re.compile(r"(ubuntu|windows|macos)-[\w.-]+")
TRUSTED_REF = {None, "${{ github.event.repository.default_branch }}"}
PR_TRIGGERS = {"pull_request", "pull_request_target"}


def zizmor(*args: str, cwd: Path = ROOT, persona: str = "pedantic") -> tuple[list[dict[str, Any]], str]:
    """Findings (JSON) and the log of one offline zizmor run that ignores any config file."""
    exe = Path(sysconfig.get_path("scripts")) / "zizmor"
    found = str(exe) if exe.is_file() else shutil.which("zizmor")
    if found is None:
        pytest.fail("zizmor is not installed: it is a test dependency, run `python3 ci/bootstrap.py`")
    result = subprocess.run([found, "--offline", "--no-config", "--persona", persona, "--format", "json",
                             "--no-exit-codes", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"zizmor failed to run: {result.stderr[-2000:]}"
    return json.loads(result.stdout), result.stderr


def describe(finding: dict[str, Any]) -> str:
    (primary,) = [loc for loc in finding["locations"] if loc["symbolic"]["kind"] == "Primary"]
    where = primary["symbolic"]["key"]["Local"]["verbatim_path"]
    row = primary["concrete"]["location"]["start_point"]["row"] + 1
    return f"{where}:{row}: {finding['ident']}: {finding['desc']} ({primary['symbolic'].get('annotation', '')})"


INPUTS = (".github/workflows/", ".github/dependabot.yml")


def test_zizmor_reports_no_unsuppressed_finding():
    findings, log = zizmor(*INPUTS)
    assert findings == [], "zizmor findings:\n" + "\n".join(map(describe, findings))
    audited = set(re.findall(r"completed (\S+)", log))
    expected = {p.relative_to(ROOT).as_posix() for p in [*WORKFLOWS, DEPENDABOT]}
    assert audited == expected, f"zizmor audited {sorted(audited)}"


def _suppressions() -> dict[tuple[str, int, str], str]:
    out = {}
    for path in [*WORKFLOWS, DEPENDABOT]:
        for row, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if m := SUPPRESSION.search(line):
                for rule in m["rules"].split(","):
                    out[(path.relative_to(ROOT).as_posix(), row, rule.strip())] = m["reason"].strip()
    return out


def test_every_suppression_is_inline_with_a_reason_and_still_needed():
    suppressed = _suppressions()
    short = {k: v for k, v in suppressed.items() if len(v) < 40}
    assert short == {}, "a suppression states its reason on its own line"
    findings, _ = zizmor("--no-ignores", *INPUTS)
    found = set()
    for f in findings:
        (primary,) = [loc for loc in f["locations"] if loc["symbolic"]["kind"] == "Primary"]
        found.add((primary["symbolic"]["key"]["Local"]["verbatim_path"],
                   primary["concrete"]["location"]["start_point"]["row"] + 1, f["ident"]))
    assert found == set(suppressed), "every finding is suppressed right where it is, and nothing else"
    # pull_request_target, and pr-gpu.yml's two checkouts of the approved PR commit: the design
    assert {rule for _, _, rule in suppressed} == {"dangerous-triggers", "unsafe-checkout"}
    assert sorted(row for path, row, rule in suppressed if rule == "unsafe-checkout" and path.endswith("pr-gpu.yml"))


def test_the_auditor_persona_finds_nothing_either():
    """zizmor's most thorough persona: secrets only in jobs with a dedicated environment
    (secrets-outside-env), among others."""
    findings, _ = zizmor(*INPUTS, persona="auditor")
    assert findings == [], "zizmor findings:\n" + "\n".join(map(describe, findings))


def test_the_same_zizmor_run_catches_the_classic_mistakes(tmp_path):
    """The invocation above is not vacuous: on a workflow with the mistakes the issue listed, it
    reports each of them."""
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "bad.yml").write_text(
        "on: pull_request\njobs:\n  j:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - uses: actions/checkout@v4\n"
        '      - run: echo "${{ github.event.pull_request.title }}"\n', encoding="utf-8")
    findings, _ = zizmor(".github/workflows/", cwd=tmp_path)
    assert {"unpinned-uses", "template-injection", "artipacked", "excessive-permissions"} <= {
        f["ident"] for f in findings}


def _uses_lines() -> list[tuple[str, int, str, str]]:
    out = []
    for path in WORKFLOWS:
        for row, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if m := USES.match(line):
                out.append((path.name, row, m[1], m[2]))
    return out


def test_every_action_is_pinned_to_a_commit_with_its_version_beside_it():
    lines = _uses_lines()
    assert len(lines) >= 20
    versions: dict[tuple[str, str], set[str]] = {}
    for name, row, ref, comment in lines:
        if ref.startswith("./"):
            continue
        m = PINNED.fullmatch(ref)
        assert m and VERSION_COMMENT.match(comment), f"{name}:{row}: {ref}{comment} is not `owner/repo@<sha> # vX.Y.Z`"
        repo = "/".join(m["action"].split("/")[:2])  # actions/cache/restore lives in actions/cache
        versions.setdefault((repo, m["sha"]), set()).add(comment.strip())
    by_repo: dict[str, set[str]] = {}
    for (repo, sha), comments in versions.items():
        assert len(comments) == 1, f"{repo}@{sha} is labelled {sorted(comments)}"
        by_repo.setdefault(repo, set()).add(sha)
    assert {r: s for r, s in by_repo.items() if len(s) > 1} == {}, "one version of each action everywhere"


def test_dependabot_keeps_the_pinned_actions_current():
    config = yaml.safe_load(DEPENDABOT.read_text(encoding="utf-8"))
    (update,) = [u for u in config["updates"] if u["package-ecosystem"] == "github-actions"]
    assert config["version"] == 2 and update["directory"] == "/" and update["schedule"]["interval"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_permissions_and_no_persisted_credentials(path):
    wf = load_workflow(path)
    assert wf["permissions"] == {}, f"{path.name}: top-level `permissions: {{}}`, each job asks for its own"
    for job_id, job in wf["jobs"].items():
        assert isinstance(job.get("permissions"), dict), f"{path.name}: job {job_id} declares no permissions"
        assert set(job["permissions"].values()) <= {"read", "write"}
        for step in checkouts(job):
            assert step.get("with", {}).get("persist-credentials") is False, f"{path.name}: {job_id}"
    for job_id, script in run_scripts(wf):
        assert "${{" not in script, f"{path.name}: {job_id}: pass values to scripts through env:"


def _runs_pr_code(wf: dict[str, Any], job: dict[str, Any]) -> bool:
    """Whether the job checks out code a pull request controls (a PR ref, or the PR merge commit
    that a `pull_request` run checks out by default)."""
    for step in checkouts(job):
        ref = step.get("with", {}).get("ref")
        if ref not in TRUSTED_REF or (ref is None and "pull_request" in triggers(wf)):
            return True
    return False


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_pull_request_code_never_meets_a_write_token(path):
    wf = load_workflow(path)
    for job_id, job in wf["jobs"].items():
        writes = sorted(k for k, v in job["permissions"].items() if v == "write")
        if writes:
            assert not _runs_pr_code(wf, job), f"{path.name}: {job_id} checks out PR code holding {writes}"
            if triggers(wf) & PR_TRIGGERS:
                assert checkouts(job) == [], f"{path.name}: {job_id} holds {writes}: it checks out nothing"


def _self_hosted(job: dict[str, Any]) -> bool:
    runs_on = job["runs-on"]
    labels = [runs_on] if isinstance(runs_on, str) else runs_on
    return not all(HOSTED.fullmatch(label) for label in labels)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_a_forks_code_reaches_a_self_hosted_runner_only_through_the_approval_job(path):
    wf = load_workflow(path)
    events = triggers(wf)
    if "pull_request" in events:  # the PR's own copy of the file runs: no gate here could hold
        assert not any(_self_hosted(job) for job in wf["jobs"].values()), f"{path.name} uses self-hosted runners"
    if "pull_request_target" not in events:
        return
    jobs = wf["jobs"]
    gate = jobs["approval"]
    assert not _runs_pr_code(wf, gate) and not _self_hosted(gate)
    assert "-m tools.approval" in step_named(gate, "Decide")["run"]
    assert gate["outputs"] == {"run": "${{ steps.decide.outputs.run }}", "sha": "${{ steps.decide.outputs.sha }}"}
    gated = 0
    for job_id, job in jobs.items():
        if _runs_pr_code(wf, job) or _self_hosted(job):
            assert "approval" in needs(job), f"{job_id} must need the approval job"
            assert "needs.approval.outputs.run == 'true'" in job["if"], f"{job_id} must run only when approved"
            refs = {s["with"].get("ref") for s in checkouts(job)}
            assert refs == {"${{ needs.approval.outputs.sha }}"}, f"{job_id} must test the approved commit"
            assert set(job["permissions"].values()) == {"read"}
            gated += 1
    assert gated >= 2


def test_the_approval_label_is_spelled_the_same_everywhere():
    text = (WORKFLOW_DIR / "pr-gpu.yml").read_text(encoding="utf-8")
    wf = load_workflow(WORKFLOW_DIR / "pr-gpu.yml")
    assert wf["env"]["APPROVAL_LABEL"] == DEFAULT_LABEL
    assert set(re.findall(r"'(ok-to-test[\w-]*)'", text)) == {DEFAULT_LABEL}
    assert f"'{DEFAULT_LABEL}'" in wf["concurrency"]["group"] and f"'{DEFAULT_LABEL}'" in wf["jobs"]["revoke"]["if"]


def test_the_approval_job_imports_nothing_it_does_not_install():
    """pr-gpu.yml's approval job installs only requests before `python -m tools.approval`."""
    install = step_named(load_workflow(WORKFLOW_DIR / "pr-gpu.yml")["jobs"]["approval"], "Install")["run"]
    assert install == 'python3 -m pip install "requests>=2.31"'
    code = ("import sys, tools.approval.__main__; "
            "extra = sorted({'yaml', 'torch', 'triton', 'numpy', 'pytest'} & set(sys.modules)); "
            "sys.exit(f'imported {extra}' if extra else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr + result.stdout
