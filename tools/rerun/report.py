"""``report``: a dispatched run's JUnit results, written into its row of the bot's reply, in place.

`summarize` turns the run's JUnit XML into the row's result cell: passed / failed / skipped /
errors, the time, the first `MAX_FAILING` failing node ids; an unreadable or missing report, one
without a test case or with impossible times gives a cell saying the run produced no report.

`Reporter.report` finds the bot's own reply for the comment (its marker, in comments by the bot's
login only), replaces the row of (tier, part) and PATCHes the comment. GitHub has no conditional
update for comments, so two reports for different rows of one reply (two tiers finishing at once)
can lose one another's row: each reads the same body and the later PATCH writes the earlier row
back to its placeholder. Detection, after every PATCH:

1. re-read the comment after ``settle`` seconds plus up to a quarter more (jitter);
2. our row as written -> fine; our row holding *other* results -> a later report of the same row
   (a re-run attempt) superseded ours -> fine; our row missing or back to a placeholder -> our
   update was lost -> read, merge and PATCH again after a jittered pause, up to ``attempts`` times.

A lost update is caught if the PATCH that erased ours lands before our last re-read, i.e. if every
writer's read-to-PATCH span is shorter than ``settle``. Writers read right before they PATCH and
never resend a stale body (each retry re-reads), so that span is one API round trip plus the
client's timeout at most; ``settle`` defaults to more than the client's 10 s timeout.

A run first waits for its own write slot ``k/M`` (its place among its comment's M runs, a dispatch
input; a run dispatched without one uses its part ``i/N``): `budget.report_slot_wait`, on the wall
``clock``. Reports of runs that finish together write one after another, within GitHub's
per-minute write limit and without overwriting one another. Each report costs three
requests: find the reply, edit it, re-read it.

A reply too long for GitHub (many shards, long failing lists) goes through `tools.rerun.fit`,
which shortens cells and never drops a row, so a row that holds results keeps them.
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from ci.history.errors import error_line
from ci.history.ingest import node_id
from ci.results.junit import ERROR, FAILED, CaseResult, JUnitError, parse_junit
from tools.rerun import replies
from tools.rerun.budget import report_slot_wait, shard_of
from tools.rerun.commands import quote
from tools.rerun.fit import STEPS, fit, shorten
from tools.rerun.github import GitHubAPI, IssueComment
from tools.rerun.headline import retitle
from tools.rerun.layout import relayout
from tools.rerun.runs_table import NO_VERDICT, RunRow, find_row, put_row
from tools.rerun.verdicts import LABELS, FailureVerdict, verdict_cell
from tools.rerun.wrap import breakable_code

log = logging.getLogger(__name__)

MAX_FAILING = 10
ID_LIMIT = 256  # characters of a failing id shown: SGLang's reach ~200 (a 126-character path, class, test, params)
ERROR_LIMIT = 160  # characters of a failure's error line shown after its id
MAX_SECONDS = 7 * 24 * 3600.0  # a run reporting more than a week of test time has a broken report


class ReportError(RuntimeError):
    """The results could not be written into the reply."""


@dataclass(frozen=True)
class RunResults:
    """Counts, total seconds, and the failing/erroring node ids (all of them, in report order);
    ``cases``, the JUnit report's cases, for judging the failures, and ``error_lines``, each failing
    id's first error line (`ci.history.errors.error_line`, as ingest stores it; ``""`` when the
    report gives none), in the order of ``failing`` (neither is part of equality)."""

    passed: int
    failed: int
    skipped: int
    errors: int
    seconds: float
    failing: tuple[str, ...]
    cases: tuple[CaseResult, ...] = field(default=(), compare=False, repr=False)
    error_lines: tuple[str, ...] = field(default=(), compare=False, repr=False)


def first_error(case: CaseResult) -> str:
    """The error line of ``case``'s last failed or erroring attempt that has one (a retried test's
    last failure is the one that decided it), or ``""``."""
    lines = [error_line(a) for a in case.attempts if a.outcome in (FAILED, ERROR)]
    return next((line for line in reversed(lines) if line), "")


def summarize(path: str | Path, root: str | Path | None = None) -> RunResults | str:
    """The results in one JUnit XML file, or a sentence saying why there are none."""
    try:
        report = parse_junit(path, root=root)
    except JUnitError as exc:
        return f"the JUnit report is missing or unreadable ({exc})"
    if not report.cases:
        return "the JUnit report holds no test case"
    times = [c.time for c in report.cases] + [report.wall_time]
    if not all(math.isfinite(t) and 0 <= t <= MAX_SECONDS for t in times):
        return "the JUnit report has an impossible time (negative, infinite, NaN or over a week)"
    counts = {k: 0 for k in ("passed", "failed", "skipped", "error")}
    for case in report.cases:
        counts[case.outcome] += 1
    bad = [c for c in report.cases if c.outcome in (FAILED, ERROR)]
    failing = tuple(node_id(c) for c in bad)  # the history's ids
    seconds = report.wall_time or sum(c.time for c in report.cases)
    return RunResults(counts["passed"], counts["failed"], counts["skipped"], counts["error"], seconds, failing,
                      tuple(report.cases), tuple(first_error(c) for c in bad))


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{int(seconds // 60)} min {int(seconds % 60)} s"


def result_cell(results: RunResults | str, verdicts: Mapping[str, FailureVerdict] | None = None) -> str:
    """The result cell (it starts with ``**``, which marks a row as holding results): counts and
    time, then the failing ids (with break opportunities, `tools.rerun.wrap`). With several
    failures each id is followed by its verdict's kind (the details are in the verdict cell, and
    for one failure the verdict cell says it all). Each id then gets its error line after `` — ``,
    quoted like the id (`ERROR_LIMIT` characters), on the id's own ``<br>`` line so that
    `tools.rerun.fit` keeps or drops the two together. The kinds and errors come after the time,
    so `tools.rerun.fit`'s second step drops them with the ids."""
    if isinstance(results, str):
        return f"**no report**: the run produced no report: {breakable_code(results, limit=200)}"
    r = results
    verdicts = verdicts or {}
    outcome = "**failed**" if r.failed or r.errors else "**passed**"
    cell = (f"{outcome}: {r.passed} passed, {r.failed} failed, {r.skipped} skipped, {r.errors} errors "
            f"in {_duration(r.seconds)}")
    if r.failing:
        several = len(r.failing) > 1
        errors = dict(zip(r.failing, r.error_lines))
        shown = "<br>".join(breakable_code(node, limit=ID_LIMIT)
                            + (f" · {LABELS[verdicts[node].kind]}" if several and node in verdicts else "")
                            + (f" — {breakable_code(errors[node], limit=ERROR_LIMIT)}" if errors.get(node) else "")
                            for node in r.failing[:MAX_FAILING])
        more = len(r.failing) - MAX_FAILING
        cell += "<br>failing:<br>" + shown + (f"<br>… and {more} more" if more > 0 else "")
    return cell


