"""Handler threads behind the webhook server: one delivery at a time per comment, results journalled.

`ThreadWorkers` runs ``count`` threads; each calls ``make_handler()`` once (its own GitHub client
and HTTP session) and then, per delivery: takes the comment's lock, skips a comment whose
``created`` delivery it has already handled (bounded LRU; an ``edited`` or ``deleted`` delivery,
which the handler ignores and GitHub may deliver first, marks nothing), calls the handler, and
reports the result as one of `RESULTS`: handled,
skipped, or unfinished / error (with the reason) when the handler reported GitHub failures
(``Outcome.errors``) or raised. Workers never write the journal: the server does, from the
reports, so one process is its only writer. `tools.rerun.worker_process` runs the same class in a
child process.
"""

from __future__ import annotations

import logging
import queue
import threading
from contextlib import nullcontext
from typing import Any, Callable, Protocol

from tools.rerun.sync import KeyedLocks, LRUSet

log = logging.getLogger(__name__)

HANDLED, SKIPPED, UNFINISHED, ERROR = "handled", "skipped_comments", "unfinished", "errors"
RESULTS = (HANDLED, SKIPPED, UNFINISHED, ERROR)
Report = Callable[[str, str, str | None], None]
"""Called once per delivery taken: (delivery id, one of `RESULTS`, the failure or None)."""


class EventHandler(Protocol):
    def handle(self, payload: dict[str, Any]) -> Any: ...


class WorkerPool(Protocol):
    """What the webhook server hands deliveries to (threads here, or a child process)."""

    def start(self, report: Report) -> None: ...
    def put(self, delivery: str, payload: dict[str, Any], *, force: bool = False) -> bool: ...
    def stop(self, timeout: float = 10.0) -> None: ...


class ThreadWorkers:
    """See the module docstring. ``capacity`` bounds the queue (`put` answers False when full,
    unless ``force``)."""

    def __init__(self, count: int, make_handler: Callable[[], EventHandler], *, capacity: int = 1024,
                 done_cache: int = 10_000, on_done: Callable[[str, Any], None] | None = None):
        if count < 1:
            raise ValueError(f"worker count must be >= 1, got {count}")
        self.count, self.make_handler, self.on_done = count, make_handler, on_done
        self.queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self.capacity = capacity
        self.done_comments = LRUSet(done_cache)
        self.comment_locks = KeyedLocks()
        self._report: Report = lambda delivery, result, error: None
        self._threads: list[threading.Thread] = []

    def start(self, report: Report) -> None:
        self._report = report
        for i in range(self.count):
            thread = threading.Thread(target=self._work, name=f"rerun-worker-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def put(self, delivery: str, payload: dict[str, Any], *, force: bool = False) -> bool:
        if not force and self.queue.qsize() >= self.capacity:
            return False
        self.queue.put((delivery, payload))
        return True

    def stop(self, timeout: float = 10.0) -> None:
        for _ in self._threads:
            self.queue.put(None)
        for thread in self._threads:
            thread.join(timeout)
        self._threads.clear()

    def _work(self) -> None:
        handler: EventHandler | None = None
        while True:
            job = self.queue.get()
            if job is None:
                return
            delivery, payload = job
            try:
                if handler is None:
                    handler = self.make_handler()
                result, error = self._process(handler, delivery, payload)
            except Exception as exc:  # the worker must survive anything a handler does
                log.exception("delivery %s failed", delivery)
                result, error = ERROR, f"{type(exc).__name__}: {exc}"
            self._report(delivery, result, error)

    def _process(self, handler: EventHandler, delivery: str, payload: dict[str, Any]) -> tuple[str, str | None]:
        comment = payload.get("comment")
        comment_id = comment.get("id") if isinstance(comment, dict) else None
        with self.comment_locks.hold(comment_id) if comment_id is not None else nullcontext():
            if comment_id is not None and comment_id in self.done_comments:
                return SKIPPED, None
            outcome = handler.handle(payload)
            errors = getattr(outcome, "errors", None)
            if errors:
                log.warning("delivery %s left unfinished: %s", delivery, "; ".join(errors))
                return UNFINISHED, "; ".join(errors)
            if comment_id is not None and payload.get("action") == "created":
                # Only the creation's delivery answers the comment: GitHub does not promise order,
                # and an `edited` delivery that arrives first is ignored, not handled.
                self.done_comments.add(comment_id)
        log.info("delivery %s: %s", delivery, getattr(outcome, "status", outcome))
        if self.on_done is not None:
            self.on_done(delivery, outcome)
        return HANDLED, None


__all__ = ["ERROR", "EventHandler", "HANDLED", "RESULTS", "Report", "SKIPPED", "ThreadWorkers", "UNFINISHED",
           "WorkerPool"]
