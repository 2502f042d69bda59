"""`ci flaky` and its evidence rule on histories whose truth is known, on SQLite and PostgreSQL.

The known history (`history_support.KnownHistory`): a test failing with p = 0.1 whatever the code,
one that broke at a known commit, one broken and fixed later, one with an ImportError on random
commits (retried, as a rerun plugin would) and a stable one; plus pull requests with retry runs.
Only the first may be listed, its interval must cover 0.1, and the ImportError never counts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.history.classify import signature
from ci.history.flaky import STREAK_LIMIT, evidence, flaky_scores, posterior
from ci.history.ingest import ingest, prepare
from ci.history.model import BROKEN, FAIL, PASS, EvidenceRow, RunIdentity
from ci.history.store import open_store
from tests.ci.history_support import KnownHistory, pg_server, store_location  # noqa: F401 (fixtures)

REPO = "acme/gpu"


def ingest_history(location: str, history: KnownHistory) -> None:
    with open_store(location) as store:
        for path, ident in history.reports:
            identity = RunIdentity(REPO, str(ident["sha"]), str(ident["event"]), "gpu_h100",
                                   ident.get("pr"), run_url=str(ident.get("run_url", "")),
                                   attempt=int(ident.get("attempt", 1)))
            assert ingest(store, prepare(path, identity)).added


def test_known_history_ranks_only_the_flaky_test(store_location: str, tmp_path: Path) -> None:
    history = KnownHistory().build(tmp_path)
    ingest_history(store_location, history)
    with open_store(store_location, create=False) as store:
        scores = flaky_scores(store)
    assert [s.node for s in scores] == [f"{KnownHistory.FILE}::test_flaky"]
    flaky = scores[0]
    assert flaky.tier == "gpu_h100" and flaky.broken == 0
    assert flaky.interval.low <= history.p <= flaky.interval.high
    assert flaky.trials >= history.commits and flaky.runs > history.commits
    assert flaky.examples and all(u.startswith("https://ci.example/run/") for u in flaky.examples)
    fingerprints = {text for _, text, _ in flaky.fingerprints}
    assert "AssertionError: accuracy <n> below <n> at <addr>" in fingerprints


def test_importerror_is_broken_never_flaky_evidence(store_location: str, tmp_path: Path) -> None:
    history = KnownHistory(p=0.0).build(tmp_path)
    ingest_history(store_location, history)
    with open_store(store_location, create=False) as store:
        assert flaky_scores(store, min_trials=0) == []
        kinds = store.fetchall("SELECT c.kind, c.retried, COUNT(*) FROM cases c JOIN nodes n ON n.id = c.node_id "
                               "WHERE n.node LIKE ? GROUP BY c.kind, c.retried ORDER BY c.kind, c.retried",
                               ("%test_import",))
    assert {(k, bool(r)) for k, r, _ in kinds} == {("broken", False), ("broken", True), ("pass", False)}
    retried = sum(n for k, r, n in kinds if r)
    assert retried == 2 * sum(n for k, r, n in kinds if k == "broken" and not r), "every rerun is recorded"


def test_flaky_command_json_and_text(store_location: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ingest_history(store_location, KnownHistory().build(tmp_path))
    assert ci_main(["flaky", "--store", store_location, "--format", "json", "--tier", "gpu_h100"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total"] == 1 and out["flaky"][0]["node"].endswith("::test_flaky")
    assert out["flaky"][0]["owner"] == ""  # not a registered file
    assert ci_main(["flaky", "--store", store_location, "--check"]) == 1
    text = capsys.readouterr().out
    assert "1 flaky test(s)" in text and "test_flaky" in text and "https://ci.example/run/" in text
    assert ci_main(["flaky", "--store", store_location, "--tier", "cpu", "--check"]) == 0
    assert ci_main(["flaky", "--store", store_location, "--min-runs", "100000"]) == 0


def test_flaky_without_history_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ci_main(["flaky", "--store", str(tmp_path / "none.sqlite")]) == 2
    assert "no history there yet" in capsys.readouterr().err
    assert not (tmp_path / "none.sqlite").exists()


def _rows(spec: list[tuple[str, str, str]]) -> list[EvidenceRow]:
    """(sha, event, kinds as a string of p/f/b) -> rows in ingest order, one report per entry."""
    kinds = {"p": PASS, "f": FAIL, "b": BROKEN}
    rows = []
    for report, (sha, event, outcomes) in enumerate(spec):
        for attempt, k in enumerate(outcomes):
            rows.append(EvidenceRow("n", "cpu", REPO, sha, event, report, attempt, kinds[k], "", "", "", ""))
    return rows


@pytest.mark.parametrize("spec, trials, failures, flaky", [
    # a failure and a pass on one commit, on the default branch: every attempt a trial
    ([("a", "push", "p"), ("b", "push", "fp"), ("c", "push", "p")], 4, 1, 1),
    # a one-commit flip between passes: counted
    ([("a", "push", "p"), ("b", "push", "f"), ("c", "push", "p")], 3, 1, 1),
    # a streak of STREAK_LIMIT commits: the code broke and was fixed, not chance
    ([("a", "push", "p"), *[(f"s{i}", "push", "f") for i in range(STREAK_LIMIT)], ("c", "push", "p")], 2, 0, 0),
    # two commits that failed every retry, then a pass: broken and reverted, not chance
    ([("a", "push", "p"), ("b", "push", "ff"), ("c", "push", "ff"), ("d", "push", "p")], 2, 0, 0),
    # a failure not (yet) followed by a pass, or with no pass before: not evidence
    ([("a", "push", "p"), ("b", "push", "f")], 1, 0, 0),
    ([("a", "push", "f"), ("b", "push", "p")], 1, 0, 0),
    # pull request: only the retries are trials; a mixed commit is evidence
    ([("x", "pull_request", "f"), ("x", "rerun", "p")], 1, 0, 1),
    ([("x", "pull_request", "ff"), ("x", "rerun", "p")], 2, 1, 2),
    # a pull request that never passes may have broken the test: nothing
    ([("x", "pull_request", "f"), ("x", "rerun", "f")], 0, 0, 0),
    # broken attempts never count, whatever surrounds them
    ([("a", "push", "p"), ("b", "push", "bbb"), ("c", "push", "p"), ("x", "pull_request", "bp")], 2, 0, 0),
])
def test_evidence_rule(spec: list[tuple[str, str, str]], trials: int, failures: int, flaky: int) -> None:
    ev = evidence(_rows(spec))
    assert (ev.trials, ev.failures, ev.flaky_failures) == (trials, failures, flaky)


def _texted(spec: list[tuple[str, str]]) -> list[EvidenceRow]:
    """(sha, attempts) -> push rows in ingest order, one report per entry; an attempt is "p" (passed),
    "-" (failed, text not kept: a retried attempt of stock JUnit) or the failure's error line."""
    rows = []
    for report, (sha, attempts) in enumerate(spec):
        for attempt, error in enumerate(attempts):
            kind, (fp, text) = (PASS, ("", "")) if error == "p" else (FAIL, signature("" if error == "-" else error))
            rows.append(EvidenceRow("n", "cpu", REPO, sha, "push", report, attempt, kind, fp, text, "", ""))
    return rows


