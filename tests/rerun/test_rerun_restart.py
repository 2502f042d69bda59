"""kill -9 of a real ``serve`` process in the middle of a 200-delivery burst, then a restart.

Every delivery that got a 202 before the kill is handled after the restart, and no comment is
dispatched twice: the journal replays what was unfinished, and a comment that was claimed before
the kill is resumed by looking its runs up by run-name before dispatching.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.journal import JOURNAL_FILE
from tools.rerun.replies import find_marker
from tools.rerun.server import signature

from rerun_support import HEAD_SHA, REPO, ROOT, TOKEN, comment_payload

SECRET = b"restart-secret"
COMMENTS = 160
REPLAYS, REDELIVERIES = 20, 20   # the same delivery id again; a new id for a sent comment
PULLS = 10
KILL_AFTER = 60                  # acknowledged deliveries before the kill
SLOW_DISPATCHES, SLOW_S = 8, 3.0  # one per worker thread; well inside the bot's 10 s timeout
TARGETS = ["test_kvfp4_quant_dequant.py", "tests/a/test_dup.py", "test_cpu_only.py"]  # one tier each


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int, tmp_path: Path, api_url: str, repo_root: Path) -> tuple[subprocess.Popen[str], int]:
    """The server process and its worker process's pid."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tools.rerun", "serve", "--port", str(port), "--secret-file", str(tmp_path / "secret"),
         "--state-dir", str(tmp_path / "state"), "--token-file", str(tmp_path / "token"), "--api-url", api_url,
         "--repo-root", str(repo_root), "--repo", REPO, "--workers", "8", "--lookup-wait", "1",
         "--writes-per-minute", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line
    return proc, int(line.rsplit("worker process ", 1)[1].split(")")[0].split(",")[0])


def _deliveries() -> list[tuple[str, int, bytes]]:
    """(delivery id, comment id, body): 160 comments, 20 replays, 20 redeliveries, shuffled."""
    items = []
    for i in range(COMMENTS):
        payload = comment_payload(f"/rerun-test {TARGETS[i % 3]}", number=1 + i % PULLS, comment_id=800_000 + i)
        items.append((f"delivery-{i}", 800_000 + i, json.dumps(payload).encode()))
    rng = random.Random(11)
    originals = list(items)
    items += rng.sample(originals, REPLAYS)
    items += [(f"redelivery-{i}", cid, body) for i, (_, cid, body) in enumerate(rng.sample(originals, REDELIVERIES))]
    rng.shuffle(items)
    return items


