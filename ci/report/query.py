"""Read what the HUD needs from a history store in one pass: the default branch's last runs, and
each report's results folded per test file.

Contract:
- `default_branch_runs` lists the reports of push and nightly events (of ``repo``, else of the
  repository that wrote the newest report) and groups them into runs: one run per (repo, sha,
  run id), in the order their first report was ingested; the last ``limit`` are returned.
- `file_results` is one grouped query per 500 reports (never one per cell): for each report and
  file, how many attempts passed, failed finally, failed and were retried, were broken, skipped,
  and the seconds they took (reruns included, as `ci durations` counts them).
- `default_branch_commits` groups those runs by commit: one per (repo, sha), in the order the
  commit's first report was ingested (the order the branch's history reached the store); the last
  ``limit`` commits are returned, each with its runs oldest first.
- `failure_lines` is one query per 500 reports: every failed or broken attempt of those reports
  (retried ones too), with its test's node id and its error line: the store's meaningful error
  line (`ci.history.errors.error_line`, schema 2 on) where it has one, else its message's first
  line; its signature and infra kind (schema 2 on; "" before); and its report's runner.
- `commit_authors` is who pushed each default-branch commit (schema 2 on; empty before).
- Reads only; never creates or migrates a store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ci.history.model import DEFAULT_BRANCH_EVENTS
from ci.history.store import Store

_CHUNK = 500


@dataclass(frozen=True)
class ReportRow:
    """One stored report's identity, as the HUD reads it."""

    id: int
    repo: str
    sha: str
    pr: int | None
    event: str
    tier: str
    run_id: str
    attempt: int
    run_url: str
    ingested_at: str


@dataclass(frozen=True)
class RunReports:
    """The reports of one run, oldest first."""

    key: tuple[str, str, str]
    reports: tuple[ReportRow, ...]


@dataclass(frozen=True)
class FileResult:
    """One file's attempts in one report, counted by kind."""

    report_id: int
    file: str
    passed: int
    failed: int       # final attempts that failed
    retried: int      # attempts that failed and were retried
    broken: int       # final attempts that were broken
    skipped: int
    attempts: int
    time: float


@dataclass(frozen=True)
class CommitRuns:
    """Every run of one commit of the default branch, oldest first."""

    sha: str
    runs: tuple[RunReports, ...]


@dataclass(frozen=True)
class FailureLine:
    """One failed or broken attempt: its report, file and node, whether it was the final attempt
    (not retried), and its message's first line (at most `MESSAGE_CHARS` characters)."""

    report_id: int
    file: str
    node: str
    final: bool
    message: str
    fingerprint: str = ""
    infra: str = ""
    runner: str = ""


MESSAGE_CHARS = 300
VERDICT_SCHEMA = 2  # the store's schema that holds authors, error lines, infra kinds and verdicts' inputs


def has_verdicts(store: Store) -> bool:
    """Whether the store's schema holds what `ci.history.verdict` reads (an older store is read as
    it is: the HUD never migrates)."""
    return store.schema_version() >= VERDICT_SCHEMA

_REPORT_COLUMNS = "id, repo, sha, pr, event, tier, run_id, attempt, run_url, ingested_at"


def _report(row: tuple) -> ReportRow:
    rid, repo, sha, pr, event, tier, run_id, attempt, url, seen = row
    return ReportRow(int(rid), repo, sha, None if pr is None else int(pr), event, tier, run_id, int(attempt),
                     url, seen)


def newest_repo(store: Store) -> str | None:
    """The repository of the newest report, or None for an empty store."""
    rows = store.fetchall("SELECT repo FROM reports ORDER BY id DESC LIMIT 1")
    return rows[0][0] if rows else None


def default_branch_runs(store: Store, repo: str, limit: int) -> list[RunReports]:
    """The last ``limit`` runs of the default branch of ``repo``, oldest first."""
    marks = ", ".join("?" * len(DEFAULT_BRANCH_EVENTS))
    rows = store.fetchall(f"SELECT {_REPORT_COLUMNS} FROM reports WHERE repo = ? AND event IN ({marks}) ORDER BY id",
                          (repo, *DEFAULT_BRANCH_EVENTS))
    runs: dict[tuple[str, str, str], list[ReportRow]] = {}
    for row in rows:
        report = _report(row)
        runs.setdefault((report.repo, report.sha, report.run_id), []).append(report)
    ordered = [RunReports(key, tuple(reports)) for key, reports in runs.items()]
    return ordered[-limit:] if limit else ordered


