"""The reply's headline follows the results (`tools.rerun.headline`), a run that ended without a
result is named (``report --ended``), and old replies are still edited in place.

Through the fake GitHub: the real handler posts the reply, `Reporter` (and the real ``report``
command) writes rows; the headline is read back from the comment as GitHub holds it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tools.rerun.fake_github import FakeGitHub
from tools.rerun.github import DEFAULT_BOT_LOGIN as BOT_LOGIN
from tools.rerun.headline import CLOSE, OPEN, outcome, retitle, silent_cell, span
from tools.rerun.replies import find_marker
from tools.rerun.report import Reporter, RunResults, result_cell, row_verdict
from tools.rerun.runs_table import (HEADER, LEGACY_HEADER, LEGACY_SEPARATOR, RunRow, find_row, parse_row, put_row,
                                    rows_in, table)
from tools.rerun.verdicts import BROKEN_ON_MAIN, FLAKY, INFRA, NEW, FailureVerdict

from rerun_support import PR, REPO, ROOT, TOKEN, comment_payload

BROKEN = FailureVerdict(BROKEN_ON_MAIN, "broken on main since abc1234")


def _row(part: str, result: str = "dispatched", verdict: str = "—", tier: str = "gpu_b200") -> RunRow:
    return RunRow(tier, part, "`self-hosted`", "`t`", f"[run](https://ci/{part.replace('/', '-')})", result, verdict)


def _reported(part: str, passed: int, failing: tuple[str, ...] = (), verdicts: dict | None = None,
              errors: int = 0) -> RunRow:
    results = RunResults(passed, len(failing) - errors, 0, errors, 5.0, failing)
    return _row(part, result_cell(results, verdicts), row_verdict(results, verdicts))


def _headline(body: str) -> str:
    return body[body.index(OPEN) + len(OPEN):body.index(CLOSE)]


# -- the outcome, from the rows alone --------------------------------------------------------------

def test_nothing_reported_keeps_the_dispatch_headline() -> None:
    rows = [_row("1/2"), _row("2/2")]
    assert outcome(rows) is None
    body = f"x\n@m {span('2 of 2 run(s) dispatched')} (workflow)\n\n{table(rows)}\n"
    assert retitle(body) == body


def test_one_of_four_reported_says_so_and_the_tally_so_far() -> None:
    rows = [_reported("1/4", 40, ("a::x",), {"a::x": BROKEN}), _row("2/4"), _row("3/4"), _row("4/4")]
    assert outcome(rows) == "1 of 4 runs reported so far: 40 passed, 1 failed: broken on main since abc1234"


def test_all_reported_one_failure_gives_its_verdict_detail() -> None:
    rows = [_reported("1/2", 3, ("a::x",), {"a::x": BROKEN}), _reported("2/2", 0)]
    assert outcome(rows) == "3 passed, 1 failed: broken on main since abc1234"


def test_several_failures_give_a_tally_of_every_kind() -> None:
    kinds = {"a::w": BROKEN, "a::x": FailureVerdict(FLAKY, "flaky 9 % ±4"), "a::y": FailureVerdict(INFRA, "infra on runner r7"),
             "a::z": FailureVerdict(NEW, "new")}
    rows = [_reported("1/2", 10, ("a::w", "a::x"), kinds), _reported("2/2", 5, ("a::y", "a::z"), kinds, errors=1)]
    assert outcome(rows) == "15 passed, 3 failed, 1 errors: 1 broken on main, 1 flaky, 1 infra, 1 new"
    # two failures in different rows, one verdict each: a tally, not one row's detail
    rows = [_reported("1/2", 1, ("a::w",), kinds), _reported("2/2", 1, ("a::x",), kinds)]
    assert outcome(rows) == "2 passed, 2 failed: 1 broken on main, 1 flaky"


def test_without_a_history_the_tally_has_no_verdict() -> None:
    assert outcome([_reported("1/1", 2, ("a::x",))]) == "2 passed, 1 failed"
    # one of two failures judged (the other row's report could not read the history): a tally,
    # never the one detail as if it spoke for both
    rows = [_reported("1/2", 1, ("a::x",), {"a::x": BROKEN}), _reported("2/2", 1, ("a::y",))]
    assert outcome(rows) == "2 passed, 2 failed: 1 broken on main"


def test_a_failed_dispatch_is_not_waited_for() -> None:
    rows = [_reported("1/2", 7), _row("2/2", "dispatch failed: <code>HTTP 500</code>")]
    assert outcome(rows) == "7 passed, 0 failed"


def test_runs_without_results_are_named_with_their_link() -> None:
    rows = [_reported("1/3", 7), _row("2/3", silent_cell("cancelled")), _row("3/3", "**no report**: the run produced no report")]
    assert outcome(rows) == ("7 passed, 0 failed; no result from shard 2/3 of `gpu_b200` ([run](https://ci/2-3)); "
                             "no report from shard 3/3 of `gpu_b200` ([run](https://ci/3-3))")
    targets = [_row("targets", silent_cell("timed_out"), tier="gpu_h100")]
    assert outcome(targets) == "0 passed, 0 failed; no result from `gpu_h100` targets ([run](https://ci/targets))"
    many = [_row(f"{i}/8", silent_cell("cancelled")) for i in range(1, 9)]
    text = outcome(many)
    assert text is not None and text.count("[run]") == 5 and text.endswith(" and 3 more")
    assert silent_cell("$(rm -rf)") == "**no result**: the run ended (unknown) without sending a result"


# -- end to end: handler, reports, the real `report` command ---------------------------------------

def _report(reporter: Reporter, tier: str, results: RunResults | str, verdicts: dict | None = None) -> None:
    reporter.report(PR, 101, tier, "targets", result_cell(results, verdicts), "https://ci/run",
                    verdict=row_verdict(results, verdicts))


def test_the_headline_turns_from_dispatched_to_the_outcome(fake: FakeGitHub, make_handler, make_client) -> None:
    assert make_handler().handle(comment_payload("/rerun-test test_pack.py", comment_id=101)).status == "dispatched"
    (reply,) = fake.bot_replies(PR)
    assert _headline(reply.body) == "2 of 2 run(s) dispatched"
    reporter = Reporter(make_client(), REPO, BOT_LOGIN, settle=0)
    _report(reporter, "gpu_h100", RunResults(4, 1, 0, 0, 2.0, ("tests/quant/test_pack.py::test_b",)),
            {"tests/quant/test_pack.py::test_b": BROKEN})
    body = fake.bot_replies(PR)[0].body
    assert _headline(body) == "1 of 2 runs reported so far: 4 passed, 1 failed: broken on main since abc1234"
    _report(reporter, "gpu_b200", RunResults(5, 0, 0, 0, 2.0, ()))
    body = fake.bot_replies(PR)[0].body
    assert _headline(body) == "9 passed, 1 failed: broken on main since abc1234"
    assert "dispatched" not in body.split("\n\n")[0]  # the first paragraph: marker and headline
    assert find_marker(body, 101) is not None and "(workflow `rerun-test-dispatch.yml` on `main`)" in body


def test_results_that_arrive_during_the_dispatch_survive_the_final_edit(fake: FakeGitHub, make_handler,
                                                                        make_client) -> None:
    """A report that lands between the bot's progress edit and its final edit: the final body keeps
    the row and the headline its outcome (no 'dispatched' over results)."""
    reporter = Reporter(make_client(), REPO, BOT_LOGIN, settle=0)
    handler = make_handler()
    original = handler._keep_reported

    def report_first(event, reply_id, body):  # the h100 run reports right before the final edit
        if not find_row(fake.bot_replies(PR)[0].body, "gpu_h100", "targets"):
            _report(reporter, "gpu_h100", RunResults(3, 0, 0, 0, 1.0, ()))
        return original(event, reply_id, body)

    handler._keep_reported = report_first
    handler.handle(comment_payload("/rerun-test test_pack.py", comment_id=101))
    body = fake.bot_replies(PR)[0].body
    assert find_row(body, "gpu_h100", "targets").has_results
    assert _headline(body) == "1 of 2 runs reported so far: 3 passed, 0 failed"


def _cli(api_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "token").write_text(TOKEN + "\n")
    return subprocess.run([sys.executable, "-m", "tools.rerun", "report", "--pr", str(PR), "--comment-id", "101",
                           "--api-url", api_url, "--token-file", str(tmp_path / "token"), "--repo", REPO,
                           "--settle-seconds", "0", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_a_run_that_ended_without_a_result_is_named(api_url: str, fake: FakeGitHub, make_handler,
                                                    tmp_path: Path) -> None:
    make_handler().handle(comment_payload("/rerun-test test_pack.py", comment_id=101))
    url = f"https://github.com/{REPO}/actions/runs/99"
    proc = _cli(api_url, tmp_path, "--tier", "gpu_b200", "--ended", "cancelled", "--run-url", url)
    assert proc.returncode == 0, proc.stderr
    body = fake.bot_replies(PR)[0].body
    assert find_row(body, "gpu_b200", "targets").result == silent_cell("cancelled")
    assert _headline(body) == f"1 of 2 runs reported so far: 0 passed, 0 failed; no result from `gpu_b200` targets ([run]({url}))"
    # a run whose results did arrive is never marked: --ended writes nothing over them
    junit = tmp_path / "j.xml"
    junit.write_text('<testsuites><testsuite time="1"><testcase classname="t" name="test_a" file="tests/quant/'
                     'test_pack.py" time="1"/></testsuite></testsuites>', encoding="utf-8")
    assert _cli(api_url, tmp_path, "--tier", "gpu_h100", "--junit", str(junit)).returncode == 0
    before = fake.bot_replies(PR)[0]
    proc = _cli(api_url, tmp_path, "--tier", "gpu_h100", "--ended", "failure")
    assert proc.returncode == 0 and "already holds results; nothing written" in proc.stdout
    after = fake.bot_replies(PR)[0]
    assert after.body == before.body and after.edits == before.edits
    assert _headline(after.body).startswith("1 passed, 0 failed; no result from `gpu_b200` targets")


@pytest.mark.parametrize("args, message", [
    ([], "report needs --junit FILE (the run's results) or --ended CONCLUSION (it sent none)"),
    (["--junit", "x.xml", "--ended", "cancelled"], "report needs --junit FILE"),
])
def test_report_needs_exactly_one_of_junit_and_ended(api_url: str, tmp_path: Path, args: list[str],
                                                     message: str) -> None:
    proc = _cli(api_url, tmp_path, "--tier", "gpu_b200", *args)
    assert proc.returncode == 2 and proc.stderr.startswith(f"rerun-test: {message}") and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# -- replies written before the verdict column -----------------------------------------------------

def test_an_old_reply_is_read_and_rewritten_in_the_current_layout() -> None:
    old = "| `gpu_b200` | 1/2 | `self-hosted` | `t` | [run](https://ci/1) | dispatched |"
    other = "| `gpu_b200` | 2/2 | `self-hosted` | `t` | [run](https://ci/2) | **passed**: 1 passed, 0 failed |"
    body = "\n".join(["m", "", LEGACY_HEADER, LEGACY_SEPARATOR, old, other, "", "note"])
    assert parse_row(old) == RunRow("gpu_b200", "1/2", "`self-hosted`", "`t`", "[run](https://ci/1)", "dispatched")
    new = put_row(body, parse_row(old).with_result("**failed**: 0 passed, 1 failed", verdict="new"))
    lines = new.split("\n")
    assert lines[2:4] == [HEADER, "|---|---|---|---|---|---|---|"] and LEGACY_HEADER not in new
    assert [r.result for r in rows_in(new)] == ["**failed**: 0 passed, 1 failed", "**passed**: 1 passed, 0 failed"]
    assert rows_in(new)[0].verdict == "new" and lines[-2:] == ["", "note"]
    assert lines[4] == "| `gpu_b200` | 1/2 | **failed**: 0 passed, 1 failed | new | [run](https://ci/1) | `t` | `self-hosted` |"
