"""The bot's verdict column says what the history knows of each failure: ``flaky 9 % ±4 over 120
runs on gpu_b200`` for a known flake, ``new`` otherwise, written through the fake GitHub by the
real ``report`` command, on SQLite and on a real PostgreSQL. A history that cannot be read, or
does not answer (a paused PostgreSQL), costs the verdicts, never the row, and shows no password;
`fit` still keeps every row of the longest reply."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ci.history.flaky import flaky_scores
from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from tests.ci.history_support import (Case, PausablePostgres, pausable_pg, paused_pg, pg_server,  # noqa: F401
                                      store_location, write_report)
from tools.rerun.commands import entities
from tools.rerun.fake_github import FakeGitHub
from tools.rerun.fit import fit, max_rows, shorten
from tools.rerun.github import DEFAULT_BOT_LOGIN as BOT_LOGIN
from tools.rerun.headline import CLOSE, OPEN, span
from tools.rerun.replies import MAX_BODY_CHARS
from tools.rerun.flake_notes import flake_notes, note
from tools.rerun.report import ERROR_LIMIT, ID_LIMIT, RunResults, result_cell, row_verdict
from tools.rerun.verdicts import FLAKY, FailureVerdict
from tools.rerun.wrap import breakable_code
from tools.rerun.runs_table import RunRow, find_row, table

from rerun_support import PR, REPO, ROOT, TOKEN

COMMENT = 6101
FILE = "tests/quant/test_pack.py"
TIER = "gpu_b200"


def flaky_history(location: str, directory: Path) -> None:
    """``test_b`` fails 1 run in 10 on gpu_b200 whatever the commit; ``test_c`` never failed."""
    rng = random.Random(11)
    with open_store(location) as store:
        for i in range(120):
            failed = rng.random() < 0.1 or i in (3, 40, 77)  # seeded: at least three flips
            cases = [Case(FILE, "test_b", "failed" if failed else "passed", "AssertionError: accuracy 0.81 < 0.85"),
                     Case(FILE, "test_c")]
            identity = RunIdentity(REPO, f"{i:07x}aa", "push", TIER, run_url=f"https://ci.example/r/{i}")
            assert ingest(store, prepare(write_report(directory, cases), identity)).added


FLAKE_ERROR = "AssertionError: accuracy 0.81 &lt; 0.85"  # test_b's flakes in `flaky_history`, as XML


def _junit(path: Path, *failing: str, message: str = "x") -> Path:
    body = "".join(f'<testcase classname="tests.quant.test_pack" name="{n}" file="{FILE}" time="0.5">'
                   f'{"<failure message=" + chr(39) + message + chr(39) + "/>" if n in failing else ""}</testcase>'
                   for n in ("test_a", "test_b", "test_c"))
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" time="3.0">{body}</testsuite>'
                    f'</testsuites>', encoding="utf-8")
    return path


def _report(api_url: str, fake: FakeGitHub, tmp_path: Path, junit: Path, *extra: str,
            env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], str]:
    fake.comments.pop(PR, None)
    body = (f"<!-- rerun-test:comment={COMMENT} state=done sha={'a' * 40} -->\n@maintainer {span('1 of 1 run(s) dispatched')}.\n\n"
            + table([RunRow(TIER, "targets", "`self-hosted`", f"`{FILE}`", "[run](https://x/1)", "dispatched")]) + "\n")
    fake.add_comment(PR, BOT_LOGIN, body)
    (tmp_path / "token").write_text(TOKEN + "\n")
    proc = subprocess.run([sys.executable, "-m", "tools.rerun", "report", "--junit", str(junit), "--pr", str(PR),
                           "--comment-id", str(COMMENT), "--tier", TIER, "--api-url", api_url, "--token-file",
                           str(tmp_path / "token"), "--repo", REPO, "--settle-seconds", "0", *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})
    row = find_row(fake.bot_replies(PR)[0].body, TIER, "targets")
    return proc, row.result if row else ""


def _verdict(fake: FakeGitHub) -> str:
    row = find_row(fake.bot_replies(PR)[0].body, TIER, "targets")
    return row.verdict if row else ""


def test_rows_name_known_flakes_and_new_failures(api_url: str, fake: FakeGitHub, store_location: str,
                                                 tmp_path: Path) -> None:
    flaky_history(store_location, tmp_path)
    with open_store(store_location, create=False) as store:
        (score,) = flaky_scores(store, tier=TIER, min_trials=5)
    expected = note(score)
    assert expected.startswith("flaky ") and f"over {score.trials} runs on {TIER}" in expected
    assert abs(score.score - 0.1) < 0.06 and score.trials == 120

    # test_b fails with the error of its flakes: flaky (`ci.history.verdict.judge`, rule 4)
    proc, cell = _report(api_url, fake, tmp_path, _junit(tmp_path / "one.xml", "test_b", message=FLAKE_ERROR),
                         "--history", store_location, "--sha", "f" * 40)
    assert proc.returncode == 0, proc.stderr
    assert cell == f"**failed**: 2 passed, 1 failed, 0 skipped, 0 errors in 3.0 s<br>failing:<br>" \
        + breakable_code(FILE + "::test_b", ID_LIMIT) + " — " + breakable_code(FLAKE_ERROR.replace("&lt;", "<"), ERROR_LIMIT)
    verdict = _verdict(fake)
    assert verdict.startswith("flaky&#58; the same failure as its earlier flakes &#40;flaky 1") and \
        f"over 120 runs on {entities(TIER)}&#41;" in verdict, verdict
    assert f"{OPEN}2 passed, 1 failed: {verdict}{CLOSE}" in fake.bot_replies(PR)[0].body  # the headline

    # with an error it never flaked with, the same test is new: probably the change's
    proc, cell = _report(api_url, fake, tmp_path, _junit(tmp_path / "other.xml", "test_b", message="KeyError: 3"),
                         "--history", store_location)
    assert _verdict(fake).startswith("new&#58; probably this change&#39;s"), _verdict(fake)

    proc, cell = _report(api_url, fake, tmp_path, _junit(tmp_path / "three.xml", "test_a", "test_b", "test_c",
                                                         message=FLAKE_ERROR), "--history", store_location)
    assert proc.returncode == 0, proc.stderr
    assert _verdict(fake) == "1 flaky, 2 new"
    assert f"{breakable_code(FILE + '::test_c', ID_LIMIT)} · new" in cell
    assert f"{breakable_code(FILE + '::test_b', ID_LIMIT)} · flaky" in cell
    assert f"{OPEN}0 passed, 3 failed: 1 flaky, 2 new{CLOSE}" in fake.bot_replies(PR)[0].body

    # the same failure on another tier is new there: flakiness is per node and tier
    assert flake_notes(store_location, "gpu_h100", [f"{FILE}::test_b"]) == {f"{FILE}::test_b": "new"}


def test_without_a_readable_history_the_row_has_no_notes(api_url: str, fake: FakeGitHub, tmp_path: Path) -> None:
    junit = _junit(tmp_path / "j.xml", "test_b")
    proc, cell = _report(api_url, fake, tmp_path, junit)
    assert proc.returncode == 0 and cell.startswith("**failed**: 2 passed, 1 failed, 0 skipped, 0 errors in 3.0 s<br>")
    assert " · " not in cell
    proc, cell = _report(api_url, fake, tmp_path, junit, "--history", str(tmp_path / "none.sqlite"))
    assert proc.returncode == 0 and " · " not in cell and cell.startswith("**failed**: 2 passed, 1 failed")
    assert "no history there yet" in proc.stderr and "the row has no verdicts" in proc.stderr
    assert _verdict(fake) == "—"
    assert not (tmp_path / "none.sqlite").exists(), "the report never creates a store"


def test_a_password_of_the_history_is_never_shown(api_url: str, fake: FakeGitHub, tmp_path: Path) -> None:
    secrets = ("pw0rd", "s3cret", "k3y")
    url = "postgresql://ci:pw0rd@127.0.0.1:1/hist?password=s3cret&sslpassword=k3y"  # refused at once
    proc, cell = _report(api_url, fake, tmp_path, _junit(tmp_path / "j.xml", "test_b"), "--history", url)
    assert proc.returncode == 0 and cell.startswith("**failed**: 2 passed, 1 failed") and " · " not in cell
    (line,) = [x for x in proc.stderr.splitlines() if "history" in x]
    shown = "postgresql://ci:***@127.0.0.1:1/hist?password=***&sslpassword=***"
    assert line.startswith(f"rerun-test report: history: cannot open history store {shown}: ") and line.count(shown) == 1, line
    assert not [s for s in secrets if s in proc.stdout + proc.stderr], proc.stderr


def _timed_report(api_url: str, fake: FakeGitHub, tmp_path: Path, *extra: str,
                  env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], str, float]:
    start = time.monotonic()
    try:
        proc, cell = _report(api_url, fake, tmp_path, _junit(tmp_path / "j.xml", "test_b"), *extra, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the report waited on a history that does not answer for 60 s ({' '.join(extra)})")
    return proc, cell, time.monotonic() - start


def _row_without_notes(report: tuple[subprocess.CompletedProcess[str], str, float], why: str) -> None:
    proc, cell, took = report
    assert proc.returncode == 0, proc.stderr
    assert cell.startswith("**failed**: 2 passed, 1 failed, 0 skipped, 0 errors in 3.0 s<br>") and " · " not in cell
    # the stderr line below names the limit that fired; the bound only rules out the default wait
    # (20 s) or a hang after it, with room for a loaded machine's start-up (12.6 s seen at load 25)
    assert took < 19.0, f"{took:.1f} s"
    assert f"{why}; the row has no verdicts" in proc.stderr, proc.stderr


def test_a_paused_history_costs_only_the_notes(api_url: str, fake: FakeGitHub, tmp_path: Path,
                                              paused_pg: PausablePostgres) -> None:
    """A paused PostgreSQL accepts the connection and never answers: the store's connect timeout
    (from the environment, cut to the report's wait) gives up, the row is written."""
    paused_pg.pause()
    _row_without_notes(_timed_report(api_url, fake, tmp_path, "--history", paused_pg.url,
                                     env={"CI_HISTORY_CONNECT_TIMEOUT": "2"}),
                       "no connection within 2 s (the connect timeout; $CI_HISTORY_CONNECT_TIMEOUT sets it)")


def test_the_report_waits_for_notes_no_longer_than_it_was_told(api_url: str, fake: FakeGitHub, tmp_path: Path) -> None:
    """A history whose own limits are long: a SQLite store in rollback-journal mode whose writer
    holds the lock (its readers wait out SQLite's 120 s busy timeout). `--history-wait` bounds it."""
    import sqlite3

    location = tmp_path / "h.sqlite"
    flaky_history(str(location), tmp_path)
    writer = sqlite3.connect(location, isolation_level=None)
    try:
        writer.execute("PRAGMA journal_mode = DELETE")
        writer.execute("BEGIN EXCLUSIVE")
        _row_without_notes(_timed_report(api_url, fake, tmp_path, "--history", str(location), "--history-wait", "2"),
                           f"history: {location}: no answer within 2 s")
    finally:
        writer.close()


def test_verdicts_never_cost_a_row_of_the_longest_reply() -> None:
    """`fit`'s last step keeps the outcome, the counts and a one-word verdict only, so a row with
    verdicts shortens to no more than the row `max_rows` is computed from."""
    failing = tuple(f"tests/t/test_x.py::test_{i}[{'p' * 60}]" for i in range(12))
    verdicts = {n: FailureVerdict(FLAKY, "flaky 100 % ±50 over 99999 runs on gpu_h200_long_tier_name") for n in failing}
    results = RunResults(99999, 99999, 99999, 99999, 9999.9, failing)
    cell, plain = result_cell(results, verdicts), result_cell(results)
    row = RunRow("gpu_h200", "1/2", "…", "1 test(s)", "[run](x)", cell, row_verdict(results, verdicts))
    bare = RunRow("gpu_h200", "1/2", "…", "1 test(s)", "[run](x)", plain)
    assert len(cell) > len(plain) and shorten(row, 4).result == shorten(bare, 4).result
    assert shorten(row, 4).verdict == "flaky"
    n = max_rows("gpu_h200")
    body = "x" * 6000 + "\n" + table([RunRow("gpu_h200", f"{i}/{n}", "`self-hosted`", "`a`", "[run](x)", cell,
                                             row.verdict) for i in range(1, n + 1)])
    fitted = fit(body)
    assert len(fitted) <= MAX_BODY_CHARS and fitted.count("**failed**: 99999 passed") == n


def test_a_test_failing_on_main_for_a_week_is_broken_on_main_not_new(api_url: str, fake: FakeGitHub,
                                                                   store_location: str, tmp_path: Path) -> None:
    """The user's case: test_b passes on main, then fails on every push since commit 30: a PR that
    fails it did not break it, and the reply says so, with the commit."""
    with open_store(store_location) as store:
        for i in range(36):
            broken = i >= 30
            cases = [Case(FILE, "test_b", "failed" if broken else "passed", "AssertionError: scale mismatch"),
                     Case(FILE, "test_c")]
            identity = RunIdentity(REPO, f"{i:07x}bb", "push", TIER, run_url=f"https://ci.example/r/{i}")
            assert ingest(store, prepare(write_report(tmp_path, cases), identity)).added
    proc, _ = _report(api_url, fake, tmp_path, _junit(tmp_path / "b.xml", "test_b", message="AssertionError: scale mismatch"),
                      "--history", store_location, "--sha", "e" * 40)
    assert proc.returncode == 0, proc.stderr
    verdict = _verdict(fake)
    assert verdict.startswith(f"broken on main since {30:07x} ") and f"last passed at {29:07x}" in verdict, verdict
    headline = fake.bot_replies(PR)[0].body.split(OPEN, 1)[1].split(CLOSE, 1)[0]
    assert headline == f"2 passed, 1 failed: {verdict}" and "new" not in headline
