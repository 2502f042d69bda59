"""Shared by the history tests: pytest-shaped JUnit reports with known truth, and real stores.

`pg_server` starts one real PostgreSQL (the ``pgserver`` package ships its binaries) per test
session in a temporary directory; when it cannot start the test fails, it never skips: CI installs
``pgserver`` with the ``test`` extra. `store_location` gives each test a fresh SQLite file or a
fresh PostgreSQL database, so the same test body runs on both. `paused_pg` is a server of the
test module's own that a test may SIGSTOP (`PausablePostgres.pause`); it runs again afterwards.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from xml.sax.saxutils import escape, quoteattr

import pytest

BACKENDS = ("sqlite", "postgresql")
_names = itertools.count()


@dataclass(frozen=True)
class Case:
    """One test in a report: ``outcome`` of the final attempt (passed/failed/error/skipped),
    ``reruns`` earlier attempts written the way pytest-rerunfailures does (empty testcases)."""

    file: str
    name: str
    outcome: str = "passed"
    message: str = ""
    detail: str = ""
    reruns: int = 0
    classname: str | None = None
    time: float = 0.01


def junit_xml(cases: list[Case]) -> str:
    """A pytest ``xunit1`` report (``file`` attributes) of ``cases``."""
    body = []
    for case in cases:
        classname = case.classname if case.classname is not None else case.file[:-3].replace("/", ".")
        attrs = f'classname={quoteattr(classname)} name={quoteattr(case.name)} file={quoteattr(case.file)}'
        for _ in range(case.reruns):
            body.append(f'<testcase {attrs} time="{case.time}" />')
        tag = {"failed": "failure", "error": "error", "skipped": "skipped"}.get(case.outcome)
        inner = (f"<{tag} message={quoteattr(case.message)}>{escape(case.detail)}</{tag}>" if tag else "")
        body.append(f'<testcase {attrs} time="{case.time}">{inner}</testcase>')
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" '
            f'tests="{len(cases)}" time="1.0">{"".join(body)}</testsuite></testsuites>')


def one_file_registry(directory: Path, file: str = "tests/a/test_a.py") -> Path:
    """``directory/registry.yaml``: the cpu tier and one active entry, ``file``."""
    from tests.ci.tree_testutil import CPU_REGISTRY_HEAD

    path = directory / "registry.yaml"
    path.write_text(CPU_REGISTRY_HEAD + f"  {file}:\n    tiers: [cpu]\n    est_time: 1\n    owner: me\n    status: active\n")
    return path


def write_report(directory: Path, cases: list[Case]) -> Path:
    path = directory / f"junit-{next(_names)}.xml"
    path.write_text(junit_xml(cases), encoding="utf-8")
    return path


IMPORT_ERROR = Case("", "", "failed", "ImportError: cannot import name 'KVFP4QuantizeUtil' from 'fp4kv.quant.mx_block16'",
                    "    def test_x():\n>       from fp4kv.quant.mx_block16 import KVFP4QuantizeUtil\n"
                    "E       ImportError: cannot import name 'KVFP4QuantizeUtil' from 'fp4kv.quant.mx_block16' "
                    "(/work/fp4kv/quant/mx_block16.py)\n")


@dataclass
class KnownHistory:
    """A simulated default branch with pull requests, and its truth.

    - ``test_flaky``: fails with p = ``p`` on every attempt, whatever the code (reruns=1 on push).
    - ``test_broke``: passes until commit ``broke_at``, fails on every commit after.
    - ``test_fixed``: fails from ``broke_at`` until ``fixed_at``, passes after.
    - ``test_import``: an ImportError on a random 30 % of commits (retried, never passing on
      retry), a pass otherwise: broken, never flaky.
    - ``test_stable``: always passes.
    """

    commits: int = 80
    p: float = 0.1
    broke_at: int = 30
    fixed_at: int = 50
    seed: int = 7
    reports: list[tuple[Path, dict[str, object]]] = field(default_factory=list)

    FILE = "tests/history/test_known.py"

    def build(self, directory: Path) -> "KnownHistory":
        rng = random.Random(self.seed)
        for i in range(self.commits):
            sha = f"{i:07x}abc"
            cases = [self._flaky(rng, retry=True),
                     self._case("test_broke", i >= self.broke_at, f"AssertionError: expected 3, got {i}"),
                     self._case("test_fixed", self.broke_at <= i < self.fixed_at, "AssertionError: wrong scale 0.5"),
                     self._import(rng), Case(self.FILE, "test_stable")]
            self.reports.append((write_report(directory, cases), dict(sha=sha, event="push",
                                                                      run_url=f"https://ci.example/run/{i}")))
            if i % 4 == 0:  # a pull request on its own commit: first run, and a retry run when it failed
                pr_sha = f"{i:07x}def"
                first = self._flaky(rng, retry=False)
                self.reports.append((write_report(directory, [first]), dict(sha=pr_sha, event="pull_request", pr=i + 1)))
                if first.outcome != "passed":
                    self.reports.append((write_report(directory, [self._flaky(rng, retry=False)]),
                                         dict(sha=pr_sha, event="rerun", pr=i + 1, attempt=2)))
        return self

    def _flaky(self, rng: random.Random, retry: bool) -> Case:
        """One run of test_flaky; with ``retry`` a failed first attempt is rerun once, in the report."""
        failed = rng.random() < self.p
        reruns = 0
        if retry and failed:
            failed, reruns = rng.random() < self.p, 1
        if failed:
            return Case(self.FILE, "test_flaky", "failed",
                        f"AssertionError: accuracy {rng.uniform(0.7, 0.84):.4f} below 0.85 at 0x{rng.getrandbits(40):x}",
                        "E   AssertionError: accuracy below", reruns=reruns)
        return Case(self.FILE, "test_flaky", reruns=reruns)

    def _case(self, name: str, failing: bool, message: str) -> Case:
        return Case(self.FILE, name, "failed", message, f"E   {message}") if failing else Case(self.FILE, name)

    def _import(self, rng: random.Random) -> Case:
        if rng.random() < 0.3:
            return Case(self.FILE, "test_import", "failed", IMPORT_ERROR.message, IMPORT_ERROR.detail, reruns=2)
        return Case(self.FILE, "test_import")


# Default-branch commits of one test, oldest first (`breakage_cases`): p passed, ff failed then
# failed its retry, fp failed then passed; the letter after is the failure's error. Two known
# breakage windows: commits 1-3 (the pass at 2 inside: X on both sides) and 8-11 (9's retry
# passed inside: Z on both sides), 13 attempts, 2 of them passes. Not counted: 4's pass (the
# window's edge, it looks like the fix), the flip at 6, the open streak 13-14.
BREAKAGE_PLAN = ("p", "ffX", "p", "ffX", "fpX", "p", "ffY", "p", "ffZ", "fpZ", "ffZ", "ffZ", "p", "ffW", "ffW")


def breakage_cases(file: str, step: str) -> list[Case]:
    """One report's case of `BREAKAGE_PLAN`'s ``step`` for ``file``::test_x."""
    if step == "p":
        return [Case(file, "test_x")]
    error = f"AssertionError: expected {step[2]}"
    return [Case(file, "test_x", "passed" if step.startswith("fp") else "failed", error, f"E   {error}", reruns=1)]


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a real PostgreSQL server for this session (fails the test if none starts).

    Its data directory is a fresh one under the system temporary directory, not pytest's: run as
    root, pgserver runs the server as its own user, who cannot enter pytest's 0700 directories."""
    import pgserver  # a missing package is a failure, not a skip: the test extra installs it

    data = tempfile.mkdtemp(prefix="ci-history-pg-")
    server = pgserver.get_server(data, cleanup_mode="stop")
    try:
        import psycopg

        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            # Only an operating-system crash needs fsync; these tests kill processes, never the machine.
            conn.execute("ALTER SYSTEM SET fsync = off")
            conn.execute("SELECT pg_reload_conf()")
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


