"""Webhook server for self-hosted setups: verify, journal, acknowledge fast, handle in background workers.

HTTP contract (``POST`` any path; ``GET /healthz`` answers 200, or 503 naming the failure while
the journal cannot be written or acknowledged deliveries wait to be marked in it):

* 411 without ``Content-Length``; 413 when it exceeds ``max_body`` (checked before reading, and the
  read never goes past it); 401 when ``X-Hub-Signature-256`` is missing or is not
  ``sha256=HMAC-SHA256(secret, raw body)``; the body is JSON or GitHub's form encoding
  (``payload=<JSON>``, `tools.rerun.webhook_body`), another Content-Type 415 naming the webhook
  setting; 400 on malformed JSON or form data or a missing ``X-GitHub-Delivery``. The journal keeps
  the JSON document, whichever encoding brought it;
* ``ping`` -> 200; other events except ``issue_comment`` and ``workflow_run`` (a dispatched run
  that ended, `tools.rerun.run_ended`) -> 200 ``ignored``;
* a delivery id already in the journal (`tools.rerun.journal`, kept across restarts) -> 200
  ``duplicate`` and nothing is queued, unless that delivery is unfinished and not queued (a
  redelivery of one that failed): then it is queued again;
* otherwise the delivery is **journalled, then** queued, and the answer is 202; a full queue
  answers 503 with ``Retry-After``, a journal that cannot be written 500. GitHub never retries a
  failed delivery by itself: ``python -m tools.rerun redeliver`` (`tools.rerun.redeliver`, run
  every few minutes) asks it to redeliver those.

Accepted deliveries go to a worker pool: `tools.rerun.workers.ThreadWorkers` (threads in this
process) or `tools.rerun.worker_process.ProcessWorkers` (the same threads in a child process, which
``serve`` uses: then acknowledging a delivery never waits for the workers' Python code under one
GIL). From the workers' reports the app marks each delivery handled in the journal, or leaves it
unfinished when the handler raised or reported GitHub failures; `WebhookApp.start` replays every
unfinished one.

A mark that cannot be written (a full disk) is kept in memory and written again every
``journal_retry`` seconds by a background thread (which also probes an unhealthy journal), so the
server recovers when the disk does, without a restart and without new traffic. Until then the
delivery is still unfinished on disk: a restart replays it, which the handler's claim makes
harmless.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

from tools.rerun.journal import ACCEPTED, Journal, JournalError
from tools.rerun.webhook_body import BodyError, decode
from tools.rerun.workers import ERROR, UNFINISHED, EventHandler, ThreadWorkers, WorkerPool

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20  # 1 MiB; GitHub caps webhook payloads at 25 MB but comments are far smaller


def signature(secret: bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """Constant-time check of an ``X-Hub-Signature-256`` header against the raw body."""
    if not header:
        return False
    return hmac.compare_digest(signature(secret, body).encode(), header.strip().encode())


@dataclass(frozen=True)
class ServerConfig:
    """``max_body`` in bytes; ``read_timeout`` seconds per socket read."""

    secret: bytes
    max_body: int = MAX_BODY
    workers: int = 4
    queue_size: int = 1024
    delivery_cache: int = 10_000
    read_timeout: float = 10.0
    journal_retry: float = 1.0  # seconds between attempts to write marks a full disk refused

    def __post_init__(self) -> None:
        if not self.secret:
            raise ValueError("webhook secret must not be empty")
        for name in ("max_body", "workers", "queue_size", "delivery_cache"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.journal_retry > 0:
            raise ValueError(f"journal_retry must be > 0 seconds, got {self.journal_retry}")


@dataclass
class Stats:
    accepted: int = 0
    duplicate_deliveries: int = 0
    replayed: int = 0
    handled: int = 0
    skipped_comments: int = 0
    unfinished: int = 0
    errors: int = 0
    journal_failures: int = 0


class WebhookApp:
    """Journal, de-duplication and the hand-off to a worker pool (`ThreadWorkers` in this process
    by default, built from ``make_handler``; ``pool`` may be a `ProcessWorkers`). Without a
    ``journal`` an in-memory one is used (nothing survives a restart then)."""

    def __init__(self, config: ServerConfig, make_handler: Callable[[], EventHandler] | None = None,
                 on_done: Callable[[str, Any], None] | None = None, journal: Journal | None = None,
                 pool: WorkerPool | None = None):
        self.config = config
        self.journal = journal or Journal(":memory:")
        if pool is None:
            if make_handler is None:
                raise ValueError("give make_handler (for in-process workers) or a worker pool")
            pool = ThreadWorkers(config.workers, make_handler, capacity=config.queue_size,
                                 done_cache=config.delivery_cache, on_done=on_done)
        self.pool = pool
        self.stats = Stats()
        self._cond = threading.Condition()
        self._in_flight: set[str] = set()  # handed to the pool and not reported back yet
        self._unmarked: dict[str, str | None] = {}  # reported, mark not written yet: delivery -> error
        self._stopping = threading.Event()
        self._retrier: threading.Thread | None = None

    def health(self) -> str | None:
        """None when healthy, else why not (the journal cannot be written, or marks are waiting)."""
        with self._cond:
            waiting = len(self._unmarked)
        if not self.journal.healthy:
            return f"the delivery journal cannot be written: {self.journal.last_error}"
        if waiting:
            return f"{waiting} handled deliveries are not marked in the journal yet"
        return None

    def start(self) -> None:
        """Start the pool, then hand it every unfinished delivery of the journal (a replay)."""
        self.pool.start(self._record)
        self._retrier = threading.Thread(target=self._retry_loop, name="journal-retry", daemon=True)
        self._retrier.start()
        for entry in self.journal.unfinished():
            try:
                payload = json.loads(entry.payload)
            except (UnicodeDecodeError, json.JSONDecodeError):  # cannot happen for what submit() stored
                log.error("journalled delivery %s is not JSON; marking it handled", entry.delivery)
                self.journal.finish(entry.delivery)
                continue
            with self._cond:
                if entry.delivery in self._in_flight:
                    continue
                self._in_flight.add(entry.delivery)
                self.stats.replayed += 1
            log.info("replaying unfinished delivery %s (attempt %d)", entry.delivery, entry.attempts + 1)
            self.pool.put(entry.delivery, payload, force=True)

    def stop(self, timeout: float = 10.0) -> None:
        self.pool.stop(timeout)
        self._stopping.set()
        if self._retrier is not None:
            self._retrier.join(timeout)

    def _retry_loop(self) -> None:
        while not self._stopping.wait(self.config.journal_retry):
            self.flush_marks()

    def flush_marks(self) -> bool:
        """Write the marks a failing journal refused (or probe it when none wait); True when
        nothing is left waiting and the journal can be written."""
        with self._cond:
            waiting = list(self._unmarked.items())
        try:
            for delivery, error in waiting:
                self._mark(delivery, error)
                with self._cond:
                    self._unmarked.pop(delivery, None)
            if not waiting and not self.journal.healthy:
                self.journal.probe()
        except JournalError as exc:
            log.warning("the delivery journal still cannot be written: %s", exc)
            return False
        if waiting:
            log.info("the delivery journal can be written again: %d late mark(s) written", len(waiting))
        return True

    def _mark(self, delivery: str, error: str | None) -> None:
        if error is None:
            self.journal.finish(delivery)
        else:
            self.journal.fail(delivery, error)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every delivery handed to the pool has been reported back."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._in_flight, timeout)

    def _record(self, delivery: str, result: str, error: str | None) -> None:
        """A worker's report: mark the journal (this process is its only writer), count, release.
        Never raises: a mark the journal refuses waits for `flush_marks`."""
        mark = (error or result) if result in (UNFINISHED, ERROR) else None
        try:
            self._mark(delivery, mark)
        except JournalError as exc:
            log.error("%s; the mark is written again once the journal can be written", exc)
            with self._cond:
                self._unmarked[delivery] = mark
                self.stats.journal_failures += 1
        with self._cond:
            self._in_flight.discard(delivery)
            setattr(self.stats, result, getattr(self.stats, result) + 1)
            self._cond.notify_all()

    def submit(self, delivery: str, body: bytes, payload: dict[str, Any]) -> str:
        """Journal and queue one issue_comment delivery: ``accepted``, ``duplicate`` or ``busy``.
        Raises `JournalError` when the journal cannot be written (then nothing is queued)."""
        with self._cond:
            if delivery in self._in_flight or delivery in self._unmarked:  # handled, its mark waits
                self.stats.duplicate_deliveries += 1
                return "duplicate"
            self._in_flight.add(delivery)
        try:
            new = self.journal.accept(delivery, body)
            if not new and self.journal.state(delivery) != ACCEPTED:
                self._settle(delivery, "duplicate_deliveries")
                return "duplicate"
        except BaseException:
            self._settle(delivery, None)
            raise
        if not self.pool.put(delivery, payload):
            if new:
                self.journal.forget(delivery)  # never acknowledged: the redelivery sweep brings it back
            self._settle(delivery, None)
            return "busy"
        with self._cond:
            self.stats.accepted += 1
        return "accepted"

    def _settle(self, delivery: str, stat: str | None) -> None:
        with self._cond:
            self._in_flight.discard(delivery)
            if stat:
                setattr(self.stats, stat, getattr(self.stats, stat) + 1)
            self._cond.notify_all()


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
            problem = self.server.app.health()
            self._answer(200, "ok") if problem is None else self._answer(503, problem)
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
            decoded = decode(self.headers.get("Content-Type"), body)  # after the check: signed as sent
        except BodyError as exc:
            return self._answer(exc.status, str(exc))
        payload = decoded.payload
        event = self.headers.get("X-GitHub-Event", "")
        if event == "ping":
            return self._answer(200, "pong")
        if event not in ("issue_comment", "workflow_run"):
            return self._answer(200, f"ignored event {event[:40]!r}")
        delivery = self.headers.get("X-GitHub-Delivery")
        if not delivery or not isinstance(payload, dict):
            return self._answer(400, "missing X-GitHub-Delivery" if not delivery else "payload is not an object")
        try:
            verdict = app.submit(delivery, decoded.document, payload)
        except JournalError as exc:
            log.error("%s", exc)
            return self._answer(500, "cannot journal the delivery; not accepted")
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
