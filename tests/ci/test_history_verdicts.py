"""Verdicts (`ci.history.verdict`) against a labelled replay and against hand-made histories whose
answer is known, on SQLite and a real PostgreSQL.

The replay (`tests.ci.verdict_replay`) must be judged at least 95 % right, and no breakage may be
called flaky: no failure whose truth is ``broken_on_main``, nor a pull request's own breakage with
an error its test never failed with. (A pull request that breaks a flaky test with that test's own
flake message is told from the flake only by how often it repeats; those are counted in the
accuracy and listed apart.)
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ci.history.ingest import ingest, prepare
from ci.history.mainline import first_parent_order
from ci.history.model import RunIdentity
from ci.history.run_results import load_run
from ci.history.runners import runner_health
from ci.history.store import open_store
from ci.history.verdict import BROKEN_ON_MAIN, FLAKY, INFRA, NEW, Failure, judge, tally
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)
from tests.ci.verdict_replay import BAD_RUNNER, Replay

REPO = "acme/llm"
TIER = "gpu_h100"
FILE = "tests/srt/test_x.py"
NODE = f"{FILE}::test_a"
BOOM = ("AssertionError: expected 3 tokens, got 4", "E   AssertionError: expected 3 tokens, got 4")
OTHER = ("AssertionError: logits differ by 0.5", "E   AssertionError: logits differ by 0.5")
CUDA = ("RuntimeError: CUDA error: uncorrectable ECC error encountered",
        "E   RuntimeError: CUDA error: uncorrectable ECC error encountered")
KERNEL_BUG = ("RuntimeError: CUDA error: an illegal memory access was encountered",
              "E   RuntimeError: CUDA error: an illegal memory access was encountered")
HIP_GONE = ('failed on setup with "RuntimeError: HIP error: hipErrorNoDevice: no ROCm-capable device is detected"',
            "E   RuntimeError: HIP error: hipErrorNoDevice: no ROCm-capable device is detected")


def check_replay(replay: Replay) -> None:
    judged = replay.pairs
    right = sum(truth == v.verdict for _, truth, v in judged)
    wrong = [(pr, truth, v.verdict, v.node, v.tier) for pr, truth, v in judged if truth != v.verdict]
    assert right / len(judged) >= 0.95, wrong
    breakage_called_flaky = [
        (pr, truth, v.node, v.tier, v.detail) for pr, truth, v in judged
        if v.verdict == FLAKY and (truth == BROKEN_ON_MAIN or (truth == NEW and (pr, v.node, v.tier) not in replay.disguised))]
    assert breakage_called_flaky == []
    truths = {truth for _, truth, _ in judged}
    assert {BROKEN_ON_MAIN, NEW, INFRA} <= truths, "the replay must exercise every verdict"
    retried = replay.retried_pairs
    assert retried and all(truth == v.verdict for _, truth, v in retried), \
        [(p, t, v.verdict) for p, t, v in retried if t != v.verdict]
    infra = [v for _, _, v in sorted(judged + retried, key=lambda p: p[0]) if v.verdict == INFRA]
    on_bad = [v for v in infra if v.runner == BAD_RUNNER]
    assert on_bad and on_bad[-1].runner_health is not None and on_bad[-1].runner_health.infra_reports
    assert any("out of line with the pool" in v.detail for v in on_bad)  # blamed by `runners.out_of_line`
    assert not any("out of line" in v.detail for v in infra if v.runner != BAD_RUNNER)
    assert all(v.detail.startswith(("broken on main since", "flaky:", "infra:", "new:")) for _, _, v in judged)


def test_replay_accuracy(store_location: str, tmp_path: Path) -> None:
    check_replay(Replay(seed=11).replay(store_location, tmp_path))


@pytest.mark.parametrize("seed", [12, 13, 14])
def test_replay_accuracy_other_seeds(seed: int, tmp_path: Path) -> None:
    check_replay(Replay(seed=seed).replay(str(tmp_path / "h.sqlite"), tmp_path))


# --- hand-made histories ------------------------------------------------------------------------

def sha(i: int, tag: str = "a") -> str:
    return f"{i:04x}{tag * 36}"


def run(store, directory: Path, commit: str, attempts: list[tuple[str, str] | None], event: str = "push",
        runner: str = "r1", node: str = "test_a", **extra) -> None:
    """One report holding ``node`` with ``attempts`` (None: passed) and a passing neighbour."""
    final = attempts[-1]
    case = (Case(FILE, node, reruns=len(attempts) - 1) if final is None
            else Case(FILE, node, "failed", final[0], final[1], reruns=len(attempts) - 1))
    extra.setdefault("scored", event in ("push", "nightly"))
    assert ingest(store, prepare(write_report(directory, [case, Case(FILE, "test_ok")]),
                                 RunIdentity(REPO, commit, event, TIER, runner=runner, **extra))).added


def pr_failure(store, directory: Path, attempts: list[tuple[str, str] | None], *, pr: int = 7, base: str = "",
               runner: str = "r1") -> Failure:
    head = f"{pr:04x}{'d' * 36}"
    run(store, directory, head, attempts, "pull_request", runner, pr=pr, base_sha=base)
    (failure,) = load_run(store, pr=pr).failures
    return failure


def test_broken_on_main_names_since_last_pass_and_candidates(store_location: str, tmp_path: Path) -> None:
    with open_store(store_location) as store:
        for i in range(4):
            run(store, tmp_path, sha(i), [None])
        run(store, tmp_path, sha(4), [None], node="test_other")  # test_a did not run at commit 4
        run(store, tmp_path, sha(5), [BOOM, BOOM])
        f = pr_failure(store, tmp_path, [BOOM, BOOM])
        (v,) = judge(store, [f])
    assert v.verdict == BROKEN_ON_MAIN
    assert (v.since, v.last_pass, v.candidates, v.candidate_count) == (sha(5), sha(3), (sha(4), sha(5)), 2)
    assert v.detail == "broken on main since 0005aaa (2 candidate commits: 0004aaa, 0005aaa, last passed at 0003aaa)"


@pytest.mark.parametrize("main_attempts, pr_error, expected", [
    ([BOOM], BOOM, BROKEN_ON_MAIN),  # one failure on main, the same error: broken
    ([BOOM], OTHER, NEW),  # one failure on main with another error: not enough to blame main
    ([BOOM, BOOM], OTHER, BROKEN_ON_MAIN),  # main fails on every attempt: broken whatever the error
    ([BOOM, None], BOOM, NEW),  # main passed on retry: a flake there, nothing broken
])
def test_open_streak_boundaries(store_location: str, tmp_path: Path, main_attempts, pr_error, expected) -> None:
    with open_store(store_location) as store:
        for i in range(3):
            run(store, tmp_path, sha(i), [None])
        run(store, tmp_path, sha(3), main_attempts)
        (v,) = judge(store, [pr_failure(store, tmp_path, [pr_error, pr_error])])
    assert v.verdict == expected, v.detail
    if expected == BROKEN_ON_MAIN:
        assert ("different error" in v.detail) == (pr_error != BOOM)


@pytest.mark.parametrize("base, expected", [(2, NEW), (3, BROKEN_ON_MAIN), (5, BROKEN_ON_MAIN), (6, NEW), (7, NEW)])
def test_merge_base_inside_a_fixed_streak(store_location: str, tmp_path: Path, base: int, expected: str) -> None:
    with open_store(store_location) as store:
        for i in range(8):
            run(store, tmp_path, sha(i), [BOOM, BOOM] if 3 <= i <= 5 else [None])
        (v,) = judge(store, [pr_failure(store, tmp_path, [BOOM, BOOM], base=sha(base))], merge_base=sha(base))
    assert v.verdict == expected, v.detail
    if expected == BROKEN_ON_MAIN:
        assert v.since == sha(3) and v.fixed_at == sha(6) and "fixed on main at 0006aaa" in v.detail


def test_a_fixed_failure_of_one_attempt_at_the_merge_base_is_no_breakage(store_location: str, tmp_path: Path) -> None:
    """Main failed BOOM once at commit 2, with no retry, and passed at 3 (four runs: too few for a
    flaky score): one attempt cannot tell a breakage fixed at 3 from a flake, so a pull request
    based at 2 failing BOOM is not called main's."""
    with open_store(store_location) as store:
        for i in range(4):
            run(store, tmp_path, sha(i), [BOOM] if i == 2 else [None])
        (v,) = judge(store, [pr_failure(store, tmp_path, [BOOM, BOOM], base=sha(2))], merge_base=sha(2))
    assert v.verdict == NEW and v.score is None, v.detail