def _send(url: str, item: tuple[str, int, bytes]) -> int | None:
    delivery, _, body = item
    try:
        return requests.post(url, data=body, timeout=10, headers={
            "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": signature(SECRET, body)}).status_code
    except requests.RequestException:
        return None  # the server was killed under this request


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_kill_9_mid_burst_then_restart_handles_every_acked_delivery_once(
        fake: FakeGitHub, api_url: str, repo_root: Path, tmp_path: Path) -> None:
    for number in range(1, PULLS + 1):
        fake.add_pull(number, HEAD_SHA)
    # Once the kill is due, dispatches turn slow (applied at once, answered SLOW_S later): their
    # workers sit between the claim and the table when the kill lands, longer than the worker
    # process takes to die after it, however loaded the machine. The restarted server must find
    # those runs, not send them again. (A 0.1 s delay for every dispatch lost that race once.)
    (tmp_path / "secret").write_bytes(SECRET)
    (tmp_path / "token").write_text(TOKEN)
    items = _deliveries()
    port = _free_port()
    url = f"http://127.0.0.1:{port}/"
    proc, child = _serve(port, tmp_path, api_url, repo_root)
    acked: Counter[str] = Counter()
    lock, killed = threading.Lock(), threading.Event()

    def claimed_now() -> bool:
        return any(find_marker(c.body, _comment_of(c.body)).state == "claimed" for c in fake.bot_replies())

    def killer() -> None:
        """kill -9 once KILL_AFTER deliveries were acknowledged and a slow dispatch's comment is
        mid-way."""
        deadline, slow_from = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            if slow_from is None:
                with lock:
                    if sum(acked.values()) >= KILL_AFTER:
                        slow_from = len(fake.dispatches)
                        fake.fail("POST", r"/dispatches$", *[Scripted(route=True, delay=SLOW_S)] * SLOW_DISPATCHES)
            elif len(fake.dispatches) > slow_from and claimed_now():
                os.kill(proc.pid, signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.005)

    def send_before_kill(item: tuple[str, int, bytes]) -> tuple[tuple[str, int, bytes], int | None]:
        if killed.is_set():
            return item, None
        status = _send(url, item)
        with lock:
            if status == 202:
                acked[item[0]] += 1
        return item, status

    try:
        watcher = threading.Thread(target=killer)
        watcher.start()
        with ThreadPoolExecutor(max_workers=16) as pool:
            first = list(pool.map(send_before_kill, items))
        watcher.join(70)
        proc.wait(10)
        assert killed.is_set() and proc.returncode == -signal.SIGKILL
        # The worker process dies with the server: no orphan keeps handling next to the restarted one.
        assert _wait_for(lambda: not _alive(child), 10), f"worker process {child} outlived the server"
        acked_before = set(acked)
        unfinished = _states(tmp_path).get("accepted", 0)
        assert unfinished > 0, "the kill landed after everything was handled; the test proved nothing"
        claimed = [c for c in fake.bot_replies() if find_marker(c.body, _comment_of(c.body)).state == "claimed"]
        assert claimed, "no comment was caught between its claim and its table; the resume path went untested"

        proc, child = _serve(port, tmp_path, api_url, repo_root)
        # GitHub's side of the story: what was not acknowledged is delivered again (same id).
        rest = [item for item, status in first if status is None or status >= 500]
        with ThreadPoolExecutor(max_workers=16) as pool:
            second = list(pool.map(lambda item: (item, _send(url, item)), rest))
        assert all(status in (200, 202) for _, status in second), Counter(s for _, s in second)
        # Replays of deliveries acknowledged before the kill are duplicates for the restarted server.
        again = [item for item in items if item[0] in acked_before][:20]
        assert {_send(url, item) for item in again} == {200}

        comment_ids = {cid for _, cid, _ in items}
        assert _wait_for(lambda: _states(tmp_path) == {"done": COMMENTS + REDELIVERIES}, 60), _states(tmp_path)
    finally:
        proc.kill()
        proc.wait(10)

    dispatched = Counter(int(d["inputs"]["comment_id"]) for d in fake.dispatches)
    assert set(dispatched) == comment_ids  # every comment ran, the acknowledged ones included
    assert set(dispatched.values()) == {1}, {c: n for c, n in dispatched.items() if n > 1}
    markers = [find_marker(c.body, _comment_of(c.body)) for c in fake.bot_replies()]
    assert sorted(m.comment_id for m in markers) == sorted(comment_ids)  # one reply per comment
    assert {m.state for m in markers} == {"done"}


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its exit status is left


def _comment_of(body: str) -> int:
    return int(body.split("comment=", 1)[1].split(" ", 1)[0])


def _states(tmp_path: Path) -> dict[str, int]:
    with sqlite3.connect(tmp_path / "state" / JOURNAL_FILE) as db:
        return dict(db.execute("SELECT state, COUNT(*) FROM deliveries GROUP BY state").fetchall())


def test_a_dead_worker_process_takes_the_server_down(api_url: str, repo_root: Path, tmp_path: Path) -> None:
    """Acknowledging deliveries nobody handles would only grow the journal: exit, let a supervisor
    restart it, and the restart replays them."""
    (tmp_path / "secret").write_bytes(SECRET)
    (tmp_path / "token").write_text(TOKEN)
    proc, child = _serve(_free_port(), tmp_path, api_url, repo_root)
    try:
        os.kill(child, signal.SIGKILL)
        assert proc.wait(15) == 3
    finally:
        proc.kill()
        proc.wait(10)
