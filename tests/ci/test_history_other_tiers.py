"""A flake's first failure on one tier, known from the test's other tiers (`ci.history.other_tiers`),
on hand-made histories in a real store (SQLite and PostgreSQL) through ingest. Main passes
``test_a`` on the judged tier ``h100-nightly`` (a tier with no flake of it yet); on ``h100-2.13``
other pull requests and main's runs fail it now and then with a tolerance error, passing in
between. Pull request 7's head fails it on ``h100-nightly`` with that error, and no other tier ran
the head yet, so without the rule it is "new: probably this change's"."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.history.other_tiers import on_other_tiers
from ci.history.store import Store, open_store
from ci.history.verdict import FLAKY, NEW, judge
from ci.history.run_results import load_run
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.test_history_passed_beside import CLOSE, HEAD, JUDGED_TIER, OTHER_TIER, PASSED, report
from tests.ci.test_history_verdicts import FILE, REPO, sha

OTHER = ("AttributeError: 'Linear4bit' object has no attribute 'quant_state'", "E   AttributeError: 'Linear4bit'")


def other_pr(store: Store, directory: Path, number: int, error: tuple[str, str] | None, attempt: int = 1) -> None:
    """Pull request ``number`` (its own author), based at main's commit 1, runs test_a on the other
    tier (its run's ``attempt``: GitHub's re-run of the jobs)."""
    report(store, directory, f"{number:04x}{'e' * 36}", OTHER_TIER, {"test_a": error, "test_ok": PASSED},
           pr=number, author=f"author{number}", run_id=f"run{number}", attempt=attempt)


def main_run(store: Store, directory: Path, commit: int, error: tuple[str, str] | None,
             tier: str = OTHER_TIER) -> None:
    report(store, directory, sha(commit), tier, {"test_a": error, "test_ok": PASSED}, event="push")


def history(store: Store, directory: Path, failing_prs: int, error: tuple[str, str] = CLOSE) -> None:
    """Main passes test_a on both tiers; then ``failing_prs`` other pull requests fail it with
    ``error`` on the other tier, each followed by a pull request and a main run that pass it; the
    first one's re-run passes it (a source that failed and passed: the code does not always fail)."""
    main_run(store, directory, 1, PASSED, JUDGED_TIER)
    main_run(store, directory, 1, PASSED)
    for i in range(failing_prs):
        other_pr(store, directory, 20 + 2 * i, error)
        if i == 0:
            other_pr(store, directory, 20, PASSED, attempt=2)
        other_pr(store, directory, 21 + 2 * i, PASSED)
        main_run(store, directory, 2 + i, PASSED)


def judged(store: Store, directory: Path, changed: tuple[str, ...] = (), *, fail: bool = True,
           base: int = 1) -> tuple[str, str]:
    """Pull request 7's head fails test_a with the tolerance error on the judged tier (``fail``);
    its verdict and detail, judged with the change's paths ``changed`` and merge base main's ``base``."""
    if fail:
        report(store, directory, HEAD, JUDGED_TIER, {"test_a": CLOSE, "test_ok": PASSED}, base_sha=sha(base))
    failures = [f for f in load_run(store, sha=HEAD, repo=REPO).failures if f.node.endswith("::test_a")]
    (v,) = judge(store, failures, merge_base=sha(base), changed=changed)
    return v.verdict, v.detail


def test_a_signature_flaking_on_another_tier_makes_the_first_failure_here_flaky(store_location: str,
                                                                               tmp_path: Path) -> None:
    """Three other pull requests failed test_a so on h100-2.13, passing in between: a flake's, and
    the detail says where the evidence is from and that it is not sure."""
    with open_store(store_location) as store:
        history(store, tmp_path, 3)
        verdict, detail = judged(store, tmp_path)
    assert verdict == FLAKY, detail
    assert detail == ("flaky: an intermittent failure: it failed so on this CI's tiers in 3 of 12 runs of 3 other pull "
                      "requests and commits while main passes it (its flakes seen on other tiers, not yet here: rerun "
                      "to be sure)")


def test_two_other_sources_are_one_too_few(store_location: str, tmp_path: Path) -> None:
    """The boundary: two other pull requests failing so is not yet a recurring signature."""
    with open_store(store_location) as store:
        history(store, tmp_path, 2)
        verdict, detail = judged(store, tmp_path)
    assert (verdict, detail) == (NEW, "new: probably this change's (not failing on the default branch)")


