"""Verdicts (`ci.history.verdict`) read from the shape of the history rather than one failure's
text, on hand-made histories whose answer is known, on SQLite and a real PostgreSQL: a test that
fails on one runner only while the pool's other runners pass it; a flake, in a CI without retries,
that everyone's runs show now and then; a test that starts failing often at one commit; a remote
service's outage that fails many tests in everyone's runs; a crash only one change's runs show."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.run_results import load_run
from ci.history.store import open_store
from ci.history.verdict import BROKEN_ON_MAIN, FLAKY, INFRA, NEW, judge
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)
from tests.ci.test_history_verdicts import BOOM, FILE, REPO, TIER, pr_failure, run, sha

PTX = ("RuntimeError: Triton Error [CUDA]: the provided PTX was compiled with an unsupported toolchain.",
       "E   RuntimeError: Triton Error [CUDA]: the provided PTX was compiled with an unsupported toolchain.")


@pytest.mark.parametrize("story, expected", [
    ("image", INFRA),  # other pull requests and main failed it on r3 only, r1 and r2 passed it since
    ("also_r2", BROKEN_ON_MAIN),  # main failed it on r2 too, at its newest commit: main's, not the machine
    ("own_pushes", NEW),  # only this pull request's own earlier pushes failed it on r3: its change
    ("r3_passed", NEW),  # r3 passed it after the others failed: no machine trouble now
])
def test_failing_on_one_runner_only_is_that_runner(store_location: str, tmp_path: Path, story: str,
                                                   expected: str) -> None:
    """Main passes test_a on r1 and r2; then runs on r3 fail it with an error no rule reads as
    infra (a runner image whose driver is older than its toolchain) while r1 and r2 keep passing."""
    with open_store(store_location) as store:
        for i in range(4):
            run(store, tmp_path, sha(i), [None], runner=f"r{1 + i % 2}")
        if story == "own_pushes":
            for push in (1, 2):
                run(store, tmp_path, f"{7:04x}{'e' * 35}{push}", [PTX, PTX], "pull_request", "r3", pr=7)
        else:
            run(store, tmp_path, sha(4, "b"), [PTX, PTX], "pull_request", "r3", pr=8)
            run(store, tmp_path, sha(4), [PTX, PTX], runner="r3")
        run(store, tmp_path, sha(5), [None], runner="r1")
        run(store, tmp_path, sha(6), [PTX, PTX] if story == "also_r2" else [None], runner="r2")
        if story == "r3_passed":
            run(store, tmp_path, sha(7), [None], runner="r3")
        (v,) = judge(store, [pr_failure(store, tmp_path, [PTX, PTX], runner="r3")])
    assert v.verdict == expected, v.detail
    if expected == INFRA:
        assert v.runner == "r3" and v.infra == "runner-only"
        assert v.detail.startswith("infra: fails on r3 only: 3 reports there since 0004bbb failed it, "
                                   "2 on other runners passed"), v.detail


TOL = ("AssertionError: Tensor-likes are not close! Mismatched elements: 3 / 4096 (0.1%)",
       "E   AssertionError: Tensor-likes are not close! Mismatched elements: 3 / 4096 (0.1%)")


@pytest.mark.parametrize("story, expected", [
    ("flake", FLAKY),  # three other pull requests failed it once each, passing around: the test's flake
    ("two_others", NEW),  # two are not enough to tell a flake from chance agreement
    ("own_pushes", NEW),  # only this pull request's own pushes failed it so: its change
    ("main_broke", BROKEN_ON_MAIN),  # main failed it at 5 and has not passed since: main's, not a flake
])
def test_a_flake_that_everyones_runs_show_without_retries(store_location: str, tmp_path: Path, story: str,
                                                         expected: str) -> None:
    """No retries anywhere, so no run holds a failure next to a pass and test_a has no flaky score;
    yet other pull requests' runs failed it with one line now and then while main kept passing it.
    One failed run of it in pull request 7 is that flake, not the change."""
    with open_store(store_location) as store:
        for i in range(5):
            run(store, tmp_path, sha(i), [None])
        if story == "main_broke":
            run(store, tmp_path, sha(5), [TOL])
        others = {"flake": (10, 11, 12), "two_others": (10, 11), "own_pushes": (), "main_broke": (10, 11, 12)}[story]
        for k, pr in enumerate(others):
            run(store, tmp_path, f"{pr:04x}{'c' * 36}", [TOL], "pull_request", pr=pr)
            run(store, tmp_path, f"{pr:04x}{'e' * 36}", [None], "pull_request", pr=pr)
            if story != "main_broke":
                run(store, tmp_path, sha(6 + k), [None])
        if story == "own_pushes":
            for push in range(3):
                run(store, tmp_path, f"{7:04x}{'f' * 35}{push}", [TOL], "pull_request", pr=7)
        (v,) = judge(store, [pr_failure(store, tmp_path, [TOL])])
    assert v.verdict == expected, v.detail
    if expected == FLAKY:
        assert v.detail == ("flaky: an intermittent failure: it failed so in 3 of 14 runs of 3 other pull requests "
                            "and commits"), v.detail


RACE = ("AssertionError: residual mismatch at row 17: 0.3125 vs 0.25 (race in the fused add)",
        "E   AssertionError: residual mismatch at row 17: 0.3125 vs 0.25 (race in the fused add)")


@pytest.mark.parametrize("story, base, expected", [
    ("race", 49, BROKEN_ON_MAIN),  # never failed before 30, 40 % of runs from 30 on: broken since 30
    ("steady", 49, FLAKY),  # it failed 40 % of runs before 30 too: a flake whose rate did not move
    ("fixed", 64, FLAKY),  # 15 passes after the last failure: a fix ended it, one failure now is a flake
    ("race", 29, FLAKY),  # based before 30: the pull request does not hold the breaking commit
])
def test_a_test_that_starts_failing_often_at_one_commit(store_location: str, tmp_path: Path, story: str, base: int,
                                                        expected: str) -> None:
    """Main runs once per commit, no retries: test_a passes at commits 0-29, then fails with one
    error in 2 of every 5 commits from 30 (a race the commit brought in), passing in between, so
    each failure alone is a flip (flaky evidence). A pull request's one failure of it is main's.
    The race runs 40 commits: 8 failures in 20 after 30 clean runs (0.5 % at the pooled rate) are
    no rise once the walk's 6 tried commits are counted (Bonferroni)."""
    with open_store(store_location) as store:
        last = 65 if story == "fixed" else 70
        for i in range(last):
            intermittent = i >= 30 or story == "steady"
            fails = intermittent and i % 5 in (0, 2) and not (story == "fixed" and i >= 50)
            run(store, tmp_path, sha(i), [RACE] if fails else [None])
        (v,) = judge(store, [pr_failure(store, tmp_path, [RACE], base=sha(base))], merge_base=sha(base))
    assert v.verdict == expected, v.detail
    if expected == BROKEN_ON_MAIN:
        assert (v.since, v.last_pass, v.candidates) == (sha(30), sha(29), (sha(30),))
        assert v.detail == ("broken on main since 001eaaa (1 candidate commit: 001eaaa, last passed at 001daaa); it "
                            "fails 16 of 40 attempts from it on, 0 of 30 before: an intermittent breakage")


