"""The webhook server over real HTTP: signatures, limits, replays, per-comment locking, and the CLI."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlencode

import pytest
import requests

from tools.rerun.fake_github import FakeGitHub
from tools.rerun.journal import Journal
from tools.rerun.server import ServerConfig, WebhookApp, running, signature
from tools.rerun.webhook_body import FORM_TYPE
from tools.rerun.sync import KeyedLocks, LRUSet

from rerun_support import PR, REPO, StubPool, comment_payload

SECRET = b"s3cret"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def app(make_handler) -> WebhookApp:
    return WebhookApp(ServerConfig(secret=SECRET, max_body=64 * 1024, workers=4), make_handler)


@pytest.fixture
def server_url(app: WebhookApp) -> Iterator[str]:
    with running(app) as server:
        yield server.url


def post(url: str, payload: Any, *, delivery: str = "d-1", event: str = "issue_comment",
         secret: bytes | None = SECRET, raw: bytes | None = None, sig: str | None = None,
         content_type: str = "application/json") -> requests.Response:
    body = raw if raw is not None else json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "Content-Type": content_type}
    if sig is not None:
        headers["X-Hub-Signature-256"] = sig
    elif secret is not None:
        headers["X-Hub-Signature-256"] = signature(secret, body)
    return requests.post(url + "/", data=body, headers=headers, timeout=10)


def test_signature_checks(server_url: str, app: WebhookApp, fake: FakeGitHub) -> None:
    payload = comment_payload("/rerun-test test_pack.py")
    assert post(server_url, payload, secret=None).status_code == 401
    assert post(server_url, payload, secret=b"wrong").status_code == 401
    assert post(server_url, payload, sig="sha256=").status_code == 401
    body = json.dumps(payload).encode()
    tampered = body.replace(b"test_pack", b"test_Pack")
    assert post(server_url, None, raw=tampered, sig=signature(SECRET, body)).status_code == 401
    app.wait_idle()
    assert app.stats.accepted == 0 and fake.requests == []


def test_size_json_ping_and_other_events(server_url: str, app: WebhookApp) -> None:
    big = b'{"x": "' + b"a" * (64 * 1024) + b'"}'
    response = post(server_url, None, raw=big)
    assert response.status_code == 413 and "exceeds the 65536-byte limit" in response.json()["message"]
    response = post(server_url, None, raw=b'{"action": ')
    assert response.status_code == 400 and "malformed JSON" in response.json()["message"]
    assert post(server_url, None, raw=b"\xff\xfe").status_code == 400
    assert post(server_url, {"zen": "hi"}, event="ping").status_code == 200
    assert post(server_url, {"action": "opened"}, event="pull_request").json()["message"].startswith("ignored")
    # a merge queue's batch (GitHub's merge_group schema): the bot answers comments, not queue runs
    queued = {"action": "checks_requested", "merge_group": {
        "head_sha": "ab" * 20, "head_ref": "refs/heads/gh-readonly-queue/main/pr-7-" + "ab" * 20,
        "base_sha": "cd" * 20, "base_ref": "refs/heads/main", "head_commit": {"id": "ab" * 20}},
        "repository": {"full_name": REPO}}
    assert post(server_url, queued, event="merge_group").json()["message"] == "ignored event 'merge_group'"
    assert requests.get(server_url + "/healthz", timeout=5).status_code == 200


def _form(payload: Any) -> bytes:
    """A body as a webhook with GitHub's default Content type (form) sends it."""
    return urlencode({"payload": json.dumps(payload)}).encode("ascii")


def test_form_encoded_deliveries_are_accepted_and_journalled_as_json(server_url: str, app: WebhookApp,
                                                                     fake: FakeGitHub) -> None:
    """A new repository webhook sends application/x-www-form-urlencoded unless told otherwise; the
    signature covers the form body as sent."""
    payload = comment_payload("/rerun-test test_kvfp4_quant_dequant.py")
    body = _form(payload)
    response = post(server_url, None, raw=body, content_type=FORM_TYPE, delivery="form-1")
    assert (response.status_code, response.json()["message"]) == (202, "accepted")
    app.wait_idle()
    assert [d["inputs"]["tests"] for d in fake.dispatches] == ["tests/quant/test_kvfp4_quant_dequant.py"]
    assert post(server_url, None, raw=_form({"zen": "hi"}), content_type=FORM_TYPE, event="ping").status_code == 200
    # Signed over the JSON inside instead of the raw form body: refused, as GitHub never does that.
    assert post(server_url, None, raw=body, content_type=FORM_TYPE,
                sig=signature(SECRET, json.dumps(payload).encode())).status_code == 401
    missing = post(server_url, None, raw=b"other=1", content_type=FORM_TYPE, delivery="form-2")
    assert missing.status_code == 400 and "exactly one `payload` field" in missing.json()["message"]
    odd = post(server_url, payload, content_type="text/plain", delivery="form-3")
    assert odd.status_code == 415 and "Content type to application/json" in odd.json()["message"]
    assert (app.stats.accepted, len(fake.dispatches)) == (1, 1)


