"""A device error that follows the code, not the machines (`ci.history.code_follow`, rule 1 of
`ci.history.verdict`): a test failing with a CUDA error on several runners at every run holding a
commit, passing before it, is a breakage, not the pool's image or driver; the same failures that
also strike runs without the commit are the pool's. Real stores (SQLite and PostgreSQL) filled
through ingest, as the verdict tests do.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.history.code_follow import MIN_FAILED, follows_code
from ci.history.flaky import node_ids
from ci.history.ingest import ingest, prepare
from ci.history.mainline import ingest_order
from ci.history.model import RunIdentity
from ci.history.run_results import load_run
from ci.history.store import open_store
from ci.history.verdict import BROKEN_ON_MAIN, INFRA, judge
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)

REPO = "acme/llm"
TIER = "gpu_h100_x2"
FILE = "tests/kernels/test_decode.py"
TESTS = ("test_a", "test_b", "test_c", "test_d", "test_e", "test_ok")
RUNNERS = tuple(f"h100-{i:02d}" for i in range(1, 7))
# a kernel's launch failing: CUDA's words do not say whose (a bad launch, or a GPU gone bad)
LAUNCH = "RuntimeError: CUDA error: unspecified launch failure"
PR_SHA = "d" * 36


def sha(i: int) -> str:
    return f"{i:04x}{'a' * 36}"


def job(store, directory: Path, commit: str, runner: str, fails: tuple[str, ...] = (), *, pr: int | None = None,
        base: str = "") -> None:
    """One report of every test of `TESTS` on ``runner``: those in ``fails`` failed with `LAUNCH`, the
    others passed; a pull request's run when ``pr`` is given (merged onto ``base``), else main's push."""
    cases = [Case(FILE, name, "failed", LAUNCH, f"E   {LAUNCH}") if name in fails else Case(FILE, name)
             for name in TESTS]
    event = "pull_request" if pr is not None else "push"
    identity = RunIdentity(REPO, commit, event, TIER, runner=runner, pr=pr, base_sha=base, scored=pr is None)
    assert ingest(store, prepare(write_report(directory, cases), identity)).added


def broken_at_six(store, directory: Path, before: bool | None, unplaced: tuple[int, ...] = (),
                  passed_at_six: bool = False) -> None:
    """Main's commits 0-5 pass test_d on each runner in turn; commit 6 breaks it: main's run at 6
    fails it on h100-01, then pull request 33, based at commit 4 (without commit 6), runs on h100-03
    (``before`` True: passes test_d; False: fails it the same way; None: no such run), then pull
    request 31 based at 6 fails it on h100-02, main's 7 on h100-04 and pull request 34 based at 7 on
    h100-06. The pull requests of ``unplaced`` report no merge base; ``passed_at_six``: main's commit
    6 first passed test_d on h100-06."""
    for i in range(6):
        job(store, directory, sha(i), RUNNERS[i])
    if passed_at_six:
        job(store, directory, sha(6), "h100-06")
    job(store, directory, sha(6), "h100-01", ("test_d",))
    if before is not None:
        job(store, directory, f"{33:04x}{PR_SHA}", "h100-03", () if before else ("test_d",), pr=33, base=sha(4))
    job(store, directory, f"{31:04x}{PR_SHA}", "h100-02", ("test_d",), pr=31, base="" if 31 in unplaced else sha(6))
    job(store, directory, sha(7), "h100-04", ("test_d",))
    job(store, directory, f"{34:04x}{PR_SHA}", "h100-06", ("test_d",), pr=34, base="" if 34 in unplaced else sha(7))


def judged(store, directory: Path):
    """Pull request 32, based at commit 7, failing test_d on h100-05: its failure and its verdict."""
    job(store, directory, f"{32:04x}{PR_SHA}", "h100-05", ("test_d",), pr=32, base=sha(7))
    (f,) = load_run(store, pr=32).failures
    (v,) = judge(store, [f], merge_base=sha(7))
    return f, v


def split_of(store, f):
    order = ingest_order(store, REPO, TIER)
    node = node_ids(store, [f.node])[f.node]
    return follows_code(store, REPO, TIER, node, f.infra, f.sha, order, ingest_order(store, REPO))


def test_a_cuda_error_at_every_run_holding_a_commit_is_the_breakage_not_the_pools(store_location: str,
                                                                                  tmp_path: Path) -> None:
    """test_d fails with a launch failure on four runners in every run holding commit 6 (main's two,
    pull requests 31's and 34's), every run before 6 passed it, and pull request 33, based before 6,
    passed it after the first failure: at the same time the code without 6 passes, the code with it
    fails. No pool is blamed (its newest three runs, on three runners, failed so: `pool_wide` would),
    and main's two failing commits are the open breakage the judged pull request meets."""
    with open_store(store_location) as store:
        broken_at_six(store, tmp_path, before=True)
        f, v = judged(store, tmp_path)
        split = split_of(store, f)
    assert f.infra == "cuda"
    assert split is not None and (split.since, split.failed, split.sources, split.runners) == (sha(6), 4, 4, 4)
    assert split.passed_beside == 1
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert v.since == sha(6) and v.last_pass == sha(5)


