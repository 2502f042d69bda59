"""Verdicts (`ci.history.verdict`) where a flake and a breakage meet, on hand-made histories whose
answer is known, on SQLite and a real PostgreSQL: one failed main run of a known flake, a breakage
reverted before the test ran again, and errors whose usual cause is the machine (a port in use);
and a merge base on a commit that did not run the tier."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.history.held_code import held_streaks
from ci.history.ingest import ingest, prepare
from ci.history.mainline import Streak
from ci.history.model import RunIdentity
from ci.history.run_results import load_run
from ci.history.store import open_store
from ci.history.verdict import BROKEN_ON_MAIN, FLAKY, NEW, judge
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)
from tests.ci.test_history_verdicts import BOOM, FILE, NODE, REPO, TIER, flaky_main, pr_failure, run, sha

PORT = ("OSError: [Errno 98] Address already in use", "E   OSError: [Errno 98] Address already in use")


@pytest.mark.parametrize("ran_at", [(5, 6), (5,)])
def test_a_breakage_closed_by_a_revert_is_no_flake_evidence(store_location: str, tmp_path: Path,
                                                            ran_at: tuple[int, ...]) -> None:
    """Main broke at 5, the revert at 7 fixed it: a breakage, so no flaky score (it was 30 %), and a
    pull request that brings the bug back is not told "flaky"; one based at 6 is broken on main.
    Also when test_a ran at 5 only (pushes run the areas they touch): one commit, both attempts."""
    from ci.history.flaky import flaky_scores

    with open_store(store_location) as store:
        for i in range(12):
            if i in ran_at:
                run(store, tmp_path, sha(i), [BOOM, BOOM])
            elif i not in (5, 6):
                run(store, tmp_path, sha(i), [None])
            else:
                run(store, tmp_path, sha(i), [None], node="test_other")  # main's commit, test_a not run
        assert flaky_scores(store) == []
        (v,) = judge(store, [pr_failure(store, tmp_path, [BOOM, BOOM], base=sha(11))], merge_base=sha(11))
        (at_6,) = judge(store, [pr_failure(store, tmp_path, [BOOM, BOOM], pr=8, base=sha(6))], merge_base=sha(6))
    assert v.verdict == NEW and v.score is None, v.detail
    assert at_6.verdict == BROKEN_ON_MAIN and at_6.since == sha(5) and at_6.fixed_at == sha(7), at_6.detail


@pytest.mark.parametrize("failing_commits, expected", [(1, FLAKY), (2, BROKEN_ON_MAIN)])
def test_one_failed_run_of_a_known_flake_on_main_is_no_open_streak(store_location: str, tmp_path: Path,
                                                                  failing_commits: int, expected: str) -> None:
    """test_a flakes with BOOM; main's newest run failed both attempts with BOOM: a flake firing,
    not "broken on main since" that commit; failures at two commits are a breakage."""
    with open_store(store_location) as store:
        flaky_main(store, tmp_path)
        for i in range(12, 12 + failing_commits):
            run(store, tmp_path, sha(i), [BOOM, BOOM])
        (v,) = judge(store, [pr_failure(store, tmp_path, [BOOM], base=sha(11 + failing_commits))],
                     merge_base=sha(11 + failing_commits))
    assert v.verdict == expected, v.detail


def test_one_failed_run_of_a_known_flake_at_the_base_is_not_fixed_on_main(store_location: str,
                                                                        tmp_path: Path) -> None:
    """The base's push failed both attempts with the flake's error, the next passed: not "fixed on
    main at ...: merge the default branch"."""
    with open_store(store_location) as store:
        flaky_main(store, tmp_path)
        run(store, tmp_path, sha(12), [BOOM, BOOM])
        run(store, tmp_path, sha(13), [None])
        (v,) = judge(store, [pr_failure(store, tmp_path, [BOOM], base=sha(12))], merge_base=sha(12))
    assert v.verdict == FLAKY, v.detail


@pytest.mark.parametrize("others_flake, pr_runs, error, expected", [
    (True, 1, PORT, FLAKY),  # an environmental error this history's tests flake with, in one run
    (False, 1, PORT, NEW),  # no test here ever flaked with it: no evidence the machines do this
    (True, 2, PORT, NEW),  # the rerun failed it too: no flake rate of its own to explain that
    (True, 1, BOOM, NEW),  # not an environmental error
    (True, 1, ("AssertionError: assert 'Address already in use' not in log",
               "E   AssertionError: assert 'Address already in use' not in log"), NEW),  # the test's own check
])
def test_an_environmental_error_other_tests_flake_with(store_location: str, tmp_path: Path, others_flake: bool,
                                                       pr_runs: int, error, expected: str) -> None:
    """test_a never failed on main and has no flaky score; test_b (on another tier) flipped twice on
    main with a port still in use (failed at one commit, passed before and after). test_a's pull
    request run failing both attempts with the same class of error is the machines' chance, not the
    change; failing its rerun too is not."""
    with open_store(store_location) as store:
        for i in range(6):
            run(store, tmp_path, sha(i), [None])
            flip = others_flake and i in (1, 4)  # failed both attempts, passed before and after: a flake
            b = Case(FILE, "test_b", "failed", *PORT, reruns=1) if flip else Case(FILE, "test_b")
            assert ingest(store, prepare(write_report(tmp_path, [b]), RunIdentity(REPO, sha(i), "push", "gpu_b200"))).added
        head = f"{7:04x}{'d' * 36}"
        for attempt in range(1, pr_runs + 1):
            run(store, tmp_path, head, [error, error], "pull_request" if attempt == 1 else "rerun", pr=7,
                base_sha=sha(5), attempt=attempt)
        (v,) = judge(store, load_run(store, pr=7).failures, merge_base=sha(5))
    assert v.verdict == expected, v.detail
    if expected == FLAKY:
        assert v.detail == "flaky: an environmental error (port) that tests here flake with"