def test_git_first_parent_order_over_ingest_order(store_location: str, tmp_path: Path) -> None:
    """Commits ingested out of order, and one the test never ran on: git's order says since when."""
    repo = tmp_path / "git"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e"]
    subprocess.run(git + ["init", "-q", "-b", "main"], check=True)
    for i in range(5):
        subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", f"c{i}"], check=True)
    order = first_parent_order(repo, "main")
    assert order is not None and len(order) == 5
    assert first_parent_order(repo, "no-such-ref") is None and first_parent_order(tmp_path / "none", "main") is None
    assert first_parent_order(repo, "--all") is None  # never an option to git
    with open_store(store_location) as store:
        for i, attempts in ((0, [None]), (1, [None]), (4, [BOOM, BOOM]), (3, [BOOM, BOOM])):  # 2 never ran it
            run(store, tmp_path, order[i], attempts)
        f = pr_failure(store, tmp_path, [BOOM, BOOM])
        (by_git,) = judge(store, [f], git_order=order)
        (by_ingest,) = judge(store, [f])
    assert (by_git.since, by_git.last_pass, by_git.candidates) == (order[3], order[1], (order[2], order[3]))
    assert by_ingest.verdict == BROKEN_ON_MAIN and by_ingest.since == order[4]  # ingest order is all it knows


