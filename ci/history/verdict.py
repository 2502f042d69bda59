"""Is this red mine? One verdict for each failing test of a run, computed here and nowhere else.

Contract (`judge`; docs/history.md#verdicts says why each rule is what it is). For a failure of
test N on tier T at commit S, the first of these that holds is its verdict:

1. ``infra``: the failure's own exception line names a runner-level cause (no CUDA device, a CUDA or
   NCCL error, the OOM killer, a lost runner, an exit by signal: `ci.history.errors.infra_kind`;
   never an assertion that quotes such text) and the runner is to blame
   (`ci.history.runners.runner_blame`: most of the run's tests failing so there at once, its rate
   out of line with the pool's, or N failing so on the whole pool every time); also ``infra``
   (`HICCUP`) when no runner is to blame and N never failed so on another runner in other runs
   (`ci.history.runners.failed_so_elsewhere`; a job killed by its time limit inside N is such a
   failure), or F's kind is a machine's only (no GPU, a GPU other processes hold, a full disk, a
   failing mount: `ci.history.infra_flakes.MACHINE_KINDS`): the error follows neither;
   else it follows the test and rules 2-5 judge F, its earlier failures of that kind N's flake
   evidence (`ci.history.infra_flakes`); when its failures of that kind split by code, not time
   (`ci.history.code_follow`: every run holding a commit failed so, runs of older code passed
   beside them), the pool is not blamed and main's failures so count as a breakage's in rules 3-5.
   Named with the runner's record. Also ``infra``
   (``runner-only``), whatever the error: N fails on F's runner only, in runs of other pull
   requests or main commits too, while the pool's other runners pass it since
   (`ci.history.runners.runner_only`: an image or driver update). So is a remote service's
   `ci.history.outages.outage`, and an outage told by its shape whatever its line says
   (`ci.history.outages.timed_outage`: one signature failing many tests of several files at once,
   at code that passed them before); a ``signal`` needs `MANY_CRASHES` or `crashed_elsewhere`.
   Not when that line is an API mismatch with an installed package that main's own runs failed at
   two or more commits (`ci.history.dependency_break`): a dependency's release, ``broken_on_main``.
2. ``flaky`` by direct evidence: N also passed on T at S (a retry within the run, or another run of
   the same commit), so the code is not what fails.
3. ``broken_on_main``: on the default branch (push and nightly reports; `ci.history.mainline` orders
   its commits), N fails on T since a commit and has not passed since (an open streak with two or
   more failing attempts, or with one whose signature is this failure's and is not a known flaky
   signature of N), or the pull request's merge base lies inside a streak main has since fixed (a
   base that never ran T stands for T's newest commit before it, `ci.history.mainline.place`,
   unless main's errors in the streak are all environmental).
   One failed run at one commit whose errors are all known flake signatures of N, or all of an
   environmental class some test of the history flakes with (rule 4), is no such streak (a flake
   firing); at the merge base it counts in rule 4 as one more failed run beside two or more failed
   attempts of the pull request (beside one, it is the flake firing twice), and is the breakage if
   the flake cannot explain the failures with it; neither is, nor a fixed streak the base lies in,
   when runs of 2 or more other pull requests based in it passed N (`ci.history.held_code`). The
   detail names the first failing commit, the last pass and the candidate commits between. Also ``broken_on_main`` when N's rate of failing with F's
   signature on the default branch moved up at a commit C the pull request holds and has not come
   down since (`ci.history.changepoint`: a race a commit brought in fails 40 % of runs, passing in
   between, and is checked before rule 2, since a retry that passes proves nothing then); other
   pull requests' runs count there too, each first attempt at its merge base (`_at_bases`).
   Before that, ``flaky`` when N fails only in the jobs that also ran a certain other test file and
   F's job ran it (`ci.history.neighbours`: order dependence, which follows the shards' layout).
   Last, a failure that rules 3-5 call ``new`` is ``broken_on_main`` when other authors' pull
   requests based at or after a commit C failed N with F, none there passed it, and runs based
   before C did (`ci.history.pr_base_evidence`: a branch that runs N on a schedule has not yet),
   unless ``changed`` shows the judged change touched what N runs; and with two such pull requests
   when main's record is sparse (`ci.history.sparse_main`: main's runs cancelled or stopped short,
   the fix's own pass skipped, none of N's flake signatures), naming them. Likewise when main cannot vouch
   for N at the merge base: N ran in each of main's last `HALT_SEEN` clean runs of T (that failed
   nothing) up to L and passed at L, main's runs of T since, up to the base, never ran N, each
   failed a test or passed none, the first and the newest failed (a job that stops at its first
   failing step), and F is specific, not environmental and none of N's flake signatures (`_halted`).
   Also when main has no run of N on T (a tier's first runs, or one that runs on pull requests
   only), no run of N on T passed, and pull requests of 3 other authors based at or before the
   merge base failed it with F (`ci.history.unvouched`); and when F is an API mismatch main's own
   runs failed at two or more commits (`ci.history.dependency_break`).
4. ``flaky`` by history: N has a flaky score on T (`ci.history.flaky`, at least `MIN_TRIALS`
   trials), the failure's signature is one N failed with as flaky evidence (a failure next to a
   pass on one commit, or a short flip between passes), the signature is not generic
   (`ci.history.errors.is_generic`: it would match any failure), and the failed runs (at S, and
   main's one-run flake at the merge base) are not less likely than `CHANCE` under "flaky"
   (`flake_chance`: N's score p and its learned retry correlation r,
   `ci.history.retries.RetryCorrelation`) than under "broken". Likewise a failure whose error is
   of an environmental class (`ci.history.errors.environment_kind`: a server that did not start, a
   port in use, a refused connection, a watchdog timeout) that some test of the history has failed
   with as flake evidence, even with no known signature or score of N's own: with no score (p = 0)
   only one failed run can be that flake, so a rerun that fails it too makes it ``new``. Likewise
   a signature that recurs in runs of other pull requests and commits while main passes N
   (`ci.history.recurring`: a CI without retries leaves no failure next to a pass), with its rate
   there as p; it also counts as a known flake signature of N in rule 3. So does main's open
   streak of one run at one commit when 2 or more other pull requests based there (holding that
   code) passed N (`ci.history.held_code`: one may be the breakage's fix).
5. ``new``: none of these; probably the change's own. Unless the same commit passed N on another
   tier and failed it on none, no other test of N's file failed on T there, and N failed on T
   once, with no crash (`ci.history.passed_beside`): then ``flaky``, worded as not sure (a flake's
   first failure, before any flake evidence). Unless there is nothing to compare with:
   no store, or no default-branch run of T in it (a first run); then its detail says so
   (`NO_HISTORY`) and the headline counts it as not judged, never as the change's.

A breakage is never called flaky: a signature N never failed with, a generic one, or a failure that
main shows consistently is not flaky. ``as_of`` (the judged run's newest report id) cuts every read,
so a verdict asked later is the one given when the run was reported. Each `Verdict` has a one-line ``detail``; `tally` makes the
headline of a set of results (``3 passed, 1 failed: broken on main since abc1234``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Collection, Sequence

from ci.history.changepoint import ChangePoint, change_point
from ci.history.classify import signature
from ci.history.code_follow import CodeQuestion
from ci.history.dependency_break import dependency_verdict
from ci.history.errors import LOST_RUNNER, SIGNAL, environment_kind, is_generic
from ci.history.flaky import DEFAULT_LEVEL, flaky_scores, node_ids
from ci.history.held_code import held_streaks
from ci.history.infra_flakes import MACHINE_ONLY, can_follow_test, infra_flakes
from ci.history.mainline import MAX_CANDIDATES, MainRun, fail_streaks, ingest_order, main_order, place, position
from ci.history.model import PASS, FlakyScore
from ci.history.neighbours import judged_order_dependence
from ci.history.outages import OUTAGE, TimedOutage, outage, timed_outage
from ci.history.passed_beside import PassedBeside, passed_beside
from ci.history.pr_base_evidence import PrBases
from ci.history.recurring import Recurrence, recurring
from ci.history.retries import RetryCorrelation
from ci.history.runners import (RunnerHealth, RunnerOnly, failed_so_elsewhere, runner_blame, runner_health,
                                 runner_only)
from ci.history.sparse_main import peer_break
from ci.history.store import Store
from ci.history.unvouched import unvouched
from ci.history.verdict_queries import (based_runs, crashed_elsewhere, has_main_history, held_passes,
                                         main_runs, same_commit,
                                         tier_reports)
from ci.history.verdict_model import Failure, Verdict, failure_from_attempts  # noqa: F401 (re-exported)
from ci.history.verdict_streaks import breakage, broken_text, failed_runs, flake_chance, score_text  # noqa: F401
from ci.history.verdict_tally import (BROKEN_ON_MAIN, FLAKY, INFRA, NEW, NO_HISTORY, SHORT, VERDICTS, Tally,  # noqa: F401
                                      by_concern, short, tally)  # re-exported: ci.history.verdict is the one import point

MIN_TRIALS = 5
CHANCE = 0.05
HALT_SEEN = 3  # main's last runs of the tier that failed nothing: each ran N before it went unseen (`_halted`)
MANY_CRASHES = 3  # tests of one run killed by a signal at once: the machine, not one change's bug
HICCUP = ("not the runner's (in line with the pool) nor the test's (it never failed so on another runner): "
          "a hiccup; rerun it")


def judge(store: Store | None, failures: Sequence[Failure], *, merge_base: str = "",
          git_order: Sequence[str] | None = None, level: float = DEFAULT_LEVEL,
          as_of: int | None = None, changed: Collection[str] = ()) -> list[Verdict]:
    """A `Verdict` for each failure, in the given order (see the module docstring). Without a
    store only rules 1, 2 and 5 can hold. ``as_of``: the id of the judged run's newest report; only
    reports up to it are read, so the verdict does not change as later history arrives (None: all).
    ``changed``: the paths the judged change touched, when known (`ci.history.pr_base_evidence`)."""
    if store is None:
        return [_without_history(f) for f in failures]
    health = runner_health(store, as_of=as_of) if any(f.infra for f in failures) else {}
    out: dict[int, Verdict] = {}
    by_tier: dict[tuple[str, str], list[int]] = {}
    for i, f in enumerate(failures):
        by_tier.setdefault((f.repo, f.tier), []).append(i)
    for (repo, tier), indexes in by_tier.items():
        nodes = sorted({failures[i].node for i in indexes})
        ids = node_ids(store, nodes)
        main = main_runs(store, repo, tier, ids, as_of)
        # an infra-looking error that follows the test is its flake evidence, when one is judged
        own = infra_flakes(store, repo, tier, as_of=as_of).owns if any(failures[i].infra for i in indexes) else None
        scores = {s.node: s for s in flaky_scores(store, tier=tier, min_trials=MIN_TRIALS, level=level, nodes=nodes,
                                                  as_of=as_of, unscored=True, own=own)}
        retries = RetryCorrelation(store, tier, as_of, own)
        first_run = not has_main_history(store, repo, tier, as_of)
        flaked = _flaked_kinds(store, as_of) if any(environment_kind(failures[i].error) for i in indexes) else \
            frozenset()
        orders: dict[str, tuple[str, ...]] = {}
        full = ingest_order(store, repo, as_of=as_of) if not git_order else ()
        bases = PrBases(store, repo, git_order, as_of)
        for i in indexes:
            f = failures[i]
            code = CodeQuestion(store, repo, tier, ids.get(f.node), f.infra, f.sha, _node_order(
                store, repo, tier, f.node, main, orders, git_order, as_of), full, as_of=as_of) \
                if f.infra not in ("", SIGNAL, LOST_RUNNER) else None
            why = runner_blame(store, repo, tier, f.runner, f.sha, ids.get(f.node), as_of=as_of,
                               code=code) if code is not None else ""
            if why is None and (not (elsewhere := failed_so_elsewhere(store, repo, tier, ids.get(f.node), f.infra,
                                f.runner, f.sha, as_of=as_of)) or not can_follow_test(f.infra)):
                out[i] = _infra(f, health, MACHINE_ONLY if elsewhere else HICCUP)
                continue
            if why is None:
                f = replace(f, infra="")  # an infra-looking error that follows the test, not the machine
            elif why:
                out[i] = _infra(f, health, why)
                continue
            if not f.infra and (spell := outage(store, f.error, as_of=as_of) or timed_outage(
                    store, f.error, f.fingerprint, repo=f.repo, as_of=as_of)) is not None:
                out[i] = isinstance(spell, TimedOutage) and dependency_verdict(store, f, spell, as_of=as_of) or replace(
                    _infra(replace(f, infra=OUTAGE), {}), detail=f"infra: {spell.describe()}")
                continue
            if f.infra == SIGNAL and sum(g.infra == SIGNAL for g in failures) < MANY_CRASHES and not crashed_elsewhere(
                    store, repo, tier, ids.get(f.node), f.sha, merge_base, as_of):
                f = replace(f, infra="")  # a crash no one else's run shows: judged as any failure
            runs = main.get(f.node, [])
            if why is None and code is not None and code():  # it follows a commit: main's failures so are too
                runs = [replace(run, infra="") if run.infra == code.kind else run for run in runs]
            order = _node_order(store, repo, tier, f.node, main, orders, git_order, as_of)
            same = same_commit(store, repo, tier, f.sha, ids.get(f.node), as_of)
            only = None if f.infra else runner_only(store, repo, tier, ids.get(f.node), f.runner, f.sha, as_of=as_of)
            if only is not None:
                health = health or runner_health(store, as_of=as_of)
                out[i] = _on_one_runner(f, only, health)
                continue
            at = place(order, full, merge_base) if merge_base else None
            walk = [] if f.infra else runs + _at_bases(based_runs(store, repo, tier, ids.get(f.node), f.sha, as_of),
                                                       order, full)
            polluted = None if f.infra or f.passed_on_retry else judged_order_dependence(
                store, repo, tier, f.node, ids.get(f.node), f.sha, f.fingerprint, walk, order, as_of)
            if polluted is not None:
                out[i] = Verdict(f.node, f.tier, f.sha, FLAKY, f"flaky: it {polluted.describe()}", f.error,
                                 f.fingerprint, f.runner)
                continue
            moved = None if f.infra else change_point(walk, order, f.fingerprint)
            if moved is not None and (at is not None and at >= moved.index or not merge_base):
                out[i] = _intermittent(f, moved, scores.get(f.node))
                continue
            placed = at is not None and position(order, merge_base) is None  # the base did not run the tier
            learned = _beside_breakages(recurring(store, repo, tier, ids.get(f.node), f.sha, as_of=as_of),
                                        runs, order) or _fired_once(store, repo, tier, ids.get(f.node), f, runs, order,
                                                                     as_of)
            held = held_streaks(store, repo, tier, ids.get(f.node), fail_streaks(runs, order), order, at, f.sha,
                                as_of=as_of)
            out[i] = _decide(f, runs, order, scores.get(f.node), same, merge_base, health, retries, flaked,
                             (at, placed), learned, held)
            if out[i].verdict == NEW and merge_base and (found := bases.broken_since(
                    tier, f.node, ids.get(f.node), f.sha, merge_base, f.fingerprint, runs, changed)) is not None:
                out[i] = replace(out[i], verdict=BROKEN_ON_MAIN, detail=found.describe(), since=found.since,
                                 last_pass=found.last_pass, candidates=found.candidates,
                                 candidate_count=found.candidate_count)
            if out[i].verdict == NEW and merge_base and (peers := peer_break(
                    bases, tier, f.node, ids.get(f.node), f.sha, merge_base, f.error, f.fingerprint, main=runs,
                    flaky_prints=_flake_prints(scores.get(f.node), learned), changed=changed,
                    kind="" if f.infra or not can_follow_test(failures[i].infra) else failures[i].infra)) is not None:
                out[i] = replace(out[i], verdict=BROKEN_ON_MAIN, detail=peers.describe(), since=peers.since,
                                 last_pass=peers.last_pass, candidates=peers.candidates,
                                 candidate_count=peers.candidate_count)
            if out[i].verdict == NEW and merge_base and (lone := unvouched(
                    bases, tier, f.node, ids.get(f.node), f.sha, merge_base, f.error, f.fingerprint, main=runs,
                    main_ran_tier=not first_run, flaky_prints=_flake_prints(scores.get(f.node), learned),
                    changed=changed, kind="" if f.infra or not can_follow_test(failures[i].infra) else
                    failures[i].infra)) is not None:
                out[i] = replace(out[i], verdict=BROKEN_ON_MAIN, detail=lone.describe(tier), since=lone.since)
            if out[i].verdict == NEW and not f.infra and (dep := dependency_verdict(store, f, None, as_of=as_of)):
                out[i] = dep
            if out[i].verdict == NEW and not f.infra and (halted := _halted(store, repo, tier, f, runs, order, at, as_of,
                                                                             scores.get(f.node))) is not None:
                out[i] = halted
            if out[i].verdict == NEW and (beside := passed_beside(store, repo, tier, f.sha, ids.get(f.node), same[1],
                                                                  failures[i].infra, as_of)) is not None:
                out[i] = _first_flake(out[i], beside)
            if first_run and out[i].verdict == NEW:
                out[i] = replace(out[i], detail=f"{NO_HISTORY} (no default-branch run of tier {tier} in the history)")
    return [out[i] for i in range(len(failures))]


def _node_order(store: Store, repo: str, tier: str, node: str, main: dict[str, list[MainRun]],
                orders: dict[str, tuple[str, ...]], git_order: Sequence[str] | None,
                as_of: int | None) -> tuple[str, ...]:
    """The default-branch order ``node``'s main runs are read in (`main_order`), once per node."""
    if node not in orders:
        orders[node] = main_order(store, repo, tier, main.get(node, []), git_order, as_of=as_of)
    return orders[node]