TYPE_ERROR = "TypeError: forward() got an unexpected keyword argument 'forward_batch'"
PORT_IN_USE = "OSError: [Errno 98] Address already in use"


@pytest.mark.parametrize("spec, trials, failures, flaky", [
    # one commit failed its retry too with a specific error the test never flaked with: broken, reverted
    ([("a", ["p"]), ("b", [TYPE_ERROR, TYPE_ERROR]), ("c", ["p"])], 2, 0, 0),
    # no retry: a flip
    ([("a", ["p"]), ("b", [TYPE_ERROR]), ("c", ["p"])], 3, 1, 1),
    # an environmental error (a port still held): a flip
    ([("a", ["p"]), ("b", [PORT_IN_USE, PORT_IN_USE]), ("c", ["p"])], 4, 2, 2),
    # a generic error: a flip
    ([("a", ["p"]), ("b", ["AssertionError", "AssertionError"]), ("c", ["p"])], 4, 2, 2),
    # the same error again and again between passes: intermittent, so flips
    ([("a", ["p"]), ("b", [TYPE_ERROR] * 2), ("c", ["p"]), ("d", [TYPE_ERROR] * 2), ("e", ["p"])], 7, 4, 4),
    # another flake of the test kept no text (it could have printed this): a flip
    ([("a", ["p"]), ("b", ["-", "p"]), ("c", ["p"]), ("d", [TYPE_ERROR] * 2), ("e", ["p"])], 7, 3, 3),
])
def test_one_commit_that_failed_every_retry(spec: list[tuple[str, list[str]]], trials: int, failures: int,
                                            flaky: int) -> None:
    ev = evidence(_texted(spec))
    assert (ev.trials, ev.failures, ev.flaky_failures) == (trials, failures, flaky)


