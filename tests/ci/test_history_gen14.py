"""The fourteenth labelled history (`bench._history_gen14`, bitsandbytes' real skeleton): its JUnit
reads the same through `ci.results.junit` and xml.etree, every failed test has exactly one label and
every label is a failure, the real windows break main where the data says and nowhere else, flakes
fail at their rates, a seed gives the same history twice; the extractor's readers are checked against
GitHub's documented matrix example, pytest's own collection and hand-written diffs."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import _history_gen14 as gen14
from bench import verdicts
from bench._history_gen14_causes import Outage, Plan
from bench._history_gen14_ci import expand_matrix, gpu_jobs
from bench._history_gen14_extract import DATA
from bench._history_gen14_parse import collected
from bench._history_gen14_runs import Planner
from bench._history_gen14_verify import differences
from bench._history_gen14_verify import main as verify_main
from bench._history_gen14_windows import edited_tests, find_windows
from bench._history_gen14_world import Push
from bench._verdicts_records import LABELS, Label, Report, Run
from ci.results.junit import parse_junit

DATA_JSON = json.loads(DATA.read_text())


@pytest.fixture(scope="module")
def full() -> gen14.History:
    return gen14.generate(1)


@pytest.fixture(scope="module")
def quick() -> gen14.History:
    return gen14.generate(2, gen14.QUICK)


def _etree_failed(xml: str) -> set[str]:
    """Failed node ids of one JUnit text read with xml.etree alone: the file is the test file whose
    dotted path starts the classname (pytest's own node id, classes after ``::``)."""
    out = set()
    for case in ET.fromstring(xml).iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        parts = case.get("classname", "").split(".")
        cut = next(i for i in range(len(parts), 0, -1) if "/".join(parts[:i]) + ".py" in DATA_FILES)
        out.add("::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], case.get("name", "")]))
    return out


DATA_FILES = {entry["file"] for entry in DATA_JSON["tests"]}


def _parser_failed(xml: str, path: Path, known: tuple[str, ...]) -> set[str]:
    path.write_text(xml, encoding="utf-8")
    out = set()
    for case in parse_junit(path, known_files=known).cases:
        assert case.file in DATA_FILES and case.reruns == 0, case  # xunit2 resolved; no rerun plugin
        if case.outcome in ("failed", "error"):
            stem = Path(case.file).with_suffix("").as_posix().replace("/", ".")
            inner = case.classname[len(stem) + 1:].split(".") if case.classname != stem else []
            out.add("::".join([case.file, *[p for p in inner if p], case.name]))
    return out


def test_gen14_is_a_bench_generator(capsys: pytest.CaptureFixture[str]) -> None:
    generator = verdicts.GENERATORS["gen14"]
    assert generator.scale == gen14.Scale() and generator.quick == gen14.QUICK
    assert generator.scale.attempt_text and generator.scale.commits == 240
    assert verdicts.main(["--generator", "gen99"]) == 2
    assert "gen14" in capsys.readouterr().err


@pytest.mark.parametrize("which", ["quick", "full"])
def test_junit_reads_the_same_through_the_parser_and_etree(which: str, request: pytest.FixtureRequest,
                                                           tmp_path: Path) -> None:
    history = request.getfixturevalue(which)
    checked = 0
    for run in history.runs[:: 1 if which == "quick" else 7]:
        for report in run.reports:
            failed = _etree_failed(report.xml)
            assert failed == _parser_failed(report.xml, tmp_path / "r.xml", history.checkout_files)
            labelled = [label.node for label in report.labels]
            assert sorted(labelled) == sorted(failed), run.run_id  # each failed test: exactly one label
            checked += len(failed)
    assert checked > 100


def test_records_labels_and_stock_junit(quick: gen14.History) -> None:
    assert all(type(run) is Run and all(type(r) is Report for r in run.reports) for run in quick.runs)
    labels = [label for run in quick.runs for label in run.labels]
    assert labels and all(type(label) is Label and label.label in LABELS and label.every_attempt for label in labels)
    assert all(label.label != "new" for run in quick.runs if run.pr is None for label in run.labels)
    assert [r.finished for r in quick.runs] == sorted(r.finished for r in quick.runs)
    with_props = next(r.xml for run in quick.runs for r in run.reports if r.labels)
    assert "ci.attempt.text" in with_props
    stock = gen14.generate(2, gen14.Scale(commits=24, nightly_quiet_every=3, attempt_text=False))
    assert all("ci.attempt." not in r.xml for run in stock.runs for r in run.reports)
    assert [lab for run in stock.runs for lab in run.labels] == labels  # the flag changes only the XML


def test_a_setup_error_on_every_case_is_labelled_each(quick: gen14.History, tmp_path: Path) -> None:
    """The Windows machine's driver too old: every case errors at setup (pytest's ``<error>``), each
    with its infra label, and the parser reads them all as errors."""
    tree = quick.tree
    assert tree is not None
    job = next(j for j in tree.jobs(len(tree.commits) - 1, False) if j.os.startswith("windows"))
    at = tree.commits[-1]["time"]
    push = Push("pull_request", at, 0, "ab" * 20, 1, 1, True, "someone", len(tree.commits) - 1)
    result = next(r for seed in range(20) if (r := Planner(tree, Plan((), (), (Outage("driver", 0, 2 ** 40, job.runner),)),
                                                               random.Random(seed)).job(push, job, tree.cases(0), at, set())).reported)
    run = gen14._run(tree, push, [result], "1", 1, at, gen14.QUICK)
    nodes = {_node(c.get("classname", "") + "::" + c.get("name", "")) for c in ET.fromstring(run.reports[0].xml).iter("testcase")}
    labels = run.reports[0].labels
    assert len(nodes) > 50 and {lab.node for lab in labels} == nodes == _etree_failed(run.reports[0].xml)
    assert {lab.label for lab in labels} == {"infra"} and "failed on setup with" in run.reports[0].xml
    parsed = parse_junit(_write(tmp_path, run.reports[0].xml), known_files=quick.checkout_files)
    assert {case.outcome for case in parsed.cases} == {"error"}


def _write(folder: Path, xml: str) -> Path:
    path = folder / "one.xml"
    path.write_text(xml, encoding="utf-8")
    return path


def test_same_seed_same_history_and_seeds_differ(quick: gen14.History) -> None:
    again = gen14.generate(2, gen14.QUICK)
    assert [(r.run_id, r.attempt, [(p.runner, p.xml, p.labels) for p in r.reports]) for r in again.runs] == \
        [(r.run_id, r.attempt, [(p.runner, p.xml, p.labels) for p in r.reports]) for r in quick.runs]
    other = gen14.generate(3, gen14.QUICK)
    assert [r.labels for r in other.runs] != [r.labels for r in quick.runs]


def test_the_real_windows_break_main_where_the_data_says(full: gen14.History) -> None:
    """Oracle: the data file's windows and commits alone. A pull request run based inside a planted
    window, neither the breaking nor the fixing pull request's, fails every case of the window's tests
    on the jobs in scope that no infra fault took; a run based outside no window reports them broken."""
    commits = DATA_JSON["commits"]
    checked = 0
    for breakage in (b for b in full.plan.breakages if not b.by_time):
        real = [w for w in DATA_JSON["windows"] if (w["start"], w["end"]) == (breakage.start, breakage.end)]
        assert real and not real[0]["flaky"]
        for run in full.runs:
            merged = next((i for i, c in enumerate(commits) if c["pr"] == run.pr), None) if run.pr else None
            inside = breakage.start <= run.commit < breakage.end and merged not in (breakage.start, breakage.end)
            for report in run.reports:
                gpu, windows = report.tier.split("-")[1], "-windows-" in report.tier
                if not (windows or gpu in breakage.gpus) or (breakage.scope == "windows" and not windows):
                    continue
                ran = {case.get("classname", "") + "::" + case.get("name", "")
                       for case in ET.fromstring(report.xml).iter("testcase")}
                for label in report.labels:
                    key = label.node.split("[")[0].split("::")
                    if f"{key[0]}::{key[-1]}" in breakage.keys and label.why == breakage.why:
                        assert inside or merged == breakage.start, (run.run_id, label)
                        assert label.label == ("broken_on_main" if inside else "new")
                if inside and run.pr is not None:
                    broken = {lab.node for lab in report.labels if lab.why == breakage.why}
                    infra = {lab.node for lab in report.labels if lab.label == "infra"}
                    expected = {n for n in (_node(c) for c in ran) if _key(n) in breakage.keys} - infra
                    assert expected <= broken | {n for n in expected if _skipped(report.xml, n)}
                    checked += len(expected)
    assert checked > 50


def _node(classname_name: str) -> str:
    classname, name = classname_name.split("::")
    parts = classname.split(".")
    cut = next(i for i in range(len(parts), 0, -1) if "/".join(parts[:i]) + ".py" in DATA_FILES)
    return "::".join(["/".join(parts[:cut]) + ".py", *parts[cut:], name])


def _key(node: str) -> str:
    parts = node.split("[")[0].split("::")
    return f"{parts[0]}::{parts[-1]}"


def _skipped(xml: str, node: str) -> bool:
    name = node.split("::")[-1]
    return any(c.get("name") == name and c.find("skipped") is not None for c in ET.fromstring(xml).iter("testcase"))


def test_flakes_fail_at_their_rates(full: gen14.History) -> None:
    """Each whole-history flake fails the first attempts of the jobs that ran it about ``rate`` of the
    time: the total within 4 binomial standard deviations of the sum of rates, and no flake far out."""
    flakes = [f for f in full.plan.flakes if f.since < DATA_JSON["commits"][0]["time"]]
    jobs = []  # (GPU, keys of the cases that ran, labels) of each first attempt's job
    for run in (r for r in full.runs if r.attempt == 1):
        for report in run.reports:
            ran = {_key(_node(c.get("classname", "") + "::" + c.get("name", "")))
                   for c in ET.fromstring(report.xml).iter("testcase") if c.find("skipped") is None}
            jobs.append((report.tier.split("-")[1], ran, report.labels))
    observed = expected = variance = 0.0
    for flake in flakes:
        hits = trials = 0
        for gpu, ran, labels in jobs:
            if (flake.gpus and gpu not in flake.gpus) or flake.key not in ran:
                continue
            if any(lab.label != "flaky" and _key(lab.node) == flake.key for lab in labels):
                continue  # another cause took its cases
            trials += 1
            hits += any(lab.label == "flaky" and _key(lab.node) == flake.key for lab in labels)
        if trials:
            sd = math.sqrt(trials * flake.rate * (1 - flake.rate))
            assert abs(hits - trials * flake.rate) <= 5 * sd + 2, (flake, hits, trials)
            observed, expected, variance = observed + hits, expected + trials * flake.rate, variance + sd * sd
    assert expected > 30 and abs(observed - expected) <= 4 * math.sqrt(variance)


def test_counts_cover_every_label(full: gen14.History) -> None:
    counts = gen14.counts(full)
    assert all(counts.get(label, 0) > 0 for label in LABELS), counts
    assert counts["reruns"] > 0 and counts["pr_runs"] > 100


def test_matrix_expands_as_githubs_documented_example() -> None:
    """GitHub's docs, "Expanding or adding matrix configurations": the six combinations listed there."""
    matrix = {"fruit": ["apple", "pear"], "animal": ["cat", "dog"],
              "include": [{"color": "green"}, {"color": "pink", "animal": "cat"}, {"fruit": "apple", "shape": "circle"},
                          {"fruit": "banana"}, {"fruit": "banana", "animal": "cat"}]}
    assert expand_matrix(matrix) == [
        {"fruit": "apple", "animal": "cat", "color": "pink", "shape": "circle"},
        {"fruit": "apple", "animal": "dog", "color": "green", "shape": "circle"},
        {"fruit": "pear", "animal": "cat", "color": "pink"},
        {"fruit": "pear", "animal": "dog", "color": "green"},
        {"fruit": "banana"}, {"fruit": "banana", "animal": "cat"}]
    assert expand_matrix({"os": ["a", "b"], "v": [1, 2], "exclude": [{"os": "b", "v": 2}]}) == \
        [{"os": "a", "v": 1}, {"os": "a", "v": 2}, {"os": "b", "v": 1}]


def test_gpu_jobs_of_a_reusable_workflow() -> None:
    runner = 'case x in\n  T4)    TEST_RUNNER="pool-t4" ;;\n  L40S)  TEST_RUNNER="pool-l40s" ;;\nesac\n'
    pr = textwrap.dedent("""\
        on:
          pull_request:
            paths: ["csrc/**", "tests/**"]
        jobs:
          test-cpu:
            strategy: {matrix: {platform: [linux-x64]}}
          test-cuda:
            strategy:
              matrix:
                platform: [linux-x64]
                gpu_type: [T4, L40S]
                cuda_version: ["12.8.1"]
                include:
                  - {cuda_version: "12.8.1", torch_version: "2.8.0"}
                  - {platform: windows, gpu_type: T4, cuda_version: "11.8.0", torch_version: "2.7.1"}
        """)
    shape = gpu_jobs({".github/workflows/tests-pr.yml": pr, ".github/workflows/test-runner.yml": runner})
    assert [(j.tier, j.runner) for j in shape.pr_jobs] == [
        ("cuda12.8.1-T4-linux-torch2.8.0", "pool-t4"), ("cuda12.8.1-L40S-linux-torch2.8.0", "pool-l40s"),
        ("cuda11.8.0-T4-windows-torch2.7.1", "CUDA-Windows-x64")]
    assert shape.pr_paths == ("csrc/**", "tests/**") and not shape.nightly_jobs and shape.nightly_cron == ""


HELPERS = '''
import torch
def id_formatter(label):
    def fmt(value):
        if isinstance(value, bool):
            return f"{label}={'T' if value else 'F'}"
        if isinstance(value, tuple) and all(isinstance(v, bool) for v in value):
            return f"{label}=" + "".join("T" if v else "F" for v in value)
        return f"{label}={value}"
    return fmt
def describe_dtype(dtype):
    return {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
TRUE_FALSE = (True, False)
'''
TESTS = '''
import pytest
import torch
from tests.helpers import TRUE_FALSE, describe_dtype, id_formatter
SIZES = [64, 128]
class TestQuant:
    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=describe_dtype)
    @pytest.mark.parametrize("signed", TRUE_FALSE, ids=id_formatter("signed"))
    @pytest.mark.parametrize("blocksize", SIZES)
    def test_blockwise(self, dtype, signed, blocksize):
        pass
    @pytest.mark.slow
    def test_slow(self):
        pass
@pytest.mark.parametrize("a, b", [(1, "x"), (2, "y")])
@pytest.mark.parametrize("t", [torch.float32, 0.5, None])
def test_pairs(a, b, t):
    pass
@pytest.mark.benchmark
@pytest.mark.parametrize("n", [1, 2])
def test_bench(n):
    pass
def test_plain():
    pass
'''


def test_collected_ids_match_pytests_own_collection(tmp_path: Path) -> None:
    """Oracle: ``pytest --collect-only`` on a hand-written file of the project's kind (stacked
    parametrize, helper id formatters, a module constant, tuple arguments, deselected marks)."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "helpers.py").write_text(HELPERS)
    (tmp_path / "tests" / "test_q.py").write_text(TESTS)
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\nmarkers = ["slow", "benchmark"]\n'
                                             "addopts = \"-m 'not slow and not benchmark'\"\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", "tests/test_q.py"], cwd=tmp_path, capture_output=True, text=True)
    real = [line for line in done.stdout.splitlines() if "::" in line]
    assert real, done.stdout + done.stderr
    ours = []
    for func in collected(TESTS):
        ids = list(func.ids) if func.cases <= 4 else None
        assert ids is not None or func.cases > 4
        prefix = f"tests/test_q.py::{func.cls + '::' if func.cls else ''}{func.name}"
        ours += [f"{prefix}[{i}]" for i in func.ids] if func.ids else [prefix]
    by_func = {f.name: f.cases for f in collected(TESTS)}
    assert by_func == {"test_blockwise": 8, "test_pairs": 6, "test_plain": 1}
    assert set(ours) <= set(real) and len(real) == 15
    assert [n for n in real if "test_pairs" in n][:4] == [n for n in ours if "test_pairs" in n]


def test_edited_tests_and_windows_from_hand_written_history() -> None:
    diff = textwrap.dedent("""\
        diff --git a/tests/test_optim.py b/tests/test_optim.py
        --- a/tests/test_optim.py
        +++ b/tests/test_optim.py
        @@ -10,7 +10,7 @@ def test_optimizer32bit(dim1, dim2):
        -    assert err < 1e-3
        +    assert err < 2e-3
        @@ -80,0 +81,3 @@ def test_optimizer32bit(dim1, dim2):
        +def test_new_guard():
        +    pass
        diff --git a/tests/test_ops.py b/tests/test_ops.py
        @@ -5,3 +5,2 @@ import torch
        -def test_removed_check():
        """)
    assert edited_tests(diff) == ["tests/test_optim.py::test_optimizer32bit", "tests/test_ops.py::test_removed_check"]
    commits = [{"subject": "Add LAMB (#10)", "pr": 10, "files": ["bitsandbytes/optim/lamb.py"]},
               {"subject": "docs (#11)", "pr": 11, "files": ["docs/x.md"]},
               {"subject": "Fix LAMB step (#12)", "pr": 12, "files": ["bitsandbytes/optim/lamb.py", "tests/test_optim.py"]},
               {"subject": "Fix ROCm build (#13)", "pr": 13, "files": ["csrc/x.cu", "tests/test_ops.py"]},
               {"subject": "Speed up (#14)", "pr": 14, "files": ["csrc/k.cu"]},
               {"subject": 'Revert "Speed up (#14)"', "pr": None, "files": ["csrc/k.cu"]},
               {"subject": "Fix flaky thresholds (#16)", "pr": 16, "files": ["tests/test_optim.py"]}]
    found = find_windows(commits, [""] * len(commits), {2: diff, 3: diff, 6: diff})
    assert [(w.start, w.end, w.kind, w.flaky) for w in found] == [(0, 2, "fix", False), (4, 5, "revert", False),
                                                                   (2, 6, "fix", True)]
    assert found[0].tests == ("tests/test_optim.py::test_optimizer32bit", "tests/test_ops.py::test_removed_check")


def test_verify_compares_and_refuses_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    stored = {"a": [1, {"b": "x"}], "c": 1}
    assert differences(stored, json.loads(json.dumps(stored))) == []
    assert differences(stored, {"a": [1, {"b": "y"}, 3], "d": 1}) == [
        "/a: 2 items in the data file, 3 fresh", "/a[1]/b: 'x' in the data file, 'y' fresh",
        "/c: only in the data file", "/d: only in the fresh extraction"]
    assert verify_main([]) == 2 and "usage" in capsys.readouterr().err
    assert verify_main([str(tmp_path / "no-repo")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "git" in err


def test_data_is_a_real_consecutive_stretch() -> None:
    commits = DATA_JSON["commits"]
    assert len(commits) == 240 and len({c["sha"] for c in commits}) == 240
    assert sum(c["pr"] is not None for c in commits) >= 150 and len(DATA_FILES) >= 10
    assert DATA.stat().st_size < 400_000
    assert all(0 <= w["start"] < w["end"] < len(commits) for w in DATA_JSON["windows"])
    assert [s["at"] for s in DATA_JSON["ci"]] == sorted(s["at"] for s in DATA_JSON["ci"])
    assert any(s["pr_jobs"] for s in DATA_JSON["ci"]) and not DATA_JSON["ci"][0]["pr_jobs"]
