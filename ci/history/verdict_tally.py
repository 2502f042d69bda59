"""The headline and order of a set of verdicts (`ci.history.verdict`'s results), apart from the rules.

Contract: `tally` counts a run's results and makes its one-line headline; `by_concern` orders
verdicts most likely the reader's own first. Both read only the `Verdict` fields named here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Protocol, Sequence


class Verdict(Protocol):
    """What the headline reads of a `ci.history.verdict.Verdict` (no import: that module imports this one)."""

    node: str
    tier: str
    verdict: str
    detail: str
    runner: str
    since: str

BROKEN_ON_MAIN, FLAKY, INFRA, NEW = "broken_on_main", "flaky", "infra", "new"
VERDICTS = (BROKEN_ON_MAIN, INFRA, FLAKY, NEW)  # the order a headline names them in
SHORT = 7
NO_HISTORY = "new: no history to compare with"


def short(sha: str) -> str:
    return sha[:SHORT]


@dataclass(frozen=True)
class Tally:
    """A set of results in numbers and one headline."""

    passed: int
    failed: int
    skipped: int
    flaky_passed: int  # passed only on a retry: counted in ``passed``
    counts: tuple[tuple[str, int], ...]  # (verdict, failures), in `VERDICTS` order, zeros left out
    headline: str


def tally(verdicts: Sequence[Verdict], passed: int, failed: int, skipped: int = 0) -> Tally:
    """Counts and the headline: ``3 passed, 1 failed: broken on main since abc1234``; failures
    judged flaky that passed on retry are counted as passed and named (``1 flaky, passed on retry``)."""
    retried = [v for v in verdicts if v.verdict == FLAKY and v.detail.startswith("flaky: failed, then passed on retry")]
    hard = [v for v in verdicts if v not in retried]
    counts = Counter(v.verdict for v in hard)
    ordered = tuple((name, counts[name]) for name in VERDICTS if counts[name])
    parts = [f"{passed} passed"] + ([f"{failed} failed"] if failed or hard else []) + (
        [f"{skipped} skipped"] if skipped else [])
    head = ", ".join(parts)
    named = [_verdict_words(name, n, hard) for name, n in ordered]
    if len(named) == 1 and ordered[0][1] == 1:
        head += ": " + named[0].split(" ", 1)[1]  # "1 failed: broken on main since abc1234"
    elif named:
        head += ": " + ", ".join(named)
    if retried:
        head += f" ({len(retried)} flaky, passed on retry)"
    return Tally(passed, failed, skipped, len(retried), ordered, head)


def _verdict_words(name: str, n: int, verdicts: Sequence[Verdict]) -> str:
    if name == BROKEN_ON_MAIN:
        since = sorted({short(v.since) for v in verdicts if v.verdict == name and v.since})
        return f"{n} broken on main since {', '.join(since)}"
    if name == NEW:
        unjudged = sum(v.verdict == NEW and v.detail.startswith(NO_HISTORY) for v in verdicts)
        words = [f"{n - unjudged} new (probably this change's)"] if n > unjudged else []
        return ", ".join(words + ([f"{unjudged} not judged (no history to compare with)"] if unjudged else []))
    if name == INFRA:
        runners = sorted({v.runner for v in verdicts if v.verdict == name and v.runner})
        return f"{n} infra" + (f" on {', '.join(runners)}" if runners else "")
    return f"{n} {name}"


_CONCERN = {NEW: 0, BROKEN_ON_MAIN: 1, INFRA: 2, FLAKY: 3}


def by_concern(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """Most likely the reader's own first: new, then broken on main, infra, flaky; by test id within."""
    return sorted(verdicts, key=lambda v: (_CONCERN.get(v.verdict, 0), v.node, v.tier))
