"""The redelivery sweep: GitHub never retries a failed webhook delivery, so `redeliver` asks it to.

The fake GitHub delivers events over real HTTP to a real `serve` app and keeps GitHub's delivery
log; the sweep reads that log through the deliveries API and asks for redeliveries, which the fake
sends to the server again.
"""

from __future__ import annotations

import socket
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer

from tools.rerun.__main__ import main
from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.fake_hooks import APP_HOOK
from tools.rerun.github import GitHubClient
from tools.rerun.journal import Journal
from tools.rerun.redeliver import HookDeliveries, HookRef, sweep, window_start
from tools.rerun.rest import ForeignURL
from tools.rerun.server import ServerConfig, WebhookApp, running

from rerun_support import REPO, TOKEN, StubPool, comment_payload

SECRET = b"hook-secret"
HOOK = 4242
SINCE = datetime.now(timezone.utc) - timedelta(hours=1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _deliveries(api_url: str, hook: HookRef) -> HookDeliveries:
    return HookDeliveries(GitHubClient(api_url, TOKEN), hook)


def test_the_sweep_redelivers_what_serve_did_not_take(fake: FakeGitHub, api_url: str, make_handler) -> None:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/"
    fake.add_hook(HOOK, url, SECRET)
    down = fake.deliver(HOOK, "issue_comment", comment_payload("/rerun-test test_kvfp4_quant_dequant.py"))
    assert (down.status_code, down.status) == (0, "failed to connect")
    hopeless = comment_payload("/rerun-test test_cpu_only.py")
    first = fake.deliver(HOOK, "issue_comment", hopeless)
    for _ in range(2):  # already redelivered twice, in vain
        fake.deliver(HOOK, "issue_comment", hopeless, guid=first.guid, redelivery=True)
    with running(WebhookApp(ServerConfig(secret=SECRET), pool=StubPool(accepts=False)), port=port):
        busy = fake.deliver(HOOK, "issue_comment", comment_payload("/rerun-test tests/a/test_dup.py"))
    assert busy.status_code == 503

    app = WebhookApp(ServerConfig(secret=SECRET), make_handler)
    with running(app, port=port):
        ok = fake.deliver(HOOK, "issue_comment", comment_payload("/rerun-test test_pack.py --tier gpu_h100"))
        fake.add_hook(HOOK, url, b"not the secret")
        forged = fake.deliver(HOOK, "issue_comment", comment_payload("/rerun-test tests/b/test_dup.py"))
        fake.add_hook(HOOK, url, SECRET)
        assert (ok.status_code, forged.status_code) == (202, 401)

        report = sweep(_deliveries(api_url, HookRef(REPO, HOOK)), SINCE, max_attempts=3)
        assert {a.guid for a in report.redelivered} == {down.guid, busy.guid}
        assert [a.guid for a in report.given_up] == [first.guid] and [a.guid for a in report.final] == [forged.guid]
        assert report.failed == [] and report.complete and report.scanned == 7
        assert app.wait_idle(20)
        again = sweep(_deliveries(api_url, HookRef(REPO, HOOK)), SINCE, max_attempts=3)
        assert again.redelivered == [] and again.scanned == 9  # both redeliveries succeeded
    assert sorted(d["inputs"]["tests"] for d in fake.dispatches) == [
        "tests/a/test_dup.py", "tests/quant/test_kvfp4_quant_dequant.py", "tests/quant/test_pack.py"]
    redeliveries = [d for d in fake.hook_deliveries if d.redelivery and d.guid != first.guid]
    assert sorted(d.status_code for d in redeliveries) == [202, 202]
    posts = [r.path for r in fake.requests if r.method == "POST" and "/hooks/" in r.path]
    assert sorted(posts) == sorted(f"/repos/{REPO}/hooks/{HOOK}/deliveries/{a.id}/attempts"
                                   for a in report.redelivered)


def test_the_listing_follows_the_cursor_and_stops_at_the_window(fake: FakeGitHub, api_url: str) -> None:
    port = _free_port()
    fake.add_hook(APP_HOOK, f"http://127.0.0.1:{port}/", SECRET)
    lost = [fake.deliver(APP_HOOK, "ping", {"zen": str(i)}) for i in range(130)]  # two pages of 100
    assert {d.status_code for d in lost} == {0}
    app = WebhookApp(ServerConfig(secret=SECRET), lambda: None, pool=StubPool(accepts=False))
    with running(app, port=port):
        dry = sweep(_deliveries(api_url, HookRef(app=True)), SINCE, dry_run=True)
        assert len(dry.redelivered) == 130 and not any(r.method == "POST" for r in fake.requests)
        report = sweep(_deliveries(api_url, HookRef(app=True)), SINCE)
    assert len(report.redelivered) == 130 and report.scanned == 130
    assert [r.query.get("cursor") is not None for r in fake.requests if r.path == "/app/hook/deliveries"] == [
        False, True, False, True]  # dry run and real run: two pages each
    assert {d.status_code for d in fake.hook_deliveries if d.redelivery} == {200}  # ping: pong
    future = sweep(_deliveries(api_url, HookRef(app=True)), datetime.now(timezone.utc) + timedelta(hours=1))
    assert (future.scanned, future.redelivered) == (0, [])


def test_a_delivery_serve_could_not_journal_is_redelivered(fake: FakeGitHub, api_url: str, make_handler,
                                                            tmp_path: Path) -> None:
    """serve answers 500 when its journal cannot be written (here: closed under it); a 500 is an
    attempt a retry can fix, so the sweep redelivers it, and the command runs."""
    port = _free_port()
    fake.add_hook(HOOK, f"http://127.0.0.1:{port}/", SECRET)
    journal = Journal.in_dir(tmp_path / "state")
    with running(WebhookApp(ServerConfig(secret=SECRET), make_handler, journal=journal), port=port):
        journal.close()
        refused = fake.deliver(HOOK, "issue_comment", comment_payload("/rerun-test test_pack.py --tier gpu_h100"))
    assert refused.status_code == 500 and fake.dispatches == []
    app = WebhookApp(ServerConfig(secret=SECRET), make_handler)
    with running(app, port=port):
        report = sweep(_deliveries(api_url, HookRef(REPO, HOOK)), SINCE)
        assert app.wait_idle(20)
    assert [a.guid for a in report.redelivered] == [refused.guid] and report.final == report.given_up == []
    assert [d["inputs"]["tests"] for d in fake.dispatches] == ["tests/quant/test_pack.py"]


def test_one_attempt_is_a_limit_and_none_is_refused(fake: FakeGitHub, api_url: str) -> None:
    fake.add_hook(HOOK, f"http://127.0.0.1:{_free_port()}/", SECRET)
    down = fake.deliver(HOOK, "issue_comment", comment_payload("/rerun-test test_pack.py"))
    report = sweep(_deliveries(api_url, HookRef(REPO, HOOK)), SINCE, max_attempts=1)
    assert [a.guid for a in report.given_up] == [down.guid] and report.redelivered == []
    assert not any(r.method == "POST" for r in fake.requests)
    with pytest.raises(ValueError, match="max_attempts must be >= 1, got 0"):
        sweep(_deliveries(api_url, HookRef(REPO, HOOK)), SINCE, max_attempts=0)


def test_a_redelivery_github_refuses_is_reported(fake: FakeGitHub, api_url: str, tmp_path: Path, capsys) -> None:
    fake.add_hook(HOOK, f"http://127.0.0.1:{_free_port()}/", SECRET)
    down = fake.deliver(HOOK, "issue_comment", comment_payload("/rerun-test test_pack.py"))
    refusal = Scripted(422, body={"message": "Validation Failed", "documentation_url": "https://docs.github.com/rest"})
    fake.fail("POST", r"/attempts$", refusal)
    report = sweep(_deliveries(api_url, HookRef(REPO, HOOK)), SINCE)
    assert report.redelivered == [] and [a.guid for a, _ in report.failed] == [down.guid]
    assert "HTTP 422: Validation Failed" in report.failed[0][1]
    (tmp_path / "token").write_text(TOKEN + "\n")
    fake.fail("POST", r"/attempts$", refusal)
    argv = ["redeliver", "--api-url", api_url, "--token-file", str(tmp_path / "token"), "--repo", REPO]
    assert main([*argv, "--hook-id", str(HOOK)]) == 1
    out, err = capsys.readouterr()
    assert f"redelivering {down.guid} failed: " in err and "HTTP 422: Validation Failed" in err
    assert "0 redelivered, 0 given up, 0 final, 1 failed" in out


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="at most 72 hours"):
        window_start(73)
    with pytest.raises(ValueError, match="not both"):
        HookRef(REPO, 1, app=True)
    with pytest.raises(ValueError, match="a repository and a hook id"):
        HookRef(REPO)
    assert window_start(2, datetime(2026, 1, 1, 12, tzinfo=timezone.utc)) == datetime(2026, 1, 1, 10, tzinfo=timezone.utc)


