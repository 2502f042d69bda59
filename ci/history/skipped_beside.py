"""Main's failures of a test at commits whose other runs of the tier skipped it: not a breakage.

pytest reports a test it skipped (``pytest.skip``, a ``skipif`` mark) as skipped, never as failed,
and broken code fails it in every run that reaches its body. So when the default branch never
passed test N on tier T (N is one that T skips: a GPU that lacks a feature, a platform without a
compiler), a failure of N on T at a commit where, or after which, main's runs of T skipped N is not
what that code does: the code at the skip (which holds the failing commit's) did not fail it; what
the run met decided. Such failures are N's flake evidence, like a failure beside a pass
(`ci.history.mainline.fail_streaks` reads a commit with a pass as passing, and ignores skips), and
make no streak. Two guards keep breakages: failures after main's newest skip of N on T stay (a
commit that made T run N, its skip condition dropped, and broke it), and so do failures at two or
more consecutive commits of main's record with no skip between (a window in which T ran N and
failed it, closed by a fix that restored the skip); a flake fires at lone commits between skips.

Contract (`skipped_beside`): pure, on main's runs of N on T (`ci.history.mainline.MainRun`, skips
included) and the order they are read in. The guard: one pass of N on T anywhere in main's record
(N runs there; a streak is judged as any) and nothing is returned; nor when no lone failure (or
one at a commit that also skipped N) lies at or before a skip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ci.history.mainline import MainRun, position
from ci.history.model import BROKEN, FAIL, PASS, SKIP
from ci.history.recurring import Recurrence


@dataclass(frozen=True)
class SkippedBeside(Recurrence):
    """Main's failures of N at or before a skip of it: their signatures, the failed runs among
    main's runs of N on T that failed or skipped it (its rate there), their commits and reports."""

    reports: frozenset[int]

    def describe(self) -> str:
        """``failed so in 3 of 101 of main's runs of the tier, at 3 commits it skipped at or after``"""
        return (f"failed so in {self.failed_runs} of {self.runs} of main's runs of the tier, at {self.sources} "
                f"commit{'s' if self.sources != 1 else ''} it skipped at or after")


def skipped_beside(runs: Sequence[MainRun], order: Sequence[str]) -> SkippedBeside | None:
    """The `SkippedBeside` of main's ``runs`` of N on T (see the module docstring): the failures
    at or before main's newest skip of N on T, each at a commit that skipped N too or between
    commits that skipped it; None when N passed on T on main or no failure is so."""
    failed: dict[int, list[MainRun]] = {}
    newest_skip = -1
    for run in runs:
        if run.kind == PASS:
            return None
        at = position(order, run.sha)
        if at is None or run.infra:
            continue
        if run.kind == SKIP:
            newest_skip = max(newest_skip, at)
        elif run.kind in (FAIL, BROKEN):
            failed.setdefault(at, []).append(run)
    skipped_at = {position(order, run.sha) for run in runs if run.kind == SKIP and not run.infra}
    # consecutive failing commits with no skip between (two or more) are the code's: a window that ran N and broke it
    marks = sorted(set(failed) | skipped_at - {None})
    lone = {at for i, at in enumerate(marks) if at in failed and (at in skipped_at or (
        (i == 0 or marks[i - 1] in skipped_at) and (i + 1 == len(marks) or marks[i + 1] in skipped_at)))}
    failed = {at: fails for at, fails in failed.items() if at <= newest_skip and at in lone}
    if not failed:
        return None
    prints = frozenset(run.fingerprint for fails in failed.values() for run in fails if run.fingerprint)
    if not prints:
        return None
    reports = frozenset(run.report_id for fails in failed.values() for run in fails)
    counted = {run.report_id for run in runs if run.kind in (SKIP, FAIL, BROKEN) and not run.infra}
    return SkippedBeside(prints, len(reports), len(counted), len(failed), reports)


def without_skipped(runs: Sequence[MainRun], beside: SkippedBeside | None) -> list[MainRun]:
    """``runs`` less the failures ``beside`` reads as flake evidence: they make no streak."""
    if beside is None:
        return list(runs)
    return [run for run in runs if run.kind not in (FAIL, BROKEN) or run.infra or run.report_id not in beside.reports]
