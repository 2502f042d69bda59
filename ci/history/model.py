"""Typed records of the history: a run's identity, one stored attempt, one flaky score.

Contract: every record is a frozen dataclass; `RunIdentity.check` is the one validation of the
identity a report is ingested with (`ValueError` naming the field).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from ci.limits import MAX_INT4

# Events a report may come from. push and nightly run the default branch: their order is the
# branch's history, so a pass -> fail -> pass between them is a flip (see `ci.history.flaky`).
# merge_group is a merge queue's run of a batch (main before it plus its pull requests): not the
# branch's history, since a batch that fails or is dequeued never lands (`ci.history.merge_queue`).
MERGE_GROUP = "merge_group"
EVENTS = ("push", "pull_request", "nightly", "rerun", MERGE_GROUP)
DEFAULT_BRANCH_EVENTS = ("push", "nightly")
# Runs whose attempts are main's evidence in a verdict, each only at a commit main's order holds.
MAIN_EVIDENCE_EVENTS = (*DEFAULT_BRANCH_EVENTS, MERGE_GROUP)

# What one attempt of a test was (`ci.history.classify.kind_of`).
PASS, FAIL, BROKEN, SKIP = "pass", "fail", "broken", "skip"

_SHA = re.compile(r"[0-9a-fA-F]{7,64}\Z")
_TEXT_LIMIT = 500


def is_sha(text: str) -> bool:
    """True for a commit id as the history takes one: 7 to 64 hexadecimal digits."""
    return bool(_SHA.match(text))


@dataclass(frozen=True)
class RunIdentity:
    """Where a report came from. ``repo``, ``sha``, ``event`` and ``tier`` are required; ``attempt``
    is the CI run's attempt (GitHub's ``run_attempt``), 1 for the first. ``author`` is who pushed
    or opened the pull request, ``base_sha`` a pull request's merge base (a merge_group run's: main
    before the batch, required); ``batch`` a merge_group run's pull requests, () when unknown, and
    only a merge_group run's (it has no one ``pr``); ``scored`` False keeps the report out of
    flakiness scores, quarantine and runner health (JUnit written by code not yet reviewed: a pull
    request's), for its own run's verdicts only."""

    repo: str
    sha: str
    event: str
    tier: str
    pr: int | None = None
    runner: str = ""
    shard: str = ""
    run_id: str = ""
    attempt: int = 1
    run_url: str = ""
    author: str = ""
    base_sha: str = ""
    scored: bool = True
    batch: tuple[int, ...] = ()

    def check(self) -> None:
        """Raise ValueError naming the first field that is missing or impossible."""
        for name in ("repo", "sha", "event", "tier"):
            if not getattr(self, name):
                raise ValueError(f"--{name.replace('_', '-')} is required and may not be empty")
        if not _SHA.match(self.sha):
            raise ValueError(f"--sha {self.sha!r} is not a hexadecimal commit id (7 to 64 digits)")
        if self.event not in EVENTS:
            raise ValueError(f"--event {self.event!r} is not one of {', '.join(EVENTS)}")
        if self.pr is not None and not 0 < self.pr <= MAX_INT4:
            raise ValueError(f"--pr {self.pr} is not a pull request number (1 to {MAX_INT4})")
        if self.base_sha and not _SHA.match(self.base_sha):
            raise ValueError(f"--base-sha {self.base_sha!r} is not a hexadecimal commit id (7 to 64 digits)")
        self._check_queue()
        if not 0 < self.attempt <= MAX_INT4:
            raise ValueError(f"--attempt {self.attempt} must be from 1 to {MAX_INT4}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str) and (len(value) > _TEXT_LIMIT or "\x00" in value):
                raise ValueError(f"--{f.name.replace('_', '-')} is longer than {_TEXT_LIMIT} characters or holds NUL")

    def _check_queue(self) -> None:
        if self.event != MERGE_GROUP:
            if self.batch:
                raise ValueError(f"--batch is a merge_group run's pull requests, not a {self.event} run's")
            return
        if self.pr is not None:
            raise ValueError("--pr: a merge_group run tests a batch, not one pull request; name its pull "
                             "requests with --batch (or --head-ref, the queue's ref)")
        if not self.base_sha:
            raise ValueError("--base-sha is required for a merge_group run: main's commit before the batch "
                             "(merge_group.base_sha)")
        for number in self.batch:
            if not 0 < number <= MAX_INT4:
                raise ValueError(f"--batch {number} is not a pull request number (1 to {MAX_INT4})")

    @property
    def default_branch(self) -> bool:
        return self.event in DEFAULT_BRANCH_EVENTS


@dataclass(slots=True)
class CaseRow:
    """One attempt of one test in one report, as stored. ``attempt`` counts from 0 within the
    report (pytest-rerunfailures' reruns); ``retried`` is true for every attempt but the last.
    Not frozen, only slotted: a million of them are built per benchmark run, and a frozen
    dataclass's ``__init__`` costs three times as much; nothing mutates one after `case_rows`."""

    node: str
    file: str
    attempt: int
    outcome: str
    kind: str
    time: float
    retried: bool
    fingerprint: str = ""
    message: str = ""
    error: str = ""  # the first meaningful error line, as written (`ci.history.errors.error_line`)
    infra: str = ""  # the runner-level cause it names (`ci.history.errors.infra_kind`), or ""


@dataclass(frozen=True)
class IngestResult:
    """What one report's ingest did: ``added`` False when the same report (content and identity)
    was already stored, in which case nothing was written."""

    source: str
    report_key: str
    added: bool
    cases: int
    attempts: int


@dataclass(frozen=True)
class EvidenceRow:
    """One stored attempt of a candidate node, with its report's identity, as `ci.history.flaky`
    reads it (ordered by report id, then attempt)."""

    node: str
    tier: str
    repo: str
    sha: str
    event: str
    report_id: int
    attempt: int
    kind: str
    fingerprint: str
    message: str
    run_url: str
    ingested_at: str
    infra: str = ""  # the runner-level cause of a failure (`ci.history.errors.infra_kind`), or ""


@dataclass(frozen=True)
class Interval:
    low: float
    high: float


@dataclass(frozen=True)
class FlakyScore:
    """A node's flakiness on one tier. ``failures`` / ``trials`` are the counts the Beta posterior
    is built from; ``flaky_failures`` the failures that are evidence of flakiness (same sha as a
    pass, or a short streak between passes on the default branch); ``broken`` attempts are
    counted apart and never enter the score."""

    node: str
    file: str
    tier: str
    score: float
    interval: Interval
    failures: int
    trials: int
    flaky_failures: int
    broken: int
    runs: int
    fingerprints: tuple[tuple[str, str, int], ...]
    last_seen: str
    examples: tuple[str, ...]
    owner: str = ""