def fresh_database(server_url: str) -> str:
    """A new, empty database on the server; its URL."""
    import psycopg

    name = f"h_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server_url.replace("/postgres?", f"/{name}?")


@pytest.fixture(params=BACKENDS)
def store_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store: a SQLite file, or a new database on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "store" / "history.sqlite")
    return fresh_database(request.getfixturevalue("pg_server"))


@dataclass
class PausablePostgres:
    """A real PostgreSQL server of its own (never the session's shared one) that a test can pause:
    `pause` SIGSTOPs the postmaster and every backend, as a hung or frozen server looks to a client
    (connections are accepted by the kernel and never answered); `resume` SIGCONTs them."""

    url: str
    data: str
    paused: list[int] = field(default_factory=list)

    def processes(self) -> list[int]:
        postmaster = int(Path(self.data, "postmaster.pid").read_text().split("\n", 1)[0])
        found = [postmaster]
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue  # exited meanwhile
                if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:  # field 4: the parent's pid
                    found.append(int(entry.name))
        return found

    def pause(self) -> None:
        postmaster, *children = self.processes()
        os.kill(postmaster, signal.SIGSTOP)  # first: a stopped postmaster starts no new child
        self.paused.append(postmaster)
        for pid in children:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue  # a backend that exited between the listing and the signal: nothing to pause
            self.paused.append(pid)

    def resume(self) -> None:
        while self.paused:
            try:
                os.kill(self.paused.pop(), signal.SIGCONT)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="module")
def pausable_pg() -> Iterator[PausablePostgres]:
    """A `PausablePostgres` for the module; resumed after each use by `paused_pg`, and at the end."""
    import pgserver

    data = tempfile.mkdtemp(prefix="ci-history-paused-")
    server = pgserver.get_server(data, cleanup_mode="stop")
    pg = PausablePostgres(server.get_uri(), data)
    try:
        yield pg
    finally:
        pg.resume()
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
def paused_pg(pausable_pg: PausablePostgres) -> Iterator[PausablePostgres]:
    """`pausable_pg`, always running again when the test ends (whatever it did)."""
    try:
        yield pausable_pg
    finally:
        pausable_pg.resume()
