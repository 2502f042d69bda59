"""The journal and the server under faults: a second ``serve`` on one state directory, a corrupt or
read-only journal at start, a full disk while marking deliveries; plus the exact limits (durability
pragma, prune window, replay past the queue's capacity, body size, queue capacity).

Real processes for the lock and start-up tests. The full disk is simulated inside the process: the
journal's SQLite connection is wrapped so that, while the "disk" is full, every write raises the
``sqlite3.OperationalError("database or disk is full")`` that SQLite gives for SQLITE_FULL/ENOSPC.
Reads, and everything else (real SQLite file, real HTTP on 127.0.0.1), are the real thing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import requests

from tools.rerun.dispatch import RunLookup
from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.handler import BotConfig
from tools.rerun.journal import DONE, JOURNAL_FILE, Journal
from tools.rerun.server import ServerConfig, WebhookApp, running, signature
from tools.rerun.worker_process import ProcessWorkers, WorkerSpec

from rerun_support import PR, REPO, ROOT, TOKEN, comment_payload

SECRET = b"faults-secret"


def _post(url: str, body: bytes, delivery: str) -> requests.Response:
    return requests.post(url, data=body, timeout=10, headers={
        "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": signature(SECRET, body)})


def _wait_for(condition: Callable[[], bool], seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _serve_argv(tmp_path: Path, api_url: str, repo_root: Path, port: int, state: Path) -> list[str]:
    (tmp_path / "secret").write_bytes(SECRET + b"\n")
    (tmp_path / "token").write_text(TOKEN + "-long\n")
    return [sys.executable, "-m", "tools.rerun", "serve", "--port", str(port), "--secret-file",
            str(tmp_path / "secret"), "--state-dir", str(state), "--token-file", str(tmp_path / "token"),
            "--api-url", api_url, "--repo-root", str(repo_root), "--repo", REPO, "--lookup-wait", "0.5",
            "--writes-per-minute", "0"]


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- one server per state directory -----------------------------------------------------------------

def test_a_second_serve_on_the_same_state_dir_refuses_to_start(tmp_path: Path, api_url: str,
                                                               repo_root: Path) -> None:
    state = tmp_path / "state"
    first = subprocess.Popen(_serve_argv(tmp_path, api_url, repo_root, _port(), state), cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert first.stdout is not None and "listening on" in first.stdout.readline()
        try:
            second = subprocess.run(_serve_argv(tmp_path, api_url, repo_root, _port(), state), cwd=ROOT,
                                    capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the second server started on the same journal: {exc.stdout!r}")
        assert second.returncode == 2, second.stdout + second.stderr
        assert "is in use by another `serve` process" in second.stderr and "Traceback" not in second.stderr
        assert "listening on" not in second.stdout
        first.send_signal(signal.SIGKILL)  # a killed holder leaves no stale lock behind
        first.wait(10)
        third = subprocess.Popen(_serve_argv(tmp_path, api_url, repo_root, _port(), state), cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            assert third.stdout is not None and "listening on" in third.stdout.readline()
        finally:
            third.terminate()
            third.wait(10)
    finally:
        first.kill()
        first.wait(10)


# -- a journal that cannot be used at start ---------------------------------------------------------

def _corrupt_journal(state: Path) -> None:
    """A real journal of 400 deliveries whose table pages were then overwritten: the header is
    intact, so SQLite opens it and only fails on the damaged pages."""
    journal = Journal.in_dir(state)
    for i in range(400):
        journal.accept(f"d{i}", json.dumps({"n": i, "pad": "x" * 300}).encode())
        journal.finish(f"d{i}")
    journal.close()
    with sqlite3.connect(state / JOURNAL_FILE) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray((state / JOURNAL_FILE).read_bytes())
    page = 4096
    for offset in range(2 * page, len(data) - page, 3 * page):
        data[offset:offset + page] = os.urandom(page)
    (state / JOURNAL_FILE).write_bytes(bytes(data))


def _readonly(journal: Path, argv: list[str]) -> list[str]:
    """``argv`` run with the journal file read-only: by its mode for a normal user; for root (whom
    modes do not stop) in a private mount namespace with the file bind-mounted read-only."""
    if os.geteuid() != 0:
        os.chmod(journal, 0o444)
        return argv
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare(1): cannot make the journal read-only")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f'mount --bind -o ro "{journal}" "{journal}"'],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot bind-mount read-only here: {probe.stderr.strip()}")
    return ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(journal), *argv]


@pytest.mark.parametrize("damage", ["corrupt", "read-only"])
def test_an_unusable_journal_at_start_is_one_clear_message_and_exit_2(damage: str, tmp_path: Path, api_url: str,
                                                                     repo_root: Path) -> None:
    state = tmp_path / "state"
    argv = _serve_argv(tmp_path, api_url, repo_root, _port(), state)
    if damage == "corrupt":
        _corrupt_journal(state)
    else:
        journal = Journal.in_dir(state)
        journal.accept("d-old", b"{}")
        journal.close()
        argv = _readonly(state / JOURNAL_FILE, argv)
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and "listening on" not in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("rerun-test: ")]
    assert len(lines) == 1 and "delivery journal" in lines[0], result.stderr
    assert ("corrupt" in lines[0] or "malformed" in lines[0]) if damage == "corrupt" else "readonly" in lines[0]


# -- a full disk while marking deliveries -----------------------------------------------------------

class FullDisk:
    """Wraps the journal's connection: while ``full`` is set, every write raises SQLite's
    SQLITE_FULL error; reads and pragmas pass through."""

    WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")

    def __init__(self, db: sqlite3.Connection):
        self.db, self.full, self.refused = db, threading.Event(), 0

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if self.full.is_set() and sql.lstrip().upper().startswith(self.WRITES):
            self.refused += 1
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)


def test_a_full_disk_while_marking_recovers_when_the_disk_does(tmp_path: Path, make_handler,
                                                               fake: FakeGitHub) -> None:
    journal = Journal.in_dir(tmp_path / "state")
    disk = FullDisk(journal._db)
    journal._db = disk  # type: ignore[assignment]
    fills = threading.Event()

    class FillsTheDisk:
        """Handles the delivery; the disk fills up while it does (after its accept, before its mark)."""

        def __init__(self) -> None:
            self.inner = make_handler()

        def handle(self, payload: dict[str, Any]) -> Any:
            outcome = self.inner.handle(payload)
            if fills.is_set():
                disk.full.set()
            return outcome

    app = WebhookApp(ServerConfig(secret=SECRET, workers=2, journal_retry=0.1), FillsTheDisk, journal=journal)
    with running(app) as server:
        bodies = {f"d{i}": json.dumps(comment_payload("/rerun-test test_pack.py", number=PR,
                                                      comment_id=910_000 + i)).encode() for i in range(6)}
        assert _post(server.url, bodies["d0"], "d0").status_code == 202
        assert app.wait_idle(20) and journal.state("d0") == DONE
        fills.set()
        assert _post(server.url, bodies["d1"], "d1").status_code == 202
        assert app.wait_idle(20) and disk.refused >= 1
        health = requests.get(server.url + "/healthz", timeout=5)
        assert health.status_code == 503 and "cannot be written" in health.json()["message"]
        assert _post(server.url, bodies["d2"], "d2").status_code == 500  # nothing acknowledged unjournalled
        time.sleep(0.5)  # retries keep failing while the disk is full
        assert requests.get(server.url + "/healthz", timeout=5).status_code == 503
        fills.clear()
        disk.full.clear()  # the disk recovers; no restart, no new traffic
        assert _wait_for(lambda: journal.state("d1") == DONE), "the late mark was never written"
        assert requests.get(server.url + "/healthz", timeout=5).status_code == 200
        for delivery in ("d2", "d3", "d4", "d5"):
            assert _post(server.url, bodies[delivery], delivery).status_code == 202
        assert app.wait_idle(20)
        assert [journal.state(f"d{i}") for i in range(6)] == [DONE] * 6 and journal.unfinished() == []
    assert app.stats.journal_failures >= 1


# -- exact limits (mutation survivors) --------------------------------------------------------------

def test_durable_really_means_synchronous_full(tmp_path: Path) -> None:
    for durable, level in ((True, 2), (False, 1)):  # PRAGMA synchronous: 1 NORMAL, 2 FULL
        journal = Journal(tmp_path / f"j{durable}.sqlite3", durable=durable)
        try:
            assert journal._db.execute("PRAGMA synchronous").fetchone()[0] == level
        finally:
            journal.close()


def test_prune_keeps_deliveries_younger_than_its_window(tmp_path: Path) -> None:
    journal = Journal(tmp_path / JOURNAL_FILE)
    for delivery in ("old", "young", "open"):
        journal.accept(delivery, b"{}")
    journal.finish("old")
    journal.finish("young")
    journal._db.execute("UPDATE deliveries SET finished = ? WHERE id = 'old'", (time.time() - 7200,))
    assert journal.prune(3600) == 1
    assert (journal.state("old"), journal.state("young"), journal.state("open")) == (None, DONE, "accepted")
    journal.close()


def test_replay_of_more_unfinished_deliveries_than_the_queue_holds(tmp_path: Path, make_handler) -> None:
    journal = Journal(tmp_path / JOURNAL_FILE)
    for i in range(7):
        journal.accept(f"r{i}", json.dumps(comment_payload("/rerun-test test_pack.py", comment_id=920_000 + i)).encode())
    app = WebhookApp(ServerConfig(secret=SECRET, workers=1, queue_size=2), make_handler, journal=journal)
    app.start()
    try:
        assert app.wait_idle(30), "replayed deliveries beyond the queue's capacity were dropped"
        assert app.stats.replayed == 7 and journal.unfinished() == []
    finally:
        app.stop()
        journal.close()


def test_a_body_one_byte_over_max_body_is_refused_and_max_body_is_not(make_handler) -> None:
    app = WebhookApp(ServerConfig(secret=SECRET, max_body=1000), make_handler)
    with running(app) as server:
        exact = b'{"zen": "' + b"z" * (1000 - 11) + b'"}'
        assert len(exact) == 1000
        ok = requests.post(server.url, data=exact, timeout=10, headers={
            "X-GitHub-Event": "ping", "X-Hub-Signature-256": signature(SECRET, exact)})
        assert ok.status_code == 200, ok.text
        over = exact[:-2] + b'z"}'
        refused = requests.post(server.url, data=over, timeout=10, headers={
            "X-GitHub-Event": "ping", "X-Hub-Signature-256": signature(SECRET, over)})
        assert refused.status_code == 413 and "1001 bytes exceeds the 1000-byte limit" in refused.json()["message"]


def test_the_queue_holds_exactly_queue_size_and_then_answers_503_busy(make_handler, fake: FakeGitHub) -> None:
    started, release = threading.Event(), threading.Event()

    class Held:
        def __init__(self) -> None:
            self.inner = make_handler()

        def handle(self, payload: dict[str, Any]) -> Any:
            started.set()
            release.wait(30)
            return self.inner.handle(payload)

    app = WebhookApp(ServerConfig(secret=SECRET, workers=1, queue_size=3), Held)
    bodies = [json.dumps(comment_payload("/rerun-test test_pack.py", comment_id=930_000 + i)).encode()
              for i in range(6)]
    with running(app) as server:
        try:
            assert _post(server.url, bodies[0], "q0").status_code == 202
            assert started.wait(10)  # the one worker holds q0: the queue itself is empty
            assert [_post(server.url, bodies[i], f"q{i}").status_code for i in (1, 2, 3)] == [202] * 3
            busy = _post(server.url, bodies[4], "q4")
            assert busy.status_code == 503 and busy.headers["Retry-After"] == "5"
            assert busy.json()["message"] == "queue full, retry later"
            assert app.journal.state("q4") is None  # never acknowledged: not journalled either
        finally:
            release.set()
        assert app.wait_idle(30)
        assert _post(server.url, bodies[4], "q4").status_code == 202  # GitHub's redelivery gets in
        assert app.wait_idle(30) and app.stats.accepted == 5


def test_the_worker_process_holds_exactly_its_capacity(api_url: str, fake: FakeGitHub, repo_root: Path) -> None:
    """`serve`'s pool: ``capacity`` deliveries in flight, the next one refused until one reports."""
    slow = Scripted(delay=2.0, route=True)
    fake.fail("GET", r"/collaborators/", slow, slow)  # the first two deliveries take 2 s each
    config = BotConfig(repo_root=repo_root, lookup=RunLookup(wait=0.3, link_wait=0.2, interval=0.02))
    pool = ProcessWorkers(WorkerSpec(api_url, TOKEN, config, workers=2), capacity=2)
    reports: list[str] = []
    pool.start(lambda delivery, result, error: reports.append(delivery))
    try:
        payloads = [comment_payload("/rerun-test test_pack.py", comment_id=940_000 + i) for i in range(3)]
        assert pool.put("p0", payloads[0]) and pool.put("p1", payloads[1])
        assert not pool.put("p2", payloads[2])  # two in flight: full
        assert _wait_for(lambda: len(reports) >= 1, 30)
        assert pool.put("p2", payloads[2])
        assert _wait_for(lambda: len(reports) == 3, 30) and sorted(reports) == ["p0", "p1", "p2"]
    finally:
        pool.stop()
