"""The GPU approval gate (tools.approval.gate, `python -m tools.approval`) against a real HTTP server on
127.0.0.1 (pytest-httpserver) playing GitHub's issue-events and permission endpoints."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from ci.registry import find_repo_root
from tools.approval import __main__ as approval
from tools.approval.gate import (EventError, IssueEventsGitHub, LabelEvent, PullRequestEvent, decide,
                                 parse_event)
from tools.rerun.github import GitHubClient, GitHubError, RetryPolicy

ROOT = find_repo_root()
REPO = "octo/fp4kv"
FORK = "mallory/fp4kv"
PR = 42
SHA = "0123456789abcdef0123456789abcdef01234567"
LABEL = "ok-to-test-gpu"
TOKEN = "t0ken"
EVENTS = f"/repos/{REPO}/issues/{PR}/events"
RUNS = f"/repos/{REPO}/actions/runs"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def payload(action: str = "labeled", *, head_repo: str | None = FORK, label: str | None = LABEL,
            state: str = "open", sha: str = SHA) -> dict[str, Any]:
    data: dict[str, Any] = {
        "action": action,
        "repository": {"full_name": REPO},
        "pull_request": {"number": PR, "state": state,
                         "head": {"sha": sha, "repo": None if head_repo is None else {"full_name": head_repo}}},
    }
    if label is not None:
        data["label"] = {"name": label}
    return data


def label_event(id_: int, action: str, actor: str | None, label: str = LABEL) -> dict[str, Any]:
    return {"id": id_, "event": action, "label": {"name": label, "color": "ededed"},
            "actor": None if actor is None else {"login": actor}, "created_at": f"2026-12-01T10:00:{id_:02d}Z"}


def serve_events(server: HTTPServer, *pages: list[dict[str, Any]]) -> None:
    """Page i links to page i+1 the way GitHub does (absolute URL in ``Link: rel="next"``)."""
    for i, page in enumerate(pages, start=1):
        query = {"per_page": "100"} if i == 1 else {"page": str(i)}
        headers = {}
        if i < len(pages):
            headers["Link"] = f'<{server.url_for(EVENTS)}?page={i + 1}>; rel="next"'
        server.expect_request(EVENTS, method="GET", query_string=query, headers=AUTH).respond_with_json(
            page, headers=headers)


def serve_permission(server: HTTPServer, user: str, permission: str | None, role: str | None = None) -> None:
    uri = f"/repos/{REPO}/collaborators/{user}/permission"
    if permission is None:
        server.expect_request(uri, headers=AUTH).respond_with_json({"message": "Not Found"}, status=404)
    else:
        server.expect_request(uri, headers=AUTH).respond_with_json(
            {"permission": permission, "role_name": role or permission, "user": {"login": user}})


@pytest.fixture(autouse=True)
def head_seen_long_ago(httpserver: HTTPServer) -> None:
    """The head commit's first workflow run, an hour before any label of these tests: outside the
    push window (tests/approval/test_approval_hardening.py covers the window itself)."""
    httpserver.expect_request(RUNS, query_string={"head_sha": SHA, "per_page": "100"}, headers=AUTH).respond_with_json(
        {"total_count": 1, "workflow_runs": [{"id": 1, "head_sha": SHA, "created_at": "2026-12-01T09:00:00Z"}]})


@pytest.fixture
def github(httpserver: HTTPServer) -> IssueEventsGitHub:
    client = GitHubClient(httpserver.url_for(""), TOKEN, timeout=5,
                          retry=RetryPolicy(max_attempts=2, backoff_base=0), sleep=lambda s: None)
    return IssueEventsGitHub(client)


def paths(server: HTTPServer) -> list[str]:
    return [request.path for request, _ in server.log]


# -- rules ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened"])
def test_a_branch_of_the_repository_runs_on_every_push_without_asking_github(action, github, httpserver):
    d = decide(parse_event(payload(action, head_repo=REPO, label=None)), LABEL, github)
    assert d.run and d.sha == SHA and "branch of octo/fp4kv" in d.reason
    assert paths(httpserver) == []


def test_head_repository_comparison_ignores_case(github):
    assert decide(parse_event(payload("synchronize", head_repo="Octo/FP4KV")), LABEL, github).run


@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened"])
def test_a_fork_never_runs_on_a_push(action, github, httpserver):
    d = decide(parse_event(payload(action)), LABEL, github)
    assert not d.run and FORK in d.reason and f"`{LABEL}`" in d.reason and "/rerun-test" in d.reason
    assert paths(httpserver) == []


def test_a_fork_runs_when_a_maintainer_applied_the_label(github, httpserver):
    serve_events(httpserver, [label_event(1, "labeled", "alice", label="bug"),
                              label_event(2, "labeled", "maint")])
    serve_permission(httpserver, "maint", "write", "maintain")
    d = decide(parse_event(payload()), LABEL, github)
    assert d.run and d.sha == SHA and d.approver == "maint"
    assert "applied by maint (maintain)" in d.reason
    assert paths(httpserver) == [EVENTS, f"/repos/{REPO}/collaborators/maint/permission", RUNS]


@pytest.mark.parametrize("permission,role", [("write", "write"), ("admin", "admin"), ("write", "maintain")])
def test_write_maintain_and_admin_approve(permission, role, github, httpserver):
    serve_events(httpserver, [label_event(7, "labeled", "boss")])
    serve_permission(httpserver, "boss", permission, role)
    assert decide(parse_event(payload()), LABEL, github).run


def test_a_triager_can_label_but_not_approve(github, httpserver):
    serve_events(httpserver, [label_event(3, "labeled", "tri")])
    serve_permission(httpserver, "tri", "read", "triage")
    d = decide(parse_event(payload()), LABEL, github)
    assert not d.run and "applied by tri, whose permission is read (role triage)" in d.reason


def test_a_non_collaborator_cannot_approve(github, httpserver):
    serve_events(httpserver, [label_event(3, "labeled", "stranger")])
    serve_permission(httpserver, "stranger", None)
    d = decide(parse_event(payload()), LABEL, github)
    assert not d.run and "permission is none" in d.reason


def test_the_latest_label_event_counts_not_an_earlier_approval(github, httpserver):
    """A writer approved once, the label was removed, and a triager put it back: not approved."""
    serve_events(httpserver, [label_event(1, "labeled", "maint"), label_event(2, "unlabeled", "maint"),
                              label_event(3, "labeled", "tri")])
    serve_permission(httpserver, "tri", "read", "triage")
    serve_permission(httpserver, "maint", "write", "maintain")
    d = decide(parse_event(payload()), LABEL, github)
    assert not d.run and "tri" in d.reason
    assert f"/repos/{REPO}/collaborators/maint/permission" not in paths(httpserver)


def test_a_label_removed_before_the_gate_ran_does_not_approve(github, httpserver):
    serve_events(httpserver, [label_event(4, "labeled", "maint"), label_event(5, "unlabeled", "bob")])
    d = decide(parse_event(payload()), LABEL, github)
    assert not d.run and "removed again by bob" in d.reason


def test_events_are_ordered_by_id_not_by_position(github, httpserver):
    serve_events(httpserver, [label_event(9, "unlabeled", "bob"), label_event(4, "labeled", "maint")])
    assert not decide(parse_event(payload()), LABEL, github).run


def test_a_deleted_account_cannot_approve(github, httpserver):
    serve_events(httpserver, [label_event(4, "labeled", None)])
    d = decide(parse_event(payload()), LABEL, github)
    assert not d.run and "deleted account" in d.reason


def test_no_event_for_the_label_is_a_refusal(github, httpserver):
    serve_events(httpserver, [label_event(4, "labeled", "maint", label="docs")])
    d = decide(parse_event(payload()), LABEL, github)
    assert not d.run and "no `ok-to-test-gpu` label event" in d.reason


def test_the_approval_is_found_on_a_later_page(github, httpserver):
    serve_events(httpserver, [label_event(i, "labeled", "x", label=f"l{i}") for i in range(1, 4)],
                 [label_event(10, "labeled", "maint")])
    serve_permission(httpserver, "maint", "admin")
    assert decide(parse_event(payload()), LABEL, github).run
    assert paths(httpserver)[:2] == [EVENTS, EVENTS]


def test_another_label_starts_nothing_even_on_a_branch_of_the_repository(github, httpserver):
    for head in (REPO, FORK):
        d = decide(parse_event(payload(label="documentation", head_repo=head)), LABEL, github)
        assert not d.run and "`documentation` does not start GPU tiers" in d.reason
    assert paths(httpserver) == []


def test_a_closed_pull_request_never_runs(github):
    for head in (REPO, FORK):
        assert not decide(parse_event(payload("synchronize", head_repo=head, state="closed")), LABEL, github).run


def test_other_actions_do_not_run(github):
    assert not decide(parse_event(payload("edited", head_repo=REPO)), LABEL, github).run


def test_a_deleted_fork_needs_approval_like_any_fork(github, httpserver):
    assert not decide(parse_event(payload("synchronize", head_repo=None)), LABEL, github).run
    serve_events(httpserver, [label_event(2, "labeled", "maint")])
    serve_permission(httpserver, "maint", "write")
    d = decide(parse_event(payload(head_repo=None)), LABEL, github)
    assert d.run and "deleted fork" in d.reason


def test_the_label_name_is_configurable(github, httpserver):
    serve_events(httpserver, [label_event(2, "labeled", "maint", label="gpu-ok")])
    serve_permission(httpserver, "maint", "write")
    assert decide(parse_event(payload(label="gpu-ok")), "gpu-ok", github).run
    assert not decide(parse_event(payload(label=LABEL)), "gpu-ok", github).run


class RecordingGitHub:
    """For the one rule that needs no HTTP: which calls `decide` makes."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def label_events(self, repo: str, number: int) -> list[LabelEvent]:
        self.calls.append("events")
        return []

    def get_permission(self, repo, user):  # pragma: no cover - must not be reached
        self.calls.append("permission")
        raise AssertionError


