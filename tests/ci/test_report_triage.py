"""The HUD's triage: rows failing now come first, with the commit their failure streak began at;
one column per commit (runs at one commit merged); failure text per cell; the pull request's
failing tests first. On SQLite and PostgreSQL, against tests/ci/report_triage_support.py's
history, whose every expectation is written out by hand there; and `triage` on hand-picked rows.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ci.history.ingest import PreparedReport, ingest, report_key
from ci.history.model import CaseRow, RunIdentity
from ci.history.store import open_store
from ci.registry import load_registry
from ci.report.grid import column_head, forge_base
from ci.report.model import Report, Run
from ci.report.query import (FailureLine, commit_authors, default_branch_commits, failure_lines, first_line,
                             has_verdicts)
from ci.report.triage import Triage, days_between, triage
from ci.report.verdicts import CellFailure, judge_cells, pull_verdicts
from ci.selection.plan import plan
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.report_support import built_report, known_store
from tests.ci.report_triage_support import (AUTHORS, BASE, EXPECTED, HOSTILE, MERGED_PR, ORDER, PR, PR_SHAS, REPO, SHAS,
                                            build_history, write_repo)


@pytest.mark.parametrize(("cells", "expected"), [
    ([], Triage("ok")),
    (["not-run", "quarantined", "manual", "skipped"], Triage("ok")),
    (["pass", "fail", "pass", "fail", "not-run", "fail"], Triage("failing", 3, 2, 5)),  # a pass ends the streak
    (["fail", "fail"], Triage("failing", 0, 2, 1)),
    (["broken"], Triage("failing", 0, 1, 0)),
    (["fail", "skipped", "not-run"], Triage("failing", 0, 1, 0)),  # no result after it: still failing
    (["flaky", "fail"], Triage("failing", 1, 1, 1)),  # a flaky cell passed in the end: it ends the streak
    (["fail", "broken", "fail"], Triage("failing", 0, 3, 2)),
    (["fail", "pass"], Triage("flaky")),
    (["flaky"], Triage("flaky")),
    (["fail"] + ["pass"] * 10, Triage("ok")),  # the failure is 11 columns back: out of the recent 10
    (["pass", "fail"] + ["pass"] * 9, Triage("flaky")),  # ... and 10 back is in
])
def test_triage_of_hand_picked_rows(cells: list[str], expected: Triage) -> None:
    assert triage(cells) == expected


def test_days_between() -> None:
    assert days_between("2026-12-01T00:00:00+00:00", "2026-12-03T12:00:00+00:00") == 2.5
    assert days_between("2026-12-03T00:00:00+00:00", "2026-12-01T00:00:00+00:00") == 0.0
    assert days_between("", "2026-12-01T00:00:00+00:00") == days_between("x", "y") == 0.0


def test_first_line() -> None:
    assert first_line("\n  \n  AssertionError: x  \nmore") == "AssertionError: x"
    assert first_line("") == ""
    assert first_line("y" * 300) == "y" * 300 and first_line("y" * 301) == "y" * 299 + "…"


@pytest.fixture
def known(store_location: str, tmp_path: Path) -> tuple[str, Path]:
    return known_store(store_location, tmp_path, write_repo, build_history)


def _report(location: str, registry_path: Path, **kw: object) -> Report:
    return built_report(location, registry_path, None, **kw)


def test_one_column_per_commit_and_breakage_first(known: tuple[str, Path]) -> None:
    report = _report(*known)
    assert report.repo == REPO
    assert [r.sha for r in report.runs] == SHAS  # c5's two runs are one column
    c5 = report.runs[5]
    assert (c5.runs, c5.run_id, c5.url) == (2, "55", f"{BASE}/actions/runs/55")  # the newest run's link
    assert [r.runs for r in report.runs] == [1] * 5 + [2, 1, 1]
    assert [r.author for r in report.runs] == AUTHORS
    assert [r.pr for r in report.runs] == [None] * 6 + [MERGED_PR, None]
    assert [(r.tier, r.file) for r in report.rows] == ORDER
    assert {(r.tier, r.file): list(r.cells) for r in report.rows} == EXPECTED
    assert [r.state for r in report.rows] == ["failing", "failing", "flaky", "flaky", "ok", "ok"]
    rows = {(r.tier, r.file): r for r in report.rows}
    zz, new = rows[("gpu_b200", "tests/test_zz.py")], rows[("cpu", "tests/test_new_break.py")]
    assert (zz.since, zz.streak, new.since, new.streak) == (3, 4, 7, 1)
    assert rows[("cpu", "tests/test_flip.py")].since == -1
    # attempts: only the rows that merged two at one commit carry them
    assert rows[("cpu", "tests/test_ab.py")].attempts == (1, 1, 1, 1, 1, 2, 1, 1)
    assert zz.attempts == (1, 1, 1, 1, 0, 2, 1, 1) and rows[("cpu", "tests/test_aa.py")].attempts == (1,) * 5 + (2, 1, 1)


def test_failure_text_per_cell(known: tuple[str, Path]) -> None:
    rows = {(r.tier, r.file): r for r in _report(*known).rows}
    zz = rows[("gpu_b200", "tests/test_zz.py")]
    assert [f.run for f in zz.failures] == [1, 3, 5, 6, 7]
    last = zz.failures[-1]
    # two tests failed; the first by node id is test_x; the message is its first line only
    assert (last.node, last.message, last.failed) == ("tests/test_zz.py::test_x", HOSTILE.split("\n")[0], 2)
    # the latest failure of a row failing now has the verdict of ci.history.verdict; older ones none
    assert last.verdict.startswith(f"broken on main since {SHAS[3][:7]} (") and f"last passed at {SHAS[2][:7]}" in last.verdict
    assert [f.verdict for f in zz.failures[:-1]] == [""] * 4
    new = rows[("cpu", "tests/test_new_break.py")].failures
    assert len(new) == 1 and new[0].verdict.startswith(f"broken on main since {SHAS[7][:7]} (")
    ab = rows[("cpu", "tests/test_ab.py")].failures
    assert [(f.run, f.node, f.message, f.failed) for f in ab] == [
        (5, "tests/test_ab.py::test_x", "AssertionError: first try", 1)]  # the flaky cell says what failed first
    assert rows[("cpu", "tests/test_aa.py")].failures == ()


def test_the_last_n_commits(known: tuple[str, Path]) -> None:
    report = _report(*known, runs=3)
    assert [r.sha for r in report.runs] == SHAS[5:]
    zz = next(r for r in report.rows if r.file == "tests/test_zz.py")
    assert (zz.since, zz.streak) == (0, 3)  # as far back as shown


def test_pull_request_view_puts_failing_then_selected_first(known: tuple[str, Path]) -> None:
    location, registry_path = known
    registry = load_registry(registry_path)
    changed = ["tests/test_ac.py"]
    pr_plans = [plan(registry, t, changed) for t in registry.tiers]
    pull = _report(location, registry_path, pr=PR, pr_plans=pr_plans, changed=changed).pull
    assert pull is not None and pull.sha == PR_SHAS[1]
    got = [(t.tier, t.file, t.status, t.selected) for t in pull.tests]
    assert got[:2] == [("cpu", "tests/test_ab.py", "fail", False), ("cpu", "tests/test_ac.py", "not-run", True)]
    assert {t.status for t in pull.tests[2:]} <= {"pass", "not-run"} and not any(t.selected for t in pull.tests[2:])
    failure = pull.tests[0].failure
    assert failure is not None and (failure.node, failure.message) == ("tests/test_ab.py::test_x",
                                                                        "AssertionError: pr broke it")
    assert failure.verdict.startswith("new: probably this change's"), failure.verdict
    assert all(t.failure is None for t in pull.tests[1:])


class _Head(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self.text: list[str] = []
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href") or ""

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._href is not None:
            self.links.append((self._href, data))
            self._href = None


def _head(run: Run) -> _Head:
    parsed = _Head()
    parsed.feed(column_head(run, Counter([run.sha])))
    return parsed


def test_a_column_header_links_commit_author_and_pull_request() -> None:
    run = Run(0, "abcdef0123", "push", "7", f"{BASE}/actions/runs/7", "", author="<b>ann</b>", pr=12)
    head = _head(run)
    assert head.links == [(f"{BASE}/commit/abcdef0123", "abcdef0"), (f"{BASE}/pull/12", "#12")]
    assert "<b>ann</b>" in head.text  # escaped: the author is text, not markup
    assert f'data-run="{BASE}/actions/runs/7"' in column_head(run, Counter([run.sha]))
    # a run URL that is not GitHub-style: the sha links to the run, the pull request is text
    plain = _head(Run(0, "abcdef0123", "push", "7", "https://ci.example/run/7", "", pr=12))
    assert plain.links == [("https://ci.example/run/7", "abcdef0")] and "#12" in plain.text
    # an unsafe URL links nothing at all, and gives a cell nothing to open
    evil = Run(0, "abcdef0123", "push", "7", "javascript:alert(1)//actions/runs/7", "", pr=12)
    assert _head(evil).links == [] and "data-run" not in column_head(evil, Counter([evil.sha]))
    assert forge_base("https://h/o/n/actions/runs/1") == "https://h/o/n" and forge_base("https://h/o/n/run/1") == ""


def test_a_store_older_than_the_verdicts_is_read_without_them(tmp_path: Path) -> None:
    """A schema-1 store (no author, error or infra columns; as a store last written before
    migration 2 is): the HUD's own reads give the failure text from the message, no authors and
    no verdicts, and leave the store at schema 1 (the HUD never migrates). (`build_report` as a
    whole also reads `ci.history.flaky`, which needs schema 2: `ci history ingest` migrates.)"""
    location, _ = known_store(str(tmp_path / "old.sqlite"), tmp_path, write_repo, build_history)
    with sqlite3.connect(location) as db:
        for statement in ("DROP INDEX cases_infra", "ALTER TABLE cases DROP COLUMN infra", "ALTER TABLE cases DROP COLUMN error",
                          "ALTER TABLE reports DROP COLUMN author", "ALTER TABLE reports DROP COLUMN base_sha",
                          "ALTER TABLE reports DROP COLUMN scored", "DELETE FROM schema_version WHERE version > 1"):
            db.execute(statement)
    with open_store(location, create=False) as store:
        assert not has_verdicts(store)
        ids = [r.id for c in default_branch_commits(store, REPO, 0) for run in c.runs for r in run.reports]
        lines = [(line.node, line.message, line.fingerprint != "") for line in failure_lines(store, ids)
                 if line.node == "tests/test_zz.py::test_x"]
        # the message's first line (as the store keeps it: this store's ingest wrote numbers as <n>)
        assert len(lines) == 6 and lines[-1] == ("tests/test_zz.py::test_x",
                                                 '<img src=x onerror="window.__pwned=<n>"> **boom** `x`', True)
        assert commit_authors(store, REPO) == {}
        assert judge_cells(store, REPO, [CellFailure("gpu_b200", SHAS[7], failure_lines(store, ids)[0], 1)]) == [""]
        assert pull_verdicts(store, REPO, PR) == {}
    with sqlite3.connect(location) as db:
        assert db.execute("SELECT MAX(version) FROM schema_version").fetchone() == (1,)


def test_the_reported_case_a_late_tier_breakage_among_hundreds_of_green_rows(tmp_path: Path) -> None:
    """The issue's history, scaled down: 100 files x 4 tiers x 40 nightly commits, all green but
    the last file of the last tier (row 400 of 400 in the registry's order), which breaks at commit
    35. Sorted by tier and path it was the last row; now it is the first, failing since commit 35
    with 5 failing runs, and it is the only row a hide-green page keeps."""
    tiers, files, commits = ("cpu", "gpu_h100", "gpu_h200", "gpu_b200"), 100, 40
    paths = [f"tests/t/test_{i:03d}.py" for i in range(files)]
    lines = ["version: 1", "tiers:"] + [f"  {t}: {{description: {t}, runner_labels: [{t}], gpu_count: 0, arch: cpu}}"
                                       for t in tiers] + ["tests:"]
    lines += [f"  {p}: {{tiers: [{', '.join(tiers)}], est_time: 1, owner: '@o', status: active}}" for p in paths]
    (tmp_path / "registry.yaml").write_text("\n".join(lines) + "\n")
    location = str(tmp_path / "h.sqlite")
    shas = [f"{i:040x}" for i in range(1, commits + 1)]
    with open_store(location) as store:
        for c, sha in enumerate(shas):
            for tier in tiers:
                rows = tuple(CaseRow(f"{p}::test_x", p, 0, "failed", "fail", 0.1, False, "fp", "AssertionError: broke")
                             if (tier, p, c >= 35) == ("gpu_b200", paths[-1], True)
                             else CaseRow(f"{p}::test_x", p, 0, "passed", "pass", 0.1, False) for p in paths)
                ident = RunIdentity(REPO, sha, "nightly", tier, run_id=str(c))
                digest = hashlib.sha256(f"{c}/{tier}".encode()).hexdigest()
                ingest(store, PreparedReport(f"{c}-{tier}.xml", ident, digest, report_key(digest, ident), files, rows))
    report = _report(location, tmp_path / "registry.yaml", runs=commits)
    assert len(report.rows) == 400 and len(report.runs) == commits
    first = report.rows[0]
    assert (first.tier, first.file, first.state, first.since, first.streak) == ("gpu_b200", paths[-1], "failing", 35, 5)
    assert report.runs[first.since].sha == shas[35]
    assert [r.state for r in report.rows[1:]] == ["ok"] * 399


def test_the_hud_does_not_call_one_failed_run_of_a_known_flake_broken(tmp_path: Path) -> None:
    """The matrix's verdict is judge's: a flake (every third push fails once, one flip keeps its
    signature) whose newest push failed both attempts is flaky there, not broken since that push."""
    from ci.history.classify import signature
    from ci.history.ingest import prepare
    from tests.ci.history_support import Case, write_report

    node_file, boom = "tests/srt/test_x.py", "AssertionError: expected 3 tokens, got 4"

    def case(attempts: str) -> Case:  # "p": passed; "fp": failed, passed on retry; "ff": failed both
        if attempts == "p":
            return Case(node_file, "test_a")
        return Case(node_file, "test_a", "passed" if attempts == "fp" else "failed", boom, f"E   {boom}", reruns=1)

    shas = [f"{i:04x}{'a' * 36}" for i in range(13)]
    with open_store(str(tmp_path / "h.sqlite")) as store:
        for i, sha in enumerate(shas):
            plan_ = "ff" if i in (4, 12) else "fp" if i % 3 == 0 else "p"
            ingest(store, prepare(write_report(tmp_path, [case(plan_)]), RunIdentity(REPO, sha, "push", "gpu_h100")))
        line = FailureLine(0, node_file, f"{node_file}::test_a", True, boom, signature(boom)[0])
        (detail,) = judge_cells(store, REPO, [CellFailure("gpu_h100", shas[12], line, 2)])
    assert detail.startswith("flaky: the same failure as its earlier flakes"), detail
