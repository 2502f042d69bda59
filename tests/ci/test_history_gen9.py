"""The ninth labelled history (`bench._history_gen9`, Liger-Kernel's real skeleton): its JUnit reads
the same through `ci.results.junit` and xml.etree, every failure is labelled and every label is a
failure, the labels follow the story (each real revert and fix window, the breaker's own pull
request, re-runs, cancelled runs, the path filter, the cron's end), flakes fail at their rates, and
`bench._history_gen9_verify.compare` tells the committed data apart from a changed one."""

from __future__ import annotations

import copy
import json
import math
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import pytest

from bench import _history_gen9 as gen9
from bench import verdicts
from bench._history_gen9_extract import COUNT, DATA
from bench._history_gen9_text import MODAL_TERMINATED
from bench._history_gen9_verify import compare
from bench._history_gen9_verify import main as verify_main
from bench._history_gen9_world import CONVERGENCE
from bench._verdicts_records import LABELS
from ci.history.ingest import node_id
from ci.results.junit import parse_junit

BENCH = Path(gen9.__file__).parent


@pytest.fixture(scope="module")
def full() -> gen9.History:
    return gen9.generate(1)


def _failing(xml: str) -> dict[str, str]:
    """node -> failed or error (as `ci.results.junit` words them), read with xml.etree."""
    out = {}
    for case in ET.fromstring(xml).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error")]
        if kinds:
            module = case.get("file", "")[:-3].replace("/", ".")
            inner = case.get("classname", "")[len(module) + 1:]
            out[f"{case.get('file')}::{inner + '::' if inner else ''}{case.get('name')}"] = \
                "failed" if kinds[0] == "failure" else "error"
    return out


def _ran(xml: str) -> set[str]:
    out = set()
    for case in ET.fromstring(xml).iter("testcase"):
        module = case.get("file", "")[:-3].replace("/", ".")
        inner = case.get("classname", "")[len(module) + 1:]
        out.add(f"{case.get('file')}::{inner + '::' if inner else ''}{case.get('name')}")
    return out


def test_gen9_is_a_bench_generator(capsys: pytest.CaptureFixture[str]) -> None:
    assert verdicts.GENERATORS["gen9"].generate is gen9.generate
    assert verdicts.GENERATORS["gen9"].quick == gen9.QUICK
    assert verdicts.main(["--generator", "gen99"]) == 2
    assert "gen8, gen9, gen10, gen11, gen12, gen13, gen14, gen15, replay, both" in capsys.readouterr().err


def test_junit_reads_the_same_with_ci_results_junit_and_etree(tmp_path: Path) -> None:
    history = gen9.generate(2, gen9.QUICK)
    reports = [r for run in history.runs for r in run.reports]
    assert reports and any(r.labels for r in reports)
    for i, report in enumerate(reports):
        path = tmp_path / f"{i}.xml"
        path.write_text(report.xml, encoding="utf-8")
        parsed = parse_junit(path)
        ours = {node_id(c): c.outcome for c in parsed.cases}
        tree = ET.fromstring(report.xml)
        assert len(ours) == len(list(tree.iter("testcase")))
        assert {n: k for n, k in ours.items() if k != "passed"} == _failing(report.xml)
        assert all(len(c.attempts) == 1 for c in parsed.cases)  # Liger runs no rerun plugin


def test_every_failure_has_one_label_and_every_label_a_failure(full: gen9.History) -> None:
    for run in full.runs:
        for report in run.reports:
            labels = {label.node: label for label in report.labels}
            assert len(labels) == len(report.labels)
            assert set(labels) == set(_failing(report.xml)), (run.run_id, report.tier)
            assert all(lb.tier == report.tier and lb.label in LABELS and lb.every_attempt for lb in labels.values())
            assert report.tier in gen9.TIERS and report.runner.startswith("modal-h100-")
    assert {lb.label for run in full.runs if run.event == "pull_request" for lb in run.labels} == set(LABELS)


