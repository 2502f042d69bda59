"""Whose is an infrastructural-looking failure (`ci.history.runners.runner_blame`, rule 1 of
`ci.history.verdict`): the runner's when its rate of such failures over the recent reports is out of
line with the pool's, the test's when the error follows the test across the pool. Real stores
(SQLite and PostgreSQL) filled through ingest, as the verdict tests do.
"""

from __future__ import annotations

from math import comb
from pathlib import Path

import pytest

from ci.history.infra_flakes import infra_flakes
from ci.history import runners
from ci.history.ingest import ingest, prepare
from ci.history.model import EvidenceRow, RunIdentity
from ci.history.run_results import load_run
from ci.history.runners import (ALPHA, JOBS, RUNS_OF_TEST, UNITS, failed_so_elsewhere, fisher_greater, out_of_line,
                                runner_blame)
from ci.history.store import open_store
from ci.history.verdict import FLAKY, INFRA, judge
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)

REPO = "acme/llm"
TIER = "gpu_h100_x2"
FILE = "tests/dist/test_tp.py"
TESTS = ("test_a", "test_b", "test_c", "test_d", "test_e", "test_ok")
RUNNERS = tuple(f"h100-{i:02d}" for i in range(1, 7))
NCCL = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
OOM = "RuntimeError: Out of memory: Killed process 4242 (pt_main_thread)"


def sha(i: int, tag: str = "a") -> str:
    return f"{i:04x}{tag * 36}"


def job(store, directory: Path, commit: str, runner: str, fails: dict[str, str] | None = None, *,
        event: str = "push", pr: int | None = None, attempt: int = 1) -> None:
    """One report of every test of `TESTS` on ``runner``: those in ``fails`` failed both attempts with
    that error (pytest-rerunfailures' rerun), the others passed."""
    fails = fails or {}
    cases = [Case(FILE, name, "failed", fails[name], f"E   {fails[name]}", reruns=1) if name in fails
             else Case(FILE, name) for name in TESTS]
    identity = RunIdentity(REPO, commit, event, TIER, runner=runner, pr=pr, attempt=attempt,
                           scored=event in ("push", "nightly"))
    assert ingest(store, prepare(write_report(directory, cases), identity)).added


def pool_history(store, directory: Path, runners: tuple[str, ...] = RUNNERS, jobs: int = 2) -> int:
    """``jobs`` clean main jobs on each of ``runners``; the next commit number."""
    for i, runner in enumerate(runners * jobs):
        job(store, directory, sha(i), runner)
    return len(runners) * jobs


def pr_failures(store, directory: Path, pr: int, runner: str, fails: dict[str, str]):
    job(store, directory, f"{pr:04x}{'d' * 36}", runner, fails, event="pull_request", pr=pr)
    return load_run(store, pr=pr).failures


def once_on_each_runner(store, directory: Path, error: str = NCCL) -> None:
    """`pool_history`, then test_a's ``error`` once on each of `RUNNERS`' main jobs, a pass between."""
    n = pool_history(store, directory)
    for i, runner in enumerate(RUNNERS):
        job(store, directory, sha(n + 2 * i), runner, {"test_a": error})
        job(store, directory, sha(n + 2 * i + 1), runner)


def test_one_tests_nccl_errors_over_the_whole_pool_are_its_flake(store_location: str, tmp_path: Path) -> None:
    """test_a's NCCL error strikes once on each of the 6 runners, passing in between: it follows the
    test, so no runner is to blame, and a pull request run that meets it and passes in a rerun of
    the same commit is flaky, not infra."""
    with open_store(store_location) as store:
        once_on_each_runner(store, tmp_path)
        (f,) = pr_failures(store, tmp_path, 7, "h100-03", {"test_a": NCCL})
        assert f.infra == "nccl"
        assert out_of_line(store, REPO, TIER, "h100-03", f.sha) is None
        job(store, tmp_path, f.sha, "h100-05", event="pull_request", pr=7, attempt=2)  # "re-run all jobs" passes
        (v,) = judge(store, load_run(store, pr=7).failures or [f])
    assert v.verdict == FLAKY and v.detail.startswith("flaky: failed, then passed")


