"""Broken on main where main has no run of the test (`ci.history.unvouched`, through
`ci.history.verdict.judge`), on hand-made histories in a real store (SQLite and PostgreSQL)
through ingest: a tier main never runs (or has not run yet), pull request 100 + i of author
``dev<i>`` runs it based at commit i; pull request 7 (author ``me``) fails it and is judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.history.store import open_store
from ci.history.unvouched import MIN_SOURCES
from ci.history.verdict import BROKEN_ON_MAIN, NEW
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.test_history_sparse_main import JUDGED, judged
from tests.ci.test_history_verdicts import BOOM, FILE, TIER, run, sha

# torch nightly's NF4 break as a real run prints it: specific, no flake's words
SHAPE = ("RuntimeError: shape '[64, -1]' is invalid for input of size 2080",
         "E   RuntimeError: shape '[64, -1]' is invalid for input of size 2080")
REFUSED = ("ConnectionRefusedError: [Errno 111] Connection refused",
           "E   ConnectionRefusedError: [Errno 111] Connection refused")


def others(store, directory: Path, bases: dict[int, tuple[str, str] | None], authors: dict[int, str] | None = None) -> None:
    """Pull request 100 + i (author ``dev<i>`` unless ``authors`` says) based at commit i fails with
    ``bases[i]`` (None: passes), in the order given."""
    for i, error in bases.items():
        pr = 100 + i
        run(store, directory, f"{pr:04x}{'c' * 36}", [error], "pull_request", pr=pr, base_sha=sha(i),
            author=(authors or {}).get(i, f"dev{i}"))


@pytest.mark.parametrize("failing, expected", [((1, 2), NEW), ((1, 2, 3), BROKEN_ON_MAIN)])
def test_other_authors_failing_alike_where_main_never_ran_the_tier(store_location: str, tmp_path: Path,
                                                                  failing: tuple[int, ...], expected: str) -> None:
    """No default-branch run of the tier at all; pull requests of other authors based at 1..k fail
    the test with one specific error, none passes. `MIN_SOURCES` (three) other authors and the
    judged one are the evidence; two are not (one may be a change stacked on the judged one)."""
    assert MIN_SOURCES == 3
    with open_store(store_location) as store:
        others(store, tmp_path, dict.fromkeys(failing, SHAPE))
        v = judged(store, tmp_path, 3, SHAPE)
    assert v.verdict == expected, v.detail
    if expected == BROKEN_ON_MAIN:
        assert (v.since, v.last_pass, v.candidates) == (sha(1), "", ())
        assert v.detail == (f"broken on main at {sha(1)[:7]} or before, not this change's: the default branch has no "
                            f"run of {TIER} in the history (its first runs, or a tier that runs on pull requests "
                            f"only), but pull requests of 3 other authors based there or on older commits failed it "
                            f"with this error and no run of it on {TIER} has passed: #101, #102, #103")
    else:
        assert v.detail.startswith("new: no history to compare with"), v.detail


def test_main_ran_the_tier_but_never_this_test(store_location: str, tmp_path: Path) -> None:
    """Main's nightly at 0 ran the tier, another test only: the detail says main has not run this one."""
    with open_store(store_location) as store:
        run(store, tmp_path, sha(0), [None], "nightly", node="test_other")
        others(store, tmp_path, dict.fromkeys((1, 2, 3), SHAPE))
        v = judged(store, tmp_path, 3, SHAPE)
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert v.detail.startswith(f"broken on main at {sha(1)[:7]} or before, not this change's: main has not run this "
                               f"test on {TIER}, but pull requests of 3 other authors"), v.detail


@pytest.mark.parametrize("story", ["pass_later", "main_ran_it", "same_author", "based_after", "environmental",
                                   "touched", "other_error", "own_pass"])
def test_the_guards(store_location: str, tmp_path: Path, story: str) -> None:
    """Three other authors fail it alike at 1-3 and the judged pull request, based at 3, fails it
    too, each story breaking one condition: a run that passed it (another pull request based at 5,
    the judged author's earlier push), main's own run of the test (rule 3's to read), one of the
    three by the judged author, the three based after the judged base (code it lacks), an
    environmental error (a flake's class), a change that touched the test's file, or one of the
    three failing another way. Each leaves the failure ``new``. (Main's run at 0 failed another
    way: main has a record of the test, which the other rules read.)"""
    failing: dict[int, tuple[str, str] | None] = dict.fromkeys((1, 2, 3), SHAPE)
    authors = {2: "me"} if story == "same_author" else None
    error, base, extra = SHAPE, 3, {}
    with open_store(store_location) as store:
        if story == "pass_later":
            failing[5] = None
        elif story == "main_ran_it":
            run(store, tmp_path, sha(0), [BOOM], "nightly")
        elif story == "based_after":  # the branch's order from git: 0 is older than 1-3
            base, extra = 0, {"git_order": tuple(sha(i) for i in range(10))}
        elif story == "environmental":
            error = REFUSED
            failing = dict.fromkeys(failing, REFUSED)
        elif story == "touched":
            extra = {"changed": (FILE,)}
        elif story == "other_error":
            failing[3] = BOOM
        others(store, tmp_path, failing, authors)
        if story == "own_pass":  # after the others: the first-seen order of the bases stays 1, 2, 3
            run(store, tmp_path, f"{JUDGED:04x}{'e' * 36}", [None], "pull_request", pr=JUDGED, base_sha=sha(3),
                author="me")
        v = judged(store, tmp_path, base, error, **extra)
    assert v.verdict == NEW, (story, v.detail)