@pytest.mark.parametrize("before", [False, None])
def test_without_a_run_of_older_code_passing_beside_it_the_pool_stands(store_location: str, tmp_path: Path,
                                                                       before: bool | None) -> None:
    """The guard: pull request 33, based at commit 4 (before the first failing one), fails test_d the
    same way after main's commit 6 first did (``before`` False): a changed image or driver fails
    whatever code it meets, so the failures follow the time, not a commit (the oldest code failing so
    is then commit 4's, which main's runs at 4 and 5 passed: no split). With no such run at all
    (None: one below the one passing run the rule needs) the two cannot be told apart. Either way:
    the pool's, infra, as before the rule."""
    with open_store(store_location) as store:
        broken_at_six(store, tmp_path, before=before)
        f, v = judged(store, tmp_path)
        split = split_of(store, f)
    assert split is None
    assert (v.verdict, v.infra) == (INFRA, "cuda")
    assert f"the pool's {5 if before is False else 4} runners failed it with infra errors" in v.detail


def test_a_run_holding_the_commit_that_passed_is_no_split(store_location: str, tmp_path: Path) -> None:
    """The other guard: main's commit 6 passed test_d on h100-06 before its later runs failed it (a
    driver changed under code that passed): a commit does not fail what it passed, so no split,
    though pull request 33 without commit 6 passed beside the failures."""
    with open_store(store_location) as store:
        broken_at_six(store, tmp_path, before=True, passed_at_six=True)
        f, v = judged(store, tmp_path)
        split = split_of(store, f)
    assert split is None
    assert (v.verdict, v.infra) == (INFRA, "cuda") and "the pool's 3 runners" in v.detail


@pytest.mark.parametrize("unplaced, split_failed", [((31, 34), None), ((31,), 3)])
def test_the_split_needs_min_failed_runs_whose_code_is_known(store_location: str, tmp_path: Path,
                                                              unplaced: tuple[int, ...],
                                                              split_failed: int | None) -> None:
    """`MIN_FAILED` (3) at its boundary: pull requests with no merge base do not say which code they
    held. Pull requests 31 and 34 unplaced leave main's two failing runs (one below: no split, the
    pool's); 34 placed makes three (at the threshold: the code's)."""
    assert MIN_FAILED == 3
    with open_store(store_location) as store:
        broken_at_six(store, tmp_path, before=True, unplaced=unplaced)
        f, v = judged(store, tmp_path)
        split = split_of(store, f)
    if split_failed is None:
        assert split is None
        assert v.verdict == INFRA and "the pool's 3 runners" in v.detail
        return
    assert split is not None and split.failed == split_failed
    assert v.verdict == BROKEN_ON_MAIN, v.detail
