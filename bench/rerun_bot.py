"""Webhook load on the /rerun-test bot: ack latency, end-to-end latency, throughput.

``python -m bench rerun_bot [--quick]``: starts the fake GitHub and the webhook server on
127.0.0.1 (threads of this process), sends N signed ``issue_comment`` deliveries (500; 100 with
``--quick``) from C concurrent senders, and reports p50/p90/p99 of

* the webhook acknowledgement (request sent -> 202 received),
* end-to-end handling (request sent -> the reply comment arrives at the fake GitHub; each
  delivery makes 7 GitHub calls: list comments, eyes, permission, PR head, dispatch, reply, rocket),
* handling in a worker (dequeued -> reply posted): end-to-end minus queueing,
* the baseline: one bare ``GET`` to the fake GitHub's permission endpoint, measured in the same run
  with the same concurrency. Ratios are p50 / baseline p50.

Everything shares one interpreter (and its GIL), so absolute numbers are a lower bound on what a
separate server process would do; the ratios are what to compare between runs.
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from bench.table import format_table, percentiles
from tools.rerun.fake_github import FakeGitHub
from tools.rerun.fake_server import serve
from tools.rerun.github import GitHubClient
from tools.rerun.handler import BotConfig, Handler
from tools.rerun.replies import MARKER_RE
from tools.rerun.server import ServerConfig, WebhookApp, running, signature

SECRET = b"bench-secret"
TOKEN = "bench-token"
SENDERS = 16
WORKERS = 8
PULLS = 50
REGISTRY = """\
version: 1
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  gpu_b200: {description: b200, runner_labels: [self-hosted, gpu-b200], gpu_count: 1, arch: sm_100}
tests:
  tests/quant/test_kvfp4_quant_dequant.py: {tiers: [cpu, gpu_b200], est_time: 30, owner: quant, status: active}
"""


def _payload(i: int) -> dict:
    number = 1 + i % PULLS
    return {
        "action": "created",
        "issue": {"number": number, "pull_request": {"url": f"https://x/pulls/{number}"}},
        "comment": {"id": 1_000_000 + i, "body": "/rerun-test test_kvfp4_quant_dequant.py",
                    "user": {"login": "maintainer", "type": "User"}},
        "repository": {"full_name": "acme/llm-serving", "default_branch": "main"},
    }


def _concurrently(count: int, fn) -> list:
    local = threading.local()

    def call(i: int):
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        return fn(session, i)

    with ThreadPoolExecutor(max_workers=SENDERS) as pool:
        return list(pool.map(call, range(count)))


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    count = 100 if quick else 500
    fake = FakeGitHub(token=TOKEN)
    fake.add_user("maintainer", "write")
    for number in range(1, PULLS + 1):
        fake.add_pull(number, "f" * 40)

    with tempfile.TemporaryDirectory() as tmp, serve(fake) as api:
        root = Path(tmp)
        (root / "registry.yaml").write_text(REGISTRY, encoding="utf-8")
        headers = {"Authorization": f"Bearer {TOKEN}"}

        def bare(session: requests.Session, _: int) -> float:
            start = time.perf_counter()
            response = session.get(f"{api}/repos/acme/llm-serving/collaborators/maintainer/permission",
                                   headers=headers, timeout=30)
            elapsed = time.perf_counter() - start
            if response.status_code != 200:
                raise RuntimeError(f"baseline request failed: HTTP {response.status_code}")
            return elapsed

        _concurrently(SENDERS, bare)  # warm up connections and threads
        baseline = _concurrently(count, bare)
        fake.requests.clear()

        config = BotConfig(repo_root=root)
        handling: list[float] = []

        class TimedHandler(Handler):
            def handle(self, payload: dict):  # type: ignore[override]
                start = time.monotonic()
                try:
                    return super().handle(payload)
                finally:
                    handling.append(time.monotonic() - start)

        app = WebhookApp(ServerConfig(secret=SECRET, workers=WORKERS, queue_size=count + 1),
                         lambda: TimedHandler(GitHubClient(api, TOKEN), config))
        bodies = [json.dumps(_payload(i)).encode() for i in range(count)]
        sent_at: dict[int, float] = {}
        with running(app) as server:
            def deliver(session: requests.Session, i: int) -> float:
                body = bodies[i]
                start = time.monotonic()
                sent_at[1_000_000 + i] = start
                response = session.post(server.url, data=body, timeout=30, headers={
                    "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": f"bench-{i}",
                    "X-Hub-Signature-256": signature(SECRET, body)})
                if response.status_code != 202:
                    raise RuntimeError(f"delivery {i}: HTTP {response.status_code} {response.text}")
                return time.monotonic() - start

            began = time.monotonic()
            acks = _concurrently(count, deliver)
            app.wait_idle()
            finished = time.monotonic()

    replies = fake.bot_replies()
    end_to_end = []
    for reply in replies:
        match = MARKER_RE.search(reply.body)
        if match:
            end_to_end.append(reply.at - sent_at[int(match[1])])
    if len(end_to_end) != count or len(fake.dispatches) != count or app.stats.errors:
        print(f"rerun_bot: expected {count} replies and dispatches, got {len(end_to_end)} replies, "
              f"{len(fake.dispatches)} dispatches, {app.stats.errors} errors")
        return 1

    base = percentiles(baseline)
    rows = []
    for name, samples in (("bare GET to fake GitHub (baseline)", baseline), ("webhook ack (202)", acks),
                          ("handling in a worker (7 GitHub calls)", handling),
                          ("end-to-end (delivery -> reply posted)", end_to_end)):
        p = percentiles(samples)
        rows.append([name, f"{p[50] * 1e3:.2f}", f"{p[90] * 1e3:.2f}", f"{p[99] * 1e3:.2f}",
                     f"{p[50] / base[50]:.1f}x"])
    print(format_table(["measure", "p50 ms", "p90 ms", "p99 ms", "p50 / baseline"], rows,
                       title=f"rerun bot: {count} signed deliveries, {SENDERS} senders, {WORKERS} workers "
                             f"(7 GitHub calls each)"))
    elapsed = finished - began
    print(f"throughput: {count / elapsed:.0f} deliveries/s handled end to end "
          f"({count} in {elapsed:.2f}s); {len(fake.requests)} GitHub API calls")
    return 0