@pytest.mark.parametrize("passed_in, expected", [((10, 11), FLAKY), ((), BROKEN_ON_MAIN), ((10,), BROKEN_ON_MAIN)])
def test_one_failed_main_run_whose_code_passed_elsewhere_is_a_flake(store_location: str, tmp_path: Path,
                                                                    passed_in: tuple[int, ...], expected: str) -> None:
    """No retries: main's newest commit 6 failed test_a once with TOL. Pull requests 10 and 11,
    based at 6 (they hold that code), passed it: commit 6 does not always fail it, so pull request
    7's one failure with the same line is the flake, not "broken on main since 6". One passing pull
    request is not enough: the fix of a breakage at 6 is based there and passes."""
    with open_store(store_location) as store:
        for i in range(7):
            run(store, tmp_path, sha(i), [TOL] if i == 6 else [None])
        for pr in passed_in:
            run(store, tmp_path, f"{pr:04x}{'c' * 36}", [None], "pull_request", pr=pr, base_sha=sha(6))
        (v,) = judge(store, [pr_failure(store, tmp_path, [TOL], base=sha(6))], merge_base=sha(6))
    assert v.verdict == expected, v.detail


@pytest.mark.parametrize("story, expected", [
    ("halted", BROKEN_ON_MAIN),  # main's runs at 5 and 6 failed test_other and never reached test_a
    ("not_run", NEW),  # main's runs at 5 and 6 passed without test_a: nothing failed there
    ("reached", NEW),  # main ran test_a at 6 as well, and it passed
    ("sparse", NEW),  # main ran test_a at 0, 2 and 4 only: it leaves test_a out now and then
    ("stopped_before", BROKEN_ON_MAIN),  # main's run at 3 failed test_other and stopped too: no sign of selection
])
def test_a_test_main_stopped_reaching_is_main_s_when_it_fails(store_location: str, tmp_path: Path, story: str,
                                                              expected: str) -> None:
    """test_a passed on main up to 4. From 5 on, main's job fails test_other first and stops (make
    stops at its first failing step), so main never ran test_a at 5 or 6. Pull request 7, based at
    6, fails test_a with an error it never failed with: main cannot vouch for test_a there."""
    with open_store(store_location) as store:
        for i in range(5):
            if story == "stopped_before" and i == 3:
                run(store, tmp_path, sha(i), [TOL], node="test_other")
            else:
                run(store, tmp_path, sha(i), [None], node="test_other" if story == "sparse" and i % 2 else "test_a")
        for i in (5, 6):
            run(store, tmp_path, sha(i), [None] if story == "not_run" else [TOL], node="test_other")
        if story == "reached":
            run(store, tmp_path, sha(6), [None])
        (v,) = judge(store, [pr_failure(store, tmp_path, [BOOM], base=sha(6))], merge_base=sha(6))
    assert v.verdict == expected, v.detail
    if expected == BROKEN_ON_MAIN:
        assert (v.since, v.last_pass, v.candidates) == (sha(5), sha(4), (sha(5),))
        assert v.detail.startswith("broken on main since 0005aaa as far as main shows"), v.detail