def test_five_tests_failing_on_one_runner_of_six_name_it(store_location: str, tmp_path: Path) -> None:
    """h100-03 failed five tests in runs of main and of another pull request; the judged run meets it
    with one test's NCCL error. Most of a run's tests failing there at once names the runner alone."""
    every = dict.fromkeys(TESTS[:5], ECC)
    with open_store(store_location) as store:
        n = pool_history(store, tmp_path)
        job(store, tmp_path, sha(n), "h100-03", every)
        job(store, tmp_path, f"{11:04x}{'d' * 36}", "h100-03", every, event="pull_request", pr=11)
        (f,) = pr_failures(store, tmp_path, 13, "h100-03", {"test_a": NCCL})
        (v,) = judge(store, [f])
        # the same error on another runner of the pool is that test's, not the machine's
        (elsewhere,) = judge(store, pr_failures(store, tmp_path, 14, "h100-04", {"test_a": NCCL}))
        whole = judge(store, pr_failures(store, tmp_path, 15, "h100-05", dict.fromkeys(TESTS[:4], ECC)))
    assert (v.verdict, v.runner, v.infra) == (INFRA, "h100-03", "nccl")
    assert v.detail.startswith("infra: nccl on runner h100-03, out of line with the pool: 11 of its 30 recent test "
                               "runs failed with infra errors (5 tests), against 0 of 60 on the pool's 5 other "
                               "runners (Fisher p = ")
    assert elsewhere.verdict != INFRA
    assert [(w.verdict, w.runner) for w in whole] == [(INFRA, "h100-05")] * 4
    assert whole[0].detail.startswith("infra: cuda on runner h100-05, 4 of the 6 tests of this run there failed with "
                                      "infra errors at once")


def test_an_oom_kill_that_follows_one_test_is_the_tests(store_location: str, tmp_path: Path) -> None:
    with open_store(store_location) as store:
        n = pool_history(store, tmp_path)
        for i, runner in enumerate(RUNNERS[:4]):
            job(store, tmp_path, sha(n + 2 * i), runner, {"test_b": OOM})
            job(store, tmp_path, sha(n + 2 * i + 1), runner)
        (f,) = pr_failures(store, tmp_path, 7, "h100-02", {"test_b": OOM})
        job(store, tmp_path, f.sha, "h100-06", event="pull_request", pr=7, attempt=2)
        (v,) = judge(store, load_run(store, pr=7).failures or [f])
    assert f.infra == "oom-kill"
    assert v.verdict == FLAKY


def test_a_bad_runner_failing_one_test_far_above_the_pool_rate_is_named(store_location: str, tmp_path: Path) -> None:
    """No count of distinct tests is asked for: test_c failing in each of h100-06's five jobs, of
    main and four pull requests, while the other five runners failed it once in 21 runs, is the
    machine (the test's own runs, Fisher p doubled < `ALPHA`). test_c failing once elsewhere too
    keeps it from `ci.history.runners.runner_only`."""
    with open_store(store_location) as store:
        n = pool_history(store, tmp_path, RUNNERS[:5], jobs=4)
        job(store, tmp_path, sha(n), "h100-06", {"test_c": ECC})
        job(store, tmp_path, sha(n + 1), "h100-01", {"test_c": ECC})
        for pr in (21, 22, 23):
            job(store, tmp_path, f"{pr:04x}{'d' * 36}", "h100-06", {"test_c": ECC}, event="pull_request", pr=pr)
        (f,) = pr_failures(store, tmp_path, 24, "h100-06", {"test_c": ECC})
        found = out_of_line(store, REPO, TIER, "h100-06", f.sha, _node_id(store, f.node))
        (v,) = judge(store, [f])
    # its jobs and its runs of test_c read alike here (one test per job failing)
    assert found is not None and (found.unit, found.failed, found.runs) in ((JOBS, 5, 5), (RUNS_OF_TEST, 5, 5))
    assert (found.sources, found.pool_failed, found.pool_runs) == (5, 1, 21) and found.p < ALPHA
    assert (v.verdict, v.runner, v.infra) == (INFRA, "h100-06", "cuda")
    assert "out of line with the pool: 5 of its 5 recent " in v.detail


