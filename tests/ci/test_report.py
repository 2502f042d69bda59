"""`ci report`: the HUD's data on a history whose every cell, rank and bar is known
(tests/ci/report_support.py), on SQLite and PostgreSQL; its escaping; its JSON; its command.

The oracles are independent of the code: the expected matrix, durations and bars are written
out by hand from the fixture's story, and the flaky intervals come from scipy's Beta quantiles.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import beta

from ci.__main__ import main as ci_main
from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from ci.registry import load_registry
from ci.report.build import cell
from ci.report.html import render, run_label
from ci.report.model import DurationRow, FileRow, FlakyRow, Report, Run
from ci.report.query import FileResult
from ci.report.write import write_report
from ci.selection.plan import plan
from tests.ci.history_support import Case, pg_server, store_location  # noqa: F401 (fixtures)
from tests.ci.history_support import write_report as write_junit
from tests.ci.report_support import (EVIL_FILE, EVIL_NAME, EXPECTED, PR, PR_SHA, REPO, RUNS, build_history, built_report,
                                     known_store, write_repo)


@pytest.fixture
def known(store_location: str, tmp_path: Path) -> tuple[str, Path]:
    return known_store(store_location, tmp_path, write_repo, build_history)


def _report(location: str, registry_path: Path, **kw: object) -> Report:
    return built_report(location, registry_path, **kw)


def test_matrix_holds_the_known_history(known: tuple[str, Path]) -> None:
    report = _report(*known)
    assert report.repo == REPO
    assert [r.url for r in report.runs] == [f"https://ci.example/run/{i}" for i in range(RUNS)]
    assert [r.run_id for r in report.runs] == [str(100 + i) for i in range(RUNS)]
    assert {(r.tier, r.file): list(r.cells) for r in report.rows} == EXPECTED
    # failing now first (the unregistered file fails in the last run), then flaky in the last 10
    # runs (a, b on cpu), then the rest in the registry's order of tiers, then paths
    assert [(r.tier, r.file, r.state) for r in report.rows] == [
        ("cpu", EVIL_FILE, "failing"), ("cpu", "tests/test_a.py", "flaky"), ("cpu", "tests/test_b.py", "flaky"),
        ("cpu", "tests/test_c.py", "ok"), ("cpu", "tests/test_e.py", "ok"), ("gpu_h100", "tests/test_b.py", "ok"),
        ("gpu_h100", "tests/test_d.py", "ok")]
    assert report.rows[0].registry_status == "unregistered"
    assert (report.rows[0].since, report.rows[0].streak) == (RUNS - 1, 1)
    # the failing cell's text: the failing test and its message's first line
    assert [(f.run, f.node, f.message, f.failed) for f in report.rows[0].failures] == [
        (RUNS - 1, f"{EVIL_FILE}::{EVIL_NAME}", "AssertionError: <b>bold</b>", 1)]


def test_runs_are_the_last_n(known: tuple[str, Path]) -> None:
    report = _report(*known, runs=2)
    assert [r.url for r in report.runs] == ["https://ci.example/run/4", "https://ci.example/run/5"]
    assert {(r.tier, r.file): list(r.cells) for r in report.rows}[("cpu", "tests/test_a.py")] == ["flaky", "pass"]


def test_flaky_ranked_with_intervals_from_scipy(known: tuple[str, Path]) -> None:
    report = _report(*known)
    # test_wobble: 9 trials (runs 1, 3, 5 fail then pass; runs 0, 2, 4 pass), 3 failures;
    # test_one: 7 trials (the flip in run 2, two attempts in run 4), 2 failures.
    got = [(f.rank, f.node, f.owner, f.failures, f.trials) for f in report.flaky]
    assert got == [(1, "tests/test_b.py::test_wobble", "@beta", 3, 9), (2, "tests/test_a.py::test_one", "@alpha", 2, 7)]
    for f, (a, b) in zip(report.flaky, [(3.5, 6.5), (2.5, 5.5)]):
        assert f.score == pytest.approx(a / (a + b))
        assert (f.low, f.high) == pytest.approx((beta.ppf(0.05, a, b), beta.ppf(0.95, a, b)), rel=1e-9)
    assert report.flaky[0].examples == ("https://ci.example/run/5", "https://ci.example/run/3", "https://ci.example/run/1")


def test_durations_against_the_registry(known: tuple[str, Path]) -> None:
    rows = {(d.tier, d.file): d for d in _report(*known).durations}
    a = rows[("cpu", "tests/test_a.py")]
    assert (a.samples, a.p50, a.p90, a.est_time, a.timeout, a.drift, a.over_timeout) == (6, 10.0, 40.0, 10, 60, True, False)
    b = rows[("cpu", "tests/test_b.py")]
    assert (b.p50, b.p90, b.drift) == (1.0, 1.5, False)  # 0.5 + 0.5, and 1.5 with a rerun attempt
    assert not rows[("cpu", "tests/test_e.py")].drift
    assert ("gpu_h100", "tests/test_b.py") not in rows  # every test skipped: no sample


def test_plan_timeline_bars(known: tuple[str, Path]) -> None:
    cpu = _report(*known).plans[0]
    assert (cpu.tier, cpu.makespan, cpu.lower_bound, cpu.selected, cpu.not_run) == ("cpu", 10, 10, 3, 1)
    lanes = [[(b.file, b.start, b.length) for b in lane.bars] for lane in cpu.shards]
    assert lanes == [[("tests/test_a.py", 0, 10)], [("tests/test_e.py", 0, 7), ("tests/test_b.py", 7, 2)]]


def test_pull_request_view(known: tuple[str, Path]) -> None:
    location, registry_path = known
    registry = load_registry(registry_path)
    changed = ["tests/test_a.py", "tests/test_b.py"]
    pr_plans = [plan(registry, t, changed) for t in registry.tiers]
    report = _report(location, registry_path, pr=PR, pr_plans=pr_plans, changed=changed)
    assert report.pull is not None and (report.pull.pr, report.pull.sha) == (PR, PR_SHA)
    got = {(t.tier, t.file): (t.selected, t.status, t.rerun) for t in report.pull.tests}
    assert got[("cpu", "tests/test_a.py")] == (True, "pass", "")
    assert got[("cpu", "tests/test_b.py")] == (True, "not-run", "/rerun-test tests/test_b.py --tier cpu")
    assert got[("gpu_h100", "tests/test_b.py")] == (True, "not-run", "/rerun-test tests/test_b.py --tier gpu_h100")
    assert got[("cpu", "tests/test_e.py")] == (False, "not-run", "/rerun-test tests/test_e.py --tier cpu")
    assert got[("cpu", "tests/test_c.py")] == (False, "quarantined", "")  # the bot refuses inactive files
    assert got[("gpu_h100", "tests/test_d.py")] == (False, "manual", "")
    why = {(t.tier, t.file): t.why for t in report.pull.tests}
    assert why[("cpu", "tests/test_a.py")] == "changed: tests/test_a.py"
    assert why[("cpu", "tests/test_e.py")] == "not affected by the change"


def _r(passed: int = 0, failed: int = 0, retried: int = 0, broken: int = 0, skipped: int = 0) -> FileResult:
    return FileResult(1, "f", passed, failed, retried, broken, skipped, passed + failed + retried + broken + skipped, 1.0)


@pytest.mark.parametrize(("pairs", "status"), [
    ([], "not-run"),
    ([(1, _r(passed=3))], "pass"),
    ([(1, _r(passed=2, failed=1))], "fail"),
    ([(1, _r(passed=2, retried=1))], "flaky"),                   # a rerun in the report passed
    ([(1, _r(failed=1)), (2, _r(passed=1))], "flaky"),           # run attempt 2 passed
    ([(1, _r(passed=1)), (2, _r(failed=1))], "fail"),            # the latest attempt decides
    ([(1, _r(passed=1, broken=1, failed=1))], "broken"),
    ([(1, _r(skipped=4))], "skipped"),
    ([(1, _r(skipped=3, passed=1))], "pass"),
])
def test_cell_rules(pairs: list[tuple[int, FileResult]], status: str) -> None:
    assert cell(pairs).status == status


class _Scripts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts, self.tags, self.hrefs, self.text = 0, set(), [], []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.scripts += tag == "script" and ("type", "application/json") not in attrs
        self.hrefs += [v for k, v in attrs if k == "href"]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _tiny(file: str, url: str) -> Report:
    return Report("2026-12-03T00:00:00+00:00", REPO, (Run(0, "abc1234", "push", "1", url, ""),),
                  (FileRow("cpu", file, "@o'<x>", "active", ("fail",), (1.0,)),), (), (), (), None, 0.9)


def test_markup_in_names_is_text_and_unsafe_links_are_dropped() -> None:
    page = render(_tiny(EVIL_FILE + EVIL_NAME, "javascript:window.__pwned=3"))
    parsed = _Scripts()
    parsed.feed(page)
    assert parsed.scripts == 1 and "img" not in parsed.tags  # only the page's own script (the data is not one)
    block = page.split('<script type="application/json" id="hud-data">', 1)[1].split("</script>", 1)[0]
    assert "<" not in block and json.loads(block)["files"][0] == EVIL_FILE + EVIL_NAME  # escaped, and exact
    assert not any(h and h.startswith("javascript") for h in parsed.hrefs)
    assert "default-src 'none'" in page


def test_json_beside_the_page_and_a_non_utf8_test_id(tmp_path: Path) -> None:
    page, data = write_report(_tiny("tests/caf\udce9.py", "https://ci.example/run/1"), tmp_path / "out")
    loaded = json.loads(data.read_text(encoding="ascii"))
    assert loaded["schema"] == 4 and loaded["rows"][0]["file"] == "tests/caf\udce9.py"
    assert loaded["runs"][0]["url"] == "https://ci.example/run/1"
    assert "tests/caf\ufffd.py" in page.read_text(encoding="utf-8")  # strict UTF-8 decode: no lone surrogate


def test_command_writes_the_page(known: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    location, registry = known
    changed = tmp_path / "changed.txt"
    changed.write_text("tests/test_a.py\ntests/test_b.py\n")
    out = tmp_path / "hud"
    assert ci_main(["report", "--html", str(out), "--store", location, "--registry", str(registry), "--shards", "2",
                    "--pr", str(PR), "--changed-files", str(changed), "--min-runs", "1"]) == 0
    assert "6 commit(s), 7 row(s), 2 flaky, 2 plan(s), 1 pull request" in capsys.readouterr().out
    data = json.loads((out / "report.json").read_text())
    assert data["pull"]["changed"] == ["tests/test_a.py", "tests/test_b.py"]
    block = (out / "index.html").read_text().split('id="hud-data">', 1)[1].split("</script>", 1)[0]
    assert sum(len(row[3]) for row in json.loads(block)["mx"]) == len(EXPECTED) * RUNS  # a letter a cell


def test_command_refuses_bad_input(known: tuple[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    location, registry = known
    base = ["report", "--html", str(tmp_path / "o"), "--registry", str(registry)]
    assert ci_main([*base, "--store", str(tmp_path / "none.sqlite")]) == 2
    assert "no history there yet" in capsys.readouterr().err
    assert not (tmp_path / "none.sqlite").exists()  # reading never creates a store
    assert ci_main([*base, "--store", location, "--changed-files", str(registry)]) == 2
    assert "give --pr N" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # argparse: the flag's own error, exit 2
        ci_main([*base, "--store", location, "--runs", "0"])
    assert refused.value.code == 2 and "argument --runs: must be a whole number from 1" in capsys.readouterr().err
    assert ci_main([*base, "--store", location, "--tier", "nope"]) == 2
    assert "unknown tier 'nope'" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert ci_main(["report", "--html", str(blocker), "--registry", str(registry), "--store", location]) == 3
    assert "cannot write" in capsys.readouterr().err
    assert blocker.read_text() == "x"


@given(st.tuples(*[st.integers(0, 3)] * 5), st.floats(0, 100))
def test_one_result_folds_as_many_do(counts: tuple[int, int, int, int, int], seconds: float) -> None:
    """`cell`'s fast path for one result agrees with its general fold (an empty result beside it
    changes no sum)."""
    passed, failed, retried, broken, skipped = counts
    one = FileResult(1, "f", passed, failed, retried, broken, skipped, sum(counts), seconds)
    empty = FileResult(2, "f", 0, 0, 0, 0, 0, 0, 0.0)
    assert cell([(1, one)]) == cell([(1, one), (1, empty)])


def test_a_merge_queue_run_is_no_column_of_main_and_no_pull_request(known: tuple[str, Path], tmp_path: Path) -> None:
    """A merge_group run tests a batch main may never get: the matrix of main's runs leaves it out,
    and no view shows it as a pull request (it has no number)."""
    location, registry = known
    before = _report(location, registry)
    ident = RunIdentity(REPO, "ab" * 20, "merge_group", "cpu", run_id="950", run_url="https://ci.example/run/queue",
                        base_sha=f"{RUNS - 1:07x}abc", batch=(7, 8))
    (tmp_path / "queue").mkdir()
    failing = write_junit(tmp_path / "queue", [Case("tests/test_c.py", "test_x", "failed", "AssertionError: q")])
    with open_store(location) as store:
        assert ingest(store, prepare(failing, ident)).added
    after = _report(location, registry)
    assert (after.runs, after.rows) == (before.runs, before.rows)
    assert "queue" not in render(after)


def test_runs_of_one_commit_are_told_apart_by_run_id() -> None:
    runs = [Run(0, "a" * 40, "push", "1001", "", ""), Run(1, "a" * 40, "nightly", "1002", "", ""),
            Run(2, "b" * 40, "push", "1003", "", "")]
    shas = Counter(r.sha for r in runs)
    assert [run_label(r, shas) for r in runs] == ["1001", "1002", "bbbbbbb"]


_REWRITER = """
import sys
from ci.report.model import DurationRow, FileRow, FlakyRow, Report, Run
from ci.report.write import write_report
runs = tuple(Run(i, f"{i:07x}", "push", str(i), "", "") for i in range(30))
for n in range(10 ** 9):  # two reports of different sizes, in turn, until killed
    rows = tuple(FileRow("cpu", f"tests/test_{i}.py", "@o", "active", ("pass",) * 30, (1.0,) * 30)
                 for i in range(2000 if n % 2 else 300))
    write_report(Report("t", "acme/x", runs, rows, (), (), (), None, 0.9), sys.argv[1])
    print(n, flush=True)
