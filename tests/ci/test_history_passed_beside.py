"""A failure the same commit passed on another tier (`ci.history.passed_beside`): a flake's first
sight, not the change's, on hand-made histories in a real store (SQLite and PostgreSQL) through
ingest. Main (commit 1) passes ``test_a`` and its file's ``test_ok`` on tiers ``h100-2.13`` and
``h100-nightly``; pull request 7's head fails ``test_a`` on ``h100-nightly`` with a tolerance error
no history shows, so without the rule it is "new: probably this change's"."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.run_results import load_run
from ci.history.store import Store, open_store
from ci.history.verdict import FLAKY, NEW, Verdict, judge
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)
from tests.ci.test_history_verdicts import FILE, REPO, sha

JUDGED_TIER, OTHER_TIER = "h100-nightly", "h100-2.13"
CLOSE = ("AssertionError: Tensor-likes are not close!", "E   AssertionError: Tensor-likes are not close!\n"
         "E   Mismatched elements: 3 / 65536 (0.0%)")
HEAD = f"{7:04x}{'d' * 36}"
PASSED = None


def report(store: Store, directory: Path, commit: str, tier: str, outcomes: dict[str, tuple[str, str] | None], *,
           event: str = "pull_request", file: str = FILE, **extra) -> int:
    """One job's report on ``tier`` at ``commit``: each test of ``file`` passed (None) or failed with
    (message, detail); the new report's id."""
    cases = [Case(file, name) if error is None else Case(file, name, "failed", error[0], error[1])
             for name, error in outcomes.items()]
    if event == "pull_request":
        extra = {"pr": 7, "base_sha": sha(1), "author": "me", "scored": False, **extra}
    result = ingest(store, prepare(write_report(directory, cases), RunIdentity(REPO, commit, event, tier, **extra)))
    assert result.added
    return int(store.fetchall("SELECT MAX(id) FROM reports")[0][0])


def main_passes(store: Store, directory: Path, tiers: tuple[str, ...] = (OTHER_TIER, JUDGED_TIER)) -> None:
    for tier in tiers:
        report(store, directory, sha(1), tier, {"test_a": PASSED, "test_ok": PASSED}, event="push")


def judged(store: Store, as_of: int | None = None) -> Verdict:
    failures = [f for f in load_run(store, sha=HEAD, repo=REPO).failures if f.node.endswith("::test_a")
                and f.tier == JUDGED_TIER]
    (verdict,) = judge(store, failures, merge_base=sha(1), as_of=as_of)
    return verdict


def test_a_pass_on_another_tier_at_the_same_commit_is_a_flakes_first_failure(store_location: str,
                                                                             tmp_path: Path) -> None:
    """The other leg of the same push passed test_a, the failing leg passed its file's test_ok:
    flaky, and the detail says it is not sure."""
    with open_store(store_location) as store:
        main_passes(store, tmp_path)
        report(store, tmp_path, HEAD, OTHER_TIER, {"test_a": PASSED, "test_ok": PASSED})
        report(store, tmp_path, HEAD, JUDGED_TIER, {"test_a": CLOSE, "test_ok": PASSED})
        v = judged(store)
    assert v.verdict == FLAKY, v.detail
    assert v.detail == ("flaky: probably a flake's first failure, not this change's: it passed at this commit on "
                        "h100-2.13 and no other test of its file failed here (no flake evidence for it yet; rerun "
                        "to be sure)")


def test_with_no_other_tier_run_yet_it_stays_the_changes(store_location: str, tmp_path: Path) -> None:
    """Nothing beside: the rule has no evidence (the boundary: zero other tiers)."""
    with open_store(store_location) as store:
        main_passes(store, tmp_path)
        report(store, tmp_path, HEAD, JUDGED_TIER, {"test_a": CLOSE, "test_ok": PASSED})
        v = judged(store)
    assert (v.verdict, v.detail) == (NEW, "new: probably this change's (not failing on the default branch)")


@pytest.mark.parametrize("other_error", [CLOSE, ("AttributeError: 'Foo' has no attribute 'bar'", "E   Attr"),
                                         ("RuntimeError: CUDA error: uncorrectable ECC error encountered",
                                          "E   RuntimeError: CUDA error: uncorrectable ECC error encountered")])
def test_a_failure_on_any_other_tier_at_the_commit_keeps_it_new(store_location: str, tmp_path: Path,
                                                                 other_error: tuple[str, str]) -> None:
    """One tier passed, another failed (its own error, a different one, or an infra one): the code
    may well be broken; the rule does not fire."""
    with open_store(store_location) as store:
        main_passes(store, tmp_path, (OTHER_TIER, JUDGED_TIER, "a10g"))
        report(store, tmp_path, HEAD, OTHER_TIER, {"test_a": PASSED, "test_ok": PASSED})
        report(store, tmp_path, HEAD, "a10g", {"test_a": other_error, "test_ok": PASSED})
        report(store, tmp_path, HEAD, JUDGED_TIER, {"test_a": CLOSE, "test_ok": PASSED})
        v = judged(store)
    assert v.verdict == NEW, v.detail


