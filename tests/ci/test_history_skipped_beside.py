"""Main's failures of a test at commits whose other runs of the tier skipped it
(`ci.history.skipped_beside`): flake evidence, not a breakage. The pure reading on hand-made
`MainRun` lists, and `judge` on hand-made histories in a real store (SQLite and PostgreSQL) through
ingest: tier ``t4`` skips ``test_a`` (a GPU without bf16) in most runs; main's nightly failed it
with an inductor error at commits 2 and 4, where another run of the same commit skipped it; pull
request 7, based at commit 4, fails it with that error. Without the rule that is "broken on main
since commit 2 (never passed there)"."""

from __future__ import annotations

from pathlib import Path

from ci.history.ingest import ingest, prepare
from ci.history.mainline import MainRun
from ci.history.model import RunIdentity
from ci.history.run_results import load_run
from ci.history.skipped_beside import skipped_beside, without_skipped
from ci.history.store import Store, open_store
from ci.history.verdict import BROKEN_ON_MAIN, FLAKY, Verdict, judge
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)
from tests.ci.test_history_verdicts import FILE, REPO, sha

TIER = "t4"
HEAD = f"{7:04x}{'e' * 36}"
COMPILE = ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised: CompilationError",
           "E   torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised: CompilationError")
ORDER = tuple(sha(i) for i in range(1, 6))


def run(i: int, kind: str, rid: int, fingerprint: str = "fp") -> MainRun:
    return MainRun(sha(i), rid, kind, fingerprint if kind == "fail" else "")


def test_failures_each_beside_a_skip_of_their_commit_are_read_as_flake_evidence() -> None:
    runs = [run(1, "skip", 1), run(2, "fail", 2), run(2, "skip", 3), run(3, "skip", 4), run(4, "fail", 5),
            run(4, "skip", 6)]
    beside = skipped_beside(runs, ORDER)
    assert beside is not None
    assert (beside.fingerprints, beside.failed_runs, beside.runs, beside.sources) == (frozenset({"fp"}), 2, 6, 2)
    assert beside.describe() == "failed so in 2 of 6 of main's runs of the tier, at 2 commits it skipped at or after"
    assert [r.report_id for r in without_skipped(runs, beside)] == [1, 3, 4, 6]
    assert without_skipped(runs, None) == runs


def test_failures_after_mains_newest_skip_are_no_such_evidence() -> None:
    """The boundary: commit 4 failed after main's newest skip (commit 3) and nothing at or after it
    skipped N (a commit that made the tier run N may have broken it); a failure at the newest
    skip's own commit is read as the flake's."""
    runs = [run(1, "skip", 1), run(2, "fail", 2), run(3, "skip", 3), run(4, "fail", 5)]
    beside = skipped_beside(runs, ORDER)
    assert beside is not None and beside.reports == frozenset({2})
    assert [r.report_id for r in without_skipped(runs, beside)] == [1, 3, 5]
    assert skipped_beside([run(1, "skip", 1), run(2, "fail", 2), run(4, "fail", 5)], ORDER) is None


def test_failures_at_consecutive_commits_with_no_skip_between_stay_a_streak() -> None:
    """The other guard: commits 2 and 3 both failed, no skip between (a window that ran N and broke
    it, then a fix restored the skip at commit 4); the boundary, one lone failing commit between
    skips, is the flake's."""
    assert skipped_beside([run(1, "skip", 1), run(2, "fail", 2), run(3, "fail", 3), run(4, "skip", 4)], ORDER) is None
    lone = skipped_beside([run(1, "skip", 1), run(2, "fail", 2), run(3, "skip", 3)], ORDER)
    assert lone is not None and lone.reports == frozenset({2})
    # a commit that failed and skipped N counts as a skip for its neighbour: commit 3 lies between skips
    both = skipped_beside([run(1, "skip", 1), run(2, "fail", 2), run(2, "skip", 3), run(3, "fail", 4),
                           run(4, "skip", 5)], ORDER)
    assert both is not None and both.reports == frozenset({2, 4})


def test_a_pass_anywhere_on_main_keeps_the_streaks_reading() -> None:
    """The guard: N runs on the tier (one pass), so a streak after it is judged as any breakage."""
    runs = [run(1, "pass", 1), run(2, "fail", 2), run(2, "skip", 3)]
    assert skipped_beside(runs, ORDER) is None
    assert skipped_beside([run(1, "skip", 1), run(2, "skip", 2)], ORDER) is None  # nothing failed


def report(store: Store, directory: Path, commit: str, outcome: str, event: str = "nightly") -> None:
    case = (Case(FILE, "test_a", "failed", *COMPILE) if outcome == "fail" else
            Case(FILE, "test_a", "skipped", "bf16 requires compute capability >= 8.0") if outcome == "skip" else
            Case(FILE, "test_a"))
    extra = {"pr": 7, "base_sha": sha(4), "author": "me", "scored": False} if event == "pull_request" else {}
    ingest(store, prepare(write_report(directory, [case, Case(FILE, "test_ok")]),
                          RunIdentity(REPO, commit, event, TIER, **extra)))


def judged(store_location: str, tmp_path: Path, main: list[tuple[int, str]]) -> Verdict:
    with open_store(store_location) as store:
        for commit, outcome in main:
            report(store, tmp_path, sha(commit), outcome)
        report(store, tmp_path, HEAD, "fail", "pull_request")
        failures = [f for f in load_run(store, sha=HEAD, repo=REPO).failures if f.node.endswith("::test_a")]
        (verdict,) = judge(store, failures, merge_base=sha(4))
    return verdict


SKIPPED_BESIDE = [(1, "skip"), (2, "fail"), (2, "skip"), (3, "skip"), (4, "fail"), (4, "skip")]


def test_a_failure_like_mains_failures_that_skipped_beside_is_flaky(store_location: str, tmp_path: Path) -> None:
    v = judged(store_location, tmp_path, SKIPPED_BESIDE)
    assert v.verdict == FLAKY, v.detail
    assert v.detail == ("flaky: an intermittent failure: it failed so in 2 of 6 of main's runs of the tier, at 2 "
                        "commits it skipped at or after")


def test_failures_after_mains_newest_skip_stay_broken_on_main(store_location: str, tmp_path: Path) -> None:
    """Commit 3 is main's newest skip; commits 4 and 5 failed with no skip since (a change that
    made the tier run N, and broke it): their streak is main's breakage, named from commit 4."""
    v = judged(store_location, tmp_path, [*SKIPPED_BESIDE[:-1], (5, "fail")])
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert v.detail.startswith(f"broken on main since {sha(4)[:7]} ("), v.detail


def test_a_pass_before_the_failures_keeps_broken_on_main(store_location: str, tmp_path: Path) -> None:
    v = judged(store_location, tmp_path, [(1, "pass"), *SKIPPED_BESIDE[1:]])
    assert v.verdict == BROKEN_ON_MAIN, v.detail
    assert f"last passed at {sha(1)[:7]}" in v.detail, v.detail