def test_cli(fake: FakeGitHub, api_url: str, tmp_path: Path, capsys) -> None:
    fake.add_hook(HOOK, f"http://127.0.0.1:{_free_port()}/", SECRET)
    lost = fake.deliver(HOOK, "issue_comment", comment_payload("/rerun-test test_pack.py"))
    (tmp_path / "token").write_text(TOKEN + "\n")
    common = ["redeliver", "--api-url", api_url, "--token-file", str(tmp_path / "token"), "--repo", REPO]
    assert main([*common, "--hook-id", str(HOOK), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would redeliver {lost.guid} (issue_comment created;" in out and "1 would redeliver" in out
    assert not any(r.method == "POST" for r in fake.requests)
    assert main(common) == 2 and "give --hook-id N" in capsys.readouterr().err
    fake.fail("GET", r"/deliveries$", Scripted(404, body={"message": "Not Found"}))
    assert main([*common, "--hook-id", str(HOOK)]) == 1
    assert "cannot list the deliveries" in capsys.readouterr().err


def test_a_cursor_to_another_host_is_not_followed(fake: FakeGitHub, api_url: str, httpserver_ipv4: HTTPServer) -> None:
    """The deliveries page's ``Link: rel="next"`` names another server: the sweep stops with an
    error naming it, and that server (which would serve a valid page) never sees the token."""
    fake.add_hook(HOOK, f"http://127.0.0.1:{_free_port()}/", SECRET)
    lost = fake.deliver(HOOK, "issue_comment", comment_payload("/rerun-test test_pack.py"))
    path = f"/repos/{REPO}/hooks/{HOOK}/deliveries"
    httpserver_ipv4.expect_request(path).respond_with_json([])
    foreign = httpserver_ipv4.url_for(f"{path}?per_page=100&cursor={lost.id}")
    fake.fail("GET", r"/deliveries$", Scripted(200, {"Link": f'<{foreign}>; rel="next"'}, [lost.to_json()]))
    with pytest.raises(ForeignURL, match="not on the API's origin") as info:
        sweep(_deliveries(api_url, HookRef(REPO, HOOK)), SINCE)
    assert info.value.path == foreign and httpserver_ipv4.log == []
    assert not any(r.method == "POST" for r in fake.requests)  # nothing redelivered on a refused listing
