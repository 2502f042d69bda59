"""Boundaries of the flakiness and quarantine rules (issue #32's mutation survivors).

Each test pins one edge of docs/history.md with hand-counted numbers, not the code's own constants:

- a fail streak between passes on the default branch is a flip (flaky evidence) at 1 and 2
  commits and breakage at 3 and more;
- pull-request and rerun groups add only their retries (a pass-only pull request still adds its
  retries; a first failure never counts as a failure);
- ``min_trials`` admits a node with exactly that many trials and no fewer;
- the ranking is by the interval's lower end, then the score (both descending), then node, tier;
- a run where the quarantined test was only skipped neither lengthens nor breaks the clean streak;
- a whole-file release rests on the file's worst node, and on its evidence tier's runs only;
- `ci quarantine`'s registry edits keep the evidence tier and cope with a missing final newline.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.history.flaky import evidence, flaky_scores, rank
from ci.history.ingest import ingest, prepare
from ci.history.model import BROKEN, FAIL, PASS, SKIP, EvidenceRow, FlakyScore, Interval, RunIdentity
from ci.history.quarantine import clean_streak, to_quarantine, to_release
from ci.history.store import open_store
from ci.registry import QuarantineEvidence, QuarantinedNode, Status, load_registry, parse_registry
from ci.registry.quarantine_edit import QuarantineFile, QuarantineNodes, edit_quarantines, render_evidence
from tests.ci.history_support import Case, write_report

REPO = "acme/gpu"
KINDS = {"p": PASS, "f": FAIL, "b": BROKEN, "s": SKIP}


def rows(spec: list[tuple[str, str, str]], node: str = "n") -> list[EvidenceRow]:
    """(sha, event, attempts as p/f/b/s) -> one report per entry, in ingest order."""
    out = []
    for report, (sha, event, outcomes) in enumerate(spec):
        for attempt, k in enumerate(outcomes):
            out.append(EvidenceRow(node, "cpu", REPO, sha, event, report, attempt, KINDS[k], "", "", "", ""))
    return out


@pytest.mark.parametrize("streak, trials, failures, flaky", [
    (1, 3, 1, 1),   # p f p: a flip, every attempt a trial
    (2, 4, 2, 2),   # p f f p: still a flip
    (3, 2, 0, 0),   # p f f f p: three commits of failure is the code breaking: only the passes count
    (4, 2, 0, 0),   # above the limit: the same
])
def test_a_fail_streak_is_a_flip_below_three_commits_and_breakage_from_three(
        streak: int, trials: int, failures: int, flaky: int) -> None:
    spec = [("a", "push", "p"), *[(f"f{i}", "push", "f") for i in range(streak)], ("z", "push", "p")]
    ev = evidence(rows(spec))
    assert (ev.trials, ev.failures, ev.flaky_failures) == (trials, failures, flaky)


@pytest.mark.parametrize("spec, trials, failures, flaky", [
    # a pull request that passed on its retry too: the retry is one trial, no failure
    ([("x", "pull_request", "p"), ("x", "rerun", "p")], 1, 0, 0),
    # passed first, failed on the retry: one trial, one failure, flaky
    ([("x", "pull_request", "p"), ("x", "rerun", "f")], 1, 1, 1),
    # failed first, then passed, then failed: two retries, one of them failed; both failures are flaky evidence
    ([("x", "pull_request", "f"), ("x", "rerun", "p"), ("x", "rerun", "f")], 2, 1, 2),
    # the first failure is never a failure in the rate, however many retries pass
    ([("x", "pull_request", "f"), ("x", "rerun", "pp")], 2, 0, 1),
    # a pull request's commit that later lands on the default branch is a default-branch group:
    # every attempt counts
    ([("a", "push", "p"), ("x", "pull_request", "f"), ("x", "push", "p")], 3, 1, 1),
])
def test_pull_request_groups_add_only_their_retries(spec: list[tuple[str, str, str]], trials: int, failures: int,
                                                    flaky: int) -> None:
    ev = evidence(rows(spec))
    assert (ev.trials, ev.failures, ev.flaky_failures) == (trials, failures, flaky)


def _score(node: str, tier: str, score: float, low: float) -> FlakyScore:
    return FlakyScore(node, "f.py", tier, score, Interval(low, 0.9), 1, 10, 1, 0, 1, (), "", ())


def test_ranking_order_and_its_ties() -> None:
    scores = [
        _score("b", "cpu", 0.2, 0.05),
        _score("a", "gpu", 0.2, 0.05),
        _score("a", "cpu", 0.2, 0.05),
        _score("z", "cpu", 0.3, 0.05),   # same low end, higher score: before the 0.2s
        _score("y", "cpu", 0.1, 0.10),   # highest low end: first, whatever its score
        _score("c", "cpu", 0.9, 0.01),   # lowest low end: last, whatever its score
    ]
    assert [(s.node, s.tier) for s in rank(scores)] == [
        ("y", "cpu"), ("z", "cpu"), ("a", "cpu"), ("a", "gpu"), ("b", "cpu"), ("c", "cpu")]
    assert [(s.node, s.tier) for s in rank(reversed(scores))] == [
        ("y", "cpu"), ("z", "cpu"), ("a", "cpu"), ("a", "gpu"), ("b", "cpu"), ("c", "cpu")]


def _ingest(location: str, directory: Path, cases: list[Case], sha: str, tier: str = "gpu_h100",
            event: str = "push") -> None:
    with open_store(location) as store:
        assert ingest(store, prepare(write_report(directory, cases), RunIdentity(REPO, sha, event, tier))).added


def test_min_trials_admits_exactly_that_many(tmp_path: Path) -> None:
    location = str(tmp_path / "h.sqlite")
    file = "tests/h/test_m.py"
    # push a: pass (1 trial); push b: failed then passed on its rerun (2 trials, 1 failure); push c: pass (1)
    _ingest(location, tmp_path, [Case(file, "test_x")], "a000001")
    _ingest(location, tmp_path, [Case(file, "test_x", reruns=1)], "b000001")
    _ingest(location, tmp_path, [Case(file, "test_x")], "c000001")
    with open_store(location, create=False) as store:
        assert [(s.node, s.trials, s.failures) for s in flaky_scores(store, min_trials=4)] == [
            (f"{file}::test_x", 4, 1)]
        assert flaky_scores(store, min_trials=3) != []
        assert flaky_scores(store, min_trials=5) == []


@pytest.mark.parametrize("spec, streak", [
    ([(0, "p"), (1, "s"), (2, "s")], 1),        # skip-only runs are not clean runs
    ([(0, "s"), (1, "s")], 0),
    ([(0, "f"), (1, "s"), (2, "p")], 1),        # ... nor do they end a failure's reset
    ([(0, "p"), (1, "s"), (2, "p")], 2),        # ... nor break a streak
    ([(0, "p"), (1, "sp"), (2, "f"), (3, "p")], 1),
    ([(0, "p"), (1, "ps"), (2, "p")], 3),       # a skip beside a pass: clean
    ([(0, "p"), (1, "fp"), (2, "p")], 1),       # a retried attempt (failed, then passed): not clean
    ([(0, "p"), (1, "bp"), (2, "p")], 1),       # a broken attempt: not clean
])
def test_what_counts_as_a_clean_run_towards_release(spec: list[tuple[int, str]], streak: int) -> None:
    found = [EvidenceRow(f"n{i}", "cpu", REPO, "a", "nightly", report, 0, KINDS[k], "", "", "", "")
             for report, kinds in spec for i, k in enumerate(kinds)]
    assert clean_streak(found) == streak


WHOLE = "tests/h/test_w.py"


def _whole_file_registry(evidence_tier: str) -> str:
    ev = QuarantineEvidence(evidence_tier, 0.2, (0.1, 0.3), 40, 8, 40, "", "", "2000-01-01T00:00:00+00:00")
    lines = ["version: 1", "tiers:",
             "  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}",
             "  gpu_h100: {description: h100, runner_labels: [gpu-h100], gpu_count: 1, arch: sm_90}",
             "quarantine:", "  threshold: 0.1", "  min_runs: 10", "  release_runs: 30",
             "tests:", f"  {WHOLE}:", "    tiers: [cpu, gpu_h100]", "    est_time: 5", '    owner: "@ci"',
             "    status: quarantined", "    reason: flaky", "    issue: https://example.org/issues/1",
             *render_evidence(ev, "    ")]
    return "\n".join(lines) + "\n"


def test_a_whole_file_release_rests_on_its_worst_node_and_its_tier(tmp_path: Path) -> None:
    location = str(tmp_path / "h.sqlite")
    registry = tmp_path / "registry.yaml"
    registry.write_text(_whole_file_registry("gpu_h100"))

    def run(sha: str, b_fails: bool, tier: str = "gpu_h100") -> None:
        _ingest(location, tmp_path, [Case(WHOLE, "test_a"),
                                     Case(WHOLE, "test_b", "failed" if b_fails else "passed", "AssertionError: b")],
                sha, tier)

    # test_b: p, then (f, p) ten times: 21 trials, 10 flips; test_a passes throughout
    run("0000000", False)
    for i in range(10):
        run(f"{i + 1:06x}f", True)
        run(f"{i + 1:06x}e", False)
    for i in range(30):  # with the pass after the last failure, 31 clean runs in a row: more than release_runs
        run(f"{i + 1:06x}d", False)
    run("ccccccc", True, tier="cpu")  # another tier's failure: not this quarantine's evidence

    with open_store(location, create=False) as store:
        loaded = load_registry(registry)
        (held,) = to_release(store, loaded, held=True)
        assert to_release(store, loaded) == []
    # test_b is the worst node: 10 failures in 51 trials, its interval's upper end far above 0.1
    # (test_a's, 0 in 51, is below 0.04); the streak counts only gpu_h100's runs
    assert (held.node, held.whole_file, held.tier) == (WHOLE, True, "gpu_h100")
    assert (held.clean_runs, held.failures, held.trials, held.ready) == (31, 10, 51, False)
    assert held.interval.high > 0.2


def test_a_whole_file_release_that_qualifies_on_every_node_is_ready(tmp_path: Path) -> None:
    location = str(tmp_path / "h.sqlite")
    registry = tmp_path / "registry.yaml"
    registry.write_text(_whole_file_registry("gpu_h100"))
    for i in range(60):
        _ingest(location, tmp_path, [Case(WHOLE, "test_a"), Case(WHOLE, "test_b")], f"{i + 1:07x}")
    _ingest(location, tmp_path, [Case(WHOLE, "test_b", "failed", "AssertionError: b")], "ccccccc", tier="cpu")
    with open_store(location, create=False) as store:
        (release,) = to_release(store, load_registry(registry))
    assert (release.tier, release.clean_runs, release.failures, release.trials, release.ready) == (
        "gpu_h100", 60, 0, 60, True)


def test_quarantine_edits_keep_the_evidence_tier_and_a_missing_final_newline() -> None:
    text = _whole_file_registry("cpu").replace("    status: quarantined\n    reason: flaky\n"
                                               "    issue: https://example.org/issues/1\n", "    status: active\n")
    text = text[:text.index("    evidence:")].rstrip("\n")  # no evidence, and no newline at the end
    assert not text.endswith("\n") and parse_registry(text, "r.yaml")[0] is not None
    ev = QuarantineEvidence("gpu_h100", 0.2, (0.1, 0.3), 40, 8, 40, "0123456789ab", "https://ci/1",
                            "2026-12-03T18:00:00+00:00")
    node = f"{WHOLE}::test_b"
    edited = edit_quarantines(text, "r.yaml", [QuarantineNodes(WHOLE, (QuarantinedNode(node, "flaky", ev),))])
    assert edited.startswith(text + "\n") and edited.endswith("\n")
    entry = parse_registry(edited, "r.yaml")[0].tests[WHOLE]
    assert entry.quarantined_nodes[0].evidence is not None and entry.quarantined_nodes[0].evidence.tier == "gpu_h100"

    whole = edit_quarantines(text, "r.yaml", [QuarantineFile(WHOLE, "flaky", "https://example.org/issues/1", ev)])
    assert whole.startswith(text.removesuffix("active") + "quarantined\n") and whole.endswith("\n")
    entry = parse_registry(whole, "r.yaml")[0].tests[WHOLE]
    assert entry.status is Status.QUARANTINED and entry.evidence is not None and entry.evidence.tier == "gpu_h100"
    assert "      tier: gpu_h100\n" in whole


def _flaky_registry(tiers: str) -> str:
    return ("version: 1\ntiers:\n  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}\n"
            "  gpu_h100: {description: h100, runner_labels: [gpu-h100], gpu_count: 1, arch: sm_90}\n"
            "quarantine:\n  threshold: 0.05\n  min_runs: 30\n  release_runs: 10\n"
            f"tests:\n  {WHOLE}: {{tiers: [{tiers}], est_time: 5, owner: me, status: active}}\n")


def test_a_quarantine_names_the_tier_its_evidence_is_from_and_only_a_tier_of_the_entry(tmp_path: Path) -> None:
    location = str(tmp_path / "h.sqlite")
    # on gpu_h100, test_a fails on pushes 2, 4, .., 38 (a flip each time): 19 failures in 40 trials;
    # on cpu it passes throughout
    for i in range(40):
        failed = i % 2 == 1 and i < 39
        _ingest(location, tmp_path, [Case(WHOLE, "test_a", "failed" if failed else "passed", "AssertionError: a")],
                f"{i + 1:07x}")
        _ingest(location, tmp_path, [Case(WHOLE, "test_a")], f"{i + 1:07x}", tier="cpu")
    registry = tmp_path / "registry.yaml"
    registry.write_text(_flaky_registry("cpu"))  # the flaky tier is not one of the entry's: nothing to do
    with open_store(location, create=False) as store:
        assert to_quarantine(store, load_registry(registry)) == []
    registry.write_text(_flaky_registry("cpu, gpu_h100"))
    with open_store(location, create=False) as store:
        (decision,) = to_quarantine(store, load_registry(registry))
    assert (decision.node, decision.whole_file, decision.score.tier) == (WHOLE, True, "gpu_h100")
    assert (decision.evidence.tier, decision.evidence.failures, decision.evidence.trials) == ("gpu_h100", 19, 40)