"""


def test_kill_9_while_writing_leaves_whole_files(tmp_path: Path) -> None:
    """SIGKILL a child that rewrites the page and its JSON in a loop: each file on disk is a whole
    one (the JSON parses with 300 or 2,000 rows, the page ends with its closing tag). A kill rarely
    lands inside the few milliseconds of a write; the size-cap test below is the one that makes a
    write fail midway every time."""
    out = tmp_path / "hud"
    rng = random.Random(5)
    for _ in range(4):
        child = subprocess.Popen([sys.executable, "-c", _REWRITER, str(out)], stdout=subprocess.PIPE, text=True,
                                 cwd=Path(__file__).resolve().parents[2])
        assert child.stdout is not None and child.stdout.readline()  # at least one whole write
        time.sleep(rng.uniform(0.0, 0.3))
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
        assert len(json.loads((out / "report.json").read_text())["rows"]) in (300, 2000)
        assert (out / "index.html").read_text(encoding="utf-8").endswith("</script></body></html>")


def test_a_store_that_is_not_a_database_is_exit_3(known: tuple[str, Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    _, registry = known
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"\xff\xfe not a database " * 100)
    assert ci_main(["report", "--html", str(tmp_path / "o"), "--registry", str(registry), "--store", str(junk)]) == 3
    err = capsys.readouterr().err
    assert str(junk) in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_screenshot_without_a_browser_is_exit_3(known: tuple[str, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    location, registry = known
    monkeypatch.setenv("CHROMIUM", str(tmp_path / "no-such-browser"))
    assert ci_main(["report", "--html", str(tmp_path / "o"), "--registry", str(registry), "--store", location,
                    "--screenshot", str(tmp_path / "s.png")]) == 3
    assert "screenshot: cannot start" in capsys.readouterr().err
    assert (tmp_path / "o" / "index.html").is_file() and not (tmp_path / "s.png").exists()


_CAPPED = """
import resource, signal, sys
from ci.report.model import DurationRow, FileRow, FlakyRow, Report, Run
from ci.report.write import write_report
runs = tuple(Run(i, f"{i:07x}", "push", str(i), "", "") for i in range(30))
def report(n):
    rows = tuple(FileRow("cpu", f"tests/test_{i}.py", "@o", "active", ("pass",) * 30, (1.0,) * 30) for i in range(n))
    flaky = tuple(FlakyRow(i + 1, "cpu", f"tests/test_{i}.py::t", f"tests/test_{i}.py", "@o", 0.5, 0.1, 0.9, 3, 9,
                           ("https://ci.example/run/1",) * 3) for i in range(n if n > 10 else 0))
    return Report("t", "acme/x", runs, rows, flaky, (), (), None, 0.9)