def test_a_breakage_main_had_is_not_learned_as_a_flake(store_location: str, tmp_path: Path) -> None:
    """Main failed test_a with TOL at commits 3 and 4 (a breakage, reverted at 5); pull requests
    based in that window failed it too, and passed once rebased. The line recurs across runs, but
    it was main's bug: pull request 7 bringing it back is new, not that "flake"."""
    with open_store(store_location) as store:
        for i in range(9):
            run(store, tmp_path, sha(i), [TOL] if i in (3, 4) else [None])
            if i in (4, 5, 6):
                pr = 10 + i
                run(store, tmp_path, f"{pr:04x}{'c' * 36}", [TOL], "pull_request", pr=pr, base_sha=sha(3))
                run(store, tmp_path, f"{pr:04x}{'e' * 36}", [None], "pull_request", pr=pr, base_sha=sha(i + 1))
        (v,) = judge(store, [pr_failure(store, tmp_path, [TOL], base=sha(8))], merge_base=sha(8))
    assert v.verdict == NEW, v.detail


@pytest.mark.parametrize("story, expected", [
    ("race", BROKEN_ON_MAIN),  # from 40 on, 2 in 5 runs fail it, most of them other pull requests'
    ("quiet_flake", FLAKY),  # 1 in 5 from 40 on, after a clean start: a flake's first failure picked as C
])
def test_a_rise_seen_in_pull_requests_based_after_it_is_main_s(store_location: str, tmp_path: Path, story: str,
                                                               expected: str) -> None:
    """No retries. Main runs once per commit; pull request 100 + i runs once, based at commit i.
    Main failed test_a only at 40 and 46, each a flip between passes and too few for a change point
    alone; the pull requests based from 40 on fail it too. Pull request 7, based at the newest
    commit, fails it once: with the race (40 % from 40 on) that is main's; with a flake, a flake."""
    last = 70
    with open_store(store_location) as store:
        for i in range(last):
            run(store, tmp_path, sha(i), [RACE] if i in (40, 46) else [None])
            fails = i >= 40 and (i % 5 in (0, 2) if story == "race" else i % 10 in (3, 7) and i < 60)
            run(store, tmp_path, f"{100 + i:04x}{'c' * 36}", [RACE] if fails else [None], "pull_request",
                pr=100 + i, base_sha=sha(i))
        (v,) = judge(store, [pr_failure(store, tmp_path, [RACE], base=sha(last - 1))], merge_base=sha(last - 1))
    assert v.verdict == expected, v.detail
    if expected == BROKEN_ON_MAIN:
        assert (v.since, v.last_pass) == (sha(40), sha(39)), v.detail