def test_a_test_failing_so_on_every_runner_of_the_pool_every_time_is_the_pools(store_location: str,
                                                                              tmp_path: Path) -> None:
    """An image or driver change under the pool (`ci.history.runners.pool_wide`): test_d's runs of
    main and other pull requests on three runners all failed with a CUDA error since its last pass.
    No runner stands out, but no flake fails every time either: infra, the pool's."""
    cublas = "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmul( ... )`"
    with open_store(store_location) as store:
        n = pool_history(store, tmp_path)
        job(store, tmp_path, sha(n), "h100-01", {"test_d": cublas})
        job(store, tmp_path, f"{31:04x}{'d' * 36}", "h100-02", {"test_d": cublas}, event="pull_request", pr=31)
        job(store, tmp_path, sha(n + 1), "h100-04", {"test_d": cublas})
        (f,) = pr_failures(store, tmp_path, 32, "h100-05", {"test_d": cublas})
        (v,) = judge(store, [f])
    assert (v.verdict, v.infra) == (INFRA, "cuda")
    assert v.detail.startswith("infra: cuda on runner h100-05, the pool's 3 runners failed it with infra errors in "
                               "all its 3 recent runs of other pull requests and main commits, none passing")


def _node_id(store, node: str) -> int:
    from ci.history.flaky import node_ids

    return node_ids(store, [node])[node]


def test_fisher_greater_is_the_hypergeometric_tail() -> None:
    assert fisher_greater(3, 3, 0, 3) == 1 / 20  # 3 failures, all in the 3 of 6 runs drawn
    assert fisher_greater(0, 5, 2, 5) == 1.0
    assert fisher_greater(1, 1, 1, 3) == 0.5
    # each term from the one before, as a whole-HUD window of 80,000 test runs needs: the same
    # float as the sum of the defining binomials, on every table of up to 12 runs a side
    for runs in range(13):
        for pool_runs in range(13):
            for failed in range(runs + 1):
                for pool_failed in range(pool_runs + 1):
                    total, bad = runs + pool_runs, failed + pool_failed
                    tail = sum(comb(bad, k) * comb(total - bad, runs - k) for k in range(failed, min(bad, runs) + 1))
                    assert fisher_greater(failed, runs, pool_failed, pool_runs) == tail / comb(total, runs)
    assert fisher_greater(200, 10000, 1400, 70000) > 0.5 > fisher_greater(3035, 10000, 2111, 70000)


def test_the_judged_pull_requests_own_earlier_pushes_are_one_source_with_it(store_location: str,
                                                                            tmp_path: Path) -> None:
    """Pull request 7's four earlier pushes failed test_a on h100-03 with an ECC error: by count the
    runner stands out (5 of its 8 jobs against none of the pool's 15), but every one of them is the
    judged change's own run, one source, so no machine is blamed on one change's JUnit. One main run
    failing so there is a second source, and then the runner is out of line."""
    with open_store(store_location) as store:
        n = pool_history(store, tmp_path, jobs=3)
        for push in range(4):
            job(store, tmp_path, sha(push, "e"), "h100-03", {"test_a": ECC}, event="pull_request", pr=7)
        (f,) = pr_failures(store, tmp_path, 7, "h100-03", {"test_a": ECC})
        node_id = _node_id(store, f.node)
        alone = out_of_line(store, REPO, TIER, "h100-03", f.sha, node_id)
        job(store, tmp_path, sha(n), "h100-03", {"test_a": ECC})
        second = out_of_line(store, REPO, TIER, "h100-03", f.sha, node_id)
    assert alone is None
    assert second is not None and second.sources == 2


def test_three_of_a_runs_six_tests_failing_there_at_once_name_the_runner_and_two_do_not(store_location: str,
                                                                                       tmp_path: Path) -> None:
    """`AT_ONCE` and "at least half", at their boundary: 3 of the judged run's 6 tests failing with
    an ECC error on a runner with a clean past is the machine by itself; 2 of 6 is no more than one
    pull request's JUnit (one source), and nothing is blamed."""
    with open_store(store_location) as store:
        pool_history(store, tmp_path)
        three = pr_failures(store, tmp_path, 7, "h100-03", dict.fromkeys(TESTS[:3], ECC))
        two = pr_failures(store, tmp_path, 8, "h100-04", dict.fromkeys(TESTS[:2], ECC))
        at_three = out_of_line(store, REPO, TIER, "h100-03", three[0].sha, _node_id(store, three[0].node))
        at_two = out_of_line(store, REPO, TIER, "h100-04", two[0].sha, _node_id(store, two[0].node))
    assert at_three is not None and (at_three.at_once, at_three.failed, at_three.runs) == (True, 3, 6), at_three
    assert at_two is None


