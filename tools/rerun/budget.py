"""The bot's GitHub API budget: GitHub's documented limits, write pacing, and what a rerun costs.

GitHub's documented limits for the token the bot and its ``report`` jobs use (GITHUB_TOKEN):
`HOURLY_REQUESTS` REST requests per hour per repository (primary limit), and the secondary limits:
at most `CONTENT_WRITES_PER_MINUTE` content-generating requests a minute and `CONTENT_WRITES_PER_HOUR`
an hour, `POINTS_PER_MINUTE` points a minute (a GET costs `READ_POINTS`, a POST/PATCH/PUT/DELETE
`WRITE_POINTS`) and `MAX_CONCURRENT` concurrent requests. Every write the bot sends is counted as
content-generating (a workflow dispatch, a comment, its edit, a reaction): the safe reading.

Two writers share those limits during a ``/rerun-tier``: the bot itself (claim, dispatches, reply
edits, reactions), paced by one `WritePacer` at `BOT_WRITES_PER_MINUTE`, and the dispatched runs'
``report`` jobs, each its own process on its own runner, which cannot share a pacer: shard ``i/N``
writes only in its own slot of a cycle of N slots `REPORT_SLOT_SECONDS` apart (`report_slot_wait`,
on the runners' synchronised wall clocks), so reports that finish together write one after another
at `REPORT_WRITES_PER_MINUTE`. Even spacing puts at most ``rate + 1`` writes of each into any 60 s,
so the two together stay under `CONTENT_WRITES_PER_MINUTE` (`WORST_WRITES_PER_MINUTE`).

`rerun_cost` is what a comment's dispatches cost, measured against the fake GitHub
(tests/rerun/test_rerun_budget.py); `max_runs` is the most runs one comment may dispatch so that the
whole rerun stays under `BUDGET_SHARE` of each hourly limit (the rest is left to CI and people); a
culprit search counts each run's artifact reads on top (``reads_per_run``).
"""

from __future__ import annotations

import functools
import math
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ci.selection.shard import parse_shard_spec

HOURLY_REQUESTS = 1000  # GITHUB_TOKEN: REST requests per hour per repository
CONTENT_WRITES_PER_MINUTE = 80  # secondary limit: content-generating requests
CONTENT_WRITES_PER_HOUR = 500  # secondary limit: content-generating requests
POINTS_PER_MINUTE = 900  # secondary limit for REST
READ_POINTS, WRITE_POINTS = 1, 5  # GET/HEAD/OPTIONS; POST/PATCH/PUT/DELETE
MAX_CONCURRENT = 100  # secondary limit: concurrent requests

BOT_WRITES_PER_MINUTE = 36
REPORT_WRITES_PER_MINUTE = 36
REPORT_SLOT_SECONDS = 60.0 / REPORT_WRITES_PER_MINUTE
WORST_WRITES_PER_MINUTE = BOT_WRITES_PER_MINUTE + 1 + REPORT_WRITES_PER_MINUTE + 1
PROGRESS_SECONDS = 60.0  # the reply shows dispatch progress at most this often
BUDGET_SHARE = 0.8

# Measured per comment (tests/rerun/test_rerun_budget.py): list comments, permission, pull,
# two reactions, the claim, and the final edit with the read that keeps reported rows.
BOT_FIXED_REQUESTS, BOT_FIXED_WRITES = 8, 4
PROGRESS_REQUESTS, PROGRESS_WRITES = 2, 1  # each progress edit: read the reply, edit it
REPORT_REQUESTS, REPORT_WRITES = 3, 1  # per run: find the reply, edit its row, re-read it after the settle

if WORST_WRITES_PER_MINUTE > CONTENT_WRITES_PER_MINUTE:  # pragma: no cover - a constants check
    raise AssertionError("the bot's and the reports' write rates add up to more than GitHub allows")


@dataclass(frozen=True)
class RerunCost:
    """GitHub requests (and of those, writes) that dispatching and reporting ``runs`` runs takes."""

    runs: int
    requests: int
    writes: int

    @property
    def fits(self) -> bool:
        return (self.requests <= BUDGET_SHARE * HOURLY_REQUESTS
                and self.writes <= BUDGET_SHARE * CONTENT_WRITES_PER_HOUR)


