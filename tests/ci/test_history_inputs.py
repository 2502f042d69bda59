"""What the history commands take from the command line and the environment: numbers are ASCII
decimal and fit the store's columns (else exit 2 naming the flag or variable, never a traceback or
a store failure), ``--store`` wins over $CI_HISTORY_STORE."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.history.store import open_store
from tests.ci.history_support import Case, one_file_registry, pg_server, store_location, write_report  # noqa: F401

ARGS = ["--repo", "acme/gpu", "--sha", "abc1234", "--event", "push", "--tier", "cpu"]


@pytest.mark.parametrize("value", ["²", "٣", "0", " 2", "2.0", "+2", "2147483648", "9223372036854775808"])
def test_a_bad_github_run_attempt_is_bad_input(value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GITHUB_RUN_ATTEMPT", value)
    store = tmp_path / "h.sqlite"
    report = write_report(tmp_path, [Case("tests/a/test_a.py", "test_ok")])
    assert ci_main(["history", "ingest", str(report), *ARGS, "--store", str(store)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"python -m ci history ingest: $GITHUB_RUN_ATTEMPT must be a whole number from 1 to 2147483647 "
                    f"in ASCII digits, got {value!r}; nothing was written")
    assert not store.exists()


def test_the_attempt_comes_from_the_flag_then_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = str(tmp_path / "h.sqlite")
    for attempt, env, flag in ((1, "", []), (3, "3", []), (5, "²", ["--attempt", "5"])):
        monkeypatch.setenv("GITHUB_RUN_ATTEMPT", env)
        report = write_report(tmp_path, [Case("tests/a/test_a.py", f"test_{attempt}")])
        assert ci_main(["history", "ingest", str(report), *ARGS, *flag, "--store", store]) == 0
    with open_store(store, create=False) as opened:
        assert opened.fetchall("SELECT attempt FROM reports ORDER BY id") == [(1,), (3,), (5,)]


@pytest.mark.parametrize("flag", ["--attempt", "--pr"])
@pytest.mark.parametrize("value", ["٣", "²", "0", "2147483648", "9223372036854775808"])
def test_numbers_the_store_cannot_hold_are_bad_input(store_location: str, flag: str, value: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    report = write_report(tmp_path, [Case("tests/a/test_a.py", "test_ok")])
    with pytest.raises(SystemExit) as refused:
        ci_main(["history", "ingest", str(report), *ARGS, flag, value, "--store", store_location])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be a whole number from 1 to 2147483647 in ASCII digits, got {value!r}" in err
    # the largest that fits is stored, on both databases
    assert ci_main(["history", "ingest", str(report), *ARGS, flag, "2147483647", "--store", store_location]) == 0
    column = flag.removeprefix("--")
    with open_store(store_location, create=False) as opened:
        assert opened.fetchall(f"SELECT {column} FROM reports") == [(2147483647,)]


@pytest.mark.parametrize("args", [["flaky", "--limit", "٣"], ["flaky", "--min-runs", "9223372036854775808"],
                                  ["report", "--html", "x", "--pr", "9223372036854775808"],
                                  ["report", "--html", "x", "--runs", "²"]])
def test_other_history_flags_are_ascii_and_bounded(args: list[str], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "h.sqlite"
    report = write_report(tmp_path, [Case("tests/a/test_a.py", "test_ok")])
    assert ci_main(["history", "ingest", str(report), *ARGS, "--store", str(store)]) == 0
    extra = ["--registry", str(one_file_registry(tmp_path))] if args[0] == "report" else []
    with pytest.raises(SystemExit) as refused:
        ci_main([*args, *extra, "--store", str(store)])
    assert refused.value.code == 2
    assert f"argument {args[-2]}: must be a whole number" in capsys.readouterr().err


def test_the_store_flag_wins_over_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from_env, from_flag = tmp_path / "env.sqlite", tmp_path / "flag.sqlite"
    monkeypatch.setenv("CI_HISTORY_STORE", str(from_env))
    report = write_report(tmp_path, [Case("tests/a/test_a.py", "test_ok")])
    assert ci_main(["history", "ingest", str(report), *ARGS, "--store", str(from_flag)]) == 0
    assert from_flag.is_file() and not from_env.exists()
    assert ci_main(["flaky", "--store", str(from_flag)]) == 0  # the environment's store does not exist
    assert capsys.readouterr().err == ""
    with sqlite3.connect(from_flag) as conn:
        assert conn.execute("SELECT COUNT(*) FROM reports").fetchall() == [(1,)]