@pytest.mark.parametrize("others_flake, fixed, expected", [
    (True, False, FLAKY),  # main's newest run of test_a failed once with a port in use: not "broken since"
    (True, True, FLAKY),  # the same, then passed: not "fixed on main, merge the default branch"
    (False, False, BROKEN_ON_MAIN),  # no test here ever flaked that way: main's failure is main's
])
def test_one_failed_main_run_with_an_environmental_error_is_no_breakage(store_location: str, tmp_path: Path,
                                                                         others_flake: bool, fixed: bool,
                                                                         expected: str) -> None:
    """test_a failed both attempts at main's commit 5 with a port in use (6 did not run it); test_b,
    on another tier, flaked with the same class of error. A pull request based at 6 failing the same
    way once is that flake, as rule 4 says, not a breakage of main."""
    with open_store(store_location) as store:
        for i in range(8 if fixed else 7):
            if i == 6:
                run(store, tmp_path, sha(i), [None], node="test_other")
            else:
                run(store, tmp_path, sha(i), [PORT, PORT] if i == 5 else [None])
            flip = others_flake and i in (1, 3)
            b = Case(FILE, "test_b", "failed", *PORT, reruns=1) if flip else Case(FILE, "test_b")
            assert ingest(store, prepare(write_report(tmp_path, [b]), RunIdentity(REPO, sha(i), "push", "gpu_b200"))).added
        (v,) = judge(store, [pr_failure(store, tmp_path, [PORT, PORT], base=sha(6))], merge_base=sha(6))
    assert v.verdict == expected, v.detail


WATCHDOG = ("torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation timeout",
            "E   torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation timeout")


@pytest.mark.parametrize("error, broken, base, expected", [
    (BOOM, (3,), 4, BROKEN_ON_MAIN), (BOOM, (3,), 5, BROKEN_ON_MAIN), (BOOM, (3,), 7, NEW), (BOOM, (3,), 2, NEW),
    (WATCHDOG, (2, 3), 4, NEW),  # an environmental error is too weak to place a base that never ran the tier
    (WATCHDOG, (2, 3), 3, BROKEN_ON_MAIN),  # the base ran the tier and failed there
])
def test_merge_base_that_did_not_run_the_tier(store_location: str, tmp_path: Path, error, broken: tuple[int, ...],
                                              base: int, expected: str) -> None:
    """Pushes run only the tiers they touch: commits 4, 5 and 7 ran another tier only, so a base
    there has, for this tier, the code of the last commit that ran it (3: broken; 6: fixed)."""
    with open_store(store_location) as store:
        for i in range(8):
            if i in (4, 5, 7):
                assert ingest(store, prepare(write_report(tmp_path, [Case(FILE, "test_ok")]),
                                             RunIdentity(REPO, sha(i), "push", "gpu_l4"))).added
            else:
                run(store, tmp_path, sha(i), [error, error] if i in broken else [None])
        (v,) = judge(store, [pr_failure(store, tmp_path, [error, error], base=sha(base))], merge_base=sha(base))
    assert v.verdict == expected, v.detail
    if expected == BROKEN_ON_MAIN:
        assert v.since == sha(broken[0]) and v.fixed_at == sha(6)


def test_two_failed_runs_of_a_known_flake_at_one_commit_are_a_breakage(store_location: str, tmp_path: Path) -> None:
    """A flake fires once: one failed run at one commit. Main's push and nightly runs of commit 12
    both failing test_a's known flake BOOM on every attempt are two runs, main's open breakage (no
    merge base known: the open streak alone says so)."""
    with open_store(store_location) as store:
        flaky_main(store, tmp_path)
        run(store, tmp_path, sha(12), [BOOM, BOOM])
        run(store, tmp_path, sha(12), [BOOM, BOOM], "nightly")
        (v,) = judge(store, [pr_failure(store, tmp_path, [BOOM])])
    assert v.verdict == BROKEN_ON_MAIN and v.since == sha(12), v.detail


