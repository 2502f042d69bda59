"""Ingest JUnit reports into a history store: idempotent, one transaction per report.

Contract:
- `prepare` reads one report with `ci.results.junit.parse_junit` (the one JUnit reader, with its
  refusals: unreadable XML, impossible times), checks the run identity and that no two testcases
  give one test id; any problem raises
  `JUnitError` or `ValueError` before the store is touched. `prepare_all` prepares every report
  first, so one bad report in a batch writes nothing at all.
- A report's key is the SHA-256 of its bytes and of its run identity. `ingest` writes the report
  row, its nodes and every attempt in one transaction; when the key is already stored it writes
  nothing and says so (``added=False``). Two ingesters of the same report at once: one adds it, the
  other finds it (the key is UNIQUE; the second waits for the first's transaction).
- Every attempt is a row: pytest-rerunfailures' reruns are stored with ``retried`` set and the
  kind `ci.history.classify.kind_of` gives them, so a retry is never mistaken for a clean pass. A
  retried attempt with its own text (`ci.pytest_attempts`) gets its error line, signature and
  infra cause exactly as a final failure does.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable, Sequence

from ci.history.classify import is_broken, kind_of, quarantined_failure, signature
from ci.history.errors import error_line, infra_kind
from ci.history.model import BROKEN, FAIL, CaseRow, IngestResult, RunIdentity
from ci.history.store import Store, now
from ci.results.junit import ERROR, FAILED, CaseResult, JUnitError, parse_junit

_NODE_CHUNK = 500


@dataclass(frozen=True)
class PreparedReport:
    """A report read and checked, ready to write: nothing about it can fail but the store."""

    source: str
    identity: RunIdentity
    content_hash: str
    report_key: str
    cases: int
    rows: tuple[CaseRow, ...]


def node_id(case: CaseResult) -> str:
    """pytest's node id from a JUnit case: ``file::Class::name`` (the classname's part after
    the module), or ``classname::name`` when the file is unknown. pytest writes the module
    relative to its rootdir (``registered.a.test_x`` for ``test/registered/a/test_x.py`` run
    with ``test/pytest.ini``), so the module is the longest tail of the file's dotted path that
    starts the classname."""
    if not case.file:
        return f"{case.classname}::{case.name}" if case.classname else case.name
    if not case.classname:
        return case.file
    dotted = case.file[:-3].split("/") if case.file.endswith(".py") else [case.file]
    inner = case.classname
    for cut in range(len(dotted)):
        module = ".".join(dotted[cut:])
        if case.classname == module:
            return f"{case.file}::{case.name}"
        if case.classname.startswith(module + "."):
            inner = case.classname[len(module) + 1:]
            break
    return f"{case.file}::{inner.replace('.', '::')}::{case.name}"


def case_rows(case: CaseResult) -> list[CaseRow]:
    """One `CaseRow` per attempt of ``case`` (all but the last are retried)."""
    attempts = case.attempts
    final_broken = is_broken(attempts[-1], case.classname)
    last = quarantined_failure(attempts[-1]) or attempts[-1]
    final_infra = infra_kind(last) if last.outcome in (FAILED, ERROR) else ""
    node = node_id(case)
    if "\x00" in node:
        raise ValueError(f"test id {node!r} holds a NUL character")
    rows = []
    for index, attempt in enumerate(attempts):
        retried = index < len(attempts) - 1
        kind = kind_of(attempt, case.classname, retried=retried, final_broken=final_broken)
        failed = kind in (FAIL, BROKEN)
        shown = (quarantined_failure(attempt) or attempt) if failed else None
        error, infra = (error_line(shown), infra_kind(shown)) if shown is not None else ("", "")
        fp, text = signature(error)  # what `fingerprint(attempt)` is, without reading the text twice
        if failed and retried and not (attempt.message or attempt.detail):
            infra = final_infra  # a rerun attempt with no text of its own (no `ci.pytest_attempts`): as the last
        rows.append(CaseRow(node, case.file, index, attempt.outcome, kind, attempt.time, retried, fp,
                            text.replace("\x00", "\ufffd"), error.replace("\x00", "\ufffd"), infra))
    return rows


# Identity fields added after reports were first keyed: left out of the key at their default, so a
# report ingested before they existed keeps its key (and is not stored twice).
_LATER_FIELDS = {"author": "", "base_sha": "", "scored": True, "batch": ()}


def report_key(content_hash: str, identity: RunIdentity) -> str:
    ident = {k: v for k, v in asdict(identity).items() if k not in _LATER_FIELDS or v != _LATER_FIELDS[k]}
    payload = json.dumps([content_hash, ident], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(payload.encode()).hexdigest()


def prepare(path: str | Path, identity: RunIdentity, *, root: str | Path | None = None,
            known_files: Iterable[str] = ()) -> PreparedReport:
    """Read, check and turn one report into rows; raises `JUnitError` / `ValueError`."""
    identity.check()
    identity = replace(identity, sha=identity.sha.lower())
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise JUnitError(f"{path}: cannot read JUnit XML: {exc.strerror or exc}") from exc
    report = parse_junit(path, root=root, known_files=known_files)
    digest = hashlib.sha256(data).hexdigest()
    rows = tuple(row for case in report.cases for row in case_rows(case))
    seen: set[tuple[str, int]] = set()
    for row in rows:
        if (row.node, row.attempt) in seen:
            raise JUnitError(f"{path}: two testcases give one test id {row.node!r} (different classes or "
                             "files that read the same); refusing the report")
        seen.add((row.node, row.attempt))
    return PreparedReport(str(path), identity, digest, report_key(digest, identity), len(report.cases), rows)


def prepare_all(paths: Sequence[str | Path], identity: RunIdentity, *, root: str | Path | None = None,
                known_files: Iterable[str] = ()) -> list[PreparedReport]:
    """`prepare` every report; the first problem raises, before anything is written."""
    known = list(known_files)
    return [prepare(p, identity, root=root, known_files=known) for p in paths]


_INSERT_REPORT = """INSERT INTO reports (report_key, content_hash, source, repo, sha, pr, event, tier, runner,
    shard, run_id, attempt, run_url, cases, attempts, ingested_at, author, base_sha, scored, batch)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (report_key) DO NOTHING RETURNING id"""


def ingest(store: Store, report: PreparedReport) -> IngestResult:
    """Write ``report`` in one transaction (nothing if it is already stored)."""
    ident = report.identity
    with store.transaction():
        cur = store.execute(_INSERT_REPORT, (
            report.report_key, report.content_hash, Path(report.source).name, ident.repo, ident.sha,
            ident.pr, ident.event, ident.tier, ident.runner, ident.shard, ident.run_id, ident.attempt,
            ident.run_url, report.cases, len(report.rows), now(), ident.author, ident.base_sha.lower(),
            int(ident.scored), " ".join(str(n) for n in ident.batch)))
        inserted = cur.fetchall()
        cur.close()
        if not inserted:
            return IngestResult(report.source, report.report_key, False, report.cases, len(report.rows))
        report_id = int(inserted[0][0])
        ids = _node_ids(store, {row.node: row.file for row in report.rows})
        store.insert_cases([(ids[r.node], report_id, r.attempt, r.outcome, r.kind, r.time, int(r.retried),
                             r.fingerprint, r.message, r.error, r.infra) for r in report.rows])
    store.node_ids.update(ids)  # committed now: safe to remember
    return IngestResult(report.source, report.report_key, True, report.cases, len(report.rows))


def _node_ids(store: Store, files: dict[str, str]) -> dict[str, int]:
    """Ids of every node in ``files`` ({node: file}), inserting the new ones (in sorted order, so
    two PostgreSQL transactions inserting the same new nodes cannot deadlock). Nodes this
    connection saw committed come from `Store.node_ids` without a query."""
    known = store.node_ids
    ids = {n: known[n] for n in files if n in known}
    names = sorted(n for n in files if n not in ids)
    for start in range(0, len(names), _NODE_CHUNK):
        chunk = names[start:start + _NODE_CHUNK]
        marks = ", ".join("?" * len(chunk))
        ids.update((n, int(i)) for i, n in store.fetchall(f"SELECT id, node FROM nodes WHERE node IN ({marks})", chunk))
    missing = [n for n in names if n not in ids]
    if missing:
        store.executemany("INSERT INTO nodes (node, file) VALUES (?, ?) ON CONFLICT (node) DO NOTHING",
                          [(n, files[n]) for n in missing])
        for start in range(0, len(missing), _NODE_CHUNK):
            chunk = missing[start:start + _NODE_CHUNK]
            marks = ", ".join("?" * len(chunk))
            ids.update((n, int(i)) for i, n in
                       store.fetchall(f"SELECT id, node FROM nodes WHERE node IN ({marks})", chunk))
    return ids