def flaky_main(store, directory: Path, error=BOOM, commits: int = 12) -> None:
    """test_a flakes on main: every third commit fails once and passes on retry; one flake failed
    both attempts between passes (a flip), which is where its signature is kept."""
    for i in range(commits):
        attempts = [error, error] if i == 4 else ([error, None] if i % 3 == 0 else [None])
        run(store, directory, sha(i), attempts)


@pytest.mark.parametrize("pr_attempts, error, expected", [
    ([BOOM], BOOM, FLAKY),  # its known flake signature, once
    ([OTHER], BOOM, NEW),  # a signature it never flaked with: never flaky
    ([BOOM, BOOM, BOOM, BOOM], BOOM, NEW),  # four in a row: its flake rate cannot explain that
    ([BOOM, None], BOOM, FLAKY),  # passed on retry in the run
])
def test_flaky_by_history(store_location: str, tmp_path: Path, pr_attempts, error, expected) -> None:
    with open_store(store_location) as store:
        flaky_main(store, tmp_path, error)
        (v,) = judge(store, [pr_failure(store, tmp_path, pr_attempts)])
    assert v.verdict == expected, v.detail
    if expected == FLAKY and pr_attempts[-1] is not None:
        assert v.score is not None and v.interval is not None and "over" in v.detail


def test_a_generic_error_is_never_flaky_by_signature(store_location: str, tmp_path: Path) -> None:
    generic = ("AssertionError", ">       assert ok\nE       AssertionError")
    with open_store(store_location) as store:
        flaky_main(store, tmp_path, generic)
        (v,) = judge(store, [pr_failure(store, tmp_path, [generic])])
    assert v.verdict == NEW and "generic" in v.detail


def test_a_pass_at_the_same_commit_is_flaky_even_while_main_is_broken(store_location: str, tmp_path: Path) -> None:
    with open_store(store_location) as store:
        for i in range(4):
            run(store, tmp_path, sha(i), [None] if i < 2 else [BOOM, BOOM])
        head = f"{7:04x}{'d' * 36}"
        run(store, tmp_path, head, [BOOM, BOOM], "pull_request", pr=7)
        run(store, tmp_path, head, [None], "rerun", pr=7, attempt=2)
        results = load_run(store, pr=7)
        (v,) = judge(store, results.failures)
    assert (results.passed, results.failed) == (2, 0)
    assert v.verdict == FLAKY and "passed" in v.detail


