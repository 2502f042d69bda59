"""Broken on main read from other pull requests' merge bases (`ci.history.pr_base_evidence`), on
hand-made histories in a real store (SQLite and PostgreSQL) through ingest: main runs the test only
on a schedule (one ``nightly`` run at commit 0, passing), pull request 100 + i of author ``dev<i>``
runs once based at commit i, and pull request 7 (author ``me``) fails test_a with BOOM."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

import pytest

from ci.history.depmaps import ingest_depmap, prepare_depmap
from ci.history.model import RunIdentity
from ci.history.run_results import load_run
from ci.history.store import open_store
from ci.history.verdict import BROKEN_ON_MAIN, NEW, Verdict, judge
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.test_history_verdicts import BOOM, FILE, OTHER, REPO, TIER, run, sha

# a kernel's or a machine's (a hardware fault never follows a test: `ci.history.hardware`)
LAUNCH = ("RuntimeError: CUDA error: unspecified launch failure",
          "E   RuntimeError: CUDA error: unspecified launch failure")

JUDGED = 7


def history(store, directory: Path, fails: dict[int, tuple[str, str]], passes: Iterable[int], *,
            authors: dict[int, str] | None = None) -> None:
    """Main's one scheduled run (commit 0, passing), then one run per base: pull request 100 + i
    based at commit i fails with ``fails[i]`` or passes (``passes``), in base order."""
    run(store, directory, sha(0), [None], "nightly")
    for i in sorted(set(fails) | set(passes)):
        author = (authors or {}).get(i, f"dev{i}")
        pr = 100 + i
        run(store, directory, f"{pr:04x}{'c' * 36}", [fails[i]] if i in fails else [None], "pull_request",
            pr=pr, base_sha=sha(i), author=author)


def judged(store, directory: Path, base: int, **extra) -> Verdict:
    head = f"{JUDGED:04x}{'d' * 36}"
    run(store, directory, head, [BOOM], "pull_request", pr=JUDGED, base_sha=sha(base), author="me")
    (failure,) = load_run(store, pr=JUDGED).failures
    (verdict,) = judge(store, [failure], merge_base=sha(base), **extra)
    return verdict


def test_pull_requests_based_after_a_commit_fail_it_and_those_before_pass(store_location: str,
                                                                          tmp_path: Path) -> None:
    """Based at 1-9 they pass, at 10-14 they fail with BOOM: main broke it at 10, which its
    schedule has not run. The first-seen order places the bases (no checkout); main's pass at 0
    counts with the nine pull requests' before it."""
    with open_store(store_location) as store:
        history(store, tmp_path, {i: BOOM for i in range(10, 15)}, range(1, 10))
        v = judged(store, tmp_path, 14)
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert (v.since, v.last_pass, v.candidates, v.candidate_count) == (sha(10), sha(9), (sha(10),), 1)
    assert v.detail == ("broken on main since 000aaaa (1 candidate commit: 000aaaa, last passed at 0009aaa; evidence: "
                        "5 pull requests based at or after it failed it with this error, 10 runs based before passed)")


def test_the_window_runs_from_the_last_passing_base_to_the_first_failing_one(store_location: str,
                                                                             tmp_path: Path) -> None:
    """With the branch's first-parent order at hand, commits 7-9 that no run was based at are the
    candidates too: the break is somewhere after the pass at 6, at or before the failure at 10. A
    base that failed otherwise (OTHER at 11) says nothing."""
    order = tuple(sha(i) for i in range(20))
    with open_store(store_location) as store:
        history(store, tmp_path, {10: BOOM, 11: OTHER, 12: BOOM, 13: BOOM}, range(1, 7))
        v = judged(store, tmp_path, 13, git_order=order)
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert (v.since, v.last_pass, v.candidates, v.candidate_count) == (sha(10), sha(6), order[7:11], 4)


STORIES = {  # story: (bases failing with BOOM, bases passing, the judged pull request's base)
    "flake_10": ((3, 13, 23, 33, 39, 40), [i for i in range(1, 39) if i % 10 != 3], 40),
    "flake_30": ((*range(3, 30, 3), 31, 32, 33), [*(i for i in range(1, 30) if i % 3), 30], 33),
    "passed_after": ((10, 11, 12), [*range(1, 10), 13], 14),
    "one_source": ((14,), list(range(1, 14)), 14),
    "one_author": (tuple(range(10, 15)), list(range(1, 10)), 14),
    "the_judged_author": (tuple(range(10, 15)), list(range(1, 10)), 14),
    "one_change_pushed_again": ((), list(range(1, 10)), 14),
}


