"""The approval gate against what a pull request's author can do: a payload nested 200,000 deep,
thousands of other issue events, a push just before the label; and the comment approval bound to a
commit (``/ok-to-test-gpu <sha-prefix>``). GitHub is pytest-httpserver on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from ci.registry import find_repo_root
from tools.approval import __main__ as approval
from tools.approval.comment import decide_comment, parse_comment_event
from tools.approval.gate import IssueEventsGitHub, decide, parse_event
from tools.rerun.github import GitHubClient, RetryPolicy

ROOT = find_repo_root()
REPO, FORK, PR, LABEL, TOKEN = "octo/fp4kv", "mallory/fp4kv", 42, "ok-to-test-gpu", "t0ken-hardening"
SHA = "89abcdef0123456789abcdef0123456789abcdef"
EVENTS = f"/repos/{REPO}/issues/{PR}/events"
RUNS = f"/repos/{REPO}/actions/runs"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LABELLED_AT = "2026-12-01T10:00:00Z"


def pr_payload(action: str = "labeled", *, state: str = "open", head_repo: str = FORK) -> dict[str, Any]:
    return {"action": action, "repository": {"full_name": REPO}, "label": {"name": LABEL},
            "pull_request": {"number": PR, "state": state, "head": {"sha": SHA, "repo": {"full_name": head_repo}}}}


def comment_payload(body: str, *, user: str = "maint", action: str = "created", state: str = "open",
                    on_pr: bool = True) -> dict[str, Any]:
    issue: dict[str, Any] = {"number": PR, "state": state}
    if on_pr:
        issue["pull_request"] = {"url": f"https://api.github.com/repos/{REPO}/pulls/{PR}"}
    return {"action": action, "repository": {"full_name": REPO, "default_branch": "main"}, "issue": issue,
            "comment": {"id": 7, "body": body, "user": {"login": user}}}


def event(id_: int, kind: str, actor: str = "maint", at: str = LABELLED_AT) -> dict[str, Any]:
    item: dict[str, Any] = {"id": id_, "event": kind, "actor": {"login": actor}, "created_at": at}
    if kind in ("labeled", "unlabeled"):
        item["label"] = {"name": LABEL}
    return item


def serve_pages(server: HTTPServer, pages: list[list[dict[str, Any]]]) -> None:
    """Issue events paged as GitHub pages them: ``next``/``last`` on every page but the last,
    ``prev``/``first`` on every page but the first."""
    url = server.url_for(EVENTS)
    count = len(pages)
    for i, page in enumerate(pages, start=1):
        links = []
        if i < count:
            links += [f'<{url}?page={i + 1}>; rel="next"', f'<{url}?page={count}>; rel="last"']
        if i > 1:
            links += [f'<{url}?page={i - 1}>; rel="prev"', f'<{url}?page=1>; rel="first"']
        query = {"per_page": "100"} if i == 1 else {"page": str(i)}
        server.expect_request(EVENTS, query_string=query, headers=AUTH).respond_with_json(
            page, headers={"Link": ", ".join(links)} if links else {})


def serve_permission(server: HTTPServer, user: str, permission: str, role: str | None = None) -> None:
    server.expect_request(f"/repos/{REPO}/collaborators/{user}/permission", headers=AUTH).respond_with_json(
        {"permission": permission, "role_name": role or permission, "user": {"login": user}})


def serve_head_seen(server: HTTPServer, *created: str) -> None:
    runs = [{"id": i, "head_sha": SHA, "created_at": at} for i, at in enumerate(created, start=1)]
    server.expect_request(RUNS, query_string={"head_sha": SHA, "per_page": "100"}, headers=AUTH).respond_with_json(
        {"total_count": len(runs), "workflow_runs": runs})


def serve_pull(server: HTTPServer, head: str = SHA, state: str = "open", base: str = "main") -> None:
    server.expect_request(f"/repos/{REPO}/pulls/{PR}", headers=AUTH).respond_with_json(
        {"number": PR, "state": state, "user": {"login": "mallory"},
         "head": {"sha": head, "ref": "fix", "repo": {"full_name": FORK}},
         "base": {"ref": base, "repo": {"full_name": REPO}}})


@pytest.fixture
def github(httpserver: HTTPServer) -> IssueEventsGitHub:
    client = GitHubClient(httpserver.url_for(""), TOKEN, timeout=5,
                          retry=RetryPolicy(max_attempts=1), sleep=lambda s: None)
    return IssueEventsGitHub(client)


def event_pages(server: HTTPServer) -> list[str]:
    return [request.query_string.decode() for request, _ in server.log if request.path == EVENTS]


# -- input the author controls --------------------------------------------------------------------

def test_a_200000_deep_event_is_exit_2_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "event.json"
    path.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "tools.approval", "--event", str(path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, env={"GITHUB_TOKEN": TOKEN, "PATH": ""})
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "nested too deeply" in result.stderr and str(path) in result.stderr


@pytest.mark.parametrize("label_page", [60, 58])
def test_thousands_of_other_events_do_not_hide_the_label(label_page: int, github, httpserver) -> None:
    """6,000 events, 5,999 of them comments and renames: the gate reads a few of the newest pages."""
    pages = [[event(p * 100 + i, "renamed", actor="mallory") for i in range(100)] for p in range(60)]
    pages[label_page - 1][50] = event(label_page * 100, "labeled")
    serve_pages(httpserver, pages)
    serve_permission(httpserver, "maint", "write")
    serve_head_seen(httpserver, "2026-12-01T09:00:00Z")
    d = decide(parse_event(pr_payload()), LABEL, github)
    assert d.run and d.sha == SHA, d.reason
    assert event_pages(httpserver) == ["per_page=100"] + [f"page={p}" for p in range(60, label_page - 1, -1)]


def test_the_newest_label_event_wins_on_the_newest_pages(github, httpserver) -> None:
    pages = [[event(p * 100 + i, "renamed", actor="mallory") for i in range(100)] for p in range(3)]
    pages[0][0], pages[2][99] = event(1, "labeled"), event(399, "unlabeled", actor="mallory")
    serve_pages(httpserver, pages)
    d = decide(parse_event(pr_payload()), LABEL, github)
    assert not d.run and "removed again by mallory" in d.reason


def test_a_label_on_the_first_page_only_is_found_walking_back(github, httpserver) -> None:
    pages = [[event(i, "renamed", actor="mallory") for i in range(100)] for _ in range(3)]
    pages[0][10] = event(10, "labeled")
    serve_pages(httpserver, pages)
    serve_permission(httpserver, "maint", "admin")
    serve_head_seen(httpserver, "2026-12-01T09:00:00Z")
    assert decide(parse_event(pr_payload()), LABEL, github).run
    assert event_pages(httpserver) == ["per_page=100", "page=3", "page=2"]  # page 1 is not read twice


@pytest.mark.parametrize("rel", ["next", "last", "prev"])
def test_a_page_link_to_another_host_is_refused(rel: str, tmp_path: Path, httpserver: HTTPServer,
                                                httpserver_ipv4: HTTPServer, monkeypatch, capsys) -> None:
    """A ``Link`` (the gate follows next, last and prev) naming another server, one that would
    serve a labeled event: exit 1 naming that URL, and that server never sees the token."""
    foreign = httpserver_ipv4.url_for(EVENTS) + "?page=5"
    httpserver_ipv4.expect_request(EVENTS).respond_with_json([event(500, "labeled")])
    own = httpserver.url_for(EVENTS) + "?page=2"
    first = {"next": {"next": foreign}, "last": {"next": own, "last": foreign}, "prev": {"next": own, "last": own}}[rel]
    httpserver.expect_request(EVENTS, query_string={"per_page": "100"}, headers=AUTH).respond_with_json(
        [event(1, "renamed")], headers={"Link": ", ".join(f'<{url}>; rel="{r}"' for r, url in first.items())})
    httpserver.expect_request(EVENTS, query_string={"page": "2"}, headers=AUTH).respond_with_json(
        [event(2, "renamed")], headers={"Link": f'<{foreign}>; rel="prev"'})
    serve_permission(httpserver, "maint", "write")
    serve_head_seen(httpserver, "2026-12-01T09:00:00Z")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_API_URL", httpserver.url_for(""))
    path = tmp_path / "event.json"
    path.write_text(json.dumps(pr_payload()), encoding="utf-8")
    assert approval.main(["--event", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"cannot verify the approval of #{PR}: GET {foreign} failed: refused: not on the API's origin" in err, err
    assert httpserver_ipv4.log == []


@pytest.mark.parametrize("head_repo", [FORK, REPO])
def test_a_labeled_event_on_a_closed_pull_request_never_runs(head_repo: str, github, httpserver) -> None:
    serve_pages(httpserver, [[event(1, "labeled")]])
    serve_permission(httpserver, "maint", "admin")
    serve_head_seen(httpserver, "2026-12-01T09:00:00Z")
    d = decide(parse_event(pr_payload(state="closed", head_repo=head_repo)), LABEL, github)
    assert not d.run and "is closed" in d.reason
    assert httpserver.log == []  # decided without asking GitHub anything


# -- a push just before the label -----------------------------------------------------------------

@pytest.mark.parametrize("seen, runs", [
    (("2026-12-01T09:59:30Z",), False),                           # 30 s before the label: refused
    (("2026-12-01T09:59:30Z", "2026-12-01T09:50:00Z"), True),     # its first run was 10 min before
    (("2026-12-01T09:58:00Z",), True),                            # exactly the window: approved
    ((), False),                                                  # no run of it at all: refused
])
def test_a_label_applied_right_after_a_push_is_refused(seen: tuple[str, ...], runs: bool, github, httpserver) -> None:
    serve_pages(httpserver, [[event(1, "labeled")]])
    serve_permission(httpserver, "maint", "write")
    serve_head_seen(httpserver, *seen)
    d = decide(parse_event(pr_payload()), LABEL, github)
    assert d.run is runs, d.reason
    if not runs:
        assert f"/ok-to-test-gpu {SHA[:12]}" in d.reason and "less than 120 s" in d.reason


# -- the comment approval, bound to the commit reviewed --------------------------------------------

def test_a_writers_comment_approves_the_commit_it_names(github, httpserver) -> None:
    serve_permission(httpserver, "maint", "write", "maintain")
    serve_pull(httpserver)
    d = decide_comment(parse_comment_event(comment_payload(f"/ok-to-test-gpu {SHA[:9]}\n\nlooks good")), github)
    assert d.run and d.sha == SHA and d.approver == "maint" and "approves the head commit" in d.reason


def test_a_push_after_the_review_is_not_approved_by_the_comment(github, httpserver) -> None:
    serve_permission(httpserver, "maint", "admin")
    serve_pull(httpserver, head="f" * 40)
    d = decide_comment(parse_comment_event(comment_payload(f"/ok-to-test-gpu {SHA[:12]}")), github)
    assert not d.run and d.sha == "f" * 40 and f"names {SHA[:12]} but the head" in d.reason


def test_a_comment_approval_needs_a_pull_request_into_the_default_branch(github, httpserver) -> None:
    serve_permission(httpserver, "maint", "admin")
    serve_pull(httpserver, base="release-1.2")
    d = decide_comment(parse_comment_event(comment_payload(f"/ok-to-test-gpu {SHA[:12]}")), github)
    assert not d.run and "targets `release-1.2`, not the default branch `main`" in d.reason


@pytest.mark.parametrize("payload, reason", [
    (comment_payload(f"/ok-to-test-gpu {SHA[:12]}", user="tri"), "permission read (role triage)"),
    (comment_payload(f"/ok-to-test-gpu {SHA[:12]}", action="edited"), "only a new comment approves"),
    (comment_payload(f"/ok-to-test-gpu {SHA[:12]}", state="closed"), "is closed"),
    (comment_payload(f"/ok-to-test-gpu {SHA[:12]}", on_pr=False), "is an issue"),
    (comment_payload("/ok-to-test-gpu"), "needs the reviewed commit"),
    (comment_payload(f"/ok-to-test-gpu {SHA[:6]}"), "needs the reviewed commit"),
    (comment_payload(f"/ok-to-test-gpu {SHA[:12].upper()}"), "needs the reviewed commit"),
    (comment_payload(f"lgtm\n/ok-to-test-gpu {SHA[:12]}"), "is not `/ok-to-test-gpu <sha-prefix>`"),
    (comment_payload(f"> /ok-to-test-gpu {SHA[:12]}"), "is not `/ok-to-test-gpu <sha-prefix>`"),
])
def test_what_the_comment_approval_refuses(payload: dict[str, Any], reason: str, github, httpserver) -> None:
    serve_permission(httpserver, "tri", "read", "triage")
    serve_pull(httpserver)
    d = decide_comment(parse_comment_event(payload), github)
    assert not d.run and reason in d.reason, d.reason


def test_cli_comment_approval_writes_the_head_sha(tmp_path: Path, httpserver, monkeypatch, capsys) -> None:
    serve_permission(httpserver, "maint", "write")
    serve_pull(httpserver)
    output = tmp_path / "output"
    for key, value in {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": httpserver.url_for(""),
                       "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary")}.items():
        monkeypatch.setenv(key, value)
    path = tmp_path / "event.json"
    path.write_text(json.dumps(comment_payload(f"/ok-to-test-gpu {SHA[:7]}")), encoding="utf-8")
    assert approval.main(["--event", str(path), "--github-output"]) == 0
    assert output.read_text() == f"run=true\nsha={SHA}\n"
    assert f"GPU tiers of #{PR} at {SHA}: run" in capsys.readouterr().out
    path.write_text(json.dumps({"comment": {}, "issue": {"number": "x"}}), encoding="utf-8")
    assert approval.main(["--event", str(path)]) == 2
    assert "issue.number must be a positive integer" in capsys.readouterr().err