def test_infra_names_the_runner_and_a_bad_machine(store_location: str, tmp_path: Path) -> None:
    with open_store(store_location) as store:
        for i in range(6):  # bad-1 fails with CUDA errors in 3 of its 5 runs; good-1 never
            run(store, tmp_path, sha(i), [CUDA, CUDA] if i in (1, 2, 4) else [None], runner="bad-1" if i else "good-1")
        run(store, tmp_path, sha(6), [CUDA], runner="good-1")
        for i in range(7, 33):  # the pool's other runner passes: bad-1 is out of line (`runners.out_of_line`)
            run(store, tmp_path, sha(i), [None], runner="good-2")
        f = pr_failure(store, tmp_path, [CUDA, CUDA], runner="bad-1")
        (v,) = judge(store, [f])
        # a pull request's own JUnit never counts for a runner's health
        for pr in (20, 21, 22):
            run(store, tmp_path, f"{pr:04x}{'e' * 36}", [CUDA], "pull_request", runner="good-1", pr=pr)
        health = runner_health(store)
        quoted = ("AssertionError: assert 'CUDA error' not in log", "E   AssertionError: assert 'CUDA error' not in log")
        (q,) = judge(store, [pr_failure(store, tmp_path, [quoted], pr=8)])
        # a pull request's kernel reading out of bounds fails on any machine, even on the bad one: its own
        (k,) = judge(store, [pr_failure(store, tmp_path, [KERNEL_BUG, KERNEL_BUG], pr=9, runner="bad-1")])
        # a pool without its devices, no runner out of line and the test never failed so elsewhere: a hiccup
        (h,) = judge(store, [pr_failure(store, tmp_path, [HIP_GONE], pr=10, runner="good-2")])
    assert (health["bad-1"].reports, health["bad-1"].infra_reports) == (5, 3)
    assert (health["good-1"].reports, health["good-1"].infra_reports) == (2, 1)
    assert v.verdict == INFRA and v.runner == "bad-1" and v.infra == "cuda"
    assert v.detail.startswith("infra: cuda on runner bad-1, out of line with the pool: 4 of its 6 recent jobs "
                               "failed with infra errors, against 1 of 28 on the pool's 2 other runners (Fisher p = ")
    assert v.detail.endswith("; bad-1 has infra failures in 3 of 5 reports (cuda 3)")  # a record: the blame is above
    assert q.verdict == NEW
    assert (k.verdict, k.infra) == (NEW, "")
    assert (h.verdict, h.infra) == (INFRA, "no-gpu") and "a hiccup" in h.detail


def test_tally_headlines() -> None:
    def v(verdict: str, detail: str = "", since: str = "", runner: str = ""):
        from ci.history.verdict import Verdict
        return Verdict(NODE, TIER, sha(9), verdict, detail or f"{verdict}: x", since=since, runner=runner)

    assert tally([], 5, 0).headline == "5 passed"
    assert tally([v(BROKEN_ON_MAIN, since=sha(3))], 3, 1).headline == "3 passed, 1 failed: broken on main since 0003aaa"
    assert tally([v(NEW)], 0, 1, 2).headline == "0 passed, 1 failed, 2 skipped: new (probably this change's)"
    assert (tally([v(BROKEN_ON_MAIN, since=sha(3)), v(NEW), v(NEW), v(INFRA, runner="h-3")], 1, 4).headline
            == "1 passed, 4 failed: 1 broken on main since 0003aaa, 1 infra on h-3, 2 new (probably this change's)")
    retried = v(FLAKY, "flaky: failed, then passed on retry in this run")
    t = tally([retried, v(FLAKY)], 4, 1)
    assert t.headline == "4 passed, 1 failed: flaky (1 flaky, passed on retry)"
    assert (t.flaky_passed, t.counts) == (1, ((FLAKY, 1),))


def test_without_history() -> None:
    fails = [Failure(NODE, TIER, sha(1), infra="nccl", runner="r9"), Failure(NODE, TIER, sha(1), passed_on_retry=True),
             Failure(NODE, TIER, sha(1))]
    verdicts = judge(None, fails)
    assert [v.verdict for v in verdicts] == [INFRA, FLAKY, NEW]
    assert verdicts[2].detail == "new: no history to compare with"
    assert tally(verdicts[2:], 3, 1).headline == "3 passed, 1 failed: not judged (no history to compare with)"
    assert (tally([*verdicts[2:], verdicts[2]], 0, 2).headline
            == "0 passed, 2 failed: 2 not judged (no history to compare with)")


def test_a_first_run_against_a_store_without_main_history_is_not_called_new(store_location: str,
                                                                            tmp_path: Path) -> None:
    """A store with no default-branch run of the tier (only pull requests, or another tier's main)
    has nothing to compare with; one main run of the tier makes the same failure the change's."""
    with open_store(store_location) as store:
        assert ingest(store, prepare(write_report(tmp_path, [Case(FILE, "test_a")]),
                                     RunIdentity(REPO, sha(1), "push", "cpu"))).added  # another tier's main
        first = pr_failure(store, tmp_path, [BOOM])
        (verdict,) = judge(store, [first])
        assert (verdict.verdict, verdict.detail) == (NEW, f"new: no history to compare with (no default-branch run "
                                                          f"of tier {TIER} in the history)")
        assert tally([verdict], 1, 1).headline == "1 passed, 1 failed: not judged (no history to compare with)"
        run(store, tmp_path, sha(2), [None])  # the tier's first main run: test_a passed there
        (verdict,) = judge(store, [first])
        assert verdict.detail == "new: probably this change's (not failing on the default branch)"
        assert (tally([verdict, *judge(None, [first])], 1, 2).headline
                == "1 passed, 2 failed: 1 new (probably this change's), 1 not judged (no history to compare with)")


