"""gen12, the DeepSpeed-skeleton labelled history (`bench._history_gen12`): its JUnit reads the same through
`ci.results.junit` and `xml.etree`, every failed test carries exactly one label, the real windows fail
where the data says, flakes fail at their rates, a seed gives one history, and the extractor's parts
read hand-written sources as GitHub and pytest do."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from bench import _history_gen12 as gen12
from bench import verdicts
from bench import _history_gen12_verify as verify
from bench._history_gen12_jobs import window_label, Code
from bench._history_gen12_parse import parse_test_file, parse_workflow
from bench._history_gen12_runs import passes_filter
from bench._history_gen12_windows import find_pins, find_windows
from bench._history_gen12_world import DATA, EXCLUDED, Workflow, expand, unique_ids
from bench._verdicts_records import LABELS
from ci.history.ingest import node_id
from ci.results.junit import ERROR, FAILED, parse_junit


@pytest.fixture(scope="module")
def history() -> gen12.History:
    return gen12.generate(1, gen12.QUICK)


def _etree_failures(xml: str, files: set[str]) -> dict[str, str]:
    """node -> message of each failed case, read with xml.etree and the file list alone."""
    out = {}
    for case in ET.fromstring(xml).iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            continue
        parts = case.get("classname").split(".")
        cut = next(cut for cut in range(len(parts), 0, -1) if "tests/" + "/".join(parts[:cut]) + ".py" in files)
        file = "tests/" + "/".join(parts[:cut]) + ".py"
        out["::".join((file, *parts[cut:], case.get("name")))] = failure.get("message")  # pytest's own node id
    return out


def test_junit_reads_the_same_through_the_parser_and_etree(history, tmp_path: Path) -> None:
    files = set(history.world.files)
    checked = 0
    for run in history.runs:
        for report in run.reports:
            path = tmp_path / "report.xml"
            path.write_text(report.xml, encoding="utf-8")
            parsed = parse_junit(path, known_files=files)
            failing = {node_id(c): c.attempts[-1].message for c in parsed.cases if c.outcome in (FAILED, ERROR)}
            assert failing == _etree_failures(report.xml, files)
            assert all(c.reruns == 0 for c in parsed.cases)  # DeepSpeed runs no rerun plugin
            checked += bool(failing)
    assert checked > 50


def test_each_failed_test_has_exactly_one_label(history) -> None:
    files = set(history.world.files)
    for run in history.runs:
        for report in run.reports:
            nodes = [label.node for label in report.labels]
            assert len(nodes) == len(set(nodes))
            assert set(nodes) == set(_etree_failures(report.xml, files))
            assert all(label.label in LABELS and label.tier == report.tier and label.every_attempt
                       for label in report.labels)
    assert {label.label for run in history.runs for label in run.labels} == set(LABELS)


def test_attempt_text_writes_the_plugins_properties_and_stock_junit_does_not(tmp_path: Path) -> None:
    stock = gen12.generate(3, replace(gen12.QUICK, attempt_text=False))
    plugin = gen12.generate(3, gen12.QUICK)
    assert [len(r.labels) for r in stock.runs] == [len(r.labels) for r in plugin.runs]
    failed = next(report for run in plugin.runs for report in run.reports if report.labels)
    assert "ci.attempt.error" in failed.xml and all("ci.attempt" not in r.xml for run in stock.runs for r in run.reports)
    path = tmp_path / "r.xml"
    path.write_text(failed.xml, encoding="utf-8")
    case = next(c for c in parse_junit(path, known_files=plugin.world.files).cases if c.outcome == FAILED)
    assert case.attempts[-1].message and case.attempts[-1].detail


def _code_index(run) -> int:
    return run.commit + 1 if run.event == "merge_group" else run.commit  # the queue tests master's tip + the PR


def test_windows_fail_where_the_data_says(history) -> None:
    world = history.world
    libuv = [w for w in world.windows if w.kind == "revert" and world.commits[w.start].pr == 7064]
    assert len(libuv) == 1 and world.commits[libuv[0].end].subject.startswith('Revert "Handle special case of libuv')
    seen = Counter()
    for run in history.runs:
        for report in run.reports:
            labels = {label.node: label for label in report.labels}
            present = {c.get("classname") + "::" + c.get("name") for c in ET.fromstring(report.xml).iter("testcase")}
            for window in world.windows:
                if window.kind == "env" or not window.start <= _code_index(run) < window.end:
                    continue
                for node in window.nodes:
                    file, *inner, name = node.split("::")
                    classname = ".".join((file[len("tests/"):-len(".py")].replace("/", "."), *inner))
                    if classname + "::" + name not in present:
                        continue  # not selected by this workflow
                    assert labels[node].label in ("broken_on_main", "infra"), (run.event, node)
                    seen[labels[node].label] += 1
            for label in report.labels:
                if label.label == "broken_on_main":
                    window = next(w for w in world.windows if label.node in w.nodes and w.why == label.why)
                    if window.kind == "env":
                        assert _code_index(run) < window.end and run.started >= window.since
                    else:
                        assert window.start <= _code_index(run) < window.end
    assert seen["broken_on_main"] > 10


def test_a_culprit_pull_request_is_new_and_skips_the_queue(history) -> None:
    world = history.world
    window = next(w for w in world.windows if world.commits[w.start].pr == 7064)
    own = [run for run in history.runs if run.pr == 7064]
    assert own and all(run.event == "pull_request" for run in own)
    labels = [label for run in own for label in run.labels if label.node in window.nodes]
    assert labels and {label.label for label in labels} <= {"new", "infra"} and "new" in {lb.label for lb in labels}


def test_outside_breakage_needs_its_workflow_time_and_an_unpinned_base() -> None:
    world = gen12.generate(1, gen12.QUICK).world
    window = next(w for w in world.windows if w.kind == "env" and w.end == 183)
    after = window.since.replace(microsecond=0) + (world.commits[183].time - window.since) / 2
    inside = Code(window.end - 1)
    assert window_label(window, inside, "nv-torch-latest-v100", after) == "broken_on_main"
    assert window_label(window, Code(window.end), "nv-torch-latest-v100", after) is None  # pinned
    assert window_label(window, inside, "nv-inference", after) is None  # that workflow was never broken
    assert window_label(window, inside, "nv-torch-latest-v100", window.since.replace(year=2024, month=1)) is None


def test_flakes_fail_within_binomial_bounds() -> None:
    history = gen12.generate(2, replace(gen12.QUICK, flaky_share=0.06))
    flaky = history.world.flaky
    runs = Counter()
    fails = Counter()
    for run in history.runs:
        for report in run.reports:
            other = {label.node for label in report.labels if label.label != "flaky"}
            fails.update(label.node for label in report.labels if label.label == "flaky")
            for case in ET.fromstring(report.xml).iter("testcase"):
                parts = case.get("classname").split(".")
                cut = next(c for c in range(len(parts), 0, -1)
                           if "tests/" + "/".join(parts[:c]) + ".py" in history.world.files)
                node = "::".join(("tests/" + "/".join(parts[:cut]) + ".py", *parts[cut:], case.get("name")))
                if node in flaky and node not in other and case.find("skipped") is None:
                    runs[node] += 1
    expected = sum(flaky[n].rate * runs[n] for n in runs)
    observed = sum(fails[n] for n in runs)
    variance = sum(flaky[n].rate * (1 - flaky[n].rate) * runs[n] for n in runs)
    assert expected > 20 and abs(observed - expected) <= 4 * math.sqrt(variance)
    for node, count in runs.items():
        rate = flaky[node].rate
        assert abs(fails[node] - rate * count) <= 4 * math.sqrt(rate * (1 - rate) * count) + 2
    assert set(fails) <= set(flaky)


def test_same_seed_same_history_other_seed_other_history() -> None:
    def shape(h):
        return [(r.event, r.sha, r.run_id, r.attempt, r.finished, [(p.runner, p.xml, p.labels) for p in r.reports])
                for r in h.runs]
    assert shape(gen12.generate(4, gen12.QUICK)) == shape(gen12.generate(4, gen12.QUICK))
    assert shape(gen12.generate(5, gen12.QUICK)) != shape(gen12.generate(4, gen12.QUICK))


def test_runs_follow_the_real_ci_shape(history) -> None:
    events = Counter(run.event for run in history.runs)
    assert set(events) == {"pull_request", "merge_group", "schedule"}
    assert all(run.batch == (run.pr,) for run in history.runs if run.event == "merge_group")
    reruns = [run for run in history.runs if run.attempt > 1]
    firsts = {(run.run_id, run.sha) for run in history.runs if run.attempt == 1}
    assert reruns and all((run.run_id, run.sha) in firsts for run in reruns)
    assert [run.finished for run in history.runs] == sorted(run.finished for run in history.runs)
    tiers = {report.tier for run in history.runs if run.event == "schedule" for report in run.reports}
    assert {"nv-h100", "nv-nightly", "nv-torch-nightly-v100"} <= tiers
    assert all(report.tier != "nv-h100" for run in history.runs if run.event != "schedule" for report in run.reports)


def test_data_holds_250_consecutive_real_commits() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    commits = data["commits"]
    assert len(commits) == 250 and commits[0]["sha"] == data["start"]
    late = [i for i, (a, b) in enumerate(zip(commits, commits[1:])) if a["time"] > b["time"]]
    assert late == [43, 151]  # two real committer clocks an hour or two ahead of the next merge
    assert sum(c["pr"] is not None for c in commits) >= 200 and len(data["test_files"]) >= 150
    assert len(DATA.read_bytes()) < 400_000


def test_parse_test_file_reads_ids_markers_and_classes() -> None:
    source = '''
import pytest
import transformers.models
pytestmark = [pytest.mark.inference_ops]

@pytest.mark.parametrize("dtype", [1, 2.5, "bf16", None, -3])
@pytest.mark.parametrize("a,b", [(True, "x"), (0, 1)])
def test_f(dtype, a, b):
    pass

@pytest.mark.sequential
class TestZ:
    @pytest.mark.parametrize("n", SIZES)
    def test(self, n):
        pass
    def helper(self):
        pass

class Helper:
    def test_not_collected(self):
        pass
'''
    parsed = parse_test_file(source)
    assert parsed == {"tests": [["", "test_f", ["inference_ops"], [["True-x", "0-1"], ["1", "2.5", "bf16", "None", "-3"]]],
                                ["TestZ", "test", ["inference_ops", "sequential"], [["n0", "n1"]]]],
                      "imports": ["transformers"]}
    assert parse_test_file("def (:\n") == {"tests": [], "unparsable": True}


def test_parse_workflow_reads_on_as_yaml_gives_it() -> None:
    text = """
