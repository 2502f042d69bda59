"""Culprit searches in the history (issue 51): `ci culprit-requests` records each new breakage
window of an opted-in tier once, before printing it, and `ci culprit` writes its answer onto that
window; both on a real SQLite file and a real PostgreSQL database. And the share of a test's flaky
failures that carry a breakage's error signature, the search's m."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.history.culprits import CulpritAnswer, CulpritRequest, breakage_requests, culprit_states, record_answer
from ci.history.store import open_store
from ci.history.verdict import BROKEN_ON_MAIN, Verdict
from ci.registry import CulpritPolicy
from tests.ci.history_support import (BREAKAGE_PLAN, Case, breakage_cases, pg_server, store_location,  # noqa: F401
                                      write_report)

FILE = "tests/srt/test_x.py"
OTHER = "tests/srt/test_y.py"
BOOM = Case(FILE, "test_a", "failed", "AssertionError: expected 3 tokens, got 4", "E   AssertionError: expected 3 tokens, got 4",
            reruns=1)
REGISTRY = """\
version: 1
tiers:
  gpu_h100:
    description: one H100
    runner_labels: [gpu-h100]
    gpu_count: 1
    arch: sm_90
    culprit: {{auto: {auto}, budget: 9, runners: 2}}
  gpu_h200:
    description: one H200
    runner_labels: [gpu-h200]
    gpu_count: 1
    arch: sm_90
tests:
  {file}:
    tiers: [gpu_h100, gpu_h200]
    est_time: 1
    owner: me
    status: active
  {other}:
    tiers: [gpu_h100, gpu_h200]
    est_time: 1
    owner: me
    status: active