def test_infra_failures_are_never_flakiness(store_location: str, tmp_path: Path) -> None:
    """A bad machine's CUDA errors between passes (retried, as pytest-rerunfailures writes them) are
    the machine's: no flaky score, and no fail streak on main."""
    from ci.history.flaky import flaky_scores

    with open_store(store_location) as store:
        for i in range(12):
            run(store, tmp_path, sha(i), [CUDA, CUDA] if i % 3 == 1 else [None], runner="bad-1")
        assert flaky_scores(store, min_trials=0) == []
        (v,) = judge(store, [pr_failure(store, tmp_path, [BOOM, BOOM])])
    assert v.verdict == NEW and "not failing on the default branch" in v.detail


def test_a_breakage_that_meets_a_bad_machine_on_its_rerun_is_still_the_breakage(store_location: str,
                                                                                 tmp_path: Path) -> None:
    with open_store(store_location) as store:
        run(store, tmp_path, sha(0), [None])
        head = f"{7:04x}{'d' * 36}"
        run(store, tmp_path, head, [OTHER, OTHER], "pull_request", pr=7)
        run(store, tmp_path, head, [CUDA, CUDA], "rerun", runner="bad-1", pr=7, attempt=2)
        (failure,) = load_run(store, pr=7).failures
        (v,) = judge(store, [failure])
    assert (failure.error, failure.infra, failure.failures) == (OTHER[0], "", 4)
    assert v.verdict == NEW


def test_failure_from_attempts() -> None:
    from ci.history.verdict import failure_from_attempts
    from ci.results.junit import FAILED, PASSED, Attempt

    nccl = Attempt(FAILED, 1.0, "RuntimeError: NCCL error: unhandled system error", "")
    f = failure_from_attempts(NODE, TIER, sha(1), [Attempt(FAILED, 1.0), nccl], runner="r9")
    assert (f.error, f.infra, f.failures, f.passed_on_retry, len(f.fingerprint)) == (
        "RuntimeError: NCCL error: unhandled system error", "nccl", 2, False, 12)
    g = failure_from_attempts(NODE, TIER, sha(1), [Attempt(FAILED, 1.0, BOOM[0], BOOM[1]), Attempt(PASSED, 1.0)])
    assert (g.error, g.infra, g.failures, g.passed_on_retry) == (BOOM[0], "", 1, True)
    assert [v.verdict for v in judge(None, [f, g])] == [INFRA, FLAKY]


@pytest.mark.parametrize("retried, other_run, detail", [
    (False, True, "flaky: failed, then passed in another run of the same commit"),
    (True, False, "flaky: failed, then passed on retry in this run"),
])
def test_a_pass_on_retry_or_in_another_run_of_the_commit_is_each_enough(store_location: str, tmp_path: Path,
                                                                       retried: bool, other_run: bool,
                                                                       detail: str) -> None:
    """Either alone makes the failure flaky (the history says nothing else: main never failed)."""
    from ci.history.verdict import failure_from_attempts
    from ci.results.junit import FAILED, PASSED, Attempt

    head = f"{7:04x}{'d' * 36}"
    attempts = [Attempt(FAILED, 1.0, *OTHER)] + ([Attempt(PASSED, 1.0)] if retried else [])
    with open_store(store_location) as store:
        for i in range(3):
            run(store, tmp_path, sha(i), [None])
        if other_run:
            run(store, tmp_path, head, [None], "pull_request", pr=7)
        (v,) = judge(store, [failure_from_attempts(NODE, TIER, head, attempts, repo=REPO)])
    assert (v.verdict, v.detail) == (FLAKY, detail)


def test_by_concern_puts_new_first_then_broken_infra_flaky() -> None:
    from ci.history.verdict import Verdict, by_concern

    made = [Verdict(f"{FILE}::test_{name}", TIER, sha(1), verdict, f"{verdict}: x")
            for name, verdict in (("a", FLAKY), ("b", INFRA), ("c", BROKEN_ON_MAIN), ("d", NEW), ("e", NEW))]
    assert [v.node[-1] for v in by_concern(made)] == ["d", "e", "c", "b", "a"]


