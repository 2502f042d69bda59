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
   failing mount: `ci.history.infra_flakes.MACHINE_KINDS`; a GPU's hardware fault, an uncorrectable
   ECC error: `ci.history.hardware.machine_only`): the error follows neither;
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
   Main's failures of N on a tier where it never passed, each at or before a commit where main
   skipped N there and not in a run of consecutive failing commits, make no streak: they are N's
   flake evidence, their signatures known flake signatures (`ci.history.skipped_beside`).
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
   failing step), and F is specific, not environmental and none of N's flake signatures
   (`ci.history.verdict_main_record.halted`).
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
   there as p; it also counts as a known flake signature of N in rule 3. Failing that, the same read over
   every tier of the repository together (`ci.history.other_tiers`: a new tier has no flake of its
   own yet), unless ``changed`` shows the change touched what N runs or the merge base lies inside
   main's streak of F on another tier. So does main's open
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

from dataclasses import replace
from typing import Collection, Sequence

from ci.history.changepoint import change_point
from ci.history.code_follow import CodeQuestion
from ci.history.dependency_break import dependency_verdict
from ci.history.errors import LOST_RUNNER, SIGNAL, environment_kind
from ci.history.flaky import DEFAULT_LEVEL, flaky_scores, node_ids
from ci.history.held_code import held_streaks
from ci.history.hardware import machine_only
from ci.history.infra_flakes import MACHINE_KINDS, MACHINE_ONLY, infra_flakes
from ci.history.mainline import MainRun, fail_streaks, ingest_order, main_order, place, position
from ci.history.neighbours import judged_order_dependence
from ci.history.other_tiers import on_other_tiers
from ci.history.outages import OUTAGE, TimedOutage, outage, timed_outage
from ci.history.pr_base_evidence import PrBases
from ci.history.recurring import recurring
from ci.history.retries import RetryCorrelation
from ci.history.runners import failed_so_elsewhere, runner_blame, runner_health, runner_only
from ci.history.skipped_beside import skipped_beside, without_skipped
from ci.history.store import Store
from ci.history.verdict_decide import CHANCE, decide, flaked_kinds  # noqa: F401 (CHANCE re-exported)
from ci.history.verdict_main_record import HALT_SEEN, beside_breakages, fired_once  # noqa: F401
from ci.history.verdict_make import infra_verdict, intermittent, on_one_runner, without_history
from ci.history.verdict_queries import based_runs, crashed_elsewhere, has_main_history, main_runs, same_commit
from ci.history.verdict_second import NewFailure, overrule_new
from ci.history.verdict_model import Failure, Verdict, failure_from_attempts  # noqa: F401 (re-exported)
from ci.history.verdict_streaks import breakage, broken_text, failed_runs, flake_chance, score_text  # noqa: F401
from ci.history.verdict_tally import (BROKEN_ON_MAIN, FLAKY, INFRA, NEW, NO_HISTORY, SHORT, VERDICTS, Tally,  # noqa: F401
                                      by_concern, short, tally)  # re-exported: ci.history.verdict is the one import point

MIN_TRIALS = 5
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
        return [without_history(f) for f in failures]
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
        flaked = flaked_kinds(store, as_of) if any(environment_kind(failures[i].error) for i in indexes) else \
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
                                f.runner, f.sha, as_of=as_of)) or machine_only(f.infra, f.error, MACHINE_KINDS)):
                out[i] = infra_verdict(f, health, MACHINE_ONLY if elsewhere else HICCUP)
                continue
            if why is None:
                f = replace(f, infra="")  # an infra-looking error that follows the test, not the machine
            elif why:
                out[i] = infra_verdict(f, health, why)
                continue
            if not f.infra and (spell := outage(store, f.error, as_of=as_of) or timed_outage(
                    store, f.error, f.fingerprint, repo=f.repo, as_of=as_of)) is not None:
                out[i] = isinstance(spell, TimedOutage) and dependency_verdict(store, f, spell, as_of=as_of) or replace(
                    infra_verdict(replace(f, infra=OUTAGE), {}), detail=f"infra: {spell.describe()}")
                continue
            if f.infra == SIGNAL and sum(g.infra == SIGNAL for g in failures) < MANY_CRASHES and not crashed_elsewhere(
                    store, repo, tier, ids.get(f.node), f.sha, merge_base, as_of):
                f = replace(f, infra="")  # a crash no one else's run shows: judged as any failure
            runs = main.get(f.node, [])
            if why is None and code is not None and code():  # it follows a commit: main's failures so are too
                runs = [replace(run, infra="") if run.infra == code.kind else run for run in runs]
            order = _node_order(store, repo, tier, f.node, main, orders, git_order, as_of)
            beside = None if f.infra else skipped_beside(runs, order)  # failed and skipped at one commit
            runs = without_skipped(runs, beside)
            same = same_commit(store, repo, tier, f.sha, ids.get(f.node), as_of)
            only = None if f.infra else runner_only(store, repo, tier, ids.get(f.node), f.runner, f.sha, as_of=as_of)
            if only is not None:
                health = health or runner_health(store, as_of=as_of)
                out[i] = on_one_runner(f, only, health)
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
                out[i] = intermittent(f, moved, scores.get(f.node))
                continue
            placed = at is not None and position(order, merge_base) is None  # the base did not run the tier
            # what N's flakes look like: recurring on this tier, main's one run held code passed, failures
            # beside skips, else its signature recurring on its other tiers
            learned = beside_breakages(recurring(store, repo, tier, ids.get(f.node), f.sha, as_of=as_of), runs, order) \
                or fired_once(store, repo, tier, ids.get(f.node), f, runs, order, as_of) or beside \
                or beside_breakages(on_other_tiers(
                    store, repo, ids.get(f.node), f.sha, as_of=as_of, fingerprint=f.fingerprint, full=full,
                    touched=bool(changed) and bases.touches(tier, f.node, changed), merge_base=merge_base), runs, order)
            held = held_streaks(store, repo, tier, ids.get(f.node), fail_streaks(runs, order), order, at, f.sha,
                                as_of=as_of)
            out[i] = decide(f, runs, order, scores.get(f.node), same, merge_base, health, retries, flaked,
                             (at, placed), learned, held)
            if out[i].verdict == NEW:
                out[i] = overrule_new(out[i], NewFailure(
                    store, f, failures[i].infra, ids.get(f.node), merge_base, runs, order, at, same, scores.get(f.node),
                    learned, first_run, as_of), bases, changed)
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
