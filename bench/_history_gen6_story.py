"""One run of the sixth history: which attempt of which test fails, why, and its truth label
(`bench._history_gen6` draws the story; `_history_gen6_world` holds the tests and causes).

Contract: `run_jobs` is deterministic given its ``rng``; every test whose first attempt failed gets
one `Label` (passed-on-retry included), labelled by the first cause that applies, in this order:
the pull request's own bug (new), a breakage main holds at the run's base (broken_on_main, unless
the pull request fixes it), a time- or runner-bound infra window (infra), test order in the job
and flake rates (flaky). A skipped test is never a failure, whatever breaks it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime

from bench._verdicts_records import Label
from bench._history_gen6_text import Case, Fail, report_xml, text_for
from bench._history_gen6_world import (CAUSE_LABEL, ORDER_POLLUTER, ORDER_VICTIM, RERUNS, RUNNERS, SHARDS,
                                       Report, Test, Window, shard_files)


@dataclass(frozen=True)
class Break:
    """Main broken at commits ``start`` <= c < ``end`` for ``nodes`` (on ``tier``, "" for all) with ``error``."""

    cause: str
    nodes: tuple[str, ...]
    start: int
    end: int
    error: str
    tier: str = ""

    def holds(self, node: str, tier: str, commit: int) -> bool:
        return node in self.nodes and self.tier in ("", tier) and self.start <= commit < self.end


@dataclass(frozen=True)
class Bug:
    """A pull request head's own bug: ``node`` fails on ``tier`` ("" for all) as ``cause``."""

    cause: str
    node: str
    tier: str = ""
    error: str = ""


@dataclass
class Setting:
    """What one run sees: main's commit under it, the time, its own bugs and fixes, its tests."""

    base: int
    when: datetime
    tests: list[Test]
    bugs: tuple[Bug, ...] = ()
    fixes: tuple[Break, ...] = ()
    breaks: list[Break] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)


def _rate(test: Test, s: Setting) -> float:
    for w in s.windows:
        if w.cause == "flaky_jump" and test.node in w.nodes and w.start <= s.when < w.end:
            return 0.35
    return test.rate


def _infra(test: Test, tier: str, runner: str, s: Setting) -> str:
    for w in s.windows:
        if not w.start <= s.when < w.end:
            continue
        if w.cause == "hf_outage" and test.weights:
            return w.cause
        if w.cause == "image_bump" and tier == w.tier and test.node in w.nodes:
            return w.cause
        if w.cause == "disk_full" and runner == w.runner and test.disk:
            return w.cause
    return ""


def _steady(test: Test, tier: str, runner: str, ran: set[str], s: Setting) -> tuple[str, Fail] | None:
    """The cause that fails every attempt of ``test`` in this job, if one does."""
    for bug in s.bugs:
        if bug.node == test.node and bug.tier in ("", tier):
            return bug.cause, text_for(bug.cause, test, bug.error)
    held = [b for b in s.breaks if b.holds(test.node, tier, s.base) and b not in s.fixes]
    if held:
        first = min(held, key=lambda b: b.start)  # the older breakage hides the newer one's error
        return first.cause, text_for(first.cause, test, first.error)
    cause = _infra(test, tier, runner, s)
    if cause:
        return cause, text_for(cause, test)
    if test.node == ORDER_VICTIM and ORDER_POLLUTER in ran:
        return "order", text_for("order", test)
    return None


def _case(test: Test, tier: str, runner: str, ran: set[str], s: Setting,
          rng: random.Random) -> tuple[Case, Label | None]:
    seconds = round(rng.uniform(0.5, 40.0), 3)
    if tier in test.skip_on:
        return Case(test, (None,), 0.0, skipped=f"flashinfer's paged decode needs sm90; {tier} is not"), None
    steady = _steady(test, tier, runner, ran, s)
    if steady is not None:
        cause, fail = steady
        tries = 1 if cause == "pr_segv" else RERUNS + 1  # a crashed process reruns nothing
        why = f"{cause}: {fail.message[:80]}"
        return (Case(test, (fail,) * tries, seconds * tries),
                Label(test.node, tier, CAUSE_LABEL[cause], True, why))
    rate, attempts = _rate(test, s), []
    for _ in range(RERUNS + 1):
        if rng.random() >= rate:
            attempts.append(None)
            break
        attempts.append(text_for(test.flake or "flaky", test))
    if attempts[0] is None:
        return Case(test, (None,), seconds), None
    every = attempts[-1] is not None
    why = f"{test.flake} at rate {rate:.2f}"
    return Case(test, tuple(attempts), seconds * len(attempts)), Label(test.node, tier, "flaky", every, why)


def run_jobs(s: Setting, rng: random.Random, attempt_text: bool) -> list[Report]:
    """Every Buildkite job of one run: its JUnit and the truth of its failing tests."""
    reports = []
    for tier, shards in SHARDS.items():
        tests = [t for t in s.tests if tier in t.tiers]
        by_file: dict[str, list[Test]] = {}
        for t in tests:
            by_file.setdefault(t.file, []).append(t)
        for shard, files in enumerate(shard_files(list(by_file), shards)):
            runner = f"{tier}-{rng.randrange(RUNNERS[tier]) + 1}"
            cases, labels, ran = [], [], set()
            crashed = False
            for name in files:
                for test in by_file[name]:
                    case, label = _case(test, tier, runner, ran, s, rng)
                    cases.append(case)
                    if label is not None:
                        labels.append(label)
                    if label is not None and label.why.startswith("pr_segv"):
                        crashed = True  # the process died: no JUnit for the rest of the job
                        break
                ran.add(name)
                if crashed:
                    break
            reports.append(Report(tier, shard, shards, runner, report_xml(cases, attempt_text, runner), labels))
    return reports