@pytest.mark.parametrize("clean, named", [(25, True), (15, False)])
def test_two_failed_jobs_of_two_sources_stand_out_only_past_the_multiplied_alpha(store_location: str, tmp_path: Path,
                                                                                 clean: int, named: bool) -> None:
    """`MIN_FAILED` and the p multiplied by the number of `UNITS`, at their boundary: h100-03 failed
    test_a in one main job and in the judged one (2 of its 2 jobs, 2 sources), the pool none of its
    ``clean`` jobs. One-sided Fisher p = 2 / ((clean + 2)(clean + 1)): against 25 clean jobs, times 3,
    0.0085 < `ALPHA`, named; against 15, 0.0074 alone but 0.022 times 3, not."""
    with open_store(store_location) as store:
        others = tuple(r for r in RUNNERS if r != "h100-03")
        n = pool_history(store, tmp_path, others, jobs=clean // len(others))
        job(store, tmp_path, sha(n), "h100-03", {"test_a": ECC})
        (f,) = pr_failures(store, tmp_path, 7, "h100-03", {"test_a": ECC})
        found = out_of_line(store, REPO, TIER, "h100-03", f.sha, _node_id(store, f.node))
    if not named:
        assert found is None, found
        return
    assert found is not None and found.unit in (JOBS, RUNS_OF_TEST), found
    assert (found.failed, found.runs, found.sources, found.pool_failed, found.pool_runs) == (2, 2, 2, 0, 25)
    assert found.p == len(UNITS) * fisher_greater(2, 2, 0, 25) and ALPHA > found.p > ALPHA / 2


def test_two_failed_runs_on_two_runners_are_not_yet_the_pools(store_location: str, tmp_path: Path) -> None:
    """`pool_wide` asks for `ONLY_MIN_FAILED` (3) runs: test_d failing so on two runners in two runs
    of others since its last pass may still be a flake, and no runner is blamed."""
    cublas = "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmul( ... )`"
    with open_store(store_location) as store:
        n = pool_history(store, tmp_path)
        job(store, tmp_path, sha(n), "h100-01", {"test_d": cublas})
        job(store, tmp_path, f"{31:04x}{'d' * 36}", "h100-02", {"test_d": cublas}, event="pull_request", pr=31)
        (f,) = pr_failures(store, tmp_path, 32, "h100-05", {"test_d": cublas})
        blamed = runner_blame(store, REPO, TIER, "h100-05", f.sha, _node_id(store, f.node))
    assert blamed is None


def test_failed_so_elsewhere_counts_other_runners_runs_of_other_changes(store_location: str, tmp_path: Path) -> None:
    """What decides a hiccup (`failed_so_elsewhere`): test_b's NCCL error in a main run on h100-02
    counts for the judged run on h100-03, not for h100-02 itself; a CUDA error is another kind;
    the judged pull request's own earlier push on h100-05 is its own change, never "elsewhere"."""
    with open_store(store_location) as store:
        n = pool_history(store, tmp_path)
        job(store, tmp_path, sha(n), "h100-02", {"test_b": NCCL})
        job(store, tmp_path, sha(n + 1), "h100-04", {"test_b": ECC})
        job(store, tmp_path, sha(1, "e"), "h100-05", {"test_b": NCCL}, event="pull_request", pr=7)
        (f,) = pr_failures(store, tmp_path, 7, "h100-03", {"test_b": NCCL})
        node = _node_id(store, f.node)
        counts = [failed_so_elsewhere(store, REPO, TIER, node, "nccl", runner, f.sha) for runner in ("h100-03", "h100-02")]
    assert counts == [1, 0]


def test_failed_so_elsewhere_reads_the_newest_reports_not_attempts(store_location: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The window is the test's newest `_ONLY_LOOKBACK` reports, each one however many attempts it
    holds (here every failure is two: pytest-rerunfailures' rerun). Newest first: the judged pull
    request's, two ECC failures, NCCL on h100-02, NCCL on h100-01. A window of 4 reports holds
    h100-02's (counted 1), one of 5 both (2); counting attempt rows, neither fits."""
    with open_store(store_location) as store:
        n = pool_history(store, tmp_path, jobs=1)
        for i, (runner, error) in enumerate((("h100-01", NCCL), ("h100-02", NCCL), ("h100-04", ECC),
                                             ("h100-05", ECC))):
            job(store, tmp_path, sha(n + i), runner, {"test_b": error})
        (f,) = pr_failures(store, tmp_path, 7, "h100-03", {"test_b": NCCL})
        node = _node_id(store, f.node)
        counts = []
        for window in (4, 5):
            monkeypatch.setattr(runners, "_ONLY_LOOKBACK", window)
            counts.append(failed_so_elsewhere(store, REPO, TIER, node, "nccl", "h100-03", f.sha))
    assert counts == [1, 2]


def test_one_test_failing_on_a_runner_stands_out_by_its_own_runs_alone(store_location: str, tmp_path: Path) -> None:
    """h100-06 failed test_c in all its 4 jobs (main's and three pull requests'); the pool failed
    test_a in half its 20 jobs and test_c never. By test runs (4 of 24 against 10 of 120) and by
    jobs (4 of 4 against 10 of 20) h100-06 is in line; by runs of test_c (4 of 4 against 0 of 20,
    Fisher p = 1 / C(24, 4)) it is not."""
    with open_store(store_location) as store:
        for i, runner in enumerate(RUNNERS[:5] * 4):
            job(store, tmp_path, sha(i), runner, {"test_a": ECC} if i % 2 else None)
        job(store, tmp_path, sha(20), "h100-06", {"test_c": ECC})
        for pr in (21, 22):
            job(store, tmp_path, f"{pr:04x}{'d' * 36}", "h100-06", {"test_c": ECC}, event="pull_request", pr=pr)
        (f,) = pr_failures(store, tmp_path, 24, "h100-06", {"test_c": ECC})
        found = out_of_line(store, REPO, TIER, "h100-06", f.sha, _node_id(store, f.node))
    assert found is not None and (found.unit, found.failed, found.runs, found.pool_failed, found.pool_runs) == (
        RUNS_OF_TEST, 4, 4, 0, 20), found
    assert found.p == len(UNITS) * fisher_greater(4, 4, 0, 20)


def test_an_nccl_flake_that_fails_every_attempt_is_flaky_not_new(store_location: str, tmp_path: Path) -> None:
    """test_a's NCCL error strikes main once on each of the 6 runners, passing in between: no runner
    explains it, so those failures are test_a's flake evidence (`ci.history.infra_flakes`). A pull
    request run failing test_a so in both attempts, with no pass of that code, is its flake again,
    not the change's (before, an infra-looking failure was never flake evidence: ``new``)."""
    with open_store(store_location) as store:
        once_on_each_runner(store, tmp_path)
        (f,) = pr_failures(store, tmp_path, 7, "h100-03", {"test_a": NCCL})
        (v,) = judge(store, [f])
    assert (f.infra, f.failures, f.passed_on_retry) == ("nccl", 2, False)
    assert (v.verdict, v.detail.split(" (flaky")[0]) == (FLAKY, "flaky: the same failure as its earlier flakes")


def test_infra_errors_of_one_runner_or_of_a_whole_job_are_not_the_tests(store_location: str, tmp_path: Path) -> None:
    """`ci.history.infra_flakes`: test_a's NCCL errors on two runners from two sources follow it;
    test_b's ECC errors on one runner only (three sources) do not, nor test_c's, whose every failure
    came with most of its job's tests failing so at once (a bad node), over three runners."""
    with open_store(store_location) as store:
        n = pool_history(store, tmp_path)
        job(store, tmp_path, sha(n), "h100-01", {"test_a": NCCL, "test_b": ECC})
        job(store, tmp_path, sha(n + 1), "h100-02", {"test_a": NCCL})
        job(store, tmp_path, sha(n + 2), "h100-01", {"test_b": ECC})
        job(store, tmp_path, f"{9:04x}{'d' * 36}", "h100-01", {"test_b": ECC}, event="pull_request", pr=9)
        for i, runner in enumerate(RUNNERS[3:]):
            job(store, tmp_path, sha(n + 3 + i), runner, dict.fromkeys(TESTS[2:5], ECC))
        found = infra_flakes(store, REPO, TIER)
    node = f"{FILE}::{{}}".format
    assert found.kinds == {node("test_a"): frozenset({"nccl"})}
    assert len(found.machine_reports) == 3


def test_a_stale_mount_over_the_whole_pool_stays_infra_after_a_passing_retry(store_location: str,
                                                                             tmp_path: Path) -> None:
    """A shared cache's mount went stale for a spell: test_a failed so once on each of the 6 runners,
    passing in between, as test_a's NCCL flake does in the test above. A stale handle is no test's
    race, so a pull request run that met it and passed on a rerun is infra, not flaky
    (`ci.history.infra_flakes.MACHINE_KINDS`)."""
    stale = "OSError: [Errno 116] Stale file handle: '/root/.cache/huggingface/hub'"
    with open_store(store_location) as store:
        once_on_each_runner(store, tmp_path, stale)
        (f,) = pr_failures(store, tmp_path, 7, "h100-03", {"test_a": stale})
        job(store, tmp_path, f.sha, "h100-05", event="pull_request", pr=7, attempt=2)  # "re-run all jobs" passes
        (v,) = judge(store, load_run(store, pr=7).failures)
    assert (v.verdict, v.infra) == (INFRA, "storage")
    assert v.detail.startswith("infra: storage on runner h100-03, not one runner's (in line with the pool)")



@pytest.mark.parametrize("story, follows", [
    ("two_runners", True),  # NCCL on h100-01 and h100-02, from two main commits: it follows test_a
    ("unnamed_runner", False),  # on h100-01 and on a runner that named itself nothing: one runner known
    ("machine_at_once", False),  # h100-01's job also failed test_b and test_c so, 3 of its 6 run tests: the machine's
    ("machine_beside_a_flake", True),  # that, and h100-03 too: it follows test_a, but not in h100-01's job
    ("signal", False),  # a segfault on two runners: a crash is judged by its own rule, never a test's flake here
    ("one_pull_request", False),  # two pushes of pull request 9: one source
])
def test_an_infra_error_follows_a_test_on_two_named_runners_outside_machine_spells(store_location: str, tmp_path: Path,
                                                                                 story: str, follows: bool) -> None:
    """`infra_flakes` at its boundaries: `MIN_RUNNERS` named runners, and a report is the machine's
    at once with exactly `AT_ONCE` infra failures among twice as many tests run (its two skipped
    tests do not count); a failure in such a report is never the test's own."""
    machine, error = story.startswith("machine"), "Fatal Python error: Segmentation fault" if story == "signal" else NCCL
    with open_store(store_location) as store:
        fails = dict.fromkeys(("test_a", "test_b", "test_c") if machine else ("test_a",), error)
        cases = [Case(FILE, name, "failed", fails[name], f"E   {fails[name]}") if name in fails else Case(FILE, name)
                 for name in TESTS] + [Case(FILE, f"test_skip{i}", "skipped", "no fp8 here") for i in (1, 2)]
        pr = 9 if story == "one_pull_request" else None
        event = "pull_request" if pr else "push"
        assert ingest(store, prepare(write_report(tmp_path, cases), RunIdentity(REPO, sha(0), event, TIER, pr=pr,
                                                                                  runner="h100-01"))).added
        job(store, tmp_path, sha(1), "" if story == "unnamed_runner" else "h100-02", {"test_a": error}, event=event,
            pr=pr)
        if story == "machine_beside_a_flake":
            job(store, tmp_path, sha(2), "h100-03", {"test_a": NCCL})
        found = infra_flakes(store, REPO, TIER)
        reports = [int(rid) for (rid,) in store.fetchall("SELECT id FROM reports ORDER BY id")]
    assert found.kinds == ({f"{FILE}::test_a": frozenset({"nccl"})} if follows else {}), found
    assert found.machine_reports == (frozenset(reports[:1]) if machine else frozenset())
    rows = [EvidenceRow(f"{FILE}::test_a", TIER, REPO, "", "push", rid, 1, "fail", "", "", "", "", "nccl")
            for rid in reports]
    assert [found.owns(row) for row in rows] == [follows and not machine] + [follows] * (len(reports) - 1)
