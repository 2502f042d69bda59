"""`ci history verdicts` and `ci history ingest`'s new identity (author, merge base, unscored), and
migration 2 over a store written by the schema before it."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import asdict
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.history.flaky import flaky_scores
from ci.history.ingest import report_key
from ci.history.migrations import MIGRATIONS, SCHEMA_VERSION
from ci.history.model import RunIdentity
from ci.history.store import SQLITE, open_store
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)

FILE = "tests/srt/test_x.py"
BOOM = Case(FILE, "test_a", "failed", "AssertionError: expected 3 tokens, got 4", "E   AssertionError: expected 3 tokens, got 4",
            reruns=1)


def ingest_cli(store: str, report: Path, sha: str, event: str, *extra: str) -> int:
    return ci_main(["history", "ingest", str(report), "--repo", "acme/llm", "--sha", sha, "--event", event,
                    "--tier", "gpu_h100", "--runner", "h100-01", "--store", store, *extra])


def build(store: str, directory: Path) -> None:
    for i in range(4):
        case = BOOM if i >= 2 else Case(FILE, "test_a")
        assert ingest_cli(store, write_report(directory, [case, Case(FILE, "test_b")]), f"{i:07x}", "push") == 0
    pr = [BOOM, Case(FILE, "test_b", "failed", "KeyError: 'rope'", "E   KeyError: 'rope'"), Case(FILE, "test_c", reruns=1)]
    assert ingest_cli(store, write_report(directory, pr), "00000ff", "pull_request", "--pr", "12", "--author", "bob",
                      "--base-sha", "0000003", "--unscored") == 0


def test_verdicts_text_and_json(store_location: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    build(store_location, tmp_path)
    capsys.readouterr()
    assert ci_main(["history", "verdicts", "--pr", "12", "--store", store_location]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("PR #12 at 00000ff (gpu_h100): 1 passed, 2 failed: 1 broken on main since 0000002, "
                      "1 new (probably this change's) (1 flaky, passed on retry)")
    assert out[1].split() == ["broken_on_main", f"{FILE}::test_a", "[gpu_h100]"]
    assert out[2].strip() == "broken on main since 0000002 (1 candidate commit: 0000002, last passed at 0000001)"
    assert out[3].strip() == "AssertionError: expected 3 tokens, got 4"
    assert ci_main(["history", "verdicts", "--sha", "00000ff", "--tier", "gpu_h100", "--format", "json",
                    "--store", store_location]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["pr"] == 12 and data["failed"] == 2 and data["passed"] == 1
    assert {v["node"]: v["verdict"] for v in data["verdicts"]} == {
        f"{FILE}::test_a": "broken_on_main", f"{FILE}::test_b": "new", f"{FILE}::test_c": "flaky"}
    broken = next(v for v in data["verdicts"] if v["verdict"] == "broken_on_main")
    assert broken["since"] == "0000002" and broken["candidates"] == ["0000002"]
    with open_store(store_location, create=False) as store:
        row = store.fetchall("SELECT author, base_sha, scored FROM reports WHERE pr = 12")
        assert row == [("bob", "0000003", 0)]
        # the unscored pull request adds nothing to flakiness: test_c failed then passed there
        assert flaky_scores(store, min_trials=0) == []


@pytest.mark.parametrize("argv, message", [
    (["--pr", "99"], "no report of pull request #99 in the history"),
    (["--sha", "abc"], "--sha 'abc' is not a hexadecimal commit id"),
    (["--sha", "00000ff", "--tier", "cpu"], "no report of commit 00000ff on tier cpu in the history"),
    (["--pr", "12", "--base", "xyz1234"], "--base 'xyz1234' is not a hexadecimal commit id"),
    (["--pr", "12", "--git-ref=--output=x"], "--git-ref '--output=x' is not a git ref"),
    (["--pr", "12", "--changed-files", "no/such/changed.txt"],
     "--changed-files: cannot read changed-files list no/such/changed.txt"),
])
def test_verdicts_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    store = str(tmp_path / "h.sqlite")
    build(store, tmp_path)
    capsys.readouterr()
    assert ci_main(["history", "verdicts", *argv, "--store", store]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_verdicts_without_a_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ci_main(["history", "verdicts", "--pr", "1", "--store", str(tmp_path / "none.sqlite")]) == 2
    assert "no history there yet" in capsys.readouterr().err
    assert not (tmp_path / "none.sqlite").exists()


def test_ingest_refuses_a_bad_base_sha(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = write_report(tmp_path, [Case(FILE, "test_a")])
    assert ingest_cli(str(tmp_path / "h.sqlite"), report, "00000ff", "pull_request", "--base-sha", "main") == 2
    assert "--base-sha 'main' is not a hexadecimal commit id" in capsys.readouterr().err
    assert not (tmp_path / "h.sqlite").exists()


def test_report_key_of_an_old_identity_is_unchanged() -> None:
    """The key before migration 2 hashed the identity's ten fields; the new ones at their defaults
    must not change it, or a report re-ingested after the upgrade would be stored twice."""
    ident = RunIdentity("acme/llm", "abcdef1", "push", "gpu", None, "r1", "1/2", "77", 1, "https://x")
    old = {k: v for k, v in asdict(ident).items()
           if k in ("repo", "sha", "event", "tier", "pr", "runner", "shard", "run_id", "attempt", "run_url")}
    expected = hashlib.sha256(json.dumps(["h", old], sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert report_key("h", ident) == expected
    assert report_key("h", RunIdentity("acme/llm", "abcdef1", "push", "gpu", None, "r1", "1/2", "77", 1, "https://x",
                                       author="bob")) != expected


def test_migration_2_over_a_version_1_store(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)")
    for statement in MIGRATIONS[0]:
        conn.execute(SQLITE.ddl(statement))
    conn.execute("INSERT INTO schema_version VALUES (1, 'then')")
    conn.execute("INSERT INTO reports (report_key, content_hash, source, repo, sha, pr, event, tier, runner, shard, "
                 "run_id, attempt, run_url, cases, attempts, ingested_at) VALUES ('k', 'h', 's', 'acme/llm', "
                 "'abcdef1', NULL, 'push', 'gpu', 'r1', '', '', 1, '', 1, 1, 'then')")
    conn.execute("INSERT INTO nodes (node, file) VALUES ('t.py::a', 't.py')")
    conn.execute("INSERT INTO cases VALUES (1, 1, 0, 'failed', 'fail', 0.1, 0, 'fp', 'AssertionError: x')")
    conn.commit()
    conn.close()
    with open_store(str(path)) as store:
        assert store.schema_version() == SCHEMA_VERSION == 8
        assert store.fetchall("SELECT author, base_sha, scored FROM reports") == [("", "", 1)]
        assert store.fetchall("SELECT fingerprint, message, error, infra FROM cases") == [("fp", "AssertionError: x", "", "")]


def test_verdicts_asked_later_hold_as_of_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Main is fixed at 4 and breaks again at 5 after the pull request ran: `--pr 12` a week later
    still names the breakage its run met (0000002), not the later one."""
    store = str(tmp_path / "h.sqlite")
    build(store, tmp_path)
    for i, case in ((4, Case(FILE, "test_a")), (5, BOOM), (6, BOOM)):
        assert ingest_cli(store, write_report(tmp_path, [case, Case(FILE, "test_b")]), f"{i:07x}", "push") == 0
    capsys.readouterr()
    assert ci_main(["history", "verdicts", "--pr", "12", "--store", store]) == 0
    assert "1 broken on main since 0000002," in capsys.readouterr().out.splitlines()[0]


