"""The delivery journal: written before the 202, kept across restarts, replayed when unfinished."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.github import GitHubClient, RetryPolicy
from tools.rerun.handler import BotConfig, Handler
from tools.rerun.journal import JOURNAL_FILE, Journal, JournalError
from tools.rerun.server import ServerConfig, WebhookApp, running, signature

from rerun_support import PR, comment_payload

SECRET = b"journal-secret"


def _post(url: str, payload: dict[str, Any], delivery: str) -> requests.Response:
    body = json.dumps(payload).encode()
    return requests.post(url, data=body, timeout=10, headers={
        "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": signature(SECRET, body)})


def test_journal_records_states_and_survives_reopening(tmp_path: Path) -> None:
    journal = Journal.in_dir(tmp_path / "state")
    assert journal.accept("d1", b'{"a": 1}') and journal.accept("d2", b"{}") and not journal.accept("d1", b"x")
    journal.fail("d2", "GitHub down")
    journal.finish("d1")
    journal.close()
    mode = oct((tmp_path / "state").stat().st_mode & 0o777)
    again = Journal(tmp_path / "state" / JOURNAL_FILE)
    assert [(e.delivery, e.payload, e.attempts) for e in again.unfinished()] == [("d2", b"{}", 1)]
    assert (again.state("d1"), again.state("d2"), again.state("d3")) == ("done", "accepted", None)
    assert not again.accept("d1", b"{}")  # replay protection across restarts
    assert again.counts() == {"done": 1, "accepted": 1} and mode == "0o700"
    with sqlite3.connect(tmp_path / "state" / JOURNAL_FILE) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_journal_errors_are_typed(tmp_path: Path) -> None:
    (tmp_path / "not-a-db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(JournalError, match="cannot open the delivery journal"):
        Journal(tmp_path / "not-a-db")


def test_a_delivery_is_on_disk_when_the_202_arrives(tmp_path: Path, make_handler, fake: FakeGitHub) -> None:
    release = threading.Event()

    class Held:
        def __init__(self) -> None:
            self.inner = make_handler()

        def handle(self, payload: dict[str, Any]) -> Any:
            release.wait(10)
            return self.inner.handle(payload)

    app = WebhookApp(ServerConfig(secret=SECRET, workers=1), Held, journal=Journal.in_dir(tmp_path))
    with running(app) as server:
        assert _post(server.url, comment_payload("/rerun-test test_pack.py"), "j-1").status_code == 202
        with sqlite3.connect(tmp_path / JOURNAL_FILE) as other:  # what a restarted process would read
            assert other.execute("SELECT state FROM deliveries WHERE id = 'j-1'").fetchall() == [("accepted",)]
        release.set()
        app.wait_idle()
    assert app.journal.state("j-1") == "done" and len(fake.dispatches) == 2


def test_unwritable_journal_answers_500_and_queues_nothing(make_handler, tmp_path: Path) -> None:
    class Broken(Journal):
        def accept(self, delivery: str, payload: bytes) -> bool:
            raise JournalError("disk full")

    app = WebhookApp(ServerConfig(secret=SECRET, workers=1), make_handler, journal=Broken(":memory:"))
    with running(app) as server:
        response = _post(server.url, comment_payload("/rerun-test test_pack.py"), "j-9")
        app.wait_idle()
    assert response.status_code == 500 and "not accepted" in response.json()["message"]
    assert app.stats.accepted == 0


def test_github_failure_keeps_the_delivery_unfinished_and_a_restart_replays_it(
        tmp_path: Path, make_handler, fake: FakeGitHub) -> None:
    payload = comment_payload("/rerun-test test_kvfp4_quant_dequant.py", comment_id=7100)
    fake.fail("POST", r"/dispatches$", Scripted(422, body={"message": "workflow is disabled"}))
    app = WebhookApp(ServerConfig(secret=SECRET, workers=2), make_handler, journal=Journal.in_dir(tmp_path))
    with running(app) as server:
        assert _post(server.url, payload, "r-1").status_code == 202
        app.wait_idle()
        # A replay of the same delivery id while it is unfinished: accepted again.
    assert (app.stats.unfinished, app.stats.handled) == (1, 0)
    assert [e.delivery for e in app.journal.unfinished()] == ["r-1"] and fake.dispatches == []
    assert "state=incomplete" in fake.bot_replies(PR)[0].body
    app.journal.close()

    restarted = WebhookApp(ServerConfig(secret=SECRET, workers=2), make_handler, journal=Journal.in_dir(tmp_path))
    with running(restarted) as server:
        restarted.wait_idle()
        assert restarted.stats.replayed == 1 and restarted.journal.unfinished() == []
        assert _post(server.url, payload, "r-1").status_code == 200  # done now: a replay is a duplicate
    assert [d["inputs"]["comment_id"] for d in fake.dispatches] == ["7100"]
    (reply,) = fake.bot_replies(PR)
    assert "state=done" in reply.body and "| dispatched |" in reply.body


def test_checkpoints_run_outside_commits_and_empty_the_wal(tmp_path: Path) -> None:
    journal = Journal.in_dir(tmp_path)
    assert journal._db.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)  # never inside an accept
    for i in range(300):
        journal.accept(f"c{i}", b"x" * 900)
    frames, copied = journal.checkpoint()
    assert frames > 0 and copied == frames  # no other writer: the passive checkpoint copies it all
    journal.close()


def test_a_hanging_api_leaves_the_delivery_unfinished_for_the_next_start(tmp_path: Path, repo_root: Path,
                                                                         sleeps) -> None:
    """Every call times out: the bounded retries give up, nothing is marked handled."""
    with socket.socket() as listener:  # accepts connections, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        api = f"http://127.0.0.1:{listener.getsockname()[1]}"

        def hanging_handler() -> Handler:
            client = GitHubClient(api, "hang-token", timeout=0.1, sleep=sleeps,
                                  retry=RetryPolicy(max_attempts=3, backoff_base=0.01))
            return Handler(client, BotConfig(repo_root=repo_root))

        app = WebhookApp(ServerConfig(secret=SECRET, workers=1), hanging_handler, journal=Journal.in_dir(tmp_path))
        with running(app) as server:
            assert _post(server.url, comment_payload("/rerun-test test_pack.py"), "h-1").status_code == 202
            app.wait_idle()
    assert app.stats.errors == 1 and app.stats.handled == 0
    (entry,) = app.journal.unfinished()
    assert entry.delivery == "h-1" and entry.attempts == 1
    assert len(sleeps.calls) == 2  # three attempts, two bounded waits between them