def test_interval_coverage_of_a_known_failure_rate() -> None:
    """Many seeded histories of a test failing with p = 0.1 (push runs with one in-report rerun,
    pull requests with retry runs): the 90 % interval covers p in about 90 % of them."""
    rng = random.Random(20261203)
    p, histories, covered = 0.1, 1000, 0
    for _ in range(histories):
        spec = []
        for i in range(rng.randint(20, 150)):
            first = "f" if rng.random() < p else "p"
            spec.append((f"c{i}", "push", first + (("f" if rng.random() < p else "p") if first == "f" else "")))
            if rng.random() < 0.3:
                pr = "f" if rng.random() < p else "p"
                spec.append((f"pr{i}", "pull_request", pr))
                if pr == "f":
                    spec.append((f"pr{i}", "rerun", "f" if rng.random() < p else "p"))
        ev = evidence(_rows(spec))
        _, interval = posterior(ev.failures, ev.trials, 0.90)
        covered += interval.low <= p <= interval.high
    assert 0.86 <= covered / histories <= 0.94, covered / histories


def test_flaky_names_the_registered_owner(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.ci.history_support import Case, write_report

    store = str(tmp_path / "h.sqlite")
    file = "tests/ci/test_durations.py"  # registered in this repository, owner @ci-infra
    for i, outcome in enumerate(["passed", "failed", "passed", "passed", "passed", "passed"]):
        report = write_report(tmp_path, [Case(file, "test_x", outcome, "AssertionError: 1 != 2")])
        assert ci_main(["history", "ingest", str(report), "--repo", REPO, "--sha", f"{i:07x}", "--event", "push",
                        "--tier", "cpu", "--store", store]) == 0
    capsys.readouterr()
    assert ci_main(["flaky", "--store", store, "--format", "json"]) == 0
    (found,) = json.loads(capsys.readouterr().out)["flaky"]
    assert (found["node"], found["owner"], found["trials"], found["failures"]) == (f"{file}::test_x", "@ci-infra", 6, 1)


def test_retry_rate_counts_only_retries_after_flaky_failures(store_location: str, tmp_path: Path) -> None:
    """r from the stored reruns, the store filled through its own ingest: 6 first-attempt flakes
    whose retry passed, 4 one-commit flips whose retry failed too; a 4-commit breakage (fail,
    fail) is the code's and must not count, nor another file's test."""
    from ci.history.retries import RetryRate, retry_rate
    from tests.ci.history_support import Case, write_report

    file, other = "tests/a/test_a.py", "tests/b/test_b.py"
    plan = ["p"] * 30
    for i in (2, 5, 8, 11, 14, 17):
        plan[i] = "fp"  # failed, retry passed
    for i in (20, 23, 26, 28):
        plan[i] = "ff"  # failed twice, between passes: a flip
    plan[40:44] = ["ff"] * 4  # a breakage: a streak of STREAK_LIMIT or more
    plan += ["p"] * 3
    reports = []
    for i, step in enumerate(plan):
        case = Case(file, "test_x") if step == "p" else \
            Case(file, "test_x", "passed" if step == "fp" else "failed", "AssertionError: x", "E   x", reruns=1)
        noise = Case(other, "test_y", "failed", "AssertionError: y", "E   y", reruns=1) if i in (3, 6, 9) else \
            Case(other, "test_y")  # flips whose retry failed: they would count if the file were ignored
        reports.append(write_report(tmp_path, [case, noise]))
    with open_store(store_location) as store:
        for i, path in enumerate(reports):
            assert ingest(store, prepare(path, RunIdentity(REPO, f"{i:07x}abc", "push", "gpu_h100"))).added
        assert retry_rate(store, tier="gpu_h100", file=file) == RetryRate(10, 4, 4.5 / 11)
        assert retry_rate(store, tier="gpu_h100", file=file, node=f"{file}::test_x") == RetryRate(10, 4, 4.5 / 11)
        assert retry_rate(store, tier="cpu", file=file) is None
        assert retry_rate(store, tier="gpu_h100", file="tests/c/test_c.py") is None