"""


def sha(i: int) -> str:
    return f"{i:040x}"


def ingest(store: str, directory: Path, i: int, cases: list[Case], tier: str = "gpu_h100", *extra: str) -> None:
    assert ci_main(["history", "ingest", str(write_report(directory, cases)), "--repo", "acme/llm", "--sha", sha(i),
                    "--event", "push", "--tier", tier, "--runner", "h100-01", "--store", store,
                    "--run-url", f"https://github.com/acme/llm/actions/runs/{i}", *extra]) == 0


def main_history(store: str, directory: Path, tier: str = "gpu_h100") -> None:
    """test_a passes at commit 1, is not run at 2 and 3, fails from 4 on: 3 candidates (2, 3, 4),
    good 1, bad 4. test_y runs everywhere and passes."""
    for i in range(1, 7):
        cases = [Case(OTHER, "test_y")]
        if i == 1:
            cases.append(Case(FILE, "test_a"))
        elif i >= 4:
            cases += [BOOM, Case(FILE, "test_b", "failed", "KeyError: 'rope'", "E   KeyError: 'rope'", reruns=1)]
        ingest(store, directory, i, cases, tier)


def requests(root: Path, store: str, i: int, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict]:
    capsys.readouterr()
    assert ci_main(["--root", str(root), "culprit-requests", "--sha", sha(i), "--store", store, *extra]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "registry.yaml").write_text(REGISTRY.format(auto="true", file=FILE, other=OTHER))
    return tmp_path / "repo"


def test_a_new_breakage_is_requested_once_and_recorded_first(store_location: str, root: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    main_history(store_location, tmp_path)
    output = tmp_path / "github_output"
    monkeypatch.setenv("GITHUB_OUTPUT", str(output))
    want = {"tier": "gpu_h100", "test": FILE, "good": sha(1), "bad": sha(4), "budget": 9, "runners": 2,
            "candidates": 3}
    # two failing tests of one file, one window: one request
    assert requests(root, store_location, 4, capsys, "--github-output") == [want]
    assert output.read_text() == f"requests={json.dumps([want], sort_keys=True)}\n"
    with open_store(store_location, create=False) as store:  # recorded before it was printed
        assert [(s.good, s.bad, s.culprit) for s in culprit_states(store, "acme/llm").values()] == [(sha(1), sha(4), "")]
    # the report job re-run, and the next commit's run of the same breakage: nothing new
    assert requests(root, store_location, 4, capsys) == []
    assert requests(root, store_location, 6, capsys, "--github-output") == []
    assert output.read_text().splitlines()[-1] == "requests=[]"


def test_only_opted_in_tiers_and_windows_worth_a_search(store_location: str, root: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    main_history(store_location, tmp_path, tier="gpu_h200")  # a tier without culprit:
    assert requests(root, store_location, 4, capsys) == []
    (root / "registry.yaml").write_text(REGISTRY.format(auto="false", file=FILE, other=OTHER))
    main_history(store_location, tmp_path)
    assert requests(root, store_location, 4, capsys) == []  # auto: false
    (root / "registry.yaml").write_text(REGISTRY.format(auto="true", file=FILE, other=OTHER))
    assert ci_main(["history", "ingest", str(write_report(tmp_path, [BOOM])), "--repo", "acme/llm", "--sha", sha(99),
                    "--event", "pull_request", "--pr", "12", "--tier", "gpu_h100", "--store", store_location]) == 0
    assert requests(root, store_location, 99, capsys) == []  # a pull request's run is not the default branch's
    # opted in again: test_x's window (never requested) is; test_y's, one candidate (7, after its pass at 6), is not
    ingest(store_location, tmp_path, 7, [BOOM, Case(OTHER, "test_y", "failed", "AssertionError: y",
                                                     "E   AssertionError: y", reruns=1)])
    assert [r["test"] for r in requests(root, store_location, 7, capsys)] == [FILE]
    assert ci_main(["history", "verdicts", "--sha", sha(7), "--tier", "gpu_h100", "--format", "json",
                    "--store", store_location]) == 0
    y = next(v for v in json.loads(capsys.readouterr().out)["verdicts"] if v["node"].startswith(OTHER))
    assert (y["verdict"], y["candidate_count"], y["last_pass"]) == ("broken_on_main", 1, sha(6))


def test_a_breakage_is_searched_only_where_the_tier_says_auto() -> None:
    v = Verdict(f"{FILE}::test_a", "gpu_h100", sha(5), BROKEN_ON_MAIN, "", since=sha(4), last_pass=sha(1),
                candidate_count=3)
    assert breakage_requests("acme/llm", [v], {"gpu_h100": CulpritPolicy(auto=False)}) == []
    assert breakage_requests("acme/llm", [v], {"gpu_h200": CulpritPolicy(auto=True)}) == []
    assert breakage_requests("acme/llm", [v, replace(v, node=f"{FILE}::test_b")], {"gpu_h100": CulpritPolicy(True, 5)}) == [
        CulpritRequest("acme/llm", "gpu_h100", FILE, sha(1), sha(4), 5, 1, 3)]


@pytest.mark.parametrize("argv, message", [
    (["--sha", "xyz"], "--sha 'xyz' is not a hexadecimal commit id"),
    (["--sha", "abcdef0"], "no report of commit abcdef0 in the history"),
    (["--sha", "abcdef0", "--github-output"], "--github-output needs $GITHUB_OUTPUT"),
])
def test_bad_input_is_one_line_and_exit_2(root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch, argv: list[str], message: str) -> None:
    monkeypatch.delenv("GITHUB_OUTPUT", raising=False)
    store = str(tmp_path / "h.sqlite")
    ingest(store, tmp_path, 1, [Case(FILE, "test_a")])
    capsys.readouterr()
    assert ci_main(["--root", str(root), "culprit-requests", "--store", store, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


def test_an_answer_lands_on_its_request_once(store_location: str, root: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    main_history(store_location, tmp_path)
    short = [dict(r, good=r["good"][:7], bad=r["bad"][:7]) for r in requests(root, store_location, 4, capsys)]
    answer = CulpritAnswer("acme/llm", "gpu_h100", FILE, sha(1), sha(4), sha(3), 0.995, 5, "confident", True,
                           run_url="https://github.com/acme/llm/actions/runs/77", links=("https://x/1", "https://x/2"))
    with open_store(store_location, create=False) as store:
        record_answer(store, answer)
        record_answer(store, answer)  # the search job re-run: the same row, unchanged
        [state] = culprit_states(store, "acme/llm").values()
        rows = store.fetchall("SELECT requested_at <> '', culprit, runs, found, run_links FROM culprits")
    assert short and (state.culprit, state.probability, state.run_url) == (sha(3), 0.995, answer.run_url)
    assert rows == [(True, sha(3), 5, 1, '["https://x/1", "https://x/2"]')]


def test_gpu_yml_records_before_it_dispatches_each_request_once(tmp_path: Path) -> None:
    """The history job's step records the requests into its output; the culprit job (actions: write
    only, no checkout, no secret) runs ``gh workflow run culprit.yml`` once per request, with exactly
    culprit.yml's inputs. The steps run as the runner runs them, with a ``gh`` that logs its argv."""
    from workflow_support import WORKFLOW_DIR, load_workflow, run_step, runner_workspace, step_named, venv_python3

    bash = "bash --noprofile --norc -eo pipefail {0}"
    jobs = load_workflow(WORKFLOW_DIR / "gpu.yml")["jobs"]
    work, scratch = runner_workspace(tmp_path), tmp_path / "scratch"
    (work / "registry.yaml").write_text(REGISTRY.format(auto="true", file=FILE, other=OTHER))
    main_history(str(work / jobs["history"]["env"]["SQLITE_STORE"]), tmp_path)
    venv_python3(scratch)
    gh = scratch / "bin" / "gh"
    gh.write_text(f'#!/bin/sh\nprintf "%s|" "$@" >> "{tmp_path}/gh.log"; echo >> "{tmp_path}/gh.log"\n')
    gh.chmod(0o755)
    record = step_named(jobs["history"], "Record the culprit searches")
    assert jobs["history"]["outputs"]["culprit_requests"] == "${{ steps.culprit.outputs.requests }}"
    assert record["id"] == "culprit" and record["continue-on-error"] is True
    # only the default branch's runs request searches; a scheduled run is on it even where its
    # payload names no repository (so no default_branch to compare with)
    assert record["if"].startswith("${{ github.event_name == 'schedule' || github.ref == ")
    env = {"REPO": "acme/llm", "SHA": sha(4), "CI_HISTORY_URL": "", "SQLITE_STORE": jobs["history"]["env"]["SQLITE_STORE"]}
    outputs = []
    for attempt in range(2):  # the job, then a re-run of it
        out = tmp_path / f"output{attempt}"
        done = run_step(record["run"], {**env, "GITHUB_OUTPUT": str(out)}, work, scratch, shell=bash)
        assert done.returncode == 0, done.stderr
        outputs.append(out.read_text().removeprefix("requests=").strip())
    assert outputs[1] == "[]"
    job = jobs["culprit"]
    assert job["needs"] == "history" and job["permissions"] == {"actions": "write"} and "'[]'" in job["if"]
    assert not any("uses" in s for s in job["steps"]) and "secrets." not in json.dumps(job)
    dispatch = step_named(job, "Dispatch culprit.yml")
    done = run_step(dispatch["run"], {"REQUESTS": outputs[0], "REF": "main", "GH_TOKEN": "t", "GH_REPO": "acme/llm"},
                    work, scratch, shell=bash)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "gh.log").read_text().splitlines() == [
        f"workflow|run|culprit.yml|--ref|main|-f|tier=gpu_h100|-f|test={FILE}|-f|good={sha(1)}|-f|bad={sha(4)}|"
        "-f|budget=9|-f|runners=2|-f|comment_id=|-f|pr=|"]


