"""GitHub client retries against the fake GitHub over real HTTP (sleep injected, never waits)."""

from __future__ import annotations

import re
import socket

import pytest
from pytest_httpserver import HTTPServer

from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.github import GitHubClient, GitHubError, RetryPolicy
from tools.rerun.rest import ForeignURL

from rerun_support import PR, REPO

PERM = r"/collaborators/maintainer/permission$"


def test_5xx_then_success(fake: FakeGitHub, make_client, sleeps) -> None:
    fake.fail("GET", PERM, Scripted(502), Scripted(503, body={"message": "unavailable"}))
    permission = make_client().get_permission(REPO, "maintainer")
    assert (permission.permission, permission.role_name, permission.is_writer) == ("write", "maintain", True)
    assert sleeps.calls == [0.01, 0.02]  # exponential backoff from backoff_base
    assert sum(r.path.endswith("/permission") for r in fake.requests) == 3


def test_429_honours_retry_after(fake: FakeGitHub, make_client, sleeps) -> None:
    fake.fail("POST", r"/dispatches$", Scripted(429, {"Retry-After": "7"}, {"message": "slow down"}))
    make_client().dispatch_workflow(REPO, "rerun-test-dispatch.yml", "main", {"pr": "1"})
    assert sleeps.calls == [7.0]
    assert len(fake.dispatches) == 1


PATIENT = RetryPolicy(max_attempts=5, backoff_base=0.01, backoff_cap=0.05, max_wait=600, total_wait_cap=900)


def test_a_secondary_rate_limit_waits_at_least_a_minute_then_longer(fake: FakeGitHub, make_client, sleeps) -> None:
    """GitHub: without retry-after, and with requests remaining, wait at least one minute, then
    exponentially longer. The sleep is injected: the test takes no minute."""
    fake.fail("GET", r"/pulls/\d+$",
              Scripted(403, body={"message": "You have exceeded a secondary rate limit."}),
              Scripted(429, {"x-ratelimit-remaining": "17"}, {"message": "too many requests"}),
              Scripted(502))
    assert make_client(retry=PATIENT).get_pull(REPO, PR).state == "open"
    assert sleeps.calls == [60.0, 120.0, 0.04]  # a 5xx keeps the short backoff (attempt 3)


def test_an_exhausted_primary_limit_waits_for_its_reset(fake: FakeGitHub, make_client, sleeps) -> None:
    fake.fail("GET", r"/pulls/\d+$",
              Scripted(403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1312"}, {"message": "API rate limit"}),
              Scripted(403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "soon"}, {"message": "API rate limit"}))
    assert make_client(retry=PATIENT, clock=lambda: 1000.0).get_pull(REPO, PR).state == "open"
    assert sleeps.calls == [312.0, 60.0]  # an unreadable reset is a rate limit that says nothing more


def test_a_secondary_rate_limit_never_waits_less_than_a_minute(fake: FakeGitHub, make_client, sleeps) -> None:
    """A policy that would wait less than GitHub asks gives up instead."""
    fake.fail("GET", PERM, Scripted(403, body={"message": "You have exceeded a secondary rate limit."}))
    with pytest.raises(GitHubError, match="asked to wait 60s, more than the 30s limit"):
        make_client().get_permission(REPO, "maintainer")
    assert sleeps.calls == []


def test_plain_403_and_404_are_final(fake: FakeGitHub, make_client, sleeps) -> None:
    fake.fail("GET", r"/pulls/\d+$", Scripted(403, body={"message": "Resource not accessible by integration"}))
    with pytest.raises(GitHubError, match="HTTP 403: Resource not accessible") as info:
        make_client().get_pull(REPO, PR)
    assert (info.value.status, info.value.attempts, info.value.transient) == (403, 1, False)
    with pytest.raises(GitHubError, match="HTTP 404") as info:
        make_client().get_pull(REPO, 999)
    assert sleeps.calls == [] and not info.value.transient  # GitHub's answer: no later call changes it


def test_final_failure_after_max_attempts(fake: FakeGitHub, make_client, sleeps) -> None:
    fake.fail("POST", r"/reactions$", *[Scripted(500, body={"message": "oops"})] * 10)
    with pytest.raises(GitHubError) as info:
        make_client().add_reaction(REPO, 1, "eyes")
    assert (info.value.status, info.value.attempts, info.value.method) == (500, 4, "POST")
    assert "failed after 4 attempt(s): HTTP 500: oops" in str(info.value)
    assert len(sleeps.calls) == 3 and info.value.transient  # the retries ran out: a later call may succeed


def test_a_body_cut_short_is_retried(fake: FakeGitHub, make_client, sleeps) -> None:
    """A connection reset mid-body (the headers promised more than came): read again, as a dropped
    connection is; when every attempt is cut, the error is transient."""
    fake.fail("GET", PERM, Scripted(route=True, cut=True))
    assert make_client().get_permission(REPO, "maintainer").permission == "write"
    assert sleeps.calls == [0.01] and sum(r.path.endswith("/permission") for r in fake.requests) == 2
    fake.fail("GET", PERM, *[Scripted(route=True, cut=True)] * 4)
    with pytest.raises(GitHubError, match="ChunkedEncodingError") as info:
        make_client().get_permission(REPO, "maintainer")
    assert (info.value.status, info.value.attempts, info.value.transient) == (None, 4, True)


