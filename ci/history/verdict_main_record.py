"""Two readings of main's record for `ci.history.verdict`: a flake signature learned across runs
kept apart from main's breakages and main's one-run streak that held code passed
(`beside_breakages`, `fired_once`), and a test main stopped reaching after it last passed
(`halted`)."""

from __future__ import annotations

from dataclasses import replace

from ci.history.errors import environment_kind, is_generic
from ci.history.held_code import held_streaks
from ci.history.mainline import MAX_CANDIDATES, MainRun, fail_streaks, position
from ci.history.model import PASS, FlakyScore
from ci.history.recurring import Recurrence
from ci.history.store import Store
from ci.history.verdict_model import Failure, Verdict
from ci.history.verdict_queries import held_passes, tier_reports
from ci.history.verdict_tally import BROKEN_ON_MAIN, short

HALT_SEEN = 3  # main's last runs of the tier that failed nothing: each ran N before it went unseen (`halted`)


def beside_breakages(learned: Recurrence | None, runs: list[MainRun], order: tuple[str, ...]) -> Recurrence | None:
    """``learned`` without the signatures main failed with as a breakage (a streak of two or more
    commits, or of two or more failed attempts): a bug that main had and a pull request brings back
    recurs across runs too, and is not a flake."""
    if learned is None:
        return None
    broke = {fp for s in fail_streaks(runs, order) if s.commits >= 2 or s.failing_attempts >= 2 for fp in s.fingerprints}
    kept = learned.fingerprints - broke
    return replace(learned, fingerprints=kept) if kept else None


def fired_once(store: Store, repo: str, tier: str, node_id: int | None, f: Failure, runs: list[MainRun],
                order: tuple[str, ...], as_of: int | None) -> Recurrence | None:
    """Main's open streak of one run at one commit, when runs of `HELD_SOURCES` other pull requests
    holding that code passed the test (`held_code`): the code does not always fail it, so that run
    was the test's flake. One such pull request is not enough: the fix of a real breakage is based
    on the broken commit and passes the test."""
    streaks = fail_streaks(runs, order)
    last = streaks[-1] if streaks else None
    if last is None or not last.open or last.runs != 1 or not last.fingerprints or last.first_index not in held_streaks(
            store, repo, tier, node_id, [last], order, last.first_index, f.sha, as_of=as_of):
        return None
    passed = held_passes(store, repo, tier, node_id, order[last.first_index:], f.sha, as_of)
    return Recurrence(frozenset(last.fingerprints), 1, passed + 1, 1) if passed else None


def halted(store: Store, repo: str, tier: str, f: Failure, runs: list[MainRun], order: tuple[str, ...],
            at: int | None, as_of: int | None, score: FlakyScore | None) -> Verdict | None:
    """``broken_on_main`` when main cannot vouch for N at the merge base: N last ran on main at a
    commit where it passed, and main's runs of the tier since, up to the base, never reached N, the
    first and the newest failing other tests (a job that stops at its first failing step). A
    failure of N in code holding those commits, with a specific error that is none of N's flakes,
    is then main's as far as main's record shows."""
    if at is None or not f.fingerprint or is_generic(f.error) or environment_kind(f.error) or (
            score is not None and f.fingerprint in {fp for fp, _, _ in score.fingerprints}):
        return None
    ran = {i: run.kind for run in runs if (i := position(order, run.sha)) is not None and i <= at}
    if not ran or ran[max(ran)] != PASS or any(run.kind != PASS for run in runs if run.sha == order[max(ran)]):
        return None
    last = max(ran)
    reports = tier_reports(store, repo, tier, order[max(0, last - 4 * HALT_SEEN):at + 1], as_of)
    before = [sha for sha in order[:last + 1] if sha in reports and not reports[sha][0]][-HALT_SEEN:]
    silent = [sha for sha in order[last + 1:at + 1] if sha in reports]
    seen = {run.sha for run in runs}
    # N ran in each of main's clean runs before (not a test main selects now and then; a run that
    # failed may have stopped early), and every run since failed something or passed nothing
    if len(before) < HALT_SEEN or not seen.issuperset(before) or not silent or not (
            reports[silent[0]][0] and reports[silent[-1]][0]) or any(passed and not failed
                                                                       for failed, passed in map(reports.get, silent)):
        return None
    candidates = order[last + 1:order.index(silent[0]) + 1]
    n = len(candidates)
    detail = (f"broken on main since {short(silent[0])} as far as main shows ({n} candidate commit{'s' if n != 1 else ''}"
              f": {', '.join(short(c) for c in candidates[:MAX_CANDIDATES])}, last passed at {short(order[last])}); "
              f"main has not run it since: its {len(silent)} run{'s' if len(silent) != 1 else ''} of {tier} up to the "
              "base failed other tests first")
    return Verdict(f.node, f.tier, f.sha, BROKEN_ON_MAIN, detail, f.error, f.fingerprint, f.runner, since=silent[0],
                   last_pass=order[last], candidates=tuple(candidates[:MAX_CANDIDATES]), candidate_count=n)