def test_a_store_before_migration_6_has_no_searches_and_stays_as_it_is(tmp_path: Path) -> None:
    """The HUD reads searches and never migrates: a store last written by a ci without the table."""
    import sqlite3

    location = str(tmp_path / "old.sqlite")
    main_history(location, tmp_path)
    with sqlite3.connect(location) as db:
        db.execute("DROP TABLE culprits")
        db.execute("DELETE FROM schema_version WHERE version > 5")
    with open_store(location, create=False) as store:
        assert culprit_states(store, "acme/llm") == {}
        assert store.schema_version() == 5


def test_false_passes_are_counted_inside_known_breakage_windows_only(store_location: str, tmp_path: Path) -> None:
    """p's data, the store filled through its own ingest: `BREAKAGE_PLAN`'s two closed windows
    (13 attempts, 2 passes inside); the window's edge, a flip, an open streak, another tier's
    windows and a pull request's runs do not count."""
    from ci.history.false_pass import FalsePasses, false_passes

    for i, step in enumerate(BREAKAGE_PLAN):
        ingest(store_location, tmp_path, i, breakage_cases(FILE, step) + breakage_cases(OTHER, "p"))
        ingest(store_location, tmp_path, 100 + i, breakage_cases(OTHER, step), "gpu_h200")
    assert ci_main(["history", "ingest", str(write_report(tmp_path, breakage_cases(FILE, "fpX"))), "--repo", "acme/llm",
                    "--sha", sha(2), "--event", "pull_request", "--tier", "gpu_h100", "--store", store_location]) == 0
    with open_store(store_location, create=False) as store:
        assert false_passes(store, tier="gpu_h100") == FalsePasses(2, 13, 2)
        assert false_passes(store, tier="gpu_h200") == FalsePasses(2, 13, 2)
        assert false_passes(store, tier="cpu") == FalsePasses(0, 0, 0)


