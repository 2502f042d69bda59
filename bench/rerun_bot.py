"""Webhook load on the /rerun-test bot, with ``serve`` as a real process: ack latency, end to end, restart.

``python -m bench rerun_bot [--quick]`` starts the fake GitHub (``python -m tools.rerun.fake_server``)
and ``python -m tools.rerun serve`` (8 workers, journal in a temporary ``--state-dir``) as separate
processes on 127.0.0.1, then, from 16 concurrent senders (one keep-alive connection each):

1. **baseline**: N ``GET /healthz`` to the same server (HTTP parsing and threads, nothing else);
2. **burst**: N signed ``issue_comment`` deliveries: webhook ack (request sent -> 202 read) and end
   to end (request sent -> the reply reaches its final state at the fake GitHub; about 10 GitHub
   calls per delivery: list comments, eyes, permission, PR, claim, dispatch, runs list, edit, rocket);
3. **restart**: N more deliveries; ``serve`` is killed with SIGKILL after N/2 acknowledgements and
   started again on the same journal; the senders re-send what got no 202 (as GitHub's redelivery
   would). Checked, not timed: every delivery that got a 202 is handled, and every comment is
   dispatched exactly once. Reported: ack latency after the restart, and the time from the restart
   until the last delivery is handled.

The temporary checkout ``serve`` reads (``--repo-root``) holds the registry and a stub of every
test file it names: the bot dispatches only registry keys that name a file in its tree
(`ci.registry.registered_file_problem`), and answers "not found" otherwise. The run fails (exit 1,
a line saying what went wrong, no table) unless every delivery of both cases is acknowledged and
every comment dispatched exactly once; so ``--quick`` doubles as a test of the bot under load.

Ratios are p50 / baseline p50 of the same run. The three processes share this machine's cores, so
the numbers are for comparing runs on one machine, not a capacity figure.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from bench.table import format_table, percentiles
from ci.registry import parse_registry
from tools.rerun.replies import MARKER_RE, find_marker
from tools.rerun.server import signature

SECRET = b"bench-secret"
TOKEN = "bench-token"
SENDERS = 16
WORKERS = 8
PULLS = 50
ROOT = Path(__file__).resolve().parents[1]
REGISTRY = """\
version: 1
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  gpu_b200: {description: b200, runner_labels: [self-hosted, gpu-b200], gpu_count: 1, arch: sm_100}
tests:
  tests/quant/test_kvfp4_quant_dequant.py: {tiers: [cpu, gpu_b200], est_time: 30, owner: quant, status: active}
"""
COMMENT = "/rerun-test test_kvfp4_quant_dequant.py"  # every delivery's comment: a file REGISTRY registers


def _payload(comment_id: int) -> dict[str, Any]:
    number = 1 + comment_id % PULLS
    return {
        "action": "created",
        "issue": {"number": number, "pull_request": {"url": f"https://x/pulls/{number}"}},
        "comment": {"id": comment_id, "body": COMMENT,
                    "user": {"login": "maintainer", "type": "User"}},
        "repository": {"full_name": "acme/llm-serving", "default_branch": "main"},
    }


def write_checkout(root: Path) -> list[str]:
    """Write `REGISTRY` as ``root/registry.yaml`` and a one-test stub at every path it registers
    (the bot resolves a target only to a registered file present in its checkout); returns those
    paths, sorted."""
    registry, problems = parse_registry(REGISTRY)
    if registry is None:
        raise ValueError(f"bench/rerun_bot.py: REGISTRY does not parse: {problems}")
    (root / "registry.yaml").write_text(REGISTRY, encoding="utf-8")
    for rel in registry.tests:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("def test_ok():\n    assert True\n", encoding="utf-8")
    return sorted(registry.tests)


def _comment_id(reply: dict[str, Any]) -> int:
    return int(reply["body"].split("comment=")[1].split(" ")[0])


def dispatch_counts(state: dict[str, Any]) -> Counter[int]:
    """How many times each comment id was dispatched, in the fake GitHub's ``state``."""
    return Counter(int(d["inputs"]["comment_id"]) for d in state["dispatches"])