def test_a_change_point_is_corrected_for_every_commit_it_tries(store_location: str, tmp_path: Path) -> None:
    """No retries. test_a passes at commits 0-9 and fails 9 of the 14 runs from 10 on, passing in
    between: a flake failing a third of its runs whose first failure came late. Ten clean runs at
    that rate have a chance just under 1 % (0.9 %), so commit 10 alone would pass for a change
    point; but the walk tried each of its 7 eligible failing commits, and over all of them that is
    no rise (Bonferroni, 1 % / 7)."""
    with open_store(store_location) as store:
        for i in range(24):
            run(store, tmp_path, sha(i), [RACE] if i in (10, 11, 13, 14, 16, 18, 19, 21, 23) else [None])
        (v,) = judge(store, [pr_failure(store, tmp_path, [RACE], base=sha(23))], merge_base=sha(23))
    assert v.verdict == FLAKY, v.detail


POLLUTER = "tests/srt/test_cache.py"


def job(store, directory: Path, commit: str, polluted: bool, event: str = "push", **extra) -> None:
    """One job (report) running test_a's file, and the polluter's file before it when ``polluted``:
    test_a then fails every attempt (three) with RACE, else passes."""
    cases = [Case(POLLUTER, "test_fill")] if polluted else []
    cases.append(Case(FILE, "test_a", "failed", *RACE, reruns=2) if polluted else Case(FILE, "test_a"))
    extra.setdefault("scored", event in ("push", "nightly"))
    assert ingest(store, prepare(write_report(directory, cases), RunIdentity(REPO, commit, event, TIER, **extra))).added


@pytest.mark.parametrize("story, expected", [
    ("order", FLAKY),  # the polluter shares test_a's job at 5-9, 15-19, 25-29: test_a fails then, passes else
    ("order_not_here", BROKEN_ON_MAIN),  # the same, but the judged job did not run the polluter: not that
    ("added", BROKEN_ON_MAIN),  # the polluter's file joins at 15 and stays: one commit's breakage, not order
])
def test_a_test_failing_only_where_another_file_ran_in_its_job_is_order_dependent(
        store_location: str, tmp_path: Path, story: str, expected: str) -> None:
    """Main runs once per commit; test files are dealt to jobs anew as files are added, so the
    polluter's file shares test_a's job at some commits only. test_a fails every attempt exactly
    there (a cache the polluter fills), passes everywhere else: the failures follow the layout, not
    a commit. Pull request 7, based at 29, fails test_a in a job that ran the polluter too."""
    with open_store(store_location) as store:
        for i in range(30):
            job(store, tmp_path, sha(i), i >= 15 if story == "added" else i % 10 >= 5)
        if story == "order_not_here":  # a job without the polluter that failed test_a all the same
            run(store, tmp_path, f"{7:04x}{'d' * 36}", [RACE, RACE, RACE], "pull_request", pr=7, base_sha=sha(29))
        else:
            job(store, tmp_path, f"{7:04x}{'d' * 36}", True, "pull_request", pr=7, base_sha=sha(29))
        failures = [f for f in load_run(store, pr=7).failures if f.node.endswith("test_a")]
        verdicts = judge(store, failures, merge_base=sha(29))
    assert {v.verdict for v in verdicts} == {expected}, [v.detail for v in verdicts]
    if story == "order":
        assert verdicts[0].detail == (f"flaky: it fails only in jobs that also ran {POLLUTER} (15 with it failed, "
                                      "15 without it passed): order-dependent")