def test_flake_match_is_learned_from_the_tests_flaky_failures(tmp_path) -> None:
    """m from a SQLite history (through the store's ingest): of the test's 4 flaky failures (each a
    lone failed run between passes) 3 read "server did not start", 1 the breakage's "wrong
    checksum": m is the 90 % quantile of Beta(1 + 1, 4 + 3); with no history, of the prior alone."""
    from ci.commands.culprit_signature import flake_match
    from ci.history.retries import flaky_fingerprints
    from ci.history.beta import beta_ppf
    from ci.history.classify import signature
    from ci.history.ingest import ingest, prepare
    from ci.history.model import RunIdentity

    store, started, checksum = tmp_path / "h.sqlite", "ConnectionError: server did not start", \
        "AssertionError: wrong checksum in block 7"
    failing = {5: started, 15: started, 25: started, 35: checksum}
    with open_store(str(store)) as opened:
        for i in range(60):
            case = Case("tests/test_calc.py", "test_add", "failed", failing[i]) if i in failing else \
                Case("tests/test_calc.py", "test_add")
            assert ingest(opened, prepare(write_report(tmp_path, [case]), RunIdentity("t/t", f"{i:07x}abc", "push",
                                                                                     "cpu"))).added
    breakage = signature(checksum)[0]
    with open_store(str(store), create=False) as opened:
        flaky = flaky_fingerprints(opened, tier="cpu", file="tests/test_calc.py", node=None)
        assert flaky_fingerprints(opened, tier="cpu", file="tests/test_calc.py", node="tests/test_calc.py::test_add") \
            == flaky
    assert sorted(flaky.values()) == [1, 3]
    m, said = flake_match(flaky, breakage)
    assert m == pytest.approx(beta_ppf(0.9, 2.0, 7.0))
    assert f"{m:.3f}, the 90% quantile of m's posterior from 1 of 4 flaky failure(s) in the history (Beta(1, 4) prior)" in said
    assert flake_match({}, breakage)[0] == pytest.approx(beta_ppf(0.9, 1.0, 4.0))

def test_the_breakage_signature_is_the_one_every_failed_attempt_of_bads_verification_shares() -> None:
    """`breakage_signature` reads --bad's first failed run only (a passing run at --bad before it,
    a flake's retry that passed, says nothing), and only when its failed attempts agree on a known
    signature; `same_signature` compares a run's last failed attempt, unknown ("") staying unknown."""
    from ci.commands.culprit_local import Run
    from ci.commands.culprit_signature import breakage_signature, same_signature

    good, bad = "a" * 40, "b" * 40
    verified = Run(bad, True, failures=3, signatures=("wrong sum",) * 3)
    assert breakage_signature([Run(good, False), verified], bad) == "wrong sum"
    assert breakage_signature([Run(bad, False, failures=1, signatures=("timed out",)), verified], bad) == "wrong sum"
    for said in (("wrong sum", "timed out", "wrong sum"), ("wrong sum", "", "wrong sum"), ("", "", "")):
        assert breakage_signature([replace(verified, signatures=said)], bad) is None, said
    assert breakage_signature([Run(good, True, failures=3, signatures=("wrong sum",) * 3)], bad) is None
    assert same_signature(Run(good, True, failures=2, signatures=("timed out", "wrong sum")), "wrong sum") is True
    assert same_signature(Run(good, True, failures=2, signatures=("wrong sum", "timed out")), "wrong sum") is False
    assert same_signature(Run(good, True, failures=2, signatures=("wrong sum", "")), "wrong sum") is None
    assert same_signature(Run(good, False), "wrong sum") is None
    assert same_signature(verified, None) is None
