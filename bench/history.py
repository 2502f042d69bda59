"""The test history at scale: ``python -m bench history [--quick]``.

A synthetic history of 1,000 reports x 1,000 tests (about 1,000,000 testcase rows; --quick: 60 x
400), seeded: pushes to the default branch, pull requests with retry runs, pytest-rerunfailures
reruns, 2 % of the tests flaky (p from 0.02 to 0.2), a test that breaks at a known commit, an
ImportError on random commits, and one pull request that fails a tenth of all tests (so
`ci flaky` must look at more than the flaky few). The reports are written as pytest JUnit XML
first (not timed), then each one in turn is:

1. read and classified (`ci.history.ingest.prepare`: the JUnit reader, classification,
   fingerprints);
2. ingested into SQLite and into PostgreSQL (`ci.history.ingest.ingest`: one transaction per
   report, idempotency key, node ids, every attempt);
3. inserted into a bare table of the same columns, no keys or indexes, with a plain
   ``executemany`` INSERT in one transaction per report: the baseline, on the same database
   (on PostgreSQL also by a plain binary COPY, the bulk path ingest itself uses).

Ingest is timed per report with the writes taking turns, so a burst of load on a shared
machine slows one sample of each. Then ``ci flaky`` (`ci.history.flaky.flaky_scores`, and the
whole command in process) is timed, best of 3, against a plain ``SELECT node_id, COUNT(*),
SUM(fail) ... GROUP BY node_id`` over the baseline table. PostgreSQL is a real server started by
``pgserver`` (default settings, fsync on); without the package its rows are left out.

Goals (issue 20): ingest >= 50,000 testcases/s; ``ci flaky`` < 1 s on a million rows.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from bench.table import best_of, format_table
from ci.history.flaky import flaky_scores
from ci.history.ingest import PreparedReport, ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import CASE_COLUMNS, Store, open_store

SEED = 20261203
GOAL_INGEST = 50_000
GOAL_FLAKY_S = 1.0
_FILE = "tests/area{0}/test_mod{1}.py"


def _case_xml(file: str, name: str, outcome: str, message: str = "", reruns: int = 0) -> str:
    attrs = f'classname="{file[:-3].replace("/", ".")}" name="{name}" file="{file}" time="0.012"'
    head = f"<testcase {attrs} />" * reruns
    if outcome == "passed":
        return head + f"<testcase {attrs} />"
    return head + f'<testcase {attrs}><failure message="{message}">E   {message}</failure></testcase>'


def write_history(directory: Path, reports: int, tests: int) -> list[tuple[Path, RunIdentity]]:
    """The synthetic history's reports and identities (see the module docstring)."""
    rng = random.Random(SEED)
    names = [(_FILE.format(i % 40, i % 200), f"test_case_{i}") for i in range(tests)]
    flaky = {i: rng.uniform(0.02, 0.2) for i in rng.sample(range(tests), max(1, tests // 50))}
    broke_at, broken_test, import_test = reports // 2, tests - 1, tests - 2
    bad_pr = reports // 3
    out: list[tuple[Path, RunIdentity]] = []
    commit = 0
    while len(out) < reports:
        sha = f"{commit:08x}{SEED:08x}"
        pr = commit % 5 == 4
        event = "pull_request" if pr else "push"
        for attempt in (1, 2):
            body, failed_any = [], False
            for i, (file, name) in enumerate(names):
                if i in flaky and rng.random() < flaky[i]:
                    retried_ok = rng.random() >= flaky[i]
                    body.append(_case_xml(file, name, "passed" if retried_ok else "failed",
                                          f"AssertionError: accuracy {rng.random():.4f} below 0.85", reruns=1))
                    failed_any |= not retried_ok
                elif i == broken_test and len(out) >= broke_at:
                    body.append(_case_xml(file, name, "failed", f"AssertionError: expected 3, got {len(out)}"))
                    failed_any = True
                elif i == import_test and rng.random() < 0.1:
                    body.append(_case_xml(file, name, "failed", "ImportError: cannot import name 'X' from 'y'", 2))
                elif pr and commit == bad_pr and i % 10 == 0:
                    body.append(_case_xml(file, name, "failed", f"ValueError: shape mismatch {i}"))
                    failed_any = True
                else:
                    body.append(_case_xml(file, name, "passed"))
            path = directory / f"r{len(out):05d}.xml"
            path.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" time="1">'
                            + "".join(body) + "</testsuite></testsuites>", encoding="utf-8")
            ident = RunIdentity("bench/repo", sha, event if attempt == 1 else "rerun", "gpu_h100",
                                commit + 1 if pr else None, run_id=str(len(out)), attempt=attempt,
                                run_url=f"https://ci.example/runs/{len(out)}")
            out.append((path, ident))
            if not (pr and failed_any) or len(out) >= reports:
                break
        commit += 1
    return out


@contextlib.contextmanager
def postgres() -> Iterator[str | None]:
    """A real PostgreSQL server's URL, or None without pgserver."""
    try:
        import pgserver
    except ImportError:
        yield None
        return
    data = tempfile.mkdtemp(prefix="bench-history-pg-")
    server = pgserver.get_server(data, cleanup_mode="stop")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()
        shutil.rmtree(data, ignore_errors=True)


_PLAIN = ("CREATE TABLE plain_cases (node TEXT, report INTEGER, attempt INTEGER, outcome TEXT, kind TEXT, "
          "time {float}, retried INTEGER, fingerprint TEXT, message TEXT, error TEXT, infra TEXT)")


def plain_insert(store: Store, report_no: int, report: PreparedReport) -> None:
    rows = [(r.node, report_no, r.attempt, r.outcome, r.kind, r.time, int(r.retried), r.fingerprint, r.message,
             r.error, r.infra) for r in report.rows]
    with store.transaction():
        store.executemany(f"INSERT INTO plain_cases VALUES ({', '.join('?' * len(CASE_COLUMNS))})", rows)


def plain_copy(store: Store, report_no: int, report: PreparedReport) -> None:
    """PostgreSQL only: the same rows by binary COPY into the bare table (what our COPY costs
    without keys, indexes or node ids)."""
    with store.transaction(), store.conn.cursor() as cur:
        with cur.copy("COPY plain_cases FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["text", "int4", "int4", "text", "text", "float8", "int4", "text", "text", "text", "text"])
            for r in report.rows:
                copy.write_row((r.node, report_no, r.attempt, r.outcome, r.kind, r.time, int(r.retried),
                                r.fingerprint, r.message, r.error, r.infra))


class Clock:
    """Wall and this process's CPU seconds, summed over the calls it timed."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0

    def __call__(self, fn: Callable[[], Any]) -> Any:
        wall, cpu = time.perf_counter(), time.process_time()
        out = fn()
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu
        return out


def run(reports: int, tests: int) -> bool:
    work = Path(tempfile.mkdtemp(prefix="bench-history-"))
    try:
        start = time.perf_counter()
        history = write_history(work, reports, tests)
        print(f"{len(history)} reports x {tests} tests written in {time.perf_counter() - start:.1f} s (not timed)")
        with postgres() as pg_url:
            stores = {"SQLite": open_store(str(work / "history.sqlite"))}
            if pg_url:
                stores["PostgreSQL"] = open_store(pg_url)
            else:
                print("PostgreSQL: pgserver is not installed (pip install pgserver): its rows are left out")
            for store in stores.values():
                with store.transaction():
                    store.execute(store.dialect.ddl(_PLAIN)).close()
            return measure(history, stores)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure(history: list[tuple[Path, RunIdentity]], stores: dict[str, Store]) -> bool:
    print(f"load average before: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    rows = 0
    parse = Clock()
    steps = {name: {"plain": Clock(), "copy": Clock(), "ingest": Clock()} for name in stores}
    for number, (path, ident) in enumerate(history):
        report = parse(lambda: prepare(path, ident))
        rows += len(report.rows)
        for name, store in stores.items():
            steps[name]["ingest"](lambda: ingest(store, report))
            steps[name]["plain"](lambda: plain_insert(store, number, report))
            if name == "PostgreSQL":
                steps[name]["copy"](lambda: plain_copy(store, number, report))
    table = [["read + classify (ci.results.junit, ci.history.classify)", f"{parse.wall:.2f}", f"{parse.cpu:.2f}",
              f"{rows / parse.wall:,.0f}", ""]]
    for name, clocks in steps.items():
        base = clocks["plain"].wall
        labels = [("plain", "plain executemany INSERT, no keys (baseline)"),
                  ("copy", "plain binary COPY, no keys"), ("ingest", "ci.history ingest")]
        for key, label in labels:
            if clocks[key].wall:
                c = clocks[key]
                table.append([f"{name}: {label}", f"{c.wall:.2f}", f"{c.cpu:.2f}", f"{rows / c.wall:,.0f}",
                              f"{c.wall / base:.2f}"])
        total = parse.wall + clocks["ingest"].wall
        table.append([f"{name}: read + classify + ingest", f"{total:.2f}", "", f"{rows / total:,.0f}", ""])
    print(format_table(["step", "wall s", "CPU s (client)", "testcases/s (wall)", "x baseline time"], table,
                       f"ingest of {rows:,} testcase rows in {len(history)} reports, one transaction per report"))
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    ingest_s = {name: clocks["ingest"].wall for name, clocks in steps.items()}
    ok = all(rows / s >= GOAL_INGEST for s in ingest_s.values())
    print()
    table = []
    for name, store in stores.items():
        from ci.commands.flaky import main as flaky_main

        location = store.location
        found = flaky_scores(store)
        plain = best_of(lambda: store.fetchall("SELECT node, COUNT(*), SUM(CASE WHEN kind = 'fail' THEN 1 ELSE 0 END) "
                                               "FROM plain_cases GROUP BY node"), repeat=3, warmup=1)
        ours = best_of(lambda: flaky_scores(store), repeat=3, warmup=1)
        with contextlib.redirect_stdout(io.StringIO()):
            command = best_of(lambda: flaky_main(["--store", location, "--format", "json"]), repeat=3, warmup=1)
        table += [[f"{name}: plain SELECT ... GROUP BY node (baseline)", f"{plain:.3f}", "1.00", ""],
                  [f"{name}: ci.history.flaky.flaky_scores", f"{ours:.3f}", f"{ours / plain:.2f}", len(found)],
                  [f"{name}: python -m ci flaky --format json (in process)", f"{command:.3f}", f"{command / plain:.2f}",
                   ""]]
        ok &= command < GOAL_FLAKY_S
        store.close()
    print(format_table(["query", "s (best of 3)", "x baseline", "flaky found"], table, f"ci flaky over {rows:,} rows"))
    print(f"\ngoal ingest >= {GOAL_INGEST:,} testcases/s and ci flaky < {GOAL_FLAKY_S:.0f} s: "
          f"{'OK' if ok else 'MISSED'}")
    return ok


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    return 0 if run(60 if quick else 1_000, 400 if quick else 1_000) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
