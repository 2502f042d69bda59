"""What the history commands take from the command line and the environment: a store URL's
secrets are never shown (the user info's password, ``?password=`` and its kin, a libpq
keyword/value string's ``password=``, which is PostgreSQL and never a SQLite path), numbers are
ASCII decimal and fit the store's columns (else exit 2 naming the flag or variable, never a
traceback or a store failure), ``--store`` wins over $CI_HISTORY_STORE."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.cache_folder import CACHE_DIR
from ci.history.location import describe, redact
from ci.history.store import open_store
from tests.ci.history_support import (Case, fresh_database, one_file_registry, pg_server,  # noqa: F401 (fixtures)
                                      store_location, write_report)

ARGS = ["--repo", "acme/gpu", "--sha", "abc1234", "--event", "push", "--tier", "cpu"]
SECRETS = ("pw0rd", "s3cret", "k3y", "/etc/pgpass-x")
# nothing listens on port 1: the connection is refused at once
UNREACHABLE = "postgresql://ci:pw0rd@127.0.0.1:1/hist?password=s3cret&sslpassword=k3y&passfile=/etc/pgpass-x"
SHOWN = "postgresql://ci:***@127.0.0.1:1/hist?password=***&sslpassword=***&passfile=***"
# the same in libpq's keyword/value form, quoted and escaped
UNREACHABLE_KEYWORDS = r"host=127.0.0.1 port=1 dbname=hist user=ci password='pw0rd s3cret' sslpassword = k3y\ x"
SHOWN_KEYWORDS = "host=127.0.0.1 port=1 dbname=hist user=ci password=*** sslpassword = ***"


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u@127.0.0.1:1/db?password=s3cret", "postgresql://u@127.0.0.1:1/db?password=***"),
    ("postgresql://u:pw@h/db", "postgresql://u:***@h/db"),
    ("postgres://u:p?w#x@h:5/db?sslmode=require", "postgres://u:***@h:5/db?sslmode=require"),
    ("postgresql://h/db?application_name=a@b&password=x@y", "postgresql://h/db?application_name=a@b&password=***"),
    ("postgresql://h/db?p%61ssword=enc&PASSWORD=up&sslkey=/k&x", "postgresql://h/db?p%61ssword=***&PASSWORD=***&sslkey=***&x"),
    ("postgresql://u:@h/db", "postgresql://u:@h/db"),
    ("postgresql:///db?host=/run/pg", "postgresql:///db?host=/run/pg"),
    ("/tmp/password=x/history.sqlite", "/tmp/password=x/history.sqlite"),
    ("./password=x.sqlite", "./password=x.sqlite"),
    ("host=h password=s3cret dbname=d", "host=h password=*** dbname=d"),
    ("  password = 'se cret' sslkey=/k host='a b'", "  password = *** sslkey=*** host='a b'"),
    (r"password='it\'s' passfile=a\ b", "password=*** passfile=***"),
    ("password= host=h", "password= ***"),  # libpq skips blanks after '=': the password is "host=h"
    ("password=", "password="),
    ("host=h password=se cret", "host=h password=*** ***"),  # unreadable from "cret" on: all of it hidden
    ("host=h password='se cret", "host=h password=***"),
])
def test_describe_hides_the_secrets_and_keeps_the_rest(url: str, shown: str) -> None:
    assert describe(url) == shown


def test_redact_hides_every_form_of_a_secret_in_any_text() -> None:
    url = "postgresql://u:p%40ss@h/db?password=two%20words"
    text = "auth failed for p@ss (p%40ss)\n\tthen two words, two%20words"
    assert redact(text, url) == "auth failed for *** (***) then ***, ***"
    assert redact("nothing secret\nhere", "/tmp/h.sqlite") == "nothing secret here"


def created(root: Path, before: list[Path]) -> list[Path]:
    """What appeared under ``root`` since ``before`` (its ``sorted(rglob("*"))``), ci's own
    cache folder left out."""
    return [p for p in sorted(root.rglob("*")) if p not in before and CACHE_DIR not in p.relative_to(root).parts]


@pytest.mark.parametrize("location, shown", [(UNREACHABLE, SHOWN), (UNREACHABLE_KEYWORDS, SHOWN_KEYWORDS)])
@pytest.mark.parametrize("command", ["history ingest", "flaky", "quarantine", "report"])
def test_no_command_shows_a_password_when_the_store_fails(command: str, location: str, shown: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    registry = one_file_registry(tmp_path)
    args = {"history ingest": ["history", "ingest", str(write_report(tmp_path, [Case("tests/a/test_a.py", "t")])),
                               *ARGS],
            "flaky": ["flaky"], "quarantine": ["quarantine", "--registry", str(registry)],
            "report": ["report", "--html", str(tmp_path / "hud"), "--registry", str(registry)]}[command]
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert ci_main([*args, "--store", location]) == 3
    out, err = capsys.readouterr()
    assert not [s for s in SECRETS if s in out + err], err
    (line,) = err.splitlines()
    assert line.count(shown) == 1, line  # named once, its secrets hidden, the rest as given
    assert created(tmp_path, before) == []  # no SQLite file named after the location


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


def keyword_form(url: str, password: str) -> str:
    """``url`` (a pgserver URL: user, database, socket directory) in libpq's keyword/value form."""
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(url)
    return f"host={parts['host']} dbname={parts['dbname']} user={parts['user']} password={password}"


@pytest.mark.parametrize("password", ["s3cret", "'se cret'", r"se\ cret"])
def test_a_keyword_form_store_is_postgresql_and_its_password_is_never_shown(
        password: str, pg_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``host=... password=...`` is the database it names (the server trusts local connections, so
    the password is accepted and unused), never a SQLite file named after it in the working
    directory; no command shows the password."""
    url = fresh_database(pg_server)
    location = keyword_form(url, password)
    report = write_report(tmp_path, [Case("tests/a/test_a.py", "test_ok")])
    registry = one_file_registry(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert ci_main(["history", "ingest", str(report), *ARGS, "--store", location]) == 0
    assert ci_main(["flaky", "--format", "json", "--store", location]) == 0
    assert ci_main(["quarantine", "--registry", str(registry), "--store", location]) == 0
    out, err = capsys.readouterr()
    assert not [s for s in ("s3cret", "se cret", "cret") if s in out + err], out + err
    shown = keyword_form(url, "***")
    assert f"history: {shown}\n" in out
    assert json.loads(out[out.index("{"):out.rindex("}") + 1])["store"] == shown
    assert created(tmp_path, before) == []
    import psycopg

    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT COUNT(*) FROM reports").fetchall() == [(1,)]


@pytest.mark.parametrize("location", ["host=127.0.0.1 password=se cret", "host=127.0.0.1 password='se cret",
                                      "dbname=d host"])
@pytest.mark.parametrize("command", ["history ingest", "flaky"])
def test_a_keyword_form_libpq_cannot_read_is_bad_input(location: str, command: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before anything is opened (exit 2), named by position, none of its values shown."""
    args = (["history", "ingest", str(write_report(tmp_path, [Case("tests/a/test_a.py", "t")])), *ARGS]
            if command == "history ingest" else ["flaky"])
    monkeypatch.chdir(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    assert ci_main([*args, "--store", location]) == 2
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert out == "" and "cret" not in line and "is not a connection string libpq can read: " in line, line
    assert ("has no '='" if location.count("'") != 1 else "is never closed") in line
    assert created(tmp_path, before) == []


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
