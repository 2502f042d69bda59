"""A PostgreSQL that stops answering (SIGSTOPped: the kernel still accepts connections, nothing
replies) costs every history command a few seconds and exit 3 with one line, never a hang: the
connect timeout bounds opening, the statement timeout (the server's, and the client's own deadline
for a server that cannot enforce it) bounds every round trip. Small limits come from the
environment, as an operator would set them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.postgres import Timeouts
from ci.history.store import open_store
from tests.ci.history_support import (Case, PausablePostgres, fresh_database, one_file_registry,  # noqa: F401
                                      pausable_pg, paused_pg, pg_server, write_report)

ROOT = Path(__file__).resolve().parents[2]
FILE = "tests/a/test_a.py"
SMALL_LIMITS = {"CI_HISTORY_CONNECT_TIMEOUT": "2", "CI_HISTORY_STATEMENT_TIMEOUT": "1"}
# connect: libpq's floor of 2 s; a round trip: the 1 s statement timeout plus the client's margin
BOUND_S = 15.0
HUNG_S = 40.0  # what the test waits before calling it a hang


def history(url: str, directory: Path) -> str:
    """A fresh database on the server with a few runs of a flaky test in it."""
    location = fresh_database(url)
    with open_store(location) as store:
        for i in range(6):
            cases = [Case(FILE, "test_x", "failed" if i % 2 else "passed", "AssertionError: 1 != 2", reruns=i % 2)]
            ingest(store, prepare(write_report(directory, cases), RunIdentity("acme/gpu", f"{i:07x}", "push", "cpu")))
    return location


def run(args: list[str], env: dict[str, str], timeout: float = HUNG_S) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    try:
        proc = subprocess.run(args, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"python -m ci {args[3]} hung on a paused PostgreSQL (still waiting after {timeout:.0f} s)")
    return proc, time.monotonic() - start


@pytest.mark.parametrize("command", ["history ingest", "flaky", "quarantine", "report"])
def test_every_command_gives_up_on_a_paused_server(paused_pg: PausablePostgres, tmp_path: Path, command: str) -> None:
    location = history(paused_pg.url, tmp_path)
    reg = one_file_registry(tmp_path, FILE)
    args = {"history ingest": ["history", "ingest", str(write_report(tmp_path, [Case(FILE, "test_x")])), "--repo",
                               "acme/gpu", "--sha", "abcdef1", "--event", "push", "--tier", "cpu"],
            "flaky": ["flaky"],
            "quarantine": ["quarantine", "--registry", str(reg)],
            "report": ["report", "--html", str(tmp_path / "hud"), "--registry", str(reg)]}[command]
    paused_pg.pause()
    proc, took = run([sys.executable, "-m", "ci", *args, "--store", location], SMALL_LIMITS)
    assert proc.returncode == 3, proc.stderr
    assert took < BOUND_S, f"{took:.1f} s"
    (line,) = proc.stderr.splitlines()  # one line, no traceback
    assert "timeout" in line and "CI_HISTORY_CONNECT_TIMEOUT" in line, line
    assert not (tmp_path / "hud").exists()


_MID_STATEMENT = """
import sys
from ci.history.flaky import flaky_scores
from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import StoreError, open_store
report = prepare(sys.argv[2], RunIdentity("acme/gpu", "abcdef2", "push", "cpu"))
with open_store(sys.argv[1]) as store:
    print("connected", flush=True)
    sys.stdin.readline()  # the server is paused now
    try:
        ingest(store, report) if sys.argv[3] == "ingest" else flaky_scores(store)
    except StoreError as exc:
        print(f"StoreError: {exc}", flush=True)
        sys.exit(3)
print("answered", flush=True)
"""


@pytest.mark.parametrize("work", ["ingest", "read"])
def test_a_server_that_stops_mid_session_is_an_error_in_seconds(paused_pg: PausablePostgres, tmp_path: Path,
                                                                work: str) -> None:
    """Connected first, then the server stops: no server-side timeout can fire, the client's own
    deadline (statement timeout plus a margin) cuts the connection."""
    location = history(paused_pg.url, tmp_path)
    report = write_report(tmp_path, [Case(FILE, f"test_{i}") for i in range(200)])
    child = subprocess.Popen([sys.executable, "-c", _MID_STATEMENT, location, str(report), work], cwd=ROOT,
                             env={**os.environ, **SMALL_LIMITS}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline() == "connected\n"
        paused_pg.pause()
        start = time.monotonic()
        child.stdin.write("go\n")
        child.stdin.flush()
        try:
            out, err = child.communicate(timeout=HUNG_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{work} hung on a paused PostgreSQL (still waiting after {HUNG_S:.0f} s)")
        took = time.monotonic() - start
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 3, (out, err)
    assert out.startswith("StoreError: ") and "no answer within" in out and "CI_HISTORY_STATEMENT_TIMEOUT" in out, out
    assert took < BOUND_S, f"{took:.1f} s"
    paused_pg.resume()
    with open_store(location, create=False) as store:  # nothing half-written: the report is absent
        assert store.fetchall("SELECT COUNT(*) FROM reports WHERE sha = 'abcdef2'") == [(0,)]


def test_a_slow_statement_is_cancelled_by_the_server_first(pg_server: str) -> None:
    """A live server enforces the statement timeout itself, with its own clear error, before the
    client's deadline (5 s later) would cut the connection."""
    with open_store(fresh_database(pg_server), timeouts=Timeouts(connect_s=5, statement_s=1)) as store:
        assert store.fetchall("SHOW statement_timeout") == [("1s",)]
        start = time.monotonic()
        with pytest.raises(Exception, match="canceling statement due to statement timeout"):
            store.fetchall("SELECT pg_sleep(4)")
        assert time.monotonic() - start < 3.0
        assert store.watchdog is not None and not store.watchdog.fired
        assert store.fetchall("SELECT 1") == [(1,)]  # the connection is still good
