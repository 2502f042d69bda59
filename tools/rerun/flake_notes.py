"""What the test history says of a run's failures, for the bot's result rows.

Contract: `flake_notes(location, tier, nodes)` reads the history store at ``location`` (a SQLite
path or a PostgreSQL URL, as `ci.history.store.open_store` takes it) and returns, for each failing
test id in ``nodes``, the note its row carries: ``flaky 9 % ±4 over 120 runs on gpu_h200`` when the
history knows it as flaky on that tier (`ci.history.flaky.flaky_scores`: flaky evidence, at least
`MIN_TRIALS` trials; the ± is half the 90 % interval's width, in points), else ``new``. It never
writes to the store (``create=False``): a store that does not exist or cannot be read raises
`ci.history.store.StoreError`, which the caller reports and then writes the row without notes.

It never keeps its caller waiting longer than ``wait`` seconds (`NOTES_WAIT_S`): the history is read
in a daemon thread, and a history that has not answered by then (a paused PostgreSQL, a hung
network file system) is a `StoreError` too, the thread left behind. The store's own timeouts
(`ci.history.postgres.Timeouts`, from the environment) are cut to ``wait`` as well, so that thread
gives up soon after. `read_within(location, wait, read)` is that contract for any read of the
store (`tools.rerun.verdicts` judges failures through it).
"""

from __future__ import annotations

import math
import threading
from typing import Callable, Sequence, TypeVar

from ci.history.flaky import DEFAULT_LEVEL, flaky_scores
from ci.history.location import describe
from ci.history.model import FlakyScore
from ci.history.postgres import Timeouts
from ci.history.store import Store, StoreError, open_store

MIN_TRIALS = 5  # what `ci flaky` hides below by default
NEW = "new"
NOTES_WAIT_S = 20.0
T = TypeVar("T")


def note(score: FlakyScore) -> str:
    """``flaky 9 % ±4 over 120 runs on gpu_h200`` (runs: the trials behind the score)."""
    half = (score.interval.high - score.interval.low) / 2 * 100
    return f"flaky {score.score * 100:.0f} % ±{half:.0f} over {score.trials} runs on {score.tier}"


def flake_notes(location: str, tier: str, nodes: Sequence[str], *, wait: float = NOTES_WAIT_S) -> dict[str, str]:
    """{node: note} for every node of ``nodes`` within ``wait`` seconds (see the module docstring)."""
    if not nodes:
        return {}

    def read(store: Store) -> dict[str, str]:
        scores = flaky_scores(store, tier=tier, min_trials=MIN_TRIALS, level=DEFAULT_LEVEL, nodes=nodes)
        known = {s.node: note(s) for s in scores}
        return {n: known.get(n, NEW) for n in nodes}

    return read_within(location, wait, read)


def read_within(location: str, wait: float, read: Callable[[Store], T]) -> T:
    """``read`` of the store at ``location`` (opened read-only, its timeouts cut to ``wait``), or
    `StoreError` when it has not answered within ``wait`` seconds (see the module docstring)."""
    outcome: list[T | BaseException] = []

    def run() -> None:
        try:
            env = Timeouts.from_env()
            cap = max(1, math.ceil(wait))
            timeouts = Timeouts(min(env.connect_s, cap), min(env.statement_s, cap))
            with open_store(location, create=False, timeouts=timeouts) as store:
                outcome.append(read(store))
        except BaseException as exc:  # handed to the caller's thread, raised there
            outcome.append(exc)

    worker = threading.Thread(target=run, name="history-read", daemon=True)
    worker.start()
    worker.join(wait)
    if not outcome:
        raise StoreError(f"{describe(location)}: no answer within {wait:g} s")
    if isinstance(outcome[0], BaseException):
        raise outcome[0]
    return outcome[0]


__all__ = ["MIN_TRIALS", "NEW", "NOTES_WAIT_S", "flake_notes", "note", "read_within"]