@pytest.mark.parametrize("later, expected", [
    ((86, 96), FLAKY),  # after the week, two failures at the past's rate: it ended all the same
    ((76, 78, 81, 84, 86, 90, 93, 96), BROKEN_ON_MAIN),  # still a third of the runs: not over
])
def test_a_rise_that_fell_back_to_its_past_rate_is_over(store_location: str, tmp_path: Path, later: tuple[int, ...],
                                                        expected: str) -> None:
    """No retries. test_a passes at commits 0-59, fails 9 of the 14 runs from 60 (a loaded week),
    then at ``later`` commits only up to 99. A pull request based at 99 fails it once. A fix (or the
    load going away) shows as a clean run after the last failure; a flake's ordinary failure after
    that must not keep "broken on main since 60" standing."""
    fails = {60, 61, 63, 65, 66, 68, 70, 71, 73, *later}
    with open_store(store_location) as store:
        for i in range(100):
            run(store, tmp_path, sha(i), [RACE] if i in fails else [None])
        (v,) = judge(store, [pr_failure(store, tmp_path, [RACE], base=sha(99))], merge_base=sha(99))
    assert v.verdict == expected, v.detail


HUB_DOWN = ("OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the "
            "cached files.", "E   requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: "
            "https://huggingface.co/api/models/org/model/revision/main")
NOT_FOUND = ("huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error: Not Found for url: "
             "https://huggingface.co/api/models/org/modle", "E   RepositoryNotFoundError: 404 Client Error")


@pytest.mark.parametrize("story, expected", [
    ("outage", INFRA),  # four tests in runs of main and two pull requests: the service, not commit 4
    ("lone", NEW),  # only this run's one test: no outage (rules 2-5 judge it; nothing here flakes so)
    ("over", NEW),  # the outage ended 41 reports ago: a window of time, not a mark the service keeps
    ("not_found", NEW),  # a 404 for a misspelt repository names no failed service: the code's own request
])
def test_a_hub_outage_is_infra_naming_the_service_never_main_s(store_location: str, tmp_path: Path, story: str,
                                                                 expected: str) -> None:
    """Main passes test_a at 0-3; then the model hub answers 503 for hours: main's commits 4 and 5
    and another pull request fail test_a to test_d, every attempt, on any runner. Pull
    request 7 failing the same way meets the outage (a window of time, not commit 4)."""
    with open_store(store_location) as store:
        for i in range(4):
            run(store, tmp_path, sha(i), [None], runner=f"r{1 + i % 2}")
        if story in ("outage", "over"):
            run(store, tmp_path, sha(4), [HUB_DOWN, HUB_DOWN], runner="r1")
            run(store, tmp_path, f"{9:04x}{'e' * 36}", [HUB_DOWN], "pull_request", "r2", pr=9, base_sha=sha(4))
            for node in ("test_b", "test_c", "test_d", "test_a"):
                run(store, tmp_path, sha(5), [HUB_DOWN, HUB_DOWN], runner="r2", node=node)
        for i in range(6, 47 if story == "over" else 6):
            run(store, tmp_path, sha(i), [None])
        attempts = [NOT_FOUND] * 2 if story == "not_found" else [HUB_DOWN] * 2
        (v,) = judge(store, [pr_failure(store, tmp_path, attempts, base=sha(3))], merge_base=sha(3))
    assert v.verdict == expected, v.detail
    if expected == INFRA:
        assert v.infra == "outage"
        assert v.detail.startswith("infra: huggingface.co failed or could not be reached: an outage, not a commit "
                                   "(it failed 4 tests in 7 runs of 4 pull requests and main commits from 20"), v.detail