def test_a_fork_push_never_reads_github():
    gh = RecordingGitHub()
    decide(parse_event(payload("synchronize")), LABEL, gh)
    assert gh.calls == []


# -- GitHub failures --------------------------------------------------------------------------------

def test_a_server_error_raises_instead_of_approving(github, httpserver):
    httpserver.expect_request(EVENTS).respond_with_json({"message": "boom"}, status=502)
    with pytest.raises(GitHubError, match="HTTP 502"):
        decide(parse_event(payload()), LABEL, github)
    assert paths(httpserver) == [EVENTS, EVENTS]  # retried once (max_attempts=2), then gave up


def test_a_non_list_events_answer_raises(github, httpserver):
    httpserver.expect_request(EVENTS).respond_with_json({"message": "odd"})
    with pytest.raises(GitHubError, match="expected a list of events"):
        decide(parse_event(payload()), LABEL, github)


def test_a_malformed_label_event_raises(github, httpserver):
    httpserver.expect_request(EVENTS).respond_with_json([{"id": 1, "event": "labeled", "label": None}])
    with pytest.raises(GitHubError, match="unexpected event shape"):
        decide(parse_event(payload()), LABEL, github)


def test_too_many_pages_raises(httpserver):
    client = GitHubClient(httpserver.url_for(""), TOKEN, retry=RetryPolicy(max_attempts=1))
    serve_events(httpserver, [], [], [])
    with pytest.raises(GitHubError, match="more than 2 pages"):
        IssueEventsGitHub(client, max_pages=2).label_events(REPO, PR)


