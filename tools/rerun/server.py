"""Webhook server for self-hosted setups: verify, acknowledge fast, handle in background workers.

HTTP contract (``POST`` any path; ``GET /healthz`` answers 200):

* 411 without ``Content-Length``; 413 when it exceeds ``max_body`` (checked before reading, and the
  read never goes past it); 401 when ``X-Hub-Signature-256`` is missing or is not
  ``sha256=HMAC-SHA256(secret, raw body)``; 400 on malformed JSON or a missing
  ``X-GitHub-Delivery``;
* ``ping`` -> 200; other events except ``issue_comment`` -> 200 ``ignored``;
* a delivery id seen before (bounded LRU) -> 200 ``duplicate`` and nothing is queued;
* otherwise the payload is queued and the answer is 202; a full queue answers 503 with
  ``Retry-After`` (GitHub redelivers), never drops silently.

Workers take a per-comment-id lock, skip comments they have already handled (bounded LRU), and
call the handler (which also checks the reply marker on GitHub). Any exception is logged and the
worker goes on; the comment is then not marked handled, so a redelivery can retry it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator, Protocol

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # 1 MiB; GitHub caps webhook payloads at 25 MB but comments are far smaller


class EventHandler(Protocol):
    def handle(self, payload: dict[str, Any]) -> Any: ...


def signature(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """Constant-time check of an ``X-Hub-Signature-256`` header against the raw body."""
    if not header:
        return False
    return hmac.compare_digest(signature(secret, body).encode(), header.strip().encode())


class LRUSet:
    """A thread-safe set that remembers at most ``capacity`` keys (oldest forgotten first)."""

    def __init__(self, capacity: int):
        if capacity < 1:
            raise ValueError(f"LRU capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[Any, None] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, key: Any) -> bool:
        """Add ``key``; False if it was already present (then it becomes the newest)."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return False
            self._items[key] = None
            if len(self._items) > self.capacity:
                self._items.popitem(last=False)
            return True

    def discard(self, key: Any) -> None:
        with self._lock:
            self._items.pop(key, None)

    def __contains__(self, key: Any) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