def dispatch_problem(state: dict[str, Any], expected: set[int]) -> str | None:
    """None when every comment in ``expected`` was dispatched exactly once and no other comment
    was (in the fake GitHub's ``state``); otherwise what is wrong, quoting the start of the bot's
    reply to a comment it never dispatched (its own words for why; marker dropped, spaces collapsed)."""
    dispatched = dispatch_counts(state)
    twice = sorted(cid for cid in expected if dispatched[cid] > 1)
    missing = sorted(cid for cid in expected if dispatched[cid] == 0)
    unexpected = sorted(set(dispatched) - expected)
    if not twice and not missing and not unexpected:
        return None
    why = next((" ".join(MARKER_RE.sub("", r["body"]).split())[:300] for r in state["replies"]
                if _comment_id(r) in missing), "none")
    return (f"{len(expected) - len(missing) - len(twice)} of {len(expected)} comments dispatched exactly once, "
            f"{len(twice)} more than once, {len(missing)} never, {len(unexpected)} dispatched though never sent "
            f"(the bot's reply to one of those: {why!r})")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Senders:
    """16 threads, each with its own keep-alive connection to the bot (reconnecting after errors)."""

    def __init__(self, port: int):
        self.port = port
        self.local = threading.local()

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int | None, float]:
        """(status or None if the connection failed, seconds from sending to the answer read)."""
        conn = getattr(self.local, "conn", None) or http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        self.local.conn = conn
        start = time.perf_counter()
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            response.read()
            return response.status, time.perf_counter() - start
        except (OSError, http.client.HTTPException):
            conn.close()
            self.local.conn = None
            return None, time.perf_counter() - start

    def map(self, fn: Callable[[int], Any], items: range | list[int]) -> list[Any]:
        with ThreadPoolExecutor(max_workers=SENDERS) as pool:
            return list(pool.map(fn, items))


class _Stack:
    """The fake GitHub and ``serve`` as processes, with helpers to deliver and to wait."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        (tmp / "repo").mkdir()
        write_checkout(tmp / "repo")
        (tmp / "secret").write_bytes(SECRET)
        (tmp / "token").write_text(TOKEN, encoding="utf-8")
        workflow = (ROOT / ".github" / "workflows" / "rerun-test-dispatch.yml").read_text(encoding="utf-8")
        run_name = next(line.split(":", 1)[1].strip().strip('"') for line in workflow.splitlines()
                        if line.startswith("run-name:"))
        setup = {"token": TOKEN, "users": {"maintainer": "write"}, "run_name_template": run_name,
                 "pulls": {str(n): "f" * 40 for n in range(1, PULLS + 1)}}
        (tmp / "setup.json").write_text(json.dumps(setup), encoding="utf-8")
        self.fake = subprocess.Popen([sys.executable, "-m", "tools.rerun.fake_server", "--setup",
                                      str(tmp / "setup.json"), "--port-file", str(tmp / "fake.port")], cwd=ROOT)
        deadline = time.monotonic() + 30
        while not (tmp / "fake.port").exists():
            if time.monotonic() > deadline or self.fake.poll() is not None:
                raise RuntimeError("the fake GitHub did not start")
            time.sleep(0.05)
        self.fake_port = int((tmp / "fake.port").read_text())
        self.port = _free_port()
        self.serve: subprocess.Popen[str] | None = None
        self.sent_at: dict[int, float] = {}

    def start_serve(self) -> None:
        self.serve = subprocess.Popen(
            [sys.executable, "-m", "tools.rerun", "serve", "--port", str(self.port), "--workers", str(WORKERS),
             "--secret-file", str(self.tmp / "secret"), "--state-dir", str(self.tmp / "state"),
             "--token-file", str(self.tmp / "token"), "--api-url", f"http://127.0.0.1:{self.fake_port}",
             "--repo-root", str(self.tmp / "repo"), "--repo", "acme/llm-serving", "--lookup-wait", "2",
             "--writes-per-minute", "0"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert self.serve.stdout is not None
        if "listening on" not in self.serve.stdout.readline():
            raise RuntimeError("serve did not start")

    def kill_serve(self) -> None:
        if self.serve is not None and self.serve.poll() is None:
            os.kill(self.serve.pid, signal.SIGKILL)
            self.serve.wait(10)

    def state(self) -> dict[str, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.fake_port, timeout=30)
        conn.request("GET", "/_fake/state")
        return json.loads(conn.getresponse().read())

    def deliver(self, senders: _Senders, comment_id: int, delivery: str) -> tuple[int | None, float]:
        body = json.dumps(_payload(comment_id)).encode()
        self.sent_at.setdefault(comment_id, time.monotonic())
        return senders.request("POST", "/", body, {
            "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": signature(SECRET, body), "Content-Type": "application/json"})

    def wait_done(self, comment_ids: set[int], timeout: float = 300) -> dict[str, Any]:
        """Poll the fake until every comment's reply is final; returns the last state."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state()
            done = {cid for r in state["replies"] for cid in [_comment_id(r)]
                    if (m := find_marker(r["body"], cid)) is not None and m.state == "done"}
            if comment_ids <= done or time.monotonic() > deadline:
                return state
            time.sleep(0.2)

    def close(self) -> None:
        self.kill_serve()
        self.fake.terminate()
        self.fake.wait(10)