def test_each_real_revert_and_fix_window_fails_on_main_until_it_ends(full: gen9.History) -> None:
    commits = full.world.commits
    revert = [w for w in full.windows if w.kind == "revert"]
    assert [commits[w.breaker].subject for w in revert] == ["Bug Fix: name patching for modules"]
    assert commits[revert[0].end].subject.startswith('Revert "Bug Fix: name patching for modules"')
    assert len(full.windows) >= 10 and all(w.breaker < w.end for w in full.windows)
    # a fix for another vendor's device ("[XPU]Fixed the issue with multiple num_warps ...") broke no NVIDIA job
    assert not any(re.search(r"xpu|npu|amd", commits[w.end].subject, re.IGNORECASE) for w in full.windows)
    assert any("[XPU]Fixed" in c.subject for c in commits)
    seen_failing = set()
    for run in full.runs:
        lands = next((c.index for c in commits if run.pr is not None and c.pr == run.pr), None)
        for report in run.reports:
            failing, ran = _failing(report.xml), _ran(report.xml)
            labels = {lb.node: lb for lb in report.labels}
            for i, w in enumerate(full.windows):
                on_main = w.breaker <= run.commit < w.end and w.end != lands
                for case in w.cases:
                    if case.node not in ran:
                        continue
                    if on_main or w.breaker == lands:
                        assert case.node in failing, (w.why, run.event, run.commit)
                        seen_failing.add(i)
                        expected = "broken_on_main" if on_main else "new"
                        assert labels[case.node].label in (expected, "infra", "broken_on_main")
    assert len(seen_failing) >= len(full.windows) // 2  # most windows are seen by some run
    for run in full.runs:  # broken_on_main and new each name a window: main's at the run's code, or the PR's own
        lands = next((c.index for c in commits if run.pr is not None and c.pr == run.pr), None)
        for lb in run.labels:
            holding = [w for w in full.windows if lb.node in {c.node for c in w.cases}]
            if lb.label == "broken_on_main":
                assert any(w.breaker <= run.commit < w.end and w.end != lands for w in holding)
            elif lb.label == "new":
                assert run.event == "pull_request" and any(w.breaker == lands for w in holding)


def test_reruns_cancels_path_filter_and_cron_follow_the_workflow(full: gen9.History) -> None:
    by_id = defaultdict(dict)
    for run in full.runs:
        by_id[run.run_id][run.attempt] = run
    reruns = [a for a in by_id.values() if 2 in a]
    assert reruns and all(run.attempt in (1, 2) for run in full.runs)
    for attempts in reruns:
        second = attempts[2]
        if 1 in attempts:
            first = attempts[1]
            assert second.sha == first.sha and second.started >= first.finished
            failed_tiers = {r.tier for r in first.reports if _failing(r.xml)} | (set(gen9.TIERS) -
                                                                                 {r.tier for r in first.reports})
            assert {r.tier for r in second.reports} <= failed_tiers
    groups = defaultdict(list)
    for run in full.runs:
        if run.attempt == 1:
            groups[f"pr{run.pr}" if run.event == "pull_request" else "main"].append(run)
    for runs in groups.values():  # cancel-in-progress: a run has its JUnit only if it ended before the next began
        runs.sort(key=lambda r: r.started)
        assert all(a.finished <= b.started for a, b in zip(runs, runs[1:]))
    commits = {c.sha: c for c in full.world.commits}
    pushes = [run for run in full.runs if run.event == "push"]
    # nvi-ci.yml's paths: [src/**, test/**]: a commit touching neither (docs, CI, benchmarks) runs no GPU job
    assert pushes and all(commits[run.sha].files for run in pushes)
    assert sum(1 for c in full.world.commits if not c.files) >= 20
    cron_end = next(c.time for c in full.world.commits if c.subject.startswith("Remove daily test cron job"))
    nightly = [run for run in full.runs if run.event == "nightly"]
    assert nightly and all(run.started.timestamp() < cron_end for run in nightly)
    pulls = [run for run in full.runs if run.event == "pull_request"]
    assert all(run.base_sha == full.world.commits[run.commit].sha and run.sha not in commits for run in pulls)