def _at_bases(based: list[MainRun], order: tuple[str, ...], full: Sequence[str]) -> list[MainRun]:
    """Pull request runs as attempts of the tier's commit their merge base holds (`place`), so a
    rate that rose at a commit shows in every run based after it, not only in main's one run per
    commit; runs whose base the order cannot place are left out."""
    placed: dict[str, int | None] = {}
    out = []
    for run in based:
        if run.sha not in placed:
            placed[run.sha] = place(order, full, run.sha)
        at = placed[run.sha]
        if at is not None:
            out.append(replace(run, sha=order[at]))
    return out


def _without_history(f: Failure) -> Verdict:
    if f.infra:
        return _infra(f, {})
    if f.passed_on_retry:
        return Verdict(f.node, f.tier, f.sha, FLAKY, "flaky: failed, then passed on retry in this run", f.error,
                       f.fingerprint, f.runner)
    return Verdict(f.node, f.tier, f.sha, NEW, NO_HISTORY, f.error, f.fingerprint, f.runner)


def _infra(f: Failure, health: dict[str, RunnerHealth], why: str = "") -> Verdict:
    record = health.get(f.runner)
    where = (f" on runner {f.runner}" if f.runner else " (runner unknown)") + (f", {why}" if why else "")
    detail = f"infra: {f.infra}{where}"
    if record is not None and record.infra_reports:
        detail += f"; {record.describe()}"
    return Verdict(f.node, f.tier, f.sha, INFRA, detail, f.error, f.fingerprint, f.runner, f.infra,
                   runner_health=record)