def _row(name: str, samples: list[float], base: float) -> list[str]:
    p = percentiles(samples)
    return [name, f"{p[50] * 1e3:.2f}", f"{p[90] * 1e3:.2f}", f"{p[99] * 1e3:.2f}", f"{p[50] / base:.1f}x"]


def main(argv: list[str]) -> int:
    count = 200 if "--quick" in argv else 500
    with tempfile.TemporaryDirectory() as tmp:
        stack = _Stack(Path(tmp))
        try:
            return _run(stack, count)
        finally:
            stack.close()


def _run(stack: _Stack, count: int) -> int:
    stack.start_serve()
    senders = _Senders(stack.port)
    senders.map(lambda i: senders.request("GET", "/healthz"), range(SENDERS * 2))  # warm up
    baseline = [t for status, t in senders.map(lambda i: senders.request("GET", "/healthz"), range(count))
                if status == 200]

    burst = set(range(1_000_000, 1_000_000 + count))
    results = senders.map(lambda cid: stack.deliver(senders, cid, f"burst-{cid}"), sorted(burst))
    acks = [t for status, t in results if status == 202]
    state = stack.wait_done(burst)
    reply_at = {_comment_id(r): r["at"] for r in state["replies"]}
    end_to_end = [reply_at[cid] - stack.sent_at[cid] for cid in burst if cid in reply_at]
    if len(acks) != count or len(end_to_end) != count:
        print(f"rerun_bot: burst: {len(acks)} of {count} acknowledged, {len(end_to_end)} replies")
        return 1
    if (problem := dispatch_problem(state, burst)) is not None:
        print(f"rerun_bot: burst: {problem}")
        return 1
    if state.get("contract_problems"):  # the fake broke GitHub's API description (tools.rerun.fake_openapi)
        print("rerun_bot: burst: the fake GitHub broke GitHub's API description:", *state["contract_problems"][:5])
        return 1

    restart = sorted(range(2_000_000, 2_000_000 + count))
    acked: set[int] = set()
    lock, killed = threading.Lock(), threading.Event()

    def deliver_until_killed(cid: int) -> tuple[int | None, float]:
        status, seconds = stack.deliver(senders, cid, f"restart-{cid}")
        with lock:
            if status == 202:
                acked.add(cid)
                if len(acked) >= count // 2 and not killed.is_set():
                    killed.set()
                    stack.kill_serve()
        return status, seconds

    first = senders.map(deliver_until_killed, restart)
    stack.kill_serve()
    restarted = time.monotonic()
    stack.start_serve()
    missing = [cid for cid, (status, _) in zip(restart, first) if status != 202]
    again = senders.map(lambda cid: stack.deliver(senders, cid, f"restart-{cid}"), missing)
    after_acks = [t for status, t in again if status in (200, 202)]
    state = stack.wait_done(set(restart))
    recovered = time.monotonic() - restarted
    if (problem := dispatch_problem(state, burst | set(restart))) is not None:
        print(f"rerun_bot: restart: {problem}; {len(acked)} acknowledged before the kill")
        return 1

    once = sum(n == 1 for n in dispatch_counts(state).values())
    base = percentiles(baseline)[50]
    rows = [_row("GET /healthz (baseline)", baseline, base), _row("webhook ack (202)", acks, base),
            _row("end to end (delivery -> final reply)", end_to_end, base),
            _row("ack after kill -9 + restart (re-sent)", after_acks, base)]
    print(format_table(["measure", "p50 ms", "p90 ms", "p99 ms", "p50 / baseline"], rows,
                       title=f"rerun bot: serve as a process, {count} signed deliveries per case, "
                             f"{SENDERS} senders, {WORKERS} workers, SQLite journal (WAL)"))
    print(f"restart: killed after {len(acked)} acknowledgements; {len(missing)} re-sent; every acknowledged "
          f"delivery handled, {once} comments dispatched exactly once; all handled "
          f"{recovered:.2f}s after the kill; {state['requests']} GitHub API calls in all")
    return 0