on:
  pull_request:
    paths-ignore:
      - 'docs/**'
  merge_group:
    branches: [ master ]
  schedule:
    - cron: "0 0 * * *"
concurrency:
  group: x
  cancel-in-progress: true
jobs:
  unit-tests:
    runs-on: [self-hosted, nvidia, cu121, v100]
    steps:
      - run: |
          # pytest commented
          pytest --forked -n 4 unit/
"""
    shape = parse_workflow(text)
    assert shape == {"events": ["merge_group", "pull_request", "schedule"], "paths": [], "paths_ignore": ["docs/**"],
                     "crons": ["0 0 * * *"], "cancel_in_progress": True, "runners": ["self-hosted,nvidia,cu121,v100"],
                     "pytest": ["pytest --forked -n 4 unit/"]}
    assert parse_workflow(": : :\n  - [") is None


def test_path_filters_as_github_applies_them() -> None:
    ignore = Workflow("w", frozenset(), (), ("docs/**", "deepspeed/inference/v2/**"), "v100", (None,))
    assert not passes_filter(ignore, ("docs/a.md", "deepspeed/inference/v2/x.py"))  # every file ignored
    assert passes_filter(ignore, ("docs/a.md", "deepspeed/runtime/engine.py"))
    only = Workflow("w", frozenset(), ("deepspeed/inference/**", "!deepspeed/inference/v2/**", "setup.py"), (),
                    "v100", (None,))
    assert passes_filter(only, ("deepspeed/inference/engine.py",))
    assert not passes_filter(only, ("deepspeed/inference/v2/engine.py",))
    assert passes_filter(only, ("setup.py",)) and not passes_filter(only, ("setup.cfg",))


def test_windows_and_pins_from_hand_written_commits() -> None:
    def commit(subject, pr=None, body="", touched=()):
        return {"sha": f"{len(subject):040x}", "subject": subject, "body": body, "pr": pr, "touched": list(touched)}
    commits = [commit("Add x (#10)", 10, touched=["deepspeed/comm/torch.py", "tests/unit/comm/test_dist.py"]),
               commit("Speed up y (#11)", 11, touched=["deepspeed/runtime/engine.py"]),
               commit('Revert "Add x (#10)" (#12)', 12, touched=["deepspeed/comm/torch.py"]),
               commit("Don't error out (#13)", 13, body="This fixes a bug introduced in #11, which breaks"),
               commit("Fix issue #5242, see #16 (#14)", 14),  # an issue before the range, a later PR: no window
               commit("Pin transformers to avoid errors (#15)", 15, touched=[".github/workflows/nv-h100.yml"]),
               commit("Unpin transformers (#16)", 16, touched=[".github/workflows/nv-h100.yml"])]
    files = {"tests/unit/comm/test_dist.py": {}}
    windows = find_windows(commits, files)
    assert [(w["culprit"], w["end"], w["kind"]) for w in windows] == [(0, 2, "revert"), (1, 3, "fix")]
    assert windows[0]["tests"] == ["tests/unit/comm/test_dist.py"] and windows[1]["sources"] == ["deepspeed/runtime/engine.py"]
    assert find_pins(commits, ("nv-h100", "nv-a6000")) == [
        {"end": 5, "workflows": ["nv-h100"], "subject": "Pin transformers to avoid errors (#15)"}]


def test_verify_names_each_difference_and_refuses_bad_input(capsys) -> None:
    assert verify.differences({"a": [1, 2], "b": {"c": 1}}, {"a": [1, 3], "b": {"c": 1, "d": 2}}) == [
        ".a[1]: 2 in the data file, 3 re-extracted", ".b.d: only in the re-extraction"]
    assert verify.main([]) == 2 and "usage" in capsys.readouterr().err
    assert verify.main(["/nonexistent-gen12-dir"]) == 1
    err = capsys.readouterr().err
    assert "not a git repository" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_repeated_ids_are_suffixed_as_pytest_does() -> None:
    assert unique_ids(["a", "b", "a", "1", "1"]) == ["a0", "b", "a1", "1_0", "1_1"]
    nodes = [n.node for path in gen12.generate(1, gen12.QUICK).world.files
             for n in expand(path, json.loads(DATA.read_text(encoding="utf-8"))["test_files"][path]["tests"])]
    assert len(nodes) == len(set(nodes))


def test_default_selection_is_pytest_inis() -> None:
    world = gen12.generate(1, gen12.QUICK).world
    latest = world.workflow("nv-torch-latest-v100", 170)
    default, sequential = world.selected(latest, 170)
    assert default and sequential and not any(n.markers & EXCLUDED for n in default)
    assert all("sequential" in n.markers for n in sequential)


def test_registered_with_its_scales() -> None:
    chosen = verdicts.GENERATORS["gen12"]
    assert chosen.generate is gen12.generate and chosen.scale == gen12.Scale() and chosen.quick == gen12.QUICK
    assert chosen.scale.attempt_text and not replace(chosen.quick, attempt_text=False).attempt_text