@pytest.mark.parametrize("story", sorted(STORIES))
def test_it_never_fires_without_independent_evidence(store_location: str, tmp_path: Path, story: str) -> None:
    """flake_10: a 10 % flake (BOOM at 3, 13, 23, 33) that happened to fail the two newest bases
    too: fewer than `MIN_SOURCES`. flake_30: a flake failing every third base up to 27, whose three
    newest bases failed: at its rate, (9 + 1) / (30 + 2), three in a row are 3 %, not below `ALPHA`.
    passed_after: a pull request based at 13, after the failures at 10-12, passed it. one_source:
    one other pull request (two other authors fire `ci.history.sparse_main`'s rule).
    one_author: five pull requests of one author at 10-14. the_judged_author: four of those five
    are pull request 7's author's (their change may be in them too), one is another's.
    one_change_pushed_again: one pull request's five pushes at bases 10-14, each failing."""
    failing, passing, base = STORIES[story]
    with open_store(store_location) as store:
        authors = {"one_author": {i: "solo" for i in failing},
                   "the_judged_author": {10: "me", 11: "me", 12: "me", 14: "me"}}.get(story)
        history(store, tmp_path, {i: BOOM for i in failing}, passing, authors=authors)
        if story == "one_change_pushed_again":
            for push, at in enumerate(range(10, 15)):
                run(store, tmp_path, f"{200:04x}{'e' * 35}{push}", [BOOM], "pull_request", pr=200, base_sha=sha(at),
                    author="solo")
        v = judged(store, tmp_path, base)
    assert v.verdict == NEW, v.detail
    assert "evidence:" not in v.detail


ROPE = "python/sglang/srt/layers/rope.py"


@pytest.mark.parametrize("changed, expected", [
    ([FILE], NEW),  # the test's own file
    ([ROPE], NEW),  # a file the test ran, as the store's runtime map says
    (["python/sglang/srt/other.py"], BROKEN_ON_MAIN),  # nothing the test runs
])
def test_a_change_that_touched_the_test_is_not_judged_by_others_failures(store_location: str, tmp_path: Path,
                                                                         changed: list[str], expected: str) -> None:
    """The story that fires above, but pull request 7's own diff (``changed``) touched what the
    test runs: its change explains its own failure as well, so it stays ``new``."""
    depmap = tmp_path / "map.json"
    depmap.write_text(json.dumps({"format": "ci-depmap", "version": 1, "tier": TIER,
                                  "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  "tests": {FILE: {"complete": True, "items": 2, "ran": 2, "executed": [FILE, ROPE],
                                                   "opened": []}}}), encoding="utf-8")
    with open_store(store_location) as store:
        assert ingest_depmap(store, prepare_depmap(depmap, RunIdentity(REPO, sha(0), "nightly", TIER, run_id="9")))
        history(store, tmp_path, {i: BOOM for i in range(10, 15)}, range(1, 10))
        v = judged(store, tmp_path, 14, changed=changed)
    assert v.verdict == expected, v.detail


@pytest.mark.parametrize("failing, expected", [((10, 11, 12), NEW), ((10, 11, 12, 13), BROKEN_ON_MAIN)])
def test_a_short_quiet_past_is_no_proof_of_no_flake(store_location: str, tmp_path: Path, failing: tuple[int, ...],
                                                    expected: str) -> None:
    """Laplace's rule at its boundary: outside the window only main's pass at 0 and one pull
    request's at 1, so q = (0 + 1) / (2 + 2) = 1/4. Three failing sources, q ** 3 = 1.6 %, are not
    below `ALPHA` (a flake of that rate does it); four, 0.4 %, are."""
    with open_store(store_location) as store:
        history(store, tmp_path, {i: BOOM for i in failing}, [1])
        v = judged(store, tmp_path, failing[-1])
    assert v.verdict == expected, v.detail


def test_a_base_that_also_passed_is_before_the_break(store_location: str, tmp_path: Path) -> None:
    """Base 10 passed in one pull request and failed in another's: the code there does not always
    fail, so the break is after it, at 11 (bases 11-13 failed, three other authors)."""
    with open_store(store_location) as store:
        history(store, tmp_path, {i: BOOM for i in (11, 12, 13)}, range(1, 11))
        run(store, tmp_path, f"{300:04x}{'c' * 36}", [BOOM], "pull_request", pr=300, base_sha=sha(10), author="dev300")
        v = judged(store, tmp_path, 13)
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert (v.since, v.last_pass, v.candidates, v.candidate_count) == (sha(11), sha(10), (sha(11),), 1)


