"""The failure `ci.history.verdict.judge` takes and the verdict it gives, apart from the rules.

Contract: `Failure` is one failing test of a run as the rules read it, `failure_from_attempts` makes
one from a test's attempts (its error line, signature and infra cause as ingest stores them), and
`Verdict` is the answer with its one-line ``detail``. `ci.history.verdict` re-exports all three:
callers import them from there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ci.history.classify import signature
from ci.history.errors import error_line, infra_kind
from ci.history.model import Interval
from ci.history.runners import RunnerHealth
from ci.results.junit import FAILED, Attempt


@dataclass(frozen=True)
class Failure:
    """One failing test of a run, to be judged. ``failures`` counts its failed attempts at ``sha``
    in this run; ``passed_on_retry`` is true when a later attempt of the run passed."""

    node: str
    tier: str
    sha: str
    repo: str = ""
    error: str = ""
    fingerprint: str = ""
    infra: str = ""
    runner: str = ""
    failures: int = 1
    passed_on_retry: bool = False


@dataclass(frozen=True)
class Verdict:
    """The verdict on one `Failure` and why, in one line (``detail``). ``since``, ``last_pass``,
    ``fixed_at`` and the candidates are set for ``broken_on_main``; ``score`` and ``interval`` when
    the history scores the test flaky on the tier; ``runner_health`` for ``infra``."""

    node: str
    tier: str
    sha: str
    verdict: str
    detail: str
    error: str = ""
    fingerprint: str = ""
    runner: str = ""
    infra: str = ""
    since: str = ""
    last_pass: str = ""
    fixed_at: str = ""
    candidates: tuple[str, ...] = ()
    candidate_count: int = 0
    score: float | None = None
    interval: Interval | None = None
    runner_health: RunnerHealth | None = None


def failure_from_attempts(node: str, tier: str, sha: str, attempts: Sequence[Attempt], *, repo: str = "",
                          runner: str = "", fingerprint: str = "", error: str = "") -> Failure:
    """A `Failure` from one test's attempts in a run: its last failed attempt with text speaks
    (error line, signature and infra cause as ingest stores them, unless ``error`` /
    ``fingerprint`` are given); ``passed_on_retry`` when the last attempt passed."""
    failed = [a for a in attempts if a.outcome not in ("passed", "skipped")] or list(attempts)
    spoken = next((a for a in reversed(failed) if a.message or a.detail), failed[-1] if failed else Attempt(FAILED, 0))
    error = error or error_line(spoken)
    fingerprint = fingerprint or signature(error)[0]
    passed = bool(attempts) and attempts[-1].outcome == "passed"
    return Failure(node, tier, sha, repo, error, fingerprint, infra_kind(spoken), runner, max(1, len(failed)), passed)