SEGV = ("Fatal Python error: Segmentation fault",
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f3a (most recent call first):")


@pytest.mark.parametrize("story, expected", [
    ("own", NEW),  # main and other pull requests pass it at the same base: the change's own crash
    ("other_base", NEW),  # another pull request crashed it from another base: that change's own
    ("same_base", INFRA),  # another pull request on the same base crashed it too: not this change
    ("main_too", INFRA),  # main's own run at the base crashed it
    ("many", INFRA),  # three tests of the run killed at once: the machine
])
def test_a_crash_only_this_change_shows_is_its_own(store_location: str, tmp_path: Path, story: str,
                                                   expected: str) -> None:
    """Main passes test_a at 0-3 on r1 and r2. Pull request 7, based at 3, dies with a segfault in
    test_a (the job writes no JUnit after it). A signal is the machine's only when it follows the
    runner, hits many tests at once, or runs of the same code show it too."""
    with open_store(store_location) as store:
        for i in range(4):
            run(store, tmp_path, sha(i), [None], runner=f"r{1 + i % 2}")
        run(store, tmp_path, f"{8:04x}{'e' * 36}", [None], "pull_request", "r1", pr=8, base_sha=sha(3))
        if story in ("other_base", "same_base"):
            run(store, tmp_path, f"{9:04x}{'e' * 36}", [SEGV], "pull_request", "r2", pr=9,
                base_sha=sha(3 if story == "same_base" else 1))
        if story == "main_too":
            run(store, tmp_path, sha(3), [SEGV], "nightly", runner="r2")
        f = pr_failure(store, tmp_path, [SEGV], base=sha(3), runner="r2")
        crashed = [replace(f, node=f"{f.node[:-1]}{c}") for c in "bcd"] if story == "many" else []
        (v, *_) = judge(store, [f, *crashed], merge_base=sha(3))
    assert (v.verdict, v.infra) == (expected, "signal" if expected == INFRA else ""), v.detail


def oom(own_gib: float, nvml: bool = False) -> tuple[str, str]:
    """torch's out-of-memory line on a nearly full 79 GiB device, with this process's share as
    ``own_gib``: what its PyTorch allocated, or (``nvml``) all it holds as NVML counts it."""
    own = (f"Including non-PyTorch memory, this process has {own_gib:.2f} GiB memory in use." if nvml
           else f"Of the allocated memory {own_gib:.2f} GiB is allocated by PyTorch")
    line = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.64 GiB. GPU 0 has a total capacity of "
            f"79.19 GiB of which 0.94 GiB is free. Process 4242 has {78.25 - own_gib:.2f} GiB memory in use. {own}")
    return line, f"E   {line}"


@pytest.mark.parametrize("story, expected", [
    ("held", INFRA),  # 3 GiB of the test's own on a full device: another process holds it, on any runner
    ("own", FLAKY),  # 75 GiB allocated by the test itself: its own appetite, a flake like any other
])
def test_a_gpu_that_another_process_holds_is_infra_whatever_test_it_hits(store_location: str, tmp_path: Path,
                                                                         story: str, expected: str) -> None:
    """Main runs test_a at 0-8 on r1-r4; at 2 and 5 (r3, r2) and in pull request 9 (r4) it ran out
    of CUDA memory, passing around. Pull request 7 runs out of memory the same way on r1."""
    error = oom(3.0 if story == "held" else 75.0)
    with open_store(store_location) as store:
        for i in range(9):
            run(store, tmp_path, sha(i), [error] if i in (2, 5) else [None], runner=f"r{1 + i % 4}")
        run(store, tmp_path, f"{9:04x}{'e' * 36}", [error], "pull_request", "r4", pr=9, base_sha=sha(6))
        (v,) = judge(store, [pr_failure(store, tmp_path, [error], base=sha(8))], merge_base=sha(8))
    assert v.verdict == expected, v.detail
    assert v.infra == ("gpu-held" if expected == INFRA else "")


