"""Broken on main when main's own record is sparse (`ci.history.sparse_main`), on hand-made
histories in a real store (SQLite and PostgreSQL) through ingest: main ran the test once, on a
schedule (commit 0, passing); pull request 100 + i of author ``dev<i>`` ran it once based at
commit i; pull request 7 (author ``me``) fails it, and is judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.history.run_results import load_run
from ci.history.sparse_main import MIN_SOURCES, PeerBreak, shareable
from ci.history.store import open_store
from ci.history.verdict import BROKEN_ON_MAIN, NEW, Verdict, judge
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.test_history_pr_base_evidence import history
from tests.ci.test_history_verdicts import BOOM, FILE, OTHER, flaky_main, run, sha

JUDGED = 7
REFUSED = ("ConnectionRefusedError: [Errno 111] Connection refused",
           "E   ConnectionRefusedError: [Errno 111] Connection refused")


def judged(store, directory: Path, base: int, error: tuple[str, str] = BOOM, **extra) -> Verdict:
    head = f"{JUDGED:04x}{'d' * 36}"
    run(store, directory, head, [error], "pull_request", pr=JUDGED, base_sha=sha(base), author="me")
    (failure,) = load_run(store, pr=JUDGED).failures
    (verdict,) = judge(store, [failure], merge_base=sha(base), **extra)
    return verdict


def pull_request(store, directory: Path, pr: int, base: int, error: tuple[str, str] | None, author: str) -> None:
    run(store, directory, f"{pr:04x}{'c' * 36}", [error], "pull_request", pr=pr, base_sha=sha(base), author=author)


@pytest.mark.parametrize("failing, expected", [((14,), NEW), ((13, 14), BROKEN_ON_MAIN)])
def test_two_other_authors_failing_alike_are_the_evidence(store_location: str, tmp_path: Path,
                                                          failing: tuple[int, ...], expected: str) -> None:
    """Bases 1-12 passed, 13 and 14 failed with BOOM: main broke the test at 13 and its record
    (one run at 0) never showed it. One other pull request is not enough (`MIN_SOURCES`): it may
    be the breaking change's own run; two other authors and the judged one are three changes."""
    assert MIN_SOURCES == 2
    with open_store(store_location) as store:
        history(store, tmp_path, {i: BOOM for i in failing}, range(1, 15 - len(failing)))
        v = judged(store, tmp_path, 14)
    assert v.verdict == expected, v.detail
    if expected == BROKEN_ON_MAIN:
        assert (v.since, v.last_pass, v.candidates, v.candidate_count) == (sha(13), sha(12), (sha(13),), 1)
        assert v.detail == ("broken on main since 000daaa (1 candidate commit: 000daaa, last passed at 000caaa); "
                            "main has not reported it, but pull requests of 2 other authors based at or after it "
                            "failed it with this error: #113, #114")


@pytest.mark.parametrize("passing, expected", [(range(1, 8), NEW), (range(1, 9), BROKEN_ON_MAIN)])
def test_a_flake_must_not_explain_two_sources(store_location: str, tmp_path: Path, passing: range,
                                              expected: str) -> None:
    """Outside the window only passes: main's at 0 and one pull request's at each base 1..n, so
    q = 1 / (n + 3). Two sources fire when q ** 2 is below `ALPHA` (1 %): at n = 7, q = 1/10 and
    q ** 2 = 1 %, not below (a flake of that rate fails two runs in a row that often); at n = 8 it is."""
    with open_store(store_location) as store:
        history(store, tmp_path, {20: BOOM, 21: BOOM}, passing)
        v = judged(store, tmp_path, 21)
    assert v.verdict == expected, v.detail


@pytest.mark.parametrize("fix_passers, expected", [(1, BROKEN_ON_MAIN), (2, NEW)])
def test_the_fixs_own_pass_amid_failures_is_skipped(store_location: str, tmp_path: Path, fix_passers: int,
                                                    expected: str) -> None:
    """Bases 1-9 passed, 10 and 11 failed, one pull request based at 12 passed (the fix: based on
    the broken code, it passes), 13 failed. The walk back from 13 skips that one pass and finds the
    break at 10. Two pull requests passing at 12 are code that passes (`HELD_SOURCES`): 12 is the
    last pass, and 13's one source is not enough."""
    with open_store(store_location) as store:
        history(store, tmp_path, {10: BOOM, 11: BOOM, 13: BOOM}, [*range(1, 10), 12])
        if fix_passers == 2:
            pull_request(store, tmp_path, 412, 12, None, "dev412")
        v = judged(store, tmp_path, 13)
    assert v.verdict == expected, v.detail
    if expected == BROKEN_ON_MAIN:
        assert (v.since, v.last_pass) == (sha(10), sha(9)), v.detail
        assert v.detail.endswith("3 other authors based at or after it failed it with this error: #110, #111, #113")


def test_a_lone_pass_is_clean_when_the_commit_before_it_passed(store_location: str, tmp_path: Path) -> None:
    """A 3 % flake's pattern: failures at 5 and 13-14, passes everywhere else, one pull request a
    base. The pass at 12 is not skipped (the base before it, 11, passed too), so 13 and 14 alone
    are the window; the failure at 5 stays outside it."""
    with open_store(store_location) as store:
        history(store, tmp_path, {5: BOOM, 13: BOOM, 14: BOOM}, [i for i in range(1, 13) if i != 5])
        v = judged(store, tmp_path, 14)
    assert v.verdict == NEW, v.detail  # q = (1 + 1) / (12 + 2): q ** 2 = 2 %, not below 1 %