def dispatch_seconds(runs: int) -> float:
    """How long the bot's pacer takes to send ``runs`` dispatches (plus its own few writes)."""
    return (runs + BOT_FIXED_WRITES) * 60.0 / BOT_WRITES_PER_MINUTE


def rerun_cost(runs: int, reads_per_run: int = 0) -> RerunCost:
    """What one comment that dispatches ``runs`` runs costs, its reports included, and
    ``reads_per_run`` further GETs per run (a culprit search's artifact reads)."""
    progress = math.ceil(dispatch_seconds(runs) / PROGRESS_SECONDS) if runs else 0
    requests = BOT_FIXED_REQUESTS + progress * PROGRESS_REQUESTS + runs * (1 + REPORT_REQUESTS + reads_per_run)
    writes = BOT_FIXED_WRITES + progress * PROGRESS_WRITES + runs * (1 + REPORT_WRITES)
    return RerunCost(runs, requests, writes)


@functools.lru_cache(maxsize=4)
def max_runs(reads_per_run: int = 0) -> int:
    """The most runs one comment may dispatch within the budget, each costing ``reads_per_run``
    requests beyond `rerun_cost`'s (a culprit search's artifact reads of a failed run)."""
    runs = 0
    while rerun_cost(runs + 1, reads_per_run).fits:
        runs += 1
    return runs


class WritePacer:
    """Spaces writes evenly at ``per_minute`` (a token bucket of one token): `take` blocks until
    this writer may send its next write. Thread-safe; one pacer per process, shared by every client
    of that process. ``clock`` and ``sleep`` are injectable."""

    def __init__(self, per_minute: float = BOT_WRITES_PER_MINUTE, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        if per_minute <= 0:
            raise ValueError(f"per_minute must be > 0, got {per_minute}")
        self.spacing = 60.0 / per_minute
        self.clock, self.sleep = clock, sleep
        self._next = -math.inf
        self._lock = threading.Lock()

    def take(self) -> None:
        """Wait for this write's turn (each caller gets its own turn, ``spacing`` after the last)."""
        with self._lock:
            now = self.clock()
            turn = max(now, self._next)
            self._next = turn + self.spacing
        if turn > now:
            self.sleep(turn - now)


class Coalescer:
    """Decides which edits of one comment are sent: an edit is `due` only when its text differs from
    the last one written and ``interval`` seconds have passed since then. (The final edit is sent
    whatever `due` says.) ``clock`` is injectable."""

    def __init__(self, interval: float = PROGRESS_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.interval, self.clock = interval, clock
        self._text: str | None = None
        self._at = -math.inf

    def due(self, text: str) -> bool:
        return text != self._text and self.clock() - self._at >= self.interval

    def wrote(self, text: str) -> None:
        self._text, self._at = text, self.clock()


def report_slot_wait(now: float, index: int, count: int, slot: float = REPORT_SLOT_SECONDS) -> float:
    """Seconds from ``now`` (epoch seconds) to the start of shard ``index`` of ``count``'s next slot
    (1-based ``index``), in a cycle of ``count`` slots of ``slot`` seconds each."""
    if not 1 <= index <= count:
        raise ValueError(f"shard {index} of {count} does not exist")
    cycle = count * slot
    return ((index - 1) * slot - now) % cycle


def shard_of(part: str) -> tuple[int, int] | None:
    """(i, N) of a part ``i/N`` as `ci.selection.shard.parse_shard_spec` reads one; None for any
    other part (``targets``)."""
    try:
        return parse_shard_spec(part)
    except ValueError:
        return None


__all__ = ["BOT_WRITES_PER_MINUTE", "BUDGET_SHARE", "Coalescer", "CONTENT_WRITES_PER_HOUR", "CONTENT_WRITES_PER_MINUTE",
           "HOURLY_REQUESTS", "MAX_CONCURRENT", "POINTS_PER_MINUTE", "PROGRESS_SECONDS", "READ_POINTS",
           "REPORT_SLOT_SECONDS", "REPORT_WRITES_PER_MINUTE", "RerunCost", "WORST_WRITES_PER_MINUTE",
           "WRITE_POINTS", "WritePacer", "dispatch_seconds", "max_runs", "report_slot_wait", "rerun_cost",
           "shard_of"]