# -- payload parsing --------------------------------------------------------------------------------

def _without(data: dict[str, Any], dotted: str) -> dict[str, Any]:
    node = data
    *parents, last = dotted.split(".")
    for key in parents:
        node = node[key]
    del node[last]
    return data


@pytest.mark.parametrize("missing,named", [
    ("action", "action"), ("repository", "repository.full_name"), ("pull_request.number", "pull_request.number"),
    ("pull_request.head.sha", "pull_request.head.sha"), ("pull_request.state", "pull_request.state"),
    ("pull_request.head.repo", "pull_request.head.repo"), ("label", "label.name")])
def test_a_missing_key_is_named(missing, named):
    with pytest.raises(EventError, match=f"has no {re.escape(named)}$"):
        parse_event(_without(payload(), missing))


@pytest.mark.parametrize("sha", ["0123", SHA.upper(), SHA + "0", "$(id)" + SHA[5:], ""])
def test_a_head_sha_that_is_not_a_commit_id_is_refused(sha):
    with pytest.raises(EventError, match="head.sha"):
        parse_event(payload(sha=sha))


@pytest.mark.parametrize("number", [True, 0, -1, "42", 4.2, None])
def test_a_bad_number_is_refused(number):
    data = payload()
    data["pull_request"]["number"] = number
    with pytest.raises(EventError, match="pull_request.number"):
        parse_event(data)