def test_a_change_touching_the_tests_file_stays_the_changes(store_location: str, tmp_path: Path) -> None:
    """The guard: the judged change edited test_a's file, which explains its failure at least as well."""
    with open_store(store_location) as store:
        history(store, tmp_path, 3)
        verdict, _ = judged(store, tmp_path, (FILE,))
        untouched, _ = judged(store, tmp_path, ("docs/index.md",), fail=False)
    assert (verdict, untouched) == (NEW, FLAKY)


def test_another_signature_on_the_other_tier_is_no_evidence(store_location: str, tmp_path: Path) -> None:
    """The other tier's flake fails with another error: this failure is none of its flakes."""
    with open_store(store_location) as store:
        history(store, tmp_path, 3, error=OTHER)
        verdict, _ = judged(store, tmp_path)
    assert verdict == NEW


def test_a_breakage_failing_run_after_run_on_the_other_tier_is_no_flake(store_location: str, tmp_path: Path) -> None:
    """Main's runs on the other tier fail test_a so at consecutive commits (a breakage there, fixed
    later), with other pull requests failing it meanwhile: not a flake's pattern, so still new."""
    with open_store(store_location) as store:
        main_run(store, tmp_path, 1, PASSED, JUDGED_TIER)
        main_run(store, tmp_path, 1, PASSED)
        for commit in (2, 3, 4):
            main_run(store, tmp_path, commit, CLOSE)
            other_pr(store, tmp_path, 20 + commit, CLOSE)
        other_pr(store, tmp_path, 22, PASSED, attempt=2)  # a failing source that passed too: only the run order guards
        main_run(store, tmp_path, 5, PASSED)
        verdict, _ = judged(store, tmp_path)
    assert verdict == NEW


def test_the_judged_pull_requests_own_runs_are_not_other_sources(store_location: str, tmp_path: Path) -> None:
    """Pull request 7's earlier pushes failing test_a so on the other tier are one source, its own."""
    with open_store(store_location) as store:
        main_run(store, tmp_path, 1, PASSED, JUDGED_TIER)
        main_run(store, tmp_path, 1, PASSED)
        for push in range(3):
            report(store, tmp_path, f"{push:04x}{'f' * 36}", OTHER_TIER, {"test_a": CLOSE, "test_ok": PASSED})
            main_run(store, tmp_path, 2 + push, PASSED)
        assert on_other_tiers(store, REPO, _node_id(store), HEAD) is None
        verdict, _ = judged(store, tmp_path)
    assert verdict == NEW


def _node_id(store: Store) -> int:
    return int(store.fetchall("SELECT id FROM nodes WHERE node LIKE ?", ("%::test_a",))[0][0])


@pytest.mark.parametrize(("base", "expected"), [(4, FLAKY), (5, NEW), (6, NEW), (7, FLAKY)])
def test_a_base_inside_mains_streak_on_another_tier_is_no_flake(store_location: str, tmp_path: Path, base: int,
                                                               expected: str) -> None:
    """Beside the recurring flake, main's runs on the other tier failed test_a so at commits 5 and
    6 (a streak of two commits, fixed at 7): a pull request based inside it holds code that failed
    so there, so its failure is not called a flake; one based before or after it is."""
    with open_store(store_location) as store:
        history(store, tmp_path, 3)
        main_run(store, tmp_path, 5, CLOSE)
        main_run(store, tmp_path, 6, CLOSE)
        main_run(store, tmp_path, 7, PASSED)
        verdict, detail = judged(store, tmp_path, base=base)
    assert verdict == expected, detail


def test_one_failed_run_of_main_at_the_base_on_another_tier_is_the_flake_firing(store_location: str,
                                                                               tmp_path: Path) -> None:
    """The guard's boundary: main's one failed run at the base (one commit, one attempt) is no streak."""
    with open_store(store_location) as store:
        history(store, tmp_path, 3)
        main_run(store, tmp_path, 5, CLOSE)
        main_run(store, tmp_path, 6, PASSED)
        verdict, detail = judged(store, tmp_path, base=5)
    assert verdict == FLAKY, detail
