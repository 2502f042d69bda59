"""A burst of signed deliveries, sent concurrently, each handled exactly once."""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import requests

from tools.rerun.fake_github import FakeGitHub
from tools.rerun.server import ServerConfig, WebhookApp, running, signature

from rerun_support import HEAD_SHA, comment_payload

SECRET = b"load-secret"
UNIQUE_COMMENTS = 160
REPLAYS = 40          # the same delivery id again
REDELIVERIES = 20     # a new delivery id for an already-sent comment
PULLS = 20


def test_burst_of_signed_deliveries_handled_exactly_once(fake: FakeGitHub, make_handler) -> None:
    for number in range(1, PULLS + 1):
        fake.add_pull(number, HEAD_SHA)
    targets = ["test_kvfp4_quant_dequant.py", "tests/a/test_dup.py", "test_cpu_only.py"]
    deliveries: list[tuple[str, bytes]] = []
    for i in range(UNIQUE_COMMENTS):
        payload = comment_payload(f"/rerun-test {targets[i % 3]}", number=1 + i % PULLS, comment_id=900_000 + i)
        deliveries.append((f"delivery-{i}", json.dumps(payload).encode()))
    rng = random.Random(7)
    originals = list(deliveries)
    deliveries += rng.sample(originals, REPLAYS)
    deliveries += [(f"redelivery-{i}", body) for i, (_, body) in enumerate(rng.sample(originals, REDELIVERIES))]
    rng.shuffle(deliveries)
    assert len(deliveries) >= 200

    app = WebhookApp(ServerConfig(secret=SECRET, workers=8), make_handler)
    local = threading.local()

    def send(item: tuple[str, bytes]) -> tuple[str, int]:
        delivery, body = item
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        response = session.post(url, data=body, timeout=30, headers={
            "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": signature(SECRET, body), "Content-Type": "application/json"})
        return delivery, response.status_code

    with running(app) as server:
        url = server.url + "/webhook"
        with ThreadPoolExecutor(max_workers=16) as pool:
            results = list(pool.map(send, deliveries))
        app.wait_idle()

    by_delivery: dict[str, Counter[int]] = {}
    for delivery, status in results:
        by_delivery.setdefault(delivery, Counter())[status] += 1
    # Every delivery id was accepted exactly once; its replays were answered as duplicates.
    assert all(codes[202] == 1 and set(codes) <= {200, 202} for codes in by_delivery.values()), by_delivery
    assert app.stats.accepted == UNIQUE_COMMENTS + REDELIVERIES
    assert app.stats.duplicate_deliveries == REPLAYS
    assert app.stats.errors == 0
    assert app.stats.handled + app.stats.skipped_comments == UNIQUE_COMMENTS + REDELIVERIES

    # Exactly one dispatch (these targets each have one default tier) and one reply per comment.
    dispatched = Counter(d["inputs"]["comment_id"] for d in fake.dispatches)
    assert len(dispatched) == UNIQUE_COMMENTS and set(dispatched.values()) == {1}
    replies = fake.bot_replies()
    assert len(replies) == UNIQUE_COMMENTS
    assert {d["inputs"]["tier"] for d in fake.dispatches} == {"gpu_b200", "gpu_h100", "cpu"}