def row_verdict(results: RunResults | str, verdicts: Mapping[str, FailureVerdict] | None = None) -> str:
    """The verdict cell of a run: `verdicts.verdict_cell` of its failing tests' verdicts (all of
    them, not only those the result cell shows); `NO_VERDICT` without failures or a history."""
    if isinstance(results, str) or not verdicts:
        return NO_VERDICT
    return verdict_cell([verdicts[n] for n in results.failing if n in verdicts])


@dataclass(frozen=True)
class ReportOutcome:
    """``writes``: PATCHes sent; ``lost``: lost updates detected and repaired; ``superseded``:
    a later report of the same row replaced ours (not an error)."""

    comment_id: int
    writes: int
    lost: int
    superseded: bool


class Reporter:
    """Writes one run's results into the bot's reply (see the module docstring)."""

    def __init__(self, client: GitHubAPI, repo: str, bot_login: str, *, settle: float = 12.0,
                 attempts: int = 6, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None, clock: Callable[[], float] = time.time):
        if settle < 0 or attempts < 1:
            raise ValueError(f"settle must be >= 0 and attempts >= 1, got {settle} and {attempts}")
        self.client, self.repo, self.bot_login = client, repo, bot_login
        self.settle, self.attempts, self.sleep, self.clock = settle, attempts, sleep, clock
        self.rng = rng or random.Random()

    def find_reply(self, pr: int, comment_id: int) -> IssueComment:
        for comment in self.client.list_issue_comments(self.repo, pr):
            if comment.user == self.bot_login and replies.answers(comment.body, comment_id):
                return comment
        raise ReportError(f"no reply of {self.bot_login} for comment {comment_id} on #{pr}")

    def report(self, pr: int, comment_id: int, tier: str, part: str, cell: str,
               run_url: str | None = None, slot: str = "", verdict: str = NO_VERDICT, *,
               only_if_waiting: bool = False, wait_slot: bool = True) -> ReportOutcome | None:
        """Put ``cell``, ``verdict`` (and the run link) into the row (tier, part), rewrite the
        headline (`tools.rerun.headline.retitle`) and lay the table out (`tools.rerun.layout`); raises `ReportError` when the row keeps getting
        lost after ``attempts`` writes, `GitHubError` when GitHub fails. ``only_if_waiting``
        (a run that ended without sending results): write nothing, and return None, when the row
        already holds results. ``wait_slot=False`` (a writer that is not the run's own job, paced
        by its own client) skips the wait for the run's write slot."""
        run = f"[run]({run_url})" if run_url else None
        writes = lost = 0
        shard = shard_of(slot) or shard_of(part)
        if shard is not None and wait_slot:
            self.sleep(report_slot_wait(self.clock(), *shard))
        for attempt in range(1, self.attempts + 1):
            reply = self.find_reply(pr, comment_id)
            current = find_row(reply.body, tier, part)
            if only_if_waiting and current is not None and current.has_results:
                return None
            base = current or RunRow(tier, part, "—", "—", "—", "")
            mine = base.with_result(cell, run, verdict)
            body = fit(relayout(retitle(put_row(reply.body, mine))))  # shortens cells to fit; never drops a row
            mine = find_row(body, tier, part) or mine  # as written (its cells may be shortened)
            self.client.edit_comment(self.repo, reply.id, body)
            writes += 1
            self.sleep(self.settle + self.rng.uniform(0, self.settle / 4))
            verdict = self._check(reply.id, mine)
            if verdict != "lost":
                return ReportOutcome(reply.id, writes, lost, verdict == "superseded")
            lost += 1
            log.warning("the row %s %s of comment %d was overwritten by a concurrent edit; writing it again "
                        "(attempt %d of %d)", tier, part, reply.id, attempt, self.attempts)
            self.sleep(self.rng.uniform(0.2, 2.0) * attempt)
        raise ReportError(f"the row {tier} {part} kept being overwritten by concurrent edits; gave up after "
                          f"{self.attempts} writes")

    def _check(self, reply_id: int, mine: RunRow) -> str:
        """``ok``, ``superseded`` (a different result is there) or ``lost``."""
        row = find_row(self.client.get_comment(self.repo, reply_id).body, mine.tier, mine.part)
        if row == mine or row in {shorten(mine, step) for step in STEPS}:  # a later `fit` shortened it
            return "ok"
        return "superseded" if row is not None and row.has_results else "lost"


__all__ = ["ERROR_LIMIT", "ID_LIMIT", "MAX_FAILING", "ReportError", "ReportOutcome", "Reporter", "RunResults", "first_error", "result_cell", "row_verdict",
           "summarize"]