def default_branch_commits(store: Store, repo: str, limit: int) -> list[CommitRuns]:
    """The last ``limit`` commits of the default branch of ``repo`` that have runs, oldest first."""
    commits: dict[str, list[RunReports]] = {}
    for run in default_branch_runs(store, repo, 0):
        commits.setdefault(run.key[1], []).append(run)
    ordered = [CommitRuns(sha, tuple(runs)) for sha, runs in commits.items()]
    return ordered[-limit:] if limit else ordered


def first_line(message: str) -> str:
    """The first non-blank line of ``message``, stripped, cut to `MESSAGE_CHARS` characters."""
    for line in message.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 1] + "…"
    return ""


_FAILURES = """SELECT c.report_id, n.file, n.node, c.retried, c.message, {extra}, r.runner
    FROM cases c JOIN nodes n ON n.id = c.node_id JOIN reports r ON r.id = c.report_id
    WHERE c.report_id IN ({marks}) AND c.kind IN ('fail', 'broken')"""


def failure_lines(store: Store, report_ids: Sequence[int]) -> list[FailureLine]:
    """Every failed or broken attempt in ``report_ids`` (see the module docstring)."""
    out: list[FailureLine] = []
    ids = sorted(set(report_ids))
    extra = "c.error, c.fingerprint, c.infra" if ids and has_verdicts(store) else "'', c.fingerprint, ''"
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        for rid, file, node, retried, message, error, fingerprint, infra, runner in store.fetchall(
                _FAILURES.format(extra=extra, marks=", ".join("?" * len(chunk))), chunk):
            out.append(FailureLine(int(rid), file, node, not retried, first_line(error or message or ""),
                                   fingerprint or "", infra or "", runner or ""))
    return out


def commit_authors(store: Store, repo: str) -> dict[str, str]:
    """sha -> the author of its newest default-branch report that names one (see the module docstring)."""
    if not has_verdicts(store):
        return {}
    marks = ", ".join("?" * len(DEFAULT_BRANCH_EVENTS))
    return {sha: author for sha, author in store.fetchall(
        f"SELECT sha, author FROM reports WHERE repo = ? AND event IN ({marks}) AND author <> '' ORDER BY id",
        (repo, *DEFAULT_BRANCH_EVENTS))}


def pull_request_reports(store: Store, repo: str, pr: int) -> list[ReportRow]:
    """Every report of pull request ``pr`` of ``repo``, oldest first."""
    return [_report(r) for r in store.fetchall(
        f"SELECT {_REPORT_COLUMNS} FROM reports WHERE repo = ? AND pr = ? ORDER BY id", (repo, pr))]


_FILE_RESULTS = """SELECT c.report_id, n.file,
    SUM(CASE WHEN c.kind = 'pass' THEN 1 ELSE 0 END),
    SUM(CASE WHEN c.kind = 'fail' AND c.retried = 0 THEN 1 ELSE 0 END),
    SUM(CASE WHEN c.kind = 'fail' AND c.retried = 1 THEN 1 ELSE 0 END),
    SUM(CASE WHEN c.kind = 'broken' AND c.retried = 0 THEN 1 ELSE 0 END),
    SUM(CASE WHEN c.kind = 'skip' THEN 1 ELSE 0 END),
    COUNT(*), SUM(c.time)
    FROM cases c JOIN nodes n ON n.id = c.node_id
    WHERE c.report_id IN ({marks})
    GROUP BY c.report_id, n.file"""


def file_results(store: Store, report_ids: Sequence[int]) -> list[FileResult]:
    """Every (report, file) of ``report_ids``, its attempts counted by kind (see the module docstring)."""
    out: list[FileResult] = []
    ids = sorted(set(report_ids))
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        for rid, file, passed, failed, retried, broken, skipped, attempts, time in store.fetchall(
                _FILE_RESULTS.format(marks=", ".join("?" * len(chunk))), chunk):
            out.append(FileResult(int(rid), file, int(passed), int(failed), int(retried), int(broken), int(skipped),
                                  int(attempts), float(time or 0.0)))
    return out