def test_a_failed_make_test_runs_no_convergence_and_make_stops_at_the_first_failing_file(full: gen9.History) -> None:
    order = list(CONVERGENCE)
    stopped = 0
    for run in full.runs:
        for report in run.reports:
            ran, failing = _ran(report.xml), _failing(report.xml)
            files = [order.index(n.split("::")[0]) for n in ran if n.split("::")[0] in order]
            if any(n.split("::")[0] not in order for n in failing):
                assert not files
                stopped += 1
            failed_files = [order.index(n.split("::")[0]) for n in failing if n.split("::")[0] in order]
            if failed_files:
                assert max(files) == min(failed_files)
    assert stopped


def test_infra_causes_are_where_the_story_put_them(full: gen9.History) -> None:
    outage = [lb for run in full.runs for lb in run.labels if lb.why.startswith("Modal outage")]
    ecc = [(run, r) for run in full.runs for r in run.reports if any(lb.why.startswith("bad GPU") for lb in r.labels)]
    assert all(r.runner == full.bad_worker for _, r in ecc)
    stems = MODAL_TERMINATED.split("{fc}")
    for run in full.runs:
        for report in run.reports:
            if stems[1] in report.xml:
                assert any(lb.why.startswith("Modal outage") for lb in report.labels)
                assert run.finished.timestamp() > full.outage[0] and run.started.timestamp() < full.outage[1] + 7200
    others = [p for p in BENCH.glob("_history_gen*.py") if not p.name.startswith("_history_gen9")]
    assert others and not any("StreamTerminatedError" in p.read_text(encoding="utf-8") for p in others)
    assert outage or ecc  # at least one of the two large infra causes hit seed 1


def test_flakes_fail_within_binomial_bounds_of_their_rates(full: gen9.History) -> None:
    failures: dict[str, int] = defaultdict(int)
    expected = variance = 0.0
    for run in full.runs:
        for report in run.reports:
            labels = {lb.node: lb.label for lb in report.labels}
            ran = _ran(report.xml)
            for node, rate in full.flaky.items():
                if node in ran and labels.get(node, "flaky") == "flaky":
                    expected += rate
                    variance += rate * (1 - rate)
                    failures[node] += node in labels
    total = sum(failures.values())
    assert full.flaky and expected > 20
    assert abs(total - expected) <= 4 * math.sqrt(variance) + 1, (total, expected)
    assert all(lb.node in full.flaky for run in full.runs for lb in run.labels if lb.label == "flaky")


def test_the_data_file_is_small_real_and_says_how_it_was_made() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert DATA.stat().st_size < 300_000
    assert data["command"] == "python -m bench._history_gen9_extract GIT_DIR"
    assert 150 <= data["count"] == COUNT == len(data["commits"]) <= 300
    assert data["commits"][0]["sha"] == data["first"] and data["commits"][-1]["sha"] == data["last"]
    assert all(c["pr"] is None or c["subject"].endswith(f"(#{c['pr']})") for c in data["commits"])
    assert all(a["time"] <= b["time"] for a, b in zip(data["commits"], data["commits"][1:]))


def test_verify_compare_names_each_difference_from_the_clone() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert compare(data, copy.deepcopy(data)) == []
    changed = copy.deepcopy(data)
    changed["commits"][5]["files"] = changed["commits"][5]["files"][1:] + ["src/liger_kernel/ops/extra.py"]
    del changed["tests"]["test/transformers/test_rms_norm.py"]["functions"]["test_correctness"]
    changed["tests"]["test/transformers/test_geglu.py"]["imports"] = []
    changed["last"] = "0" * 40
    lines = compare(data, changed)
    assert len(lines) == 4
    assert lines[0].startswith("last: committed '3c64eaae")
    assert lines[1].startswith(f"commit 5 ({data['commits'][5]['sha'][:12]}) files:")
    assert any(line.startswith("test/transformers/test_geglu.py imports:") for line in lines)
    assert any(line.startswith("test/transformers/test_rms_norm.py::test_correctness: committed {") for line in lines)
    changed["commits"] = changed["commits"][:-1]
    assert "commits: committed 250, clone 249" in compare(data, changed)


def test_verify_refuses_a_folder_that_is_no_clone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert verify_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(tmp_path) in err[0] and "git directory" in err[0]
    assert verify_main([]) == 2