def test_a_form_delivery_replays_from_the_journal(make_handler, fake: FakeGitHub, tmp_path: Path) -> None:
    """The journal keeps the JSON document, so a restart replays a form-encoded delivery."""
    payload = comment_payload("/rerun-test test_kvfp4_quant_dequant.py")
    journal = Journal(str(tmp_path / "journal.sqlite3"))
    try:
        with running(WebhookApp(ServerConfig(secret=SECRET), lambda: None, journal=journal,
                                pool=StubPool(accepts=True))) as server:
            assert post(server.url, None, raw=_form(payload), content_type=FORM_TYPE, delivery="f-9").status_code == 202
        assert [json.loads(e.payload) for e in journal.unfinished()] == [payload]
        replay = WebhookApp(ServerConfig(secret=SECRET), make_handler, journal=journal)
        replay.start()
        assert replay.wait_idle(20) and replay.stats.replayed == 1
        replay.stop()
    finally:
        journal.close()
    assert [d["inputs"]["tests"] for d in fake.dispatches] == ["tests/quant/test_kvfp4_quant_dequant.py"]


def test_missing_and_short_content_length(server_url: str) -> None:
    host, port = server_url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.putrequest("POST", "/")
    conn.putheader("X-GitHub-Event", "issue_comment")
    conn.endheaders()
    assert conn.getresponse().status == 411
    conn.close()
    # Claims more bytes than it sends, then half-closes: the server must not hang or crash.
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    conn.putrequest("POST", "/")
    conn.putheader("Content-Length", "100")
    conn.endheaders(b"{}")
    conn.sock.shutdown(1)
    assert conn.getresponse().status == 400
    conn.close()


def test_replayed_delivery_is_not_redispatched(server_url: str, app: WebhookApp, fake: FakeGitHub) -> None:
    payload = comment_payload("/rerun-test test_kvfp4_quant_dequant.py")
    first = post(server_url, payload, delivery="abc")
    assert first.status_code == 202
    replay = post(server_url, payload, delivery="abc")
    assert (replay.status_code, replay.json()["message"]) == (200, "duplicate")
    app.wait_idle()
    # A new delivery id for the same comment (GitHub "redeliver") is also not re-dispatched.
    assert post(server_url, payload, delivery="abc-redelivered").status_code == 202
    app.wait_idle()
    assert len(fake.dispatches) == 1 and len(fake.bot_replies(PR)) == 1
    assert (app.stats.accepted, app.stats.duplicate_deliveries, app.stats.skipped_comments) == (2, 1, 1)


def test_an_edit_delivered_before_its_creation_does_not_hide_the_command(server_url: str, app: WebhookApp,
                                                                         fake: FakeGitHub) -> None:
    """GitHub does not promise delivery order: the `edited` delivery of a comment may arrive before
    its `created` one. Ignoring the edit must not mark the comment handled."""
    created = comment_payload("/rerun-test test_kvfp4_quant_dequant.py", comment_id=777)
    edited = {**created, "action": "edited", "changes": {"body": {"from": "/rerun-test test_pack.py"}}}
    assert post(server_url, edited, delivery="e-edit").status_code == 202
    app.wait_idle()
    assert post(server_url, created, delivery="e-create").status_code == 202
    app.wait_idle()
    assert [d["inputs"]["tests"] for d in fake.dispatches] == ["tests/quant/test_kvfp4_quant_dequant.py"]
    assert (app.stats.handled, app.stats.skipped_comments) == (2, 0)
    # Once the creation is handled, a later delivery of it is skipped, as before.
    assert post(server_url, created, delivery="e-create-again").status_code == 202
    app.wait_idle()
    assert app.stats.skipped_comments == 1 and len(fake.dispatches) == 1