def rare_flake_main(store, directory: Path, commits: int = 100) -> None:
    """test_a flakes on main at a rate under `CHANCE`: commits 10 and 25 failed once and passed on
    retry, 40 failed both attempts with BOOM between passes (a flip: its signature); the rest passed."""
    for i in range(commits):
        run(store, directory, sha(i), [BOOM, None] if i in (10, 25) else [BOOM, BOOM] if i == 40 else [None])


@pytest.mark.parametrize("pr_attempts, expected", [
    ([BOOM], FLAKY),  # the flake firing twice, though two failed runs are rare at its rate
    ([BOOM, BOOM], BROKEN_ON_MAIN),  # its retry failed too: with main's run there, a 4 % flake cannot
])
def test_one_failed_base_run_of_a_rare_flake_never_makes_the_flake_broken(store_location: str, tmp_path: Path,
                                                                         pr_attempts, expected: str) -> None:
    """Main's newest run (commit 100, the base) failed test_a once with its flake's error; the pull
    request based there fails it once too. Two failed runs of a 4 % flake are rarer than `CHANCE`,
    but main's one run is no streak (rule 3): it counts against the flake only beside a pull
    request run whose retries failed too."""
    with open_store(store_location) as store:
        rare_flake_main(store, tmp_path)
        run(store, tmp_path, sha(100), [BOOM])
        (v,) = judge(store, [pr_failure(store, tmp_path, pr_attempts, base=sha(100))], merge_base=sha(100))
    assert v.verdict == expected, v.detail


@pytest.mark.parametrize("held_prs, expected", [((31, 32), FLAKY), ((31,), BROKEN_ON_MAIN)])
def test_a_fixed_streak_whose_code_other_pull_requests_passed_is_no_breakage(store_location: str, tmp_path: Path,
                                                                            held_prs: tuple[int, ...],
                                                                            expected: str) -> None:
    """test_a's flake struck main's runs at commits 100-102 in a row (once each), then 103 passed.
    Two other pull requests based at 101 passed test_a, so that code passes it: main's streak was
    the flake firing, and a pull request based at 102 failing once is flaky, not told to merge the
    default branch (`ci.history.held_code`). One such pull request may be the fix itself: still a breakage."""
    with open_store(store_location) as store:
        rare_flake_main(store, tmp_path)
        for i in (100, 101, 102):
            run(store, tmp_path, sha(i), [BOOM])
        for pr in held_prs:
            run(store, tmp_path, f"{pr:04x}{'e' * 36}", [None], "pull_request", pr=pr, base_sha=sha(101))
        run(store, tmp_path, sha(103), [None])
        (v,) = judge(store, [pr_failure(store, tmp_path, [BOOM], base=sha(102))], merge_base=sha(102))
    assert v.verdict == expected, v.detail


@pytest.mark.parametrize("passed_at, judged_pr, at, held", [
    (3, 40, 3, True),  # pull requests 31 and 32 based inside the streak passed test_a: its code passes it
    (2, 40, 2, True),  # based at its first commit, and the merge base there too
    (4, 40, 3, False),  # based at the fix: not the streak's code
    (3, 40, 4, False),  # the merge base is the fix: no streak around it
    (3, 40, 1, False),  # the merge base is before the streak
    (3, 40, None, False),  # a merge base the order cannot place
    (3, 32, 3, False),  # pull request 32 is the judged one's own earlier push: one other pull request
])
def test_held_streaks_boundaries(store_location: str, tmp_path: Path, passed_at: int, judged_pr: int,
                                 at: int | None, held: bool) -> None:
    """`held_streaks` asked directly of main's streak at commits 2-3 (fixed at 4): pull requests 31
    and 32 based at ``passed_at`` passed test_a (pull request 33 there failed it, and a merge queue
    batch there passed it: neither counts); the judged run is pull request ``judged_pr``'s, based
    at position ``at``."""
    order = tuple(sha(i) for i in range(6))
    streak = Streak(sha(2), sha(3), sha(1), sha(4), 2, 2, 2, (), (), (), 0, first_index=2, end_index=4)
    with open_store(store_location) as store:
        for i in range(6):
            run(store, tmp_path, sha(i), [BOOM] if i in (2, 3) else [None])
        for pr, attempts in ((31, [None]), (32, [None]), (33, [BOOM])):
            run(store, tmp_path, f"{pr:04x}{'e' * 36}", attempts, "pull_request", pr=pr, base_sha=sha(passed_at))
        run(store, tmp_path, f"{50:04x}{'e' * 36}", [None], "merge_group", base_sha=sha(passed_at))
        judged = f"{judged_pr:04x}{'d' * 36}"
        run(store, tmp_path, judged, [BOOM], "pull_request", pr=judged_pr, base_sha=sha(3))
        (node_id,) = store.fetchall("SELECT id FROM nodes WHERE node = ?", (NODE,))[0]
        found = held_streaks(store, REPO, TIER, node_id, [streak], order, at, judged)
    assert found == (frozenset({2}) if held else frozenset())