class KeyedLocks:
    """One lock per key, created on demand and dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[Any, tuple[threading.Lock, int]] = {}

    @contextmanager
    def hold(self, key: Any) -> Iterator[None]:
        with self._guard:
            lock, users = self._locks.get(key, (threading.Lock(), 0))
            self._locks[key] = (lock, users + 1)
        try:
            with lock:
                yield
        finally:
            with self._guard:
                lock, users = self._locks[key]
                if users == 1:
                    del self._locks[key]
                else:
                    self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        with self._guard:
            return len(self._locks)


@dataclass(frozen=True)
class ServerConfig:
    """``max_body`` in bytes; ``read_timeout`` seconds per socket read."""

    secret: bytes
    max_body: int = MAX_BODY
    workers: int = 4
    queue_size: int = 1024
    delivery_cache: int = 10_000
    read_timeout: float = 10.0

    def __post_init__(self) -> None:
        if not self.secret:
            raise ValueError("webhook secret must not be empty")
        for name in ("max_body", "workers", "queue_size", "delivery_cache"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class Stats:
    accepted: int = 0
    duplicate_deliveries: int = 0
    skipped_comments: int = 0
    handled: int = 0
    errors: int = 0


@dataclass(frozen=True)
class _Job:
    delivery: str
    payload: dict[str, Any]
    received: float


class WebhookApp:
    """Queue, workers and de-duplication. ``make_handler`` is called once per worker thread (each
    gets its own GitHub client and HTTP session)."""

    def __init__(self, config: ServerConfig, make_handler: Callable[[], EventHandler],
                 on_done: Callable[[str, Any], None] | None = None):
        self.config = config
        self.make_handler = make_handler
        self.on_done = on_done
        self.queue: queue.Queue[_Job | None] = queue.Queue(maxsize=config.queue_size)
        self.deliveries = LRUSet(config.delivery_cache)
        self.done_comments = LRUSet(config.delivery_cache)
        self.comment_locks = KeyedLocks()
        self.stats = Stats()
        self._stats_lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.config.workers):
            thread = threading.Thread(target=self._work, name=f"rerun-worker-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 10.0) -> None:
        for _ in self._threads:
            self.queue.put(None)
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    def wait_idle(self) -> None:
        """Block until every queued job has been processed."""
        self.queue.join()

    def _count(self, name: str) -> None:
        with self._stats_lock:
            setattr(self.stats, name, getattr(self.stats, name) + 1)

    def submit(self, delivery: str, payload: dict[str, Any]) -> str:
        """Queue one issue_comment delivery: ``accepted``, ``duplicate`` or ``busy``."""
        if not self.deliveries.add(delivery):
            self._count("duplicate_deliveries")
            return "duplicate"
        try:
            self.queue.put_nowait(_Job(delivery, payload, time.monotonic()))
        except queue.Full:
            self.deliveries.discard(delivery)  # let GitHub's redelivery through later
            return "busy"
        self._count("accepted")
        return "accepted"

    def _work(self) -> None:
        handler: EventHandler | None = None
        while True:
            job = self.queue.get()
            try:
                if job is None:
                    return
                if handler is None:
                    handler = self.make_handler()
                self._process(handler, job)
            except Exception:  # the worker must survive anything a handler does
                self._count("errors")
                log.exception("delivery %s failed", job.delivery if job else "?")
                if job is not None:
                    self.deliveries.discard(job.delivery)  # GitHub's redelivery (same id) may retry it
            finally:
                self.queue.task_done()

    def _process(self, handler: EventHandler, job: _Job) -> None:
        comment = job.payload.get("comment")
        comment_id = comment.get("id") if isinstance(comment, dict) else None
        if comment_id is None:
            result = handler.handle(job.payload)
        else:
            with self.comment_locks.hold(comment_id):
                if comment_id in self.done_comments:
                    self._count("skipped_comments")
                    return
                result = handler.handle(job.payload)
                self.done_comments.add(comment_id)
        self._count("handled")
        log.info("delivery %s: %s", job.delivery, getattr(result, "status", result))
        if self.on_done is not None:
            self.on_done(job.delivery, result)


class _RequestHandler(BaseHTTPRequestHandler):
    server: "WebhookServer"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s " + format, self.address_string(), *args)

    def _answer(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        body = json.dumps({"message": message}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        if self.path == "/healthz":
            self._answer(200, "ok")
        else:
            self._answer(404, "not found")

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        app = self.server.app
        limit = app.config.max_body
        length_header = self.headers.get("Content-Length")
        if length_header is None or self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            return self._answer(411, "Content-Length required")
        try:
            length = int(length_header)
            if length < 0:
                raise ValueError
        except ValueError:
            self.close_connection = True
            return self._answer(400, f"bad Content-Length {length_header[:40]!r}")
        if length > limit:
            self.close_connection = True  # the body stays unread
            return self._answer(413, f"body of {length} bytes exceeds the {limit}-byte limit")
        body = self._read(length)
        if body is None:
            self.close_connection = True
            return self._answer(400, "body shorter than Content-Length")
        if not verify_signature(app.config.secret, body, self.headers.get("X-Hub-Signature-256")):
            return self._answer(401, "missing or invalid X-Hub-Signature-256")
        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return self._answer(400, f"malformed JSON: {exc}")
        event = self.headers.get("X-GitHub-Event", "")
        if event == "ping":
            return self._answer(200, "pong")
        if event != "issue_comment":
            return self._answer(200, f"ignored event {event[:40]!r}")
        delivery = self.headers.get("X-GitHub-Delivery")
        if not delivery or not isinstance(payload, dict):
            return self._answer(400, "missing X-GitHub-Delivery" if not delivery else "payload is not an object")
        verdict = app.submit(delivery, payload)
        if verdict == "busy":
            return self._answer(503, "queue full, retry later", {"Retry-After": "5"})
        return self._answer(200 if verdict == "duplicate" else 202, verdict)

    def _read(self, length: int) -> bytes | None:
        """Exactly ``length`` bytes (never more than the limit, which ``length`` is within)."""
        chunks, remaining = [], length
        while remaining > 0:
            chunk = self.rfile.read(min(remaining, 65536))
            if not chunk:
                return None
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)


class WebhookServer(ThreadingHTTPServer):
    """``ThreadingHTTPServer`` bound to one `WebhookApp`."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256  # listen backlog; the stdlib default of 5 resets bursts

    def __init__(self, address: tuple[str, int], app: WebhookApp):
        self.app = app
        handler = type("_Bound", (_RequestHandler,), {"timeout": app.config.read_timeout})
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that stalls past read_timeout or drops the connection: log, keep serving.
        log.warning("connection from %s failed", client_address, exc_info=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


@contextmanager
def running(app: WebhookApp, host: str = "127.0.0.1", port: int = 0) -> Iterator[WebhookServer]:
    """Start the app's workers and an HTTP server in background threads; stop both on exit."""
    app.start()
    server = WebhookServer((host, port), app)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="rerun-http", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        app.stop()