def test_simultaneous_deliveries_of_one_comment_dispatch_once(server_url: str, app: WebhookApp,
                                                             fake: FakeGitHub) -> None:
    comments = [comment_payload("/rerun-test test_kvfp4_quant_dequant.py") for _ in range(8)]
    barrier = threading.Barrier(len(comments) * 2)
    codes: list[int] = []

    def send(payload: dict[str, Any], delivery: str) -> None:
        barrier.wait()
        codes.append(post(server_url, payload, delivery=delivery).status_code)

    threads = [threading.Thread(target=send, args=(p, f"{p['comment']['id']}-{copy}"))
               for p in comments for copy in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    app.wait_idle()
    assert codes == [202] * 16
    dispatched = sorted(int(d["inputs"]["comment_id"]) for d in fake.dispatches)
    assert dispatched == sorted(p["comment"]["id"] for p in comments)
    assert len(fake.bot_replies(PR)) == 8 and len(app.pool.comment_locks) == 0


def test_worker_survives_handler_exceptions(fake: FakeGitHub, make_handler) -> None:
    class Exploding:
        calls = 0

        def handle(self, payload: dict[str, Any]) -> None:
            Exploding.calls += 1
            if Exploding.calls == 1:
                raise RuntimeError("boom")
            return make_handler().handle(payload)

    app = WebhookApp(ServerConfig(secret=SECRET, workers=1), Exploding)
    with running(app) as server:
        payload = comment_payload("/rerun-test test_pack.py")
        assert post(server.url, payload, delivery="x1").status_code == 202
        app.wait_idle()
        # Not marked handled after the crash, so GitHub's redelivery (same delivery id) goes through.
        assert post(server.url, payload, delivery="x1").status_code == 202
        app.wait_idle()
    assert (app.stats.errors, app.stats.handled) == (1, 1)
    assert len(fake.dispatches) == 2  # test_pack.py runs on gpu_h100 and gpu_b200


def test_lru_and_keyed_locks() -> None:
    lru = LRUSet(2)
    assert lru.add("a") and lru.add("b") and not lru.add("a")
    assert lru.add("c") and "b" not in lru and "a" in lru and len(lru) == 2
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        LRUSet(0)
    locks, inside, peak = KeyedLocks(), [0], [0]

    def work() -> None:
        with locks.hold(1):
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
            time.sleep(0.002)
            inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 1 and len(locks) == 0
    with pytest.raises(ValueError, match="secret must not be empty"):
        ServerConfig(secret=b"")


def test_cli_serve_and_handle_dry_run(api_url: str, fake: FakeGitHub, repo_root: Path, tmp_path: Path) -> None:
    (tmp_path / "secret").write_bytes(SECRET + b"\n")
    (tmp_path / "token").write_text("test-token\n")
    payload = comment_payload("/rerun-test test_kvfp4_quant_dequant.py")
    (tmp_path / "event.json").write_text(json.dumps(payload))
    # --repo explicitly: on GitHub Actions $GITHUB_REPOSITORY would name the real repository.
    common = ["--api-url", api_url, "--token-file", str(tmp_path / "token"), "--repo-root", str(repo_root),
              "--repo", REPO, "--lookup-wait", "0.5", "--writes-per-minute", "0"]
    dry = subprocess.run([sys.executable, "-m", "tools.rerun", "handle", "--event", str(tmp_path / "event.json"),
                          "--dry-run", *common], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    assert "rerun-test: dispatched" in dry.stdout and '"tests": "tests/quant/test_kvfp4_quant_dequant.py"' in dry.stdout
    assert "would react: eyes, rocket" in dry.stdout and fake.writes() == []

    with socketless_port() as port:
        proc = subprocess.Popen([sys.executable, "-m", "tools.rerun", "serve", "--port", str(port),
                                 "--secret-file", str(tmp_path / "secret"), "--state-dir", str(tmp_path / "state"),
                                 *common],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and "listening on" in proc.stdout.readline()
        url = f"http://127.0.0.1:{port}"
        assert post(url, payload, delivery="cli-1").status_code == 202
        deadline = time.monotonic() + 20
        while not fake.dispatches and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [d["inputs"]["tests"] for d in fake.dispatches] == ["tests/quant/test_kvfp4_quant_dequant.py"]
    finally:
        proc.terminate()
        proc.wait(10)


class socketless_port:
    """A free TCP port number on 127.0.0.1 (the socket is closed before the server binds it)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def __exit__(self, *exc: object) -> None:
        return None