def _on_one_runner(f: Failure, only: RunnerOnly, health: dict[str, RunnerHealth]) -> Verdict:
    record = health.get(f.runner)
    detail = f"infra: {only.describe()}"
    if record is not None and record.infra_reports:
        detail += f"; {record.describe()}"
    return Verdict(f.node, f.tier, f.sha, INFRA, detail, f.error, f.fingerprint, f.runner, "runner-only",
                   runner_health=record)


def _beside_breakages(learned: Recurrence | None, runs: list[MainRun], order: tuple[str, ...]) -> Recurrence | None:
    """``learned`` without the signatures main failed with as a breakage (a streak of two or more
    commits, or of two or more failed attempts): a bug that main had and a pull request brings back
    recurs across runs too, and is not a flake."""
    if learned is None:
        return None
    broke = {fp for s in fail_streaks(runs, order) if s.commits >= 2 or s.failing_attempts >= 2 for fp in s.fingerprints}
    kept = learned.fingerprints - broke
    return replace(learned, fingerprints=kept) if kept else None


def _fired_once(store: Store, repo: str, tier: str, node_id: int | None, f: Failure, runs: list[MainRun],
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


def _halted(store: Store, repo: str, tier: str, f: Failure, runs: list[MainRun], order: tuple[str, ...],
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


def _first_flake(v: Verdict, beside: PassedBeside) -> Verdict:
    return replace(v, verdict=FLAKY, detail=f"flaky: probably a flake's first failure, not this change's: {beside.describe()}"
                   " and no other test of its file failed here (no flake evidence for it yet; rerun to be sure)")


def _intermittent(f: Failure, moved: ChangePoint, score: FlakyScore | None) -> Verdict:
    n = len(moved.candidates)
    passed = f", last passed at {short(moved.last_clean)}" if moved.last_clean else ", never ran there before"
    detail = (f"broken on main since {short(moved.since)} ({n} candidate commit{'s' if n != 1 else ''}: "
              f"{', '.join(short(c) for c in moved.candidates)}{passed}); it {moved.describe()}")
    return Verdict(f.node, f.tier, f.sha, BROKEN_ON_MAIN, detail, f.error, f.fingerprint, f.runner,
                   since=moved.since, last_pass=moved.last_clean, candidates=moved.candidates, candidate_count=n,
                   score=score.score if score else None, interval=score.interval if score else None)


def _decide(f: Failure, runs: list[MainRun], order: tuple[str, ...], score: FlakyScore | None,
            same: tuple[int, list[int]], merge_base: str, health: dict[str, RunnerHealth],
            retries: RetryCorrelation, flaked: frozenset[str] = frozenset(),
            base_at: tuple[int | None, bool] = (None, False), learned: Recurrence | None = None,
            held: frozenset[int] = frozenset()) -> Verdict:
    if f.infra:
        return _infra(f, health)
    passes, fails_here = same
    base = dict(error=f.error, fingerprint=f.fingerprint, runner=f.runner,
                score=score.score if score else None, interval=score.interval if score else None)
    if f.passed_on_retry or passes:
        where = "on retry in this run" if f.passed_on_retry else "in another run of the same commit"
        return Verdict(f.node, f.tier, f.sha, FLAKY, f"flaky: failed, then passed {where}" + score_text(score),
                       **base)
    flaky_prints = ({fp for fp, _, _ in score.fingerprints} if score else set()) | set(learned.fingerprints if learned
                                                                                        else ())
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


def _flake_prints(score: FlakyScore | None, learned: Recurrence | None) -> set[str]:
    """N's known flaky signatures: its score's and those recurring while main passes it."""
    return ({fp for fp, _, _ in score.fingerprints} if score else set()) | set(learned.fingerprints if learned else ())


def _flaked_kinds(store: Store, as_of: int | None) -> frozenset[str]:
    """The environmental error classes (`environment_kind`) any test of the history, on any tier,
    failed with as flake evidence: this CI's machines and harness are seen to produce them by chance."""
    return frozenset(kind for s in flaky_scores(store, as_of=as_of, unscored=True)
                     for _, text, _ in s.fingerprints if (kind := environment_kind(text)))