def test_changed_files_keep_a_change_that_touched_the_test_its_own(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Main ran test_a once, at 0000000 (a schedule); pull requests of three other authors based at
    0000003-0000005 failed it with BOOM, two based before passed. Pull request 30 fails it so too:
    main's, read from those bases, unless its own change touched the test's file."""
    store = str(tmp_path / "h.sqlite")
    assert ingest_cli(store, write_report(tmp_path, [Case(FILE, "test_a")]), "0000000", "nightly") == 0
    for base in range(1, 6):
        case = BOOM if base >= 3 else Case(FILE, "test_a")
        assert ingest_cli(store, write_report(tmp_path, [case]), f"{base:05x}ee", "pull_request", "--pr", str(20 + base),
                          "--author", f"dev{base}", "--base-sha", f"{base:07x}", "--unscored") == 0
    assert ingest_cli(store, write_report(tmp_path, [BOOM]), "00000dd", "pull_request", "--pr", "30", "--author", "me",
                      "--base-sha", "0000005", "--unscored") == 0
    changed = tmp_path / "changed.txt"
    changed.write_text(f"{FILE}\n", encoding="utf-8")
    capsys.readouterr()
    assert ci_main(["history", "verdicts", "--pr", "30", "--store", store]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("1 failed: broken on main since 0000003")
    assert ci_main(["history", "verdicts", "--pr", "30", "--changed-files", str(changed), "--store", store]) == 0
    headline = capsys.readouterr().out.splitlines()[0]
    assert "new" in headline and "broken" not in headline, headline


def test_a_pool_wide_spell_is_the_pools_in_the_verdicts_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 47: every runner fails every test alike (tests/ci/report_infra_support.py's pool history,
    each runner 4 of its 9 reports): the CLI (and so the step summary) calls each failure the pool's,
    and no runner's record calls it a bad machine."""
    from tests.ci.report_infra_support import FILES, POOL, SHAS, build_pool_history

    store = str(tmp_path / "history.sqlite")
    build_pool_history(store, tmp_path)
    capsys.readouterr()
    assert ci_main(["history", "verdicts", "--sha", SHAS[-1], "--store", store]) == 0
    out = capsys.readouterr().out.splitlines()
    details = [line.strip() for line in out if line.strip().startswith("infra:")]
    assert len(details) == len(FILES) and all("the pool's 3 runners failed it with infra errors" in d for d in details)
    records = [f"{r} has infra failures in 4 of 9 reports (cuda 4)" for r in POOL]
    assert all(d.endswith(tuple(records)) for d in details)  # the record, counts only: no "a bad machine?"