write_report(report(10), sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the cap fails with EFBIG instead
cap = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
try:
    write_report(report(2000), sys.argv[1])
except OSError as exc:
    print("refused:", exc.strerror)
"""


# The larger report's JSON is 1.56 MB (each row's `culprit: null` included) and its page 1.76 MB (2,000
# flaky rows: a table in the page), the first report's 7 kB and 21 kB.
@pytest.mark.parametrize(("cap", "json_rows"), [(200_000, 10), (1_650_000, 2000)])
def test_a_write_that_fails_midway_keeps_the_previous_files(tmp_path: Path, cap: int, json_rows: int) -> None:
    """The second, larger report cannot be written whole (a file size cap): below the JSON's size
    both files stay the first report's, between the two sizes the JSON is the new one and the
    page the old one; either way each file is whole. A plain write would leave one torn."""
    out = tmp_path / "hud"
    done = subprocess.run([sys.executable, "-c", _CAPPED, str(out), str(cap)], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0 and "refused: File too large" in done.stdout, done.stderr
    assert len(json.loads((out / "report.json").read_text())["rows"]) == json_rows
    page = (out / "index.html").read_text(encoding="utf-8")
    assert page.endswith("</script></body></html>") and page.count('"tests/test_') == 10  # the first report's
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "report.json"]  # no temporary file left


def test_a_page_of_2000_files_by_30_runs_stays_a_few_megabytes() -> None:
    """The issue's size bound, on the worst case of a cell (every row a full 30 runs, long paths,
    a duration line each); bench/report.py measures the real page."""
    runs = tuple(Run(i, f"{i:040x}", "push", str(10 ** 9 + i), f"https://ci.example/run/{i}", "") for i in range(30))
    rows = tuple(FileRow("cpu", f"tests/area{i % 40}/sub/test_module_number_{i}.py", f"@team{i % 10}", "active",
                         ("pass", "fail", "flaky") * 10, (12.5,) * 30) for i in range(2000))
    durations = tuple(DurationRow("cpu", r.file, r.owner, 30, 12.5, 12.5, 10.0, 60.0, False, False) for r in rows)
    page = render(Report("t", REPO, runs, rows, (), durations, (), None, 0.9)).encode()
    assert len(page) < 4_000_000, len(page)
