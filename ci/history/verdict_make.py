"""The verdicts `ci.history.verdict.judge` builds in more than one place: infra (with the runner's
record), a runner-only failure, a failure judged without a store, a flake's first failure, and an
intermittent breakage main's rate shows. Each takes the judged `Failure` and returns its `Verdict`."""

from __future__ import annotations

from dataclasses import replace

from ci.history.changepoint import ChangePoint
from ci.history.model import FlakyScore
from ci.history.passed_beside import PassedBeside
from ci.history.runners import RunnerHealth, RunnerOnly
from ci.history.verdict_model import Failure, Verdict
from ci.history.verdict_tally import BROKEN_ON_MAIN, FLAKY, INFRA, NEW, NO_HISTORY, short


def without_history(f: Failure) -> Verdict:
    if f.infra:
        return infra_verdict(f, {})
    if f.passed_on_retry:
        return Verdict(f.node, f.tier, f.sha, FLAKY, "flaky: failed, then passed on retry in this run", f.error,
                       f.fingerprint, f.runner)
    return Verdict(f.node, f.tier, f.sha, NEW, NO_HISTORY, f.error, f.fingerprint, f.runner)


def infra_verdict(f: Failure, health: dict[str, RunnerHealth], why: str = "") -> Verdict:
    record = health.get(f.runner)
    where = (f" on runner {f.runner}" if f.runner else " (runner unknown)") + (f", {why}" if why else "")
    detail = f"infra: {f.infra}{where}"
    if record is not None and record.infra_reports:
        detail += f"; {record.describe()}"
    return Verdict(f.node, f.tier, f.sha, INFRA, detail, f.error, f.fingerprint, f.runner, f.infra,
                   runner_health=record)


def on_one_runner(f: Failure, only: RunnerOnly, health: dict[str, RunnerHealth]) -> Verdict:
    record = health.get(f.runner)
    detail = f"infra: {only.describe()}"
    if record is not None and record.infra_reports:
        detail += f"; {record.describe()}"
    return Verdict(f.node, f.tier, f.sha, INFRA, detail, f.error, f.fingerprint, f.runner, "runner-only",
                   runner_health=record)


def first_flake(v: Verdict, beside: PassedBeside) -> Verdict:
    return replace(v, verdict=FLAKY, detail=f"flaky: probably a flake's first failure, not this change's: {beside.describe()}"
                   " and no other test of its file failed here (no flake evidence for it yet; rerun to be sure)")


def intermittent(f: Failure, moved: ChangePoint, score: FlakyScore | None) -> Verdict:
    n = len(moved.candidates)
    passed = f", last passed at {short(moved.last_clean)}" if moved.last_clean else ", never ran there before"
    detail = (f"broken on main since {short(moved.since)} ({n} candidate commit{'s' if n != 1 else ''}: "
              f"{', '.join(short(c) for c in moved.candidates)}{passed}); it {moved.describe()}")
    return Verdict(f.node, f.tier, f.sha, BROKEN_ON_MAIN, detail, f.error, f.fingerprint, f.runner,
                   since=moved.since, last_pass=moved.last_clean, candidates=moved.candidates, candidate_count=n,
                   score=score.score if score else None, interval=score.interval if score else None)