@pytest.mark.parametrize("own_gib, retried, expected", [
    (2.87, False, INFRA),  # another process holds 76 GiB: the machine's, the first time it hits the test
    (2.87, True, INFRA),  # the pipeline's retry passing does not make it a flake: the failure named the machine
    (75.0, True, FLAKY),  # the test's own 75 GiB: its own appetite, and the retry passed
    (75.0, False, NEW),  # ... and nothing passed: the change's, as any failure main never shows
])
def test_a_gpu_another_process_holds_stays_infra_when_the_retry_passes(store_location: str, tmp_path: Path,
                                                                       own_gib: float, retried: bool,
                                                                       expected: str) -> None:
    """Main passes test_a at 0-3. Pull request 7's run 70 runs out of CUDA memory in test_a, its line
    saying how much this process holds (NVML's count); ``retried``: the pipeline's retry of the
    failed job (attempt 2 of run 70, its own JUnit) passes it."""
    error = oom(own_gib, nvml=True)
    head = f"{7:04x}{'d' * 36}"
    with open_store(store_location) as store:
        for i in range(4):
            run(store, tmp_path, sha(i), [None], runner=f"r{1 + i % 2}")
        for attempt, result in enumerate([error, None] if retried else [error], 1):
            run(store, tmp_path, head, [result], "pull_request", f"r{attempt}", pr=7, base_sha=sha(3), run_id="70",
                attempt=attempt)
        (f,) = load_run(store, pr=7).failures
        (v,) = judge(store, [f], merge_base=sha(3))
    assert f.passed_on_retry is retried
    assert v.verdict == expected, v.detail
    assert v.infra == ("gpu-held" if expected == INFRA else "")


TIMEOUT = ("modal.exception.FunctionTimeoutError: Function tests timed out after 5400.0 seconds",
           "E   modal.exception.FunctionTimeoutError: Function tests timed out after 5400.0 seconds")
TEST_TIMEOUT = ("Failed: Timeout (>300.0s) from pytest-timeout.", "E   Failed: Timeout (>300.0s) from pytest-timeout.")
TERMINATED = ("modal.exception.RemoteError: Function call fc-01JQ3 was terminated by the Modal worker",
              "E   modal.exception.RemoteError: Function call fc-01JQ3 was terminated by the Modal worker")


@pytest.mark.parametrize("error, expected", [
    (TIMEOUT, "job-timeout"),  # the whole job's time ran out while test_a happened to run: the executor's
    (TERMINATED, "lost-runner"),  # the worker running the job went away under it
    (TEST_TIMEOUT, NEW),  # test_a's own time limit: a hang the change may have brought
])
def test_a_job_killed_from_outside_is_infra_not_the_running_test_s(store_location: str, tmp_path: Path,
                                                                   error: tuple[str, str], expected: str) -> None:
    """Main passes test_a at 0-3; pull request 7's job is killed inside test_a: by its time limit,
    by its worker going away, or by test_a's own timeout."""
    with open_store(store_location) as store:
        for i in range(4):
            run(store, tmp_path, sha(i), [None], runner=f"r{1 + i % 2}")
        (v,) = judge(store, [pr_failure(store, tmp_path, [error], base=sha(3), runner="r2")], merge_base=sha(3))
    assert (v.verdict, v.infra) == ((NEW, "") if expected == NEW else (INFRA, expected)), v.detail
