"""The tenth labelled history (`bench._history_gen10`, torchao's real skeleton): its JUnit reads
the same through `ci.results.junit` and `xml.etree`, its labels agree with its attempts and with
the story (each real revert / fix window), its flake rates stay inside binomial bounds, and the
verify command's comparison is pinned on the committed data file.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

from bench import _history_gen10 as gen10
from bench import _history_gen10_extract as extract
from bench import _history_gen10_verify as verify
from bench._history_gen10_causes import COMPILE_RATE
from bench._verdicts_records import LABELS
from ci.history.ingest import node_id
from ci.results.junit import FAILED, parse_junit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def history() -> gen10.History:
    return gen10.generate(1)


def _failed(report) -> set[str]:
    return {label.node for label in report.labels}


def test_junit_reads_the_same_through_the_reader_and_etree(history, tmp_path):
    for i, run in enumerate(history.runs[::25]):
        for report in run.reports:
            path = tmp_path / f"{i}-{report.tier}.xml"
            path.write_text(report.xml, encoding="utf-8")
            cases = parse_junit(path).cases
            read = {node_id(c): c.outcome for c in cases}
            etree = {}
            for case in ET.fromstring(report.xml).iter("testcase"):
                klass = case.get("classname")[len(case.get("file")[:-3].replace("/", ".")) + 1:]
                node = "::".join(p for p in (case.get("file"), klass.replace(".", "::"), case.get("name")) if p)
                etree[node] = FAILED if case.find("failure") is not None else "passed"
            assert read == etree
            assert {n for n, outcome in read.items() if outcome == FAILED} == _failed(report)
            assert all(len(c.attempts) == 1 for c in cases)  # no rerun plugin: one attempt each


def test_labels_are_the_harness_labels_and_final(history):
    labels = [label for run in history.runs for label in run.labels]
    assert {label.label for label in labels} <= set(LABELS)
    assert all(label.every_attempt for label in labels)
    found = {label.label for run in history.runs if run.event == "pull_request" for label in run.labels}
    assert found == set(LABELS)


def test_a_rerun_is_the_same_run_and_only_its_failed_jobs(history):
    first = {(r.run_id, r.attempt): r for r in history.runs}
    reruns = [r for r in history.runs if r.attempt == 2]
    assert reruns
    for run in reruns:
        before = first.get((run.run_id, 1))
        if before is None:  # attempt 1 left no report: its only failed job lost its runner
            continue
        assert (before.sha, before.base_sha, before.pr) == (run.sha, run.base_sha, run.pr)
        assert before.finished <= run.started
        passed = {r.tier for r in before.reports if not r.labels}
        assert not passed & {r.tier for r in run.reports}


def test_each_real_window_fails_its_tests_on_main_and_on_the_breakers_pull_request(history):
    assert {w.kind for w in history.windows} == {"revert", "fix", "nightly"}
    merged = {c.pr: c.index for c in history.world.commits}
    runs_by_commit = defaultdict(list)
    for run in history.runs:
        runs_by_commit[(run.event, run.commit)].append(run)
    for window in history.windows:  # on the push jobs that run its tests in their only command
        file = window.tests[0].split("::")[0]
        tiers = [job.tier for job in history.world.jobs if "push" in job.events and len(job.commands) == 1
                 and file in job.commands[0] and (job.torch == "nightly" or not window.nightly_only)]
        for index in range(max(window.start, 0), window.end):
            reports = [r for run in runs_by_commit[("push", index)] for r in run.reports if r.tier in tiers]
            assert reports, (window.why, index)
            for report in reports:
                broken = {label.node for label in report.labels if label.label == "broken_on_main"}
                assert set(window.tests) <= broken, (window.why, index, report.tier)
            elsewhere = [r for run in runs_by_commit[("push", index)] for r in run.reports if r.tier not in tiers
                         and (r.tier.endswith("2.13") and window.nightly_only)]
            assert not [label for r in elsewhere for label in r.labels if window.why in label.why]
        after = [r for run in runs_by_commit[("push", window.end)] for r in run.reports if r.tier in tiers]
        for report in after:
            assert not [label for label in report.labels if window.why in label.why]
        pulls = [run for run in history.runs if run.event == "pull_request"]
        for run in pulls:  # a pull request run's `commit` is its merge base; its own commit is its pr's
            mine = [label for label in run.labels if label.node in window.tests and window.why in label.why]
            merged_as = merged[run.pr]
            if merged_as == window.start and window.kind != "nightly":
                assert {label.label for label in mine} <= {"new"}
                assert mine or not any(r.tier in tiers for r in run.reports)
            elif merged_as == window.end:
                assert not mine, "the fix's own pull request holds the fix"
            elif window.start <= run.commit < window.end:
                assert {label.label for label in mine} <= {"broken_on_main"}


def test_every_breaker_and_ender_has_its_pull_request_and_a_fix_is_tested_inside_its_window(history):
    runs = [run for run in history.runs if run.event == "pull_request"]
    merged = {c.pr: c.index for c in history.world.commits}
    for window in history.windows:
        ends = [run for run in runs if merged[run.pr] == window.end]
        assert ends or history.world.commits[window.end].pr is None, window.why
    assert any(window.start <= run.commit < window.end for window in history.windows if window.kind != "nightly"
               for run in runs if merged[run.pr] == window.end)


def test_the_breakers_pull_requests_are_labelled_new_somewhere(history):
    news = {label.why.split(";")[0] for run in history.runs if run.event == "pull_request"
            for label in run.labels if label.label == "new"}
    assert news
    assert news <= {w.why for w in history.windows}


def _binomial_ok(failures: int, expected: float, variance: float) -> bool:
    return abs(failures - expected) <= 4 * math.sqrt(variance) + 2


def test_flake_rates_stay_within_binomial_bounds(history):
    failures, expected, variance = 0, 0.0, 0.0
    compile_trials = compile_failures = 0
    for run in history.runs:
        for report in run.reports:
            labelled = {label.node: label for label in report.labels}
            for case in ET.fromstring(report.xml).iter("testcase"):
                klass = case.get("classname")[len(case.get("file")[:-3].replace("/", ".")) + 1:]
                node = "::".join(p for p in (case.get("file"), klass.replace(".", "::"), case.get("name")) if p)
                label = labelled.get(node)
                if label is not None and label.label != "flaky":
                    continue  # an earlier cause took the trial
                trait = history.causes.flaky.get(node)
                if trait is not None:
                    expected += trait[0]
                    variance += trait[0] * (1 - trait[0])
                    failures += label is not None and label.why in ("tolerance flake", "sqnr flake")
                elif "compile" in node:
                    compile_trials += 1
                    compile_failures += label is not None and "compile flake" in label.why
    assert failures > 0 and _binomial_ok(failures, expected, variance)
    p = COMPILE_RATE
    assert compile_failures > 0
    assert _binomial_ok(compile_failures, compile_trials * p, compile_trials * p * (1 - p))


def test_runs_are_in_the_order_they_finish_and_pull_requests_name_a_real_base(history):
    finished = [run.finished for run in history.runs]
    assert finished == sorted(finished)
    shas = {c.sha for c in history.world.commits}
    assert all(run.base_sha in shas for run in history.runs if run.event == "pull_request")
    assert {run.event for run in history.runs} == {"push", "pull_request", "nightly"}


def test_the_committed_data_file_is_the_extracts_window():
    data = json.loads(extract.DATA.read_text(encoding="utf-8"))
    assert extract.DATA.stat().st_size < 300_000
    assert (data["last"], data["count"], data["command"]) == (extract.LAST, extract.COUNT, extract.COMMAND)
    assert data["commits"][-1]["sha"] == extract.LAST and data["commits"][0]["sha"] == data["first"]
    assert len(data["commits"]) == extract.COUNT
    for commit in data["commits"]:
        number = re.search(r"\(#(\d+)\)\s*$", commit["subject"])
        assert number is None or commit["pr"] == int(number.group(1))
    assert sum(c["pr"] is not None for c in data["commits"]) > 200


def test_verify_compares_field_by_field_on_the_committed_data():
    data = json.loads(extract.DATA.read_text(encoding="utf-8"))
    assert verify.compare(data, data) == []
    changed = json.loads(json.dumps(data))
    changed["commits"][5]["files"].append("torchao/new.py")
    del changed["tests"][sorted(changed["tests"])[0]]
    changed["tests"][sorted(changed["tests"])[0]]["imports"] = []
    problems = verify.compare(data, changed)
    assert len(problems) == 3
    assert problems[0].startswith(f"commit 5 ({data['commits'][5]['sha'][:12]}) files:")
    assert "only in the committed data" in problems[1] and "imports" in problems[2]


def test_extract_reads_parametrize_counts_and_torchao_imports():
    source = ("import pytest\nfrom torchao.float8 import x\nimport torchao.utils\nimport torch\nSIZES = [1, 2, 3]\n"
              "@pytest.mark.parametrize('a', [1, 2])\n@pytest.mark.parametrize('b', SIZES)\ndef test_a(a, b): pass\n"
              "class TestB:\n    @parametrize('c', some_call())\n    def test_c(self, c): pass\n"
              "    def helper(self): pass\n")
    functions, imports = extract.parse_test(source)
    assert functions == [["test_a", 6], ["TestB::test_c", 1]]
    assert imports == ["torchao.float8", "torchao.utils"]


@pytest.mark.parametrize("module", ["bench._history_gen10_extract", "bench._history_gen10_verify"])
def test_the_commands_refuse_a_folder_that_is_not_a_clone_in_one_line(module, tmp_path):
    done = subprocess.run([sys.executable, "-m", module, str(tmp_path / "nowhere")], capture_output=True,
                          text=True, check=False, cwd=ROOT)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert str(tmp_path / "nowhere") in done.stderr