def test_retry_after_beyond_limit_gives_up_instead_of_waiting_less(fake: FakeGitHub, make_client, sleeps) -> None:
    fake.fail("GET", PERM, Scripted(429, {"Retry-After": "3600"}))
    with pytest.raises(GitHubError, match="asked to wait 3600s, more than the 30s limit"):
        make_client().get_permission(REPO, "maintainer")
    assert sleeps.calls == []


def test_total_wait_cap(fake: FakeGitHub, make_client, sleeps) -> None:
    fake.fail("GET", PERM, *[Scripted(429, {"Retry-After": "25"})] * 3)
    with pytest.raises(GitHubError, match="exceed the 60s total wait limit"):
        make_client().get_permission(REPO, "maintainer")
    assert sleeps.calls == [25.0, 25.0]


def test_connection_refused_and_timeout_are_retried_then_typed(sleeps) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = RetryPolicy(max_attempts=2, backoff_base=0.01)
    with pytest.raises(GitHubError, match="ConnectionError") as info:
        GitHubClient(f"http://127.0.0.1:{port}", "t", sleep=sleeps, retry=policy).get_pull(REPO, 1)
    assert info.value.status is None and info.value.attempts == 2 and info.value.transient
    with socket.socket() as listener:  # accepts connections (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        client = GitHubClient(f"http://127.0.0.1:{listener.getsockname()[1]}", "t", sleep=sleeps,
                              retry=policy, timeout=0.2)
        with pytest.raises(GitHubError, match="Timeout"):
            client.get_pull(REPO, 1)


def test_bad_arguments_raise_clear_errors(make_client) -> None:
    client = make_client()
    with pytest.raises(ValueError, match="at most 25 inputs, got 26"):
        client.dispatch_workflow(REPO, "w.yml", "main", {str(i): "x" for i in range(26)})
    with pytest.raises(ValueError, match="must be strings: pr"):
        client.dispatch_workflow(REPO, "w.yml", "main", {"pr": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="unknown reaction 'party'"):
        client.add_reaction(REPO, 1, "party")
    with pytest.raises(ValueError, match="max_attempts must be >= 1"):
        RetryPolicy(max_attempts=0)


def test_a_dispatch_takes_up_to_25_inputs(fake: FakeGitHub, make_client) -> None:
    """GitHub raised the workflow_dispatch cap from 10 inputs to 25 on 2025-12-04."""
    client = make_client()
    assert client.dispatch_workflow(REPO, "w.yml", "main", {f"i{n}": "x" for n in range(25)}).sent
    assert len(fake.dispatches[0]["inputs"]) == 25
    with fake.off_contract():  # 26 inputs, on purpose
        over = client.request("POST", f"/repos/{REPO}/actions/workflows/w.yml/dispatches", ok=(204, 422),
                              json={"ref": "main", "inputs": {f"i{n}": "x" for n in range(26)}})
    assert over is not None and over.status_code == 422 and "up to 25 `inputs`" in over.json()["message"]


# -- the token goes to the API's own origin only ---------------------------------------------------

def test_a_next_link_to_another_host_is_refused_before_anything_is_sent(
        fake: FakeGitHub, api_url: str, make_client, httpserver_ipv4: HTTPServer) -> None:
    """A comments page whose ``Link: rel="next"`` names another server (here 127.0.0.1 on another
    port, serving a valid page): the client raises naming it, and that server sees no request."""
    foreign = httpserver_ipv4.url_for(f"/repos/{REPO}/issues/{PR}/comments?page=2")
    httpserver_ipv4.expect_request(f"/repos/{REPO}/issues/{PR}/comments").respond_with_json([])
    fake.fail("GET", rf"/issues/{PR}/comments$", Scripted(200, {"Link": f'<{foreign}>; rel="next"'}, []))
    with pytest.raises(ForeignURL, match=re.escape(f"GET {foreign} failed: refused: not on the API's origin {api_url}")) as info:
        make_client().list_issue_comments(REPO, PR)
    assert httpserver_ipv4.log == [] and info.value.status is None
    assert [r.path for r in fake.requests] == [f"/repos/{REPO}/issues/{PR}/comments"]


@pytest.mark.parametrize("url, same", [
    ("https://api.github.com:443/repos/a/b?page=2", True), ("https://API.github.com/x", True),
    ("http://api.github.com/x", False), ("https://api.github.com:8443/x", False),
    ("https://api.github.com.evil.example/x", False), ("https://api.github.com@evil.example/x", False),
    ("//evil.example/x", False), ("ftp://api.github.com/x", False), ("https://api.github.com:x/y", False),
    # not whole URLs, but appended to the base URL they would move its host
    ("@evil.example/x", False), (".evil.example/x", False), (":8443/x", False)])
def test_only_urls_on_the_api_origin_are_followed(url: str, same: bool) -> None:
    client = GitHubClient("https://api.github.com", "t")
    if same:
        assert client.url_for("GET", url) == url
    else:
        with pytest.raises(ForeignURL, match="not on the API's origin https://api.github.com:443"):
            client.url_for("GET", url)
    assert client.url_for("GET", "/repos/a/b") == "https://api.github.com/repos/a/b"
