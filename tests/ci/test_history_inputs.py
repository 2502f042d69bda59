"""What the history commands take from the command line and the environment: a store URL's
secrets are never shown (the user info's password, ``?password=`` and its kin), numbers are
ASCII decimal and fit the store's columns (else exit 2 naming the flag or variable, never a
traceback or a store failure), ``--store`` wins over $CI_HISTORY_STORE."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.history.location import describe, redact
from ci.history.store import open_store
from tests.ci.history_support import (Case, one_file_registry, pg_server, store_location,  # noqa: F401 (fixtures)
                                      write_report)

ARGS = ["--repo", "acme/gpu", "--sha", "abc1234", "--event", "push", "--tier", "cpu"]
SECRETS = ("pw0rd", "s3cret", "k3y", "/etc/pgpass-x")
# nothing listens on port 1: the connection is refused at once
UNREACHABLE = "postgresql://ci:pw0rd@127.0.0.1:1/hist?password=s3cret&sslpassword=k3y&passfile=/etc/pgpass-x"
SHOWN = "postgresql://ci:***@127.0.0.1:1/hist?password=***&sslpassword=***&passfile=***"


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u@127.0.0.1:1/db?password=s3cret", "postgresql://u@127.0.0.1:1/db?password=***"),
    ("postgresql://u:pw@h/db", "postgresql://u:***@h/db"),
    ("postgres://u:p?w#x@h:5/db?sslmode=require", "postgres://u:***@h:5/db?sslmode=require"),
    ("postgresql://h/db?application_name=a@b&password=x@y", "postgresql://h/db?application_name=a@b&password=***"),
    ("postgresql://h/db?p%61ssword=enc&PASSWORD=up&sslkey=/k&x", "postgresql://h/db?p%61ssword=***&PASSWORD=***&sslkey=***&x"),
    ("postgresql://u:@h/db", "postgresql://u:@h/db"),
    ("postgresql:///db?host=/run/pg", "postgresql:///db?host=/run/pg"),
    ("/tmp/password=x/history.sqlite", "/tmp/password=x/history.sqlite"),
])
def test_describe_hides_the_secrets_and_keeps_the_rest(url: str, shown: str) -> None:
    assert describe(url) == shown


def test_redact_hides_every_form_of_a_secret_in_any_text() -> None:
    url = "postgresql://u:p%40ss@h/db?password=two%20words"
    text = "auth failed for p@ss (p%40ss)\n\tthen two words, two%20words"
    assert redact(text, url) == "auth failed for *** (***) then ***, ***"
    assert redact("nothing secret\nhere", "/tmp/h.sqlite") == "nothing secret here"


@pytest.mark.parametrize("command", ["history ingest", "flaky", "quarantine", "report"])
def test_no_command_shows_a_password_when_the_store_fails(command: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    registry = one_file_registry(tmp_path)
    args = {"history ingest": ["history", "ingest", str(write_report(tmp_path, [Case("tests/a/test_a.py", "t")])),
                               *ARGS],
            "flaky": ["flaky"], "quarantine": ["quarantine", "--registry", str(registry)],
            "report": ["report", "--html", str(tmp_path / "hud"), "--registry", str(registry)]}[command]
    assert ci_main([*args, "--store", UNREACHABLE]) == 3
    out, err = capsys.readouterr()
    assert not [s for s in SECRETS if s in out + err], err
    (line,) = err.splitlines()
    assert line.count(SHOWN) == 1, line  # named once, its secrets hidden, the rest as given


def test_a_store_that_works_is_shown_without_its_password(pg_server: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The server trusts local connections, so a password in the URL is accepted and unused."""
    location = pg_server + "&password=s3cret"
    report = write_report(tmp_path, [Case("tests/a/test_a.py", "test_ok")])
    assert ci_main(["history", "ingest", str(report), *ARGS, "--store", location]) == 0
    assert ci_main(["flaky", "--format", "json", "--store", location]) == 0
    out, err = capsys.readouterr()
    assert "s3cret" not in out + err
    assert f"history: {pg_server}&password=***\n" in out
    assert json.loads(out[out.index("{"):])["store"] == f"{pg_server}&password=***"


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


@pytest.mark.parametrize("variable", ["CI_HISTORY_CONNECT_TIMEOUT", "CI_HISTORY_STATEMENT_TIMEOUT"])
def test_a_bad_timeout_setting_is_bad_input(variable: str, pg_server: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    report = write_report(tmp_path, [Case("tests/a/test_a.py", "test_ok")])
    for value in ("²", "0", "86401", "1.5"):
        monkeypatch.setenv(variable, value)
        assert ci_main(["history", "ingest", str(report), *ARGS, "--store", pg_server]) == 2
        assert ci_main(["flaky", "--store", pg_server]) == 2
        err = capsys.readouterr().err
        assert err.count(f"${variable} must be a whole number from 1 to 86400 in ASCII digits, got {value!r} "
                         "(seconds)") == 2, err


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