@pytest.mark.parametrize("neighbour, other_file, expected", [(CLOSE, None, NEW), (PASSED, CLOSE, FLAKY)])
def test_a_neighbour_of_the_same_file_failing_on_the_tier_keeps_it_new(store_location: str, tmp_path: Path, neighbour,
                                                                       other_file, expected: str) -> None:
    """test_ok (same file) failed beside test_a on the judged tier: a breakage of that tier's path
    (one GPU architecture), not one chance failure. A failing test of another file does not count."""
    with open_store(store_location) as store:
        main_passes(store, tmp_path)
        report(store, tmp_path, HEAD, OTHER_TIER, {"test_a": PASSED, "test_ok": PASSED})
        report(store, tmp_path, HEAD, JUDGED_TIER, {"test_a": CLOSE, "test_ok": neighbour})
        if other_file is not None:
            report(store, tmp_path, HEAD, JUDGED_TIER, {"test_b": other_file}, file="tests/srt/test_other.py")
        v = judged(store)
    assert v.verdict == expected, v.detail


@pytest.mark.parametrize("failed_reports, expected", [(1, FLAKY), (2, NEW)])
def test_a_rerun_that_fails_it_again_on_the_tier_keeps_it_new(store_location: str, tmp_path: Path,
                                                              failed_reports: int, expected: str) -> None:
    """One failed report on the tier is a chance failure; a re-run of the job failing it again (the
    boundary: two) reproduces it there, as a breakage of that tier only would."""
    with open_store(store_location) as store:
        main_passes(store, tmp_path)
        report(store, tmp_path, HEAD, OTHER_TIER, {"test_a": PASSED, "test_ok": PASSED})
        for attempt in range(1, failed_reports + 1):
            report(store, tmp_path, HEAD, JUDGED_TIER, {"test_a": CLOSE, "test_ok": PASSED}, run_id="9",
                   attempt=attempt)
        v = judged(store)
    assert v.verdict == expected, v.detail


@pytest.mark.parametrize("reruns, expected", [(0, FLAKY), (1, NEW)])
def test_pytest_reruns_that_fail_it_again_in_the_job_keep_it_new(store_location: str, tmp_path: Path, reruns: int,
                                                                  expected: str) -> None:
    """pytest-rerunfailures' reruns in the one job: failing once is a chance failure, failing its
    rerun too (the boundary: two failed attempts) reproduces it on the tier."""
    with open_store(store_location) as store:
        main_passes(store, tmp_path)
        report(store, tmp_path, HEAD, OTHER_TIER, {"test_a": PASSED, "test_ok": PASSED})
        write = write_report(tmp_path, [Case(FILE, "test_a", "failed", *CLOSE, reruns=reruns), Case(FILE, "test_ok")])
        assert ingest(store, prepare(write, RunIdentity(REPO, HEAD, "pull_request", JUDGED_TIER, pr=7, base_sha=sha(1),
                                                        scored=False))).added
        v = judged(store)
    assert v.verdict == expected, v.detail


def test_a_crash_of_the_test_process_keeps_it_new(store_location: str, tmp_path: Path) -> None:
    """A segfault killed the process: the file's tests after it never ran, so test_ok's pass in
    another job of the tier says nothing about the crash; the rule does not fire."""
    crash = ("Fatal Python error: Segmentation fault", "Fatal Python error: Segmentation fault\n\n"
             "Current thread 0x00007f (most recent call first):\n  File \"tests/srt/test_x.py\", line 12 in test_a")
    with open_store(store_location) as store:
        main_passes(store, tmp_path)
        report(store, tmp_path, HEAD, OTHER_TIER, {"test_a": PASSED, "test_ok": PASSED})
        report(store, tmp_path, HEAD, JUDGED_TIER, {"test_a": crash, "test_ok": PASSED})
        (failure,) = [f for f in load_run(store, sha=HEAD, repo=REPO).failures if f.tier == JUDGED_TIER]
        assert failure.infra == "signal"
        v = judged(store)
    assert v.verdict == NEW, v.detail


def test_a_pass_on_another_tier_at_another_commit_is_no_evidence(store_location: str, tmp_path: Path) -> None:
    """The other tier passed test_a at the merge base (main) and at an earlier head of the pull
    request, not at the judged commit: different code."""
    with open_store(store_location) as store:
        main_passes(store, tmp_path)
        report(store, tmp_path, f"{7:04x}{'e' * 36}", OTHER_TIER, {"test_a": PASSED, "test_ok": PASSED})
        report(store, tmp_path, HEAD, JUDGED_TIER, {"test_a": CLOSE, "test_ok": PASSED})
        assert judged(store).verdict == NEW


def test_the_verdict_holds_as_of_the_judged_run(store_location: str, tmp_path: Path) -> None:
    """The other tier's pass reported after the judged run is not read when asked as of that run."""
    with open_store(store_location) as store:
        main_passes(store, tmp_path)
        at = report(store, tmp_path, HEAD, JUDGED_TIER, {"test_a": CLOSE, "test_ok": PASSED})
        report(store, tmp_path, HEAD, OTHER_TIER, {"test_a": PASSED, "test_ok": PASSED})
        assert judged(store, as_of=at).verdict == NEW
        assert judged(store).verdict == FLAKY


def test_many_tiers_are_named_three_and_counted(store_location: str, tmp_path: Path) -> None:
    """With no default-branch run of the judged tier (no history: "not judged" otherwise), the pass
    elsewhere is still evidence; five tiers beside are named three and "2 more tiers"."""
    tiers = ("a10g", "h100-2.13", "l4-2.13", "l4-nightly", "t4")
    with open_store(store_location) as store:
        for tier in tiers:
            report(store, tmp_path, HEAD, tier, {"test_a": PASSED, "test_ok": PASSED})
        report(store, tmp_path, HEAD, JUDGED_TIER, {"test_a": CLOSE, "test_ok": PASSED})
        v = judged(store)
    assert v.verdict == FLAKY, v.detail
    assert "it passed at this commit on a10g, h100-2.13, l4-2.13 and 2 more tiers and no other" in v.detail