def test_parse_reads_every_field():
    assert parse_event(payload()) == PullRequestEvent(REPO, PR, "labeled", "open", SHA, FORK, LABEL)
    assert parse_event(payload("synchronize")).label is None  # a label key on other actions is ignored
    with pytest.raises(EventError, match="no pull_request.number"):
        parse_event([1, 2])


# -- the command ------------------------------------------------------------------------------------

@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, httpserver: HTTPServer) -> dict[str, Path]:
    files = {"output": tmp_path / "output", "summary": tmp_path / "summary"}
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", httpserver.url_for(""))
    monkeypatch.setenv("GITHUB_OUTPUT", str(files["output"]))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(files["summary"]))
    return files


def write_event(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return str(path)


def test_cli_writes_the_decision_to_github_output_and_the_summary(tmp_path, env, httpserver, capsys):
    serve_events(httpserver, [label_event(2, "labeled", "maint")])
    serve_permission(httpserver, "maint", "write", "maintain")
    assert approval.main(["--event", write_event(tmp_path, payload()), "--github-output"]) == 0
    assert env["output"].read_text() == f"run=true\nsha={SHA}\n"
    assert f"#{PR} at {SHA}: run: pull request from {FORK}" in capsys.readouterr().out
    assert env["summary"].read_text().startswith("### GPU tiers: run\n")


def test_cli_refusal_is_exit_0_with_run_false(tmp_path, env, capsys):
    assert approval.main(["--event", write_event(tmp_path, payload("synchronize")), "--github-output"]) == 0
    assert env["output"].read_text() == f"run=false\nsha={SHA}\n"
    assert ": not run: pull request from mallory/fp4kv" in capsys.readouterr().out


def test_cli_github_failure_is_exit_1_and_writes_no_output(tmp_path, env, httpserver, capsys):
    httpserver.expect_request(EVENTS).respond_with_json({"message": "Not Found"}, status=404)
    assert approval.main(["--event", write_event(tmp_path, payload()), "--github-output"]) == 1
    assert not env["output"].exists()
    assert "cannot verify the approval of #42" in capsys.readouterr().err


@pytest.mark.parametrize("content,message", [
    (b"\xff\xfe not utf-8", "codec can't decode"),
    (b"{not json", "Expecting property name"),
    (json.dumps({"action": "labeled"}).encode(), "has no pull_request.number"),
])
def test_cli_bad_event_file_is_exit_2_naming_the_file(tmp_path, env, capsys, content, message):
    path = tmp_path / "event.json"
    path.write_bytes(content)
    assert approval.main(["--event", str(path), "--github-output"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and message in err
    assert not env["output"].exists()


def test_cli_needs_a_token_and_an_output_file(tmp_path, env, monkeypatch, capsys):
    event = write_event(tmp_path, payload())
    monkeypatch.delenv("GITHUB_TOKEN")
    assert approval.main(["--event", event]) == 2
    assert "GITHUB_TOKEN is not set" in capsys.readouterr().err
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.delenv("GITHUB_OUTPUT")
    assert approval.main(["--event", event, "--github-output"]) == 2
    assert "--github-output needs $GITHUB_OUTPUT" in capsys.readouterr().err
    assert approval.main(["--event", str(tmp_path / "missing.json")]) == 2


def test_python_m_tools_approval_end_to_end(tmp_path, env, httpserver):
    """The command as pr-gpu.yml runs it: a real process, a real HTTP server."""
    serve_events(httpserver, [label_event(2, "labeled", "tri")])
    serve_permission(httpserver, "tri", "read", "triage")
    result = subprocess.run([sys.executable, "-m", "tools.approval", "--event", write_event(tmp_path, payload()),
                             "--label", LABEL, "--github-output"], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert env["output"].read_text() == f"run=false\nsha={SHA}\n"
    assert "whose permission is read (role triage)" in result.stdout
