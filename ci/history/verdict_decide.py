"""Rules 2-5 of `ci.history.verdict` for one failure, once rule 1 and the rate's change point have
had their say: flaky by a pass beside it, broken_on_main by main's streak or the merge base's
failure, flaky by history (a known signature, an environmental class the CI flakes with) when the
failed runs are likely enough under "flaky", else new (`decide`)."""

from __future__ import annotations

from ci.history.errors import environment_kind, is_generic
from ci.history.flaky import flaky_scores
from ci.history.mainline import MainRun, fail_streaks
from ci.history.model import FlakyScore
from ci.history.recurring import Recurrence
from ci.history.retries import RetryCorrelation
from ci.history.runners import RunnerHealth
from ci.history.store import Store
from ci.history.verdict_make import infra_verdict
from ci.history.verdict_model import Failure, Verdict
from ci.history.verdict_streaks import breakage, broken_text, failed_runs, flake_chance, score_text
from ci.history.verdict_tally import BROKEN_ON_MAIN, FLAKY, NEW

CHANCE = 0.05  # below this chance under "flaky", the failed runs are not the flake's


def decide(f: Failure, runs: list[MainRun], order: tuple[str, ...], score: FlakyScore | None,
            same: tuple[int, list[int]], merge_base: str, health: dict[str, RunnerHealth],
            retries: RetryCorrelation, flaked: frozenset[str] = frozenset(),
            base_at: tuple[int | None, bool] = (None, False), learned: Recurrence | None = None,
            held: frozenset[int] = frozenset()) -> Verdict:
    if f.infra:
        return infra_verdict(f, health)
    passes, fails_here = same
    base = dict(error=f.error, fingerprint=f.fingerprint, runner=f.runner,
                score=score.score if score else None, interval=score.interval if score else None)
    if f.passed_on_retry or passes:
        where = "on retry in this run" if f.passed_on_retry else "in another run of the same commit"
        return Verdict(f.node, f.tier, f.sha, FLAKY, f"flaky: failed, then passed {where}" + score_text(score),
                       **base)
    flaky_prints = flake_prints(score, learned)
    known_flake = bool(f.fingerprint) and f.fingerprint in flaky_prints and not is_generic(f.error)
    environment = "" if known_flake else environment_kind(f.error)
    environment = environment if environment in flaked else ""
    streaks = fail_streaks(runs, order)
    streak = breakage(streaks, f.fingerprint, known_flake, flaky_prints, base_at, flaked, held)
    if streak is not None:
        return Verdict(f.node, f.tier, f.sha, BROKEN_ON_MAIN, broken_text(streak, f.fingerprint), since=streak.first_fail,
                       last_pass=streak.last_pass, fixed_at=streak.fixed_at, candidates=streak.candidates,
                       candidate_count=streak.candidate_count, **base)
    if ((score is not None or learned is not None) and known_flake) or environment:
        tries, at_base = failed_runs(f.failures, fails_here, streaks, order, flaky_prints, merge_base, flaked)
        # no score: everyone's runs' rate, else only one failed run can be the flake
        p = score.score if score is not None else learned.rate if learned is not None and known_flake else 0.0
        # main's one flake-like run at the base weighs against the flake only beside a run that failed again
        if at_base is not None and (at_base.first_index in held or sum(tries[:-1]) < 2):
            tries, at_base = tries[:-1], None if at_base.first_index in held else at_base
        r = retries.rate(f.node).mean if sum(tries) >= 2 else 0.0
        chance = flake_chance(p, r, tries)
        if chance < CHANCE and at_base is not None:  # the base failed the same way: main's, not the change's
            return Verdict(f.node, f.tier, f.sha, BROKEN_ON_MAIN, broken_text(at_base, f.fingerprint), since=at_base.first_fail,
                           last_pass=at_base.last_pass, fixed_at=at_base.fixed_at, candidates=at_base.candidates,
                           candidate_count=at_base.candidate_count, **base)
        if chance < CHANCE:
            return Verdict(f.node, f.tier, f.sha, NEW, f"new: failed {sum(tries)} attempts in {len(tries)} "
                           f"run{'s' if len(tries) != 1 else ''} with no pass; a flake of its rate "
                           f"({p:.0%}, a retry after a flake failing {r:.0%}) would do that "
                           f"{chance:.1%} of the time", **base)
        own = score is not None and f.fingerprint in {fp for fp, _, _ in score.fingerprints}
        why = ("the same failure as its earlier flakes" if own else f"an intermittent failure: it {learned.describe()}"
               if known_flake and learned else f"an environmental error ({environment}) that tests here flake with")
        return Verdict(f.node, f.tier, f.sha, FLAKY, f"flaky: {why}" + score_text(score), **base)
    why = ("its error is generic, so it matches no earlier flake" if score and f.fingerprint in flaky_prints
           else "an error this test never failed with as a flake" if score else "not failing on the default branch")
    return Verdict(f.node, f.tier, f.sha, NEW, f"new: probably this change's ({why})", **base)


def flake_prints(score: FlakyScore | None, learned: Recurrence | None) -> set[str]:
    """N's known flaky signatures: its score's and those recurring while main passes it."""
    return ({fp for fp, _, _ in score.fingerprints} if score else set()) | set(learned.fingerprints if learned else ())


def flaked_kinds(store: Store, as_of: int | None) -> frozenset[str]:
    """The environmental error classes (`environment_kind`) any test of the history, on any tier,
    failed with as flake evidence: this CI's machines and harness are seen to produce them by chance."""
    return frozenset(kind for s in flaky_scores(store, as_of=as_of, unscored=True)
                     for _, text, _ in s.fingerprints if (kind := environment_kind(text)))
