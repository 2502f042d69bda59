"""``report``: JUnit results into the tier's row of the bot's reply, including two reports racing."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tools.rerun.fake_github import FakeGitHub
from tools.rerun.github import DEFAULT_BOT_LOGIN as BOT_LOGIN
from tools.rerun.report import ID_LIMIT, Reporter, ReportError, RunResults, result_cell, summarize
from tools.rerun.runs_table import RunRow, find_row, table
from tools.rerun.wrap import breakable_code

from rerun_support import PR, REPO, ROOT, TOKEN

COMMENT = 6001


def _junit(path: Path, cases: str, suite_time: str = "12.5") -> Path:
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" time="{suite_time}">{cases}'
                    f'</testsuite></testsuites>', encoding="utf-8")
    return path


def _case(name: str, outcome: str = "", file: str = "tests/quant/test_pack.py", time: str = "0.5") -> str:
    child = {"": "", "failed": "<failure message='x'/>", "error": "<error message='x'/>",
             "skipped": "<skipped message='x'/>"}[outcome]
    return f'<testcase classname="tests.quant.test_pack" name="{name}" file="{file}" time="{time}">{child}</testcase>'


def _reply(fake: FakeGitHub, *rows: tuple[str, str]) -> int:
    body = (f"<!-- rerun-test:comment={COMMENT} state=done sha={'a' * 40} -->\n@maintainer 2 run(s) dispatched.\n\n"
            + table([RunRow(t, p, "`self-hosted`", "`tests/quant/test_pack.py`", "[run](https://x/1)", "dispatched")
                     for t, p in rows]) + "\n\n**a note** below the table\n")
    return fake.add_comment(PR, BOT_LOGIN, body)


def test_summarize_counts_time_and_failing_ids(tmp_path: Path) -> None:
    cases = "".join([_case("test_ok_1"), _case("test_ok_2"), _case("test_skip", "skipped"), _case("test_err", "error")]
                    + [_case(f"test_bad[{i}]", "failed") for i in range(12)])
    results = summarize(_junit(tmp_path / "j.xml", cases))
    assert results == RunResults(2, 12, 1, 1, 12.5, tuple(
        ["tests/quant/test_pack.py::test_err"] + [f"tests/quant/test_pack.py::test_bad[{i}]" for i in range(12)]))
    cell = result_cell(results)
    assert cell.startswith("**failed**: 2 passed, 12 failed, 1 skipped, 1 errors in 12.5 s<br>failing:<br>")
    assert cell.count(breakable_code("tests/quant/test_pack.py::").removesuffix("</code>")) == 10 and cell.endswith("… and 3 more")
    assert result_cell(summarize(_junit(tmp_path / "ok.xml", _case("a"), "754"))) == \
        "**passed**: 1 passed, 0 failed, 0 skipped, 0 errors in 12 min 34 s"


@pytest.mark.parametrize("content, why", [
    (None, "missing or unreadable"),
    ("<testsuites><testsuite", "missing or unreadable"),
    ('<testsuites><testsuite name="p" time="1"></testsuite></testsuites>', "holds no test case"),
    ('<testsuite time="1">' + _case("a", time="inf") + "</testsuite>", "'inf'"),
    ('<testsuite time="nan">' + _case("a") + "</testsuite>", "'nan'"),
    ('<testsuite time="1">' + _case("a", time="-3") + "</testsuite>", "'-3'"),
    ('<testsuite time="1">' + _case("a", time="1e308") + "</testsuite>", "'1e308'"),
])
def test_bad_or_missing_junit_says_no_report(tmp_path: Path, content: str | None, why: str) -> None:
    path = tmp_path / "junit.xml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    results = summarize(path)
    # ci.results.junit refuses impossible times itself (naming the value); summarize checks them again.
    assert isinstance(results, str) and (why in results or "impossible time" in results), results
    assert result_cell(results).startswith("**no report**: the run produced no report: ")


def test_report_edits_only_its_row_of_the_bots_own_reply(fake: FakeGitHub, make_client, tmp_path: Path) -> None:
    fake.add_comment(PR, "mallory", f"<!-- rerun-test:comment={COMMENT} -->\n| `gpu_b200` | targets | fake |")
    reply = _reply(fake, ("gpu_h100", "targets"), ("gpu_b200", "targets"))
    cell = result_cell(summarize(_junit(tmp_path / "j.xml", _case("a"))))
    done = Reporter(make_client(), REPO, BOT_LOGIN, settle=0).report(PR, COMMENT, "gpu_b200", "targets", cell,
                                                                      "https://github.com/acme/r/actions/runs/9")
    assert (done.comment_id, done.writes, done.lost) == (reply, 1, 0)
    body = fake.bot_replies(PR)[0].body
    row = find_row(body, "gpu_b200", "targets")
    assert (row.result, row.run) == (cell, "[run](https://github.com/acme/r/actions/runs/9)")
    assert find_row(body, "gpu_h100", "targets").result == "dispatched" and "**a note** below" in body
    assert [c.user for c in fake.comments[PR] if c.edits] == [BOT_LOGIN]  # mallory's comment untouched


def test_a_missing_row_is_appended_and_a_missing_reply_is_an_error(fake: FakeGitHub, make_client) -> None:
    _reply(fake, ("gpu_h100", "targets"))
    Reporter(make_client(), REPO, BOT_LOGIN, settle=0).report(PR, COMMENT, "gpu_b200", "2/3", "**passed**: 1")
    body = fake.bot_replies(PR)[0].body
    assert find_row(body, "gpu_b200", "2/3").result == "**passed**: 1"
    assert body.index("| `gpu_h100`") < body.index("| `gpu_b200` | 2/3") < body.index("**a note**")
    with pytest.raises(ReportError, match="no reply of github-actions\\[bot\\] for comment 1 on #42"):
        Reporter(make_client(), REPO, BOT_LOGIN, settle=0).report(PR, 1, "gpu_b200", "targets", "**passed**")


def _race(fake: FakeGitHub, make_client, settle: float, stagger: float) -> dict[str, object]:
    """Two tiers report at once; the fake holds both PATCHes until both writers have read the same
    body, then applies them ``stagger`` seconds apart: the second erases the first (a lost update)
    after the first writer has already re-read its row once and found it there."""
    _reply(fake, ("gpu_h100", "targets"), ("gpu_b200", "targets"))
    fake.hold_patches(2, stagger=stagger)
    outcomes: dict[str, object] = {}

    def report(tier: str, seed: int) -> None:
        reporter = Reporter(make_client(), REPO, BOT_LOGIN, settle=settle, rng=random.Random(seed))
        try:
            outcomes[tier] = reporter.report(PR, COMMENT, tier, "targets", f"**passed**: {tier} results")
        except ReportError as exc:
            outcomes[tier] = exc

    threads = [threading.Thread(target=report, args=(t, i)) for i, t in enumerate(("gpu_h100", "gpu_b200"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcomes


def test_two_tiers_reporting_at_once_both_survive(fake: FakeGitHub, make_client) -> None:
    outcomes = _race(fake, make_client, settle=0.8, stagger=0.3)
    body = fake.bot_replies(PR)[0].body
    assert find_row(body, "gpu_h100", "targets").result == "**passed**: gpu_h100 results"
    assert find_row(body, "gpu_b200", "targets").result == "**passed**: gpu_b200 results"
    assert sum(o.lost for o in outcomes.values()) == 1  # the first write was erased once, then repaired


def test_the_race_is_real_without_the_settle_reread(fake: FakeGitHub, make_client) -> None:
    """The same race with no delayed re-read: one row is lost. This is what the test above guards."""
    _race(fake, make_client, settle=0, stagger=1.0)
    rows = [find_row(fake.bot_replies(PR)[0].body, t, "targets").result for t in ("gpu_h100", "gpu_b200")]
    assert sorted(rows) == ["**passed**: gpu_b200 results", "dispatched"] or \
        sorted(rows) == ["**passed**: gpu_h100 results", "dispatched"]


def test_a_later_report_of_the_same_row_is_not_fought(fake: FakeGitHub, make_client) -> None:
    _reply(fake, ("gpu_b200", "targets"))
    reporter = Reporter(make_client(), REPO, BOT_LOGIN, settle=0)
    original = reporter.client.get_comment

    def newer_result_lands(repo: str, comment_id: int):  # a re-run attempt reports right after us
        comment = original(repo, comment_id)
        fake.comments[PR][0].body = comment.body.replace("**passed**: attempt 1", "**failed**: attempt 2")
        return original(repo, comment_id)
    reporter.client.get_comment = newer_result_lands  # type: ignore[method-assign]
    done = reporter.report(PR, COMMENT, "gpu_b200", "targets", "**passed**: attempt 1")
    assert done.superseded and done.writes == 1
    assert find_row(fake.bot_replies(PR)[0].body, "gpu_b200", "targets").result == "**failed**: attempt 2"


def test_cli_report_writes_the_row_and_exits_non_zero_without_a_report(api_url: str, fake: FakeGitHub,
                                                                      tmp_path: Path) -> None:
    _reply(fake, ("gpu_b200", "1/2"))
    (tmp_path / "token").write_text(TOKEN + "\n")
    junit = _junit(tmp_path / "junit.xml", _case("test_a") + _case("test_b", "failed"))
    common = ["--pr", str(PR), "--comment-id", str(COMMENT), "--tier", "gpu_b200", "--part", "1/2",
              "--api-url", api_url, "--token-file", str(tmp_path / "token"), "--repo", REPO, "--settle-seconds", "0"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tools.rerun", "report", *common, *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)

    ok = run("--junit", str(junit), "--run-url", "https://github.com/acme/llm-serving/actions/runs/5")
    assert ok.returncode == 0, ok.stderr
    row = find_row(fake.bot_replies(PR)[0].body, "gpu_b200", "1/2")
    assert row.result.startswith("**failed**: 1 passed, 1 failed") and breakable_code("tests/quant/test_pack.py::test_b", ID_LIMIT) in row.result
    assert row.run == "[run](https://github.com/acme/llm-serving/actions/runs/5)"
    missing = run("--junit", str(tmp_path / "nope.xml"))
    assert missing.returncode == 1 and "missing or unreadable" in missing.stderr
    assert find_row(fake.bot_replies(PR)[0].body, "gpu_b200", "1/2").result.startswith("**no report**")


def test_hostile_test_names_cannot_break_the_row(fake: FakeGitHub, make_client, tmp_path: Path) -> None:
    name = "test_x[a | b`<script>@team | c]"
    junit = _junit(tmp_path / "j.xml", _case(name.replace("<", "&lt;").replace(">", "&gt;"), "failed"))
    cell = result_cell(summarize(junit))
    assert "|" not in cell and "<script>" not in cell and "@team" not in cell
    _reply(fake, ("gpu_b200", "targets"), ("gpu_h100", "targets"))
    Reporter(make_client(), REPO, BOT_LOGIN, settle=0).report(PR, COMMENT, "gpu_b200", "targets", cell)
    body = fake.bot_replies(PR)[0].body
    assert find_row(body, "gpu_b200", "targets").result == cell
    assert find_row(body, "gpu_h100", "targets").result == "dispatched"