def test_broken_rows_at_the_commit_count_once_with_no_fail_row(store_location: str, tmp_path: Path) -> None:
    """The same commit's other run broke at import, retried (two broken rows, no fail row): one run
    of two failures there, which the flake of test_a explains (its retry failing, r = 0.25)."""
    from ci.history.verdict import failure_from_attempts
    from ci.results.junit import FAILED, Attempt

    head = f"{7:04x}{'d' * 36}"
    broken = ("ImportError: cannot import name 'x' from 'y'", "E   ImportError: cannot import name 'x' from 'y'")
    with open_store(store_location) as store:
        flaky_main(store, tmp_path)
        run(store, tmp_path, head, [broken, broken], "pull_request", pr=7)
        (v,) = judge(store, [failure_from_attempts(NODE, TIER, head, [Attempt(FAILED, 1.0, *BOOM)], repo=REPO)])
    assert v.verdict == FLAKY and v.score is not None and 0.224 < v.score < 0.368, v.detail


@pytest.mark.parametrize("retries_fail, expected", [(True, FLAKY), (False, NEW)])
def test_rule_4_learns_how_often_a_flakes_retry_fails(store_location: str, tmp_path: Path, retries_fail: bool,
                                                      expected: str) -> None:
    """A 21 % flake on main; where its retries mostly failed too (r = 0.78 learned from the stored
    retries), a pull request run and its rerun failing both attempts each is a flake (0.78 * 0.21 *
    0.78 = 13 %); where they mostly passed (r = 0.22), the same is not (1 %). score^4 called both new."""
    with open_store(store_location) as store:
        for i in range(40):
            flip = i == 9 or (retries_fail and i in (5, 13, 21, 29))  # both attempts failed, between passes
            run(store, tmp_path, sha(i), [BOOM, BOOM] if flip else [BOOM, None] if i in (5, 13, 21, 29) else [None])
        head = f"{7:04x}{'d' * 36}"
        for event, attempt in (("pull_request", 1), ("rerun", 2)):
            run(store, tmp_path, head, [BOOM, BOOM], event, pr=7, base_sha=sha(39), attempt=attempt)
        (v,) = judge(store, load_run(store, pr=7).failures, merge_base=sha(39))
    assert v.verdict == expected, v.detail


def test_a_verdict_holds_as_of_the_judged_run(store_location: str, tmp_path: Path) -> None:
    """Broken on main since 3 when the pull request ran; main is fixed at 6 and breaks again at 8
    afterwards: asked again, the answer (and the commit it names) is the one given then."""
    with open_store(store_location) as store:
        for i in range(6):
            run(store, tmp_path, sha(i), [BOOM, BOOM] if i >= 3 else [None])
        pr_failure(store, tmp_path, [BOOM, BOOM], base=sha(5))
        results = load_run(store, pr=7)
        (then,) = judge(store, results.failures, merge_base=results.base_sha, as_of=results.report_id)
        for i in range(6, 10):
            run(store, tmp_path, sha(i), [BOOM, BOOM] if i >= 8 else [None])
        (later,) = judge(store, results.failures, merge_base=results.base_sha, as_of=load_run(store, pr=7).report_id)
    assert then.verdict == later.verdict == BROKEN_ON_MAIN and then.since == later.since == sha(3), later.detail
    assert then == later


def test_a_flake_seen_only_in_another_pull_requests_rerun_is_flaky(store_location: str, tmp_path: Path) -> None:
    """Main always passed; pull request 3's run failed test_a twice with BOOM and its rerun of that
    same commit passed: the same code passed, so BOOM is a flake of test_a (its run stays unscored:
    no quarantine reads it), and pull request 7 failing once with BOOM is told flaky."""
    from ci.history.flaky import flaky_scores

    with open_store(store_location) as store:
        for i in range(12):
            run(store, tmp_path, sha(i), [None])
        other = f"{3:04x}{'d' * 36}"
        for event, attempts, attempt in (("pull_request", [BOOM, BOOM], 1), ("rerun", [None], 2)):
            run(store, tmp_path, other, attempts, event, pr=3, base_sha=sha(11), attempt=attempt)
        assert flaky_scores(store) == []  # what quarantines read: scored reports only
        (v,) = judge(store, [pr_failure(store, tmp_path, [BOOM], base=sha(11))], merge_base=sha(11))
    assert v.verdict == FLAKY, v.detail
