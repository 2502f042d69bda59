"""What the test history says of a run's failures, for the bot's result rows.

Contract: `flake_notes(location, tier, nodes)` reads the history store at ``location`` (a SQLite
path or a PostgreSQL URL, as `ci.history.store.open_store` takes it) and returns, for each failing
test id in ``nodes``, the note its row carries: ``flaky 9 % ±4 over 120 runs on gpu_h200`` when the
history knows it as flaky on that tier (`ci.history.flaky.flaky_scores`: flaky evidence, at least
`MIN_TRIALS` trials; the ± is half the 90 % interval's width, in points), else ``new``. It never
writes to the store (``create=False``): a store that does not exist or cannot be read raises
`ci.history.store.StoreError`, which the caller reports and then writes the row without notes.
"""

from __future__ import annotations

from typing import Sequence

from ci.history.flaky import DEFAULT_LEVEL, flaky_scores
from ci.history.model import FlakyScore
from ci.history.store import open_store

MIN_TRIALS = 5  # what `ci flaky` hides below by default
NEW = "new"


def note(score: FlakyScore) -> str:
    """``flaky 9 % ±4 over 120 runs on gpu_h200`` (runs: the trials behind the score)."""
    half = (score.interval.high - score.interval.low) / 2 * 100
    return f"flaky {score.score * 100:.0f} % ±{half:.0f} over {score.trials} runs on {score.tier}"


def flake_notes(location: str, tier: str, nodes: Sequence[str]) -> dict[str, str]:
    """{node: note} for every node of ``nodes`` (see the module docstring)."""
    if not nodes:
        return {}
    with open_store(location, create=False) as store:
        scores = flaky_scores(store, tier=tier, min_trials=MIN_TRIALS, level=DEFAULT_LEVEL, nodes=nodes)
    known = {s.node: note(s) for s in scores}
    return {n: known.get(n, NEW) for n in nodes}


__all__ = ["MIN_TRIALS", "NEW", "flake_notes", "note"]
