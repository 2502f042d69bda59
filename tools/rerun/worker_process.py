"""The webhook server's handler threads in a child process, so acknowledging never waits for them.

Profiled (bench/rerun_bot.py): with the handlers' threads in the server's own process, a webhook
acknowledgement spent nearly all of its time waiting for the GIL behind them (its own work is
about 0.2 ms of CPU). `ProcessWorkers` starts one child (``spawn``) that runs `ThreadWorkers` with
the real `Handler`; the parent sends (delivery, payload) over a queue and gets (delivery, result,
error) back, and the parent alone writes the journal (a second writing process made acks wait in
SQLite's busy handler).

The child never outlives the parent: it blocks reading a pipe whose only writer is the parent, and
exits at once when that read ends (the parent exited or was killed -9), so a restarted server is
never racing an orphan over the same comments. A child that dies makes the parent exit with
status 3; every delivery it had not finished is still unfinished in the journal and is replayed
when the server is started again.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import threading
from dataclasses import dataclass
from typing import Any

from tools.rerun.workers import Report

log = logging.getLogger(__name__)

CHILD_DIED = 3
READY = "ready"
READY_TIMEOUT = 60.0  # seconds for the child to import the bot


@dataclass(frozen=True)
class WorkerSpec:
    """Everything the child needs to build its handlers (all picklable). ``config`` is a
    `tools.rerun.handler.BotConfig`; ``token`` travels over the spawn pipe, never argv."""

    api_url: str
    token: str | None
    config: Any
    workers: int
    done_cache: int = 10_000


class ProcessWorkers:
    """A `tools.rerun.workers.WorkerPool` backed by one child process (see the module docstring)."""

    def __init__(self, spec: WorkerSpec, capacity: int = 1024):
        self.spec, self.capacity = spec, capacity
        self._ctx = multiprocessing.get_context("spawn")
        self._pending = 0
        self._lock = threading.Lock()
        self._stopping = False

    def start(self, report: Report) -> None:
        self._report = report
        self.jobs = self._ctx.Queue()
        self.results = self._ctx.Queue()
        life_read, self._life = self._ctx.Pipe(duplex=False)
        self.process = self._ctx.Process(target=_child_main, name="rerun-workers", daemon=True,
                                         args=(self.spec, self.jobs, self.results, life_read))
        self.process.start()
        life_read.close()
        ready = self.results.get(timeout=READY_TIMEOUT)  # imports done, handlers can be built
        if ready != READY:
            raise RuntimeError(f"the worker process did not start: {ready!r}")
        threading.Thread(target=self._collect, name="rerun-results", daemon=True).start()
        threading.Thread(target=self._watch, name="rerun-child-watch", daemon=True).start()

    def put(self, delivery: str, payload: dict[str, Any], *, force: bool = False) -> bool:
        with self._lock:
            if not force and self._pending >= self.capacity:
                return False
            self._pending += 1
        self.jobs.put((delivery, payload))
        return True

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping = True
        self.jobs.put(None)
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout)
        self._life.close()

    def _collect(self) -> None:
        while True:
            item = self.results.get()
            if item is None:
                return
            delivery, result, error = item
            with self._lock:
                self._pending -= 1
            try:
                self._report(delivery, result, error)
            except Exception:  # this thread is the only reader of results: it must outlive any report
                log.exception("recording the result of delivery %s failed", delivery)

    def _watch(self) -> None:
        self.process.join()
        if not self._stopping:
            log.critical("the worker process died (exit %s); exiting so that a restart replays the journal",
                         self.process.exitcode)
            os._exit(CHILD_DIED)


def _child_main(spec: WorkerSpec, jobs: Any, results: Any, life: Any) -> None:
    """Entry point of the child: build the handlers, work until told to stop or orphaned."""
    from tools.rerun.github import GitHubClient
    from tools.rerun.handler import Handler
    from tools.rerun.secrets_file import RedactingFilter, remember
    from tools.rerun.workers import ThreadWorkers

    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [workers]: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    if spec.token:
        remember(spec.token)

    def orphaned() -> None:
        try:
            life.recv()
        except (EOFError, OSError):
            pass
        os._exit(0)  # the parent is gone: stop at once, whatever is in flight stays unfinished
    threading.Thread(target=orphaned, name="rerun-parent-watch", daemon=True).start()

    pace = spec.config.pacer()  # one pacer for every handler thread: GitHub limits the token, not the thread
    workers = ThreadWorkers(spec.workers, lambda: Handler(GitHubClient(spec.api_url, spec.token, pace=pace),
                                                          spec.config),
                            done_cache=spec.done_cache)
    workers.start(lambda delivery, result, error: results.put((delivery, result, error)))
    results.put(READY)
    while True:
        job = jobs.get()
        if job is None:
            break
        workers.put(job[0], job[1], force=True)
    workers.stop()
    results.put(None)


__all__ = ["CHILD_DIED", "ProcessWorkers", "WorkerSpec"]