def test_a_base_that_failed_with_another_error_is_no_source(store_location: str, tmp_path: Path) -> None:
    """OTHER at 11 and 12 says nothing of BOOM: one source (13) remains, fewer than either rule's
    minimum (counted, the three would fire both)."""
    with open_store(store_location) as store:
        history(store, tmp_path, {11: OTHER, 12: OTHER, 13: BOOM}, range(1, 11))
        v = judged(store, tmp_path, 13)
    assert v.verdict == NEW, v.detail


def test_a_change_to_the_test_file_itself_needs_no_runtime_map(store_location: str, tmp_path: Path) -> None:
    """The story that fires, but pull request 7 edited the test's own file and the store holds no
    map of it: its own change still explains its failure."""
    with open_store(store_location) as store:
        history(store, tmp_path, {i: BOOM for i in range(10, 15)}, range(1, 10))
        v = judged(store, tmp_path, 14, changed=[FILE])
    assert v.verdict == NEW, v.detail


def test_a_long_window_keeps_the_newest_candidates(store_location: str, tmp_path: Path) -> None:
    """29 commits after the last pass (at 1) up to the break (at 30): the 20 (`MAX_CANDIDATES`)
    nearest the break are named, oldest first, as main's own streaks name theirs; all are counted."""
    order = tuple(sha(i) for i in range(40))
    with open_store(store_location) as store:
        history(store, tmp_path, {i: BOOM for i in range(30, 34)}, [1])
        v = judged(store, tmp_path, 33, git_order=order)
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert (v.since, v.last_pass, v.candidates, v.candidate_count) == (sha(30), sha(1), order[11:31], 29)


def test_passes_based_after_the_judged_base_are_not_counted_as_before(store_location: str, tmp_path: Path) -> None:
    """A pull request based at 15, after the judged base 14, passed: it is no run "based before"
    the break, and the detail's count stays main's pass and the nine at 1-9."""
    with open_store(store_location) as store:
        history(store, tmp_path, {i: BOOM for i in range(10, 15)}, [*range(1, 10), 15])
        v = judged(store, tmp_path, 14)
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert v.detail.endswith("5 pull requests based at or after it failed it with this error, 10 runs based before "
                             "passed)"), v.detail


def test_a_base_whose_retry_passed_is_the_last_pass(store_location: str, tmp_path: Path) -> None:
    """Pull request 109 based at 9 failed BOOM, then passed on retry: the code at 9 does not always
    fail, so 9 is the last pass and 10 the one candidate (the branch's order given: that run came last)."""
    with open_store(store_location) as store:
        history(store, tmp_path, {i: BOOM for i in range(10, 15)}, range(1, 9))
        run(store, tmp_path, f"{109:04x}{'c' * 36}", [BOOM, None], "pull_request", pr=109, base_sha=sha(9),
            author="dev9")
        v = judged(store, tmp_path, 14, git_order=tuple(sha(i) for i in range(20)))
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert (v.since, v.last_pass, v.candidates, v.candidate_count) == (sha(10), sha(9), (sha(10),), 1)


def test_failures_with_an_infra_cause_are_no_evidence(store_location: str, tmp_path: Path) -> None:
    """Pull requests based at 10-14 failed the test with a CUDA launch failure on runner r2, the
    judged one on r1: the error follows the test (rule 1 hands it on). An infra-tagged failure is no
    source of this module's (no "evidence:" in the detail); `ci.history.sparse_main` reads the same
    kind as the judged failure's, once rule 1 found it the test's, and names the five. (Not an
    uncorrectable ECC error: a hardware fault never follows a test, `ci.history.hardware`.)"""
    with open_store(store_location) as store:
        history(store, tmp_path, {}, range(1, 10))
        for i in range(10, 15):
            run(store, tmp_path, f"{100 + i:04x}{'c' * 36}", [LAUNCH], "pull_request", runner="r2", pr=100 + i,
                base_sha=sha(i), author=f"dev{i}")
        head = f"{JUDGED:04x}{'d' * 36}"
        run(store, tmp_path, head, [LAUNCH], "pull_request", pr=JUDGED, base_sha=sha(14), author="me")
        (failure,) = load_run(store, pr=JUDGED).failures
        (v,) = judge(store, [failure], merge_base=sha(14))
    assert failure.infra == "cuda"
    assert v.verdict == BROKEN_ON_MAIN and "evidence:" not in v.detail, v.detail
    assert v.detail.endswith("failed it with this error: #110, #111, #112, #113, #114"), v.detail