def test_main_passing_is_a_clean_pass_even_alone(store_location: str, tmp_path: Path) -> None:
    """Main's one run at 22 passed between failing bases (21, then 23-24): main's pass is the
    code's, never a fix's, so the break is after 22 (two sources), not at 21."""
    with open_store(store_location) as store:
        history(store, tmp_path, {21: BOOM, 23: BOOM, 24: BOOM}, range(1, 21))
        run(store, tmp_path, sha(22), [None], "nightly")
        v = judged(store, tmp_path, 24, git_order=tuple(sha(i) for i in range(30)))
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert (v.since, v.last_pass) == (sha(23), sha(22)), v.detail


def test_a_lone_pass_after_a_commit_that_also_passed_is_clean(store_location: str, tmp_path: Path) -> None:
    """At 21 one pull request passed and another failed; at 22 one passed; 23-24 failed. 22 is
    clean: the commit before it passed too, so it is no fix amid failures (the window starts at 23)."""
    with open_store(store_location) as store:
        history(store, tmp_path, {23: BOOM, 24: BOOM}, range(1, 23))
        pull_request(store, tmp_path, 221, 21, BOOM, "dev221")
        v = judged(store, tmp_path, 24, git_order=tuple(sha(i) for i in range(30)))
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert (v.since, v.last_pass, v.candidate_count) == (sha(23), sha(22), 1), v.detail


def test_only_one_lone_pass_is_skipped(store_location: str, tmp_path: Path) -> None:
    """Failures at 10, 12, 14 and 15 with one pull request passing at 11 and at 13: the walk back
    skips 13 (the fix, perhaps) but not 11 as well, so the break is at 12, last passed at 11."""
    with open_store(store_location) as store:
        history(store, tmp_path, {10: BOOM, 12: BOOM, 14: BOOM, 15: BOOM}, [*range(1, 10), 11, 13])
        v = judged(store, tmp_path, 15, git_order=tuple(sha(i) for i in range(20)))
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert (v.since, v.last_pass) == (sha(12), sha(11)), v.detail


@pytest.mark.parametrize("error, expected", [(BOOM, NEW), (OTHER, BROKEN_ON_MAIN)])
def test_a_known_flake_signature_is_no_shared_evidence(store_location: str, tmp_path: Path, error: tuple[str, str],
                                                       expected: str) -> None:
    """Main flakes with BOOM (`flaky_main`: commits 0-11, its signature kept by a flip at 4), a
    pull request based at 12 passed, two other authors at 13 and 14 failed as the judged one does:
    with BOOM that is the flake firing in two runs (its rate explains it: flaky or new, not main's);
    with OTHER, an error the test never flaked with, it is the breakage."""
    with open_store(store_location) as store:
        flaky_main(store, tmp_path)
        pull_request(store, tmp_path, 112, 12, None, "dev12")
        for i in (13, 14):
            pull_request(store, tmp_path, 100 + i, i, error, f"dev{i}")
        v = judged(store, tmp_path, 14, error=error)
    assert (v.verdict == BROKEN_ON_MAIN) == (expected == BROKEN_ON_MAIN), v.detail


@pytest.mark.parametrize("error, expected", [(REFUSED, NEW), (OTHER, BROKEN_ON_MAIN)])
def test_an_environmental_error_is_no_shared_evidence(store_location: str, tmp_path: Path,
                                                      error: tuple[str, str], expected: str) -> None:
    """Two other authors failed it with a refused connection, as the judged run did: that is the
    machines' surroundings, which any change meets; the same story with a specific error fires."""
    with open_store(store_location) as store:
        history(store, tmp_path, {13: error, 14: error}, range(1, 13))
        v = judged(store, tmp_path, 14, error=error)
    assert v.verdict == expected, v.detail


@pytest.mark.parametrize("changed, expected", [([FILE], NEW), (["python/sglang/srt/other.py"], BROKEN_ON_MAIN)])
def test_a_change_to_the_test_itself_stays_its_own(store_location: str, tmp_path: Path, changed: list[str],
                                                   expected: str) -> None:
    """The story that fires, but pull request 7 edited the test's own file: its change explains its
    failure at least as well, whatever others show."""
    with open_store(store_location) as store:
        history(store, tmp_path, {13: BOOM, 14: BOOM}, range(1, 13))
        v = judged(store, tmp_path, 14, changed=changed)
    assert v.verdict == expected, v.detail


def test_another_error_or_the_judged_authors_runs_are_no_source(store_location: str, tmp_path: Path) -> None:
    """At 13 another author failed with OTHER, at 14 the judged run's own author failed with BOOM
    in another pull request: neither is an independent failure alike, so one source (15) is left."""
    with open_store(store_location) as store:
        history(store, tmp_path, {13: OTHER, 15: BOOM}, range(1, 13))
        pull_request(store, tmp_path, 214, 14, BOOM, "me")
        v = judged(store, tmp_path, 15)
    assert v.verdict == NEW, v.detail


def test_shareable_signatures() -> None:
    """Specific errors are shareable; a generic one, an environmental one, or a known flake's are not."""
    assert shareable(BOOM[0], "f1", set())
    assert not shareable(BOOM[0], "f1", {"f1"})
    assert not shareable(REFUSED[0], "f2", set())
    assert not shareable("AssertionError: False is not true", "f3", set())
    assert not shareable(BOOM[0], "", set())


def test_the_detail_names_at_most_five_pull_requests() -> None:
    brk = PeerBreak(sha(10), sha(9), (sha(10),), 1, tuple(f"#{n}" for n in range(1, 8)), 7, 1e-6)
    assert brk.describe().endswith("7 other authors based at or after it failed it with this error: "
                                   "#1, #2, #3, #4, #5 and 2 more")
