"""Whose is an infrastructural-looking failure (`ci.history.runners.runner_blame`, rule 1 of
`ci.history.verdict`): the runner's when its rate of such failures over the recent reports is out of
line with the pool's, the test's when the error follows the test across the pool. Real stores
(SQLite and PostgreSQL) filled through ingest, as the verdict tests do.
"""

from __future__ import annotations

from pathlib import Path

from ci.history.infra_flakes import infra_flakes
from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.run_results import load_run
from ci.history.runners import ALPHA, JOBS, RUNS_OF_TEST, fisher_greater, out_of_line
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
