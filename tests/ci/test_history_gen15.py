"""The fifteenth labelled history (`bench._history_gen15`, PEFT's real skeleton): its JUnit reads the
same through `ci.results.junit` and xml.etree, each failed test has exactly one label and each label
is a failed test, the real windows break where the data says and nowhere else, flakes fail within
binomial bounds of their rates, a seed gives the same history twice; the parametrize reader is
checked against pytest's own collection and the extractor's window finder against hand-made
subjects."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import _history_gen15 as gen15
from bench._history_gen15_extract import DATA, windows
from bench._history_gen15_extract import main as extract_main
from bench._history_gen15_parse import read_tests
from bench._history_gen15_verify import differences
from bench._history_gen15_world import GPU_FILES
from ci.results.junit import ERROR, FAILED, SKIPPED, parse_junit


@pytest.fixture(scope="module")
def quick() -> gen15.History:
    return gen15.generate(1, gen15.QUICK)


@pytest.fixture(scope="module")
def full() -> gen15.History:
    return gen15.generate(2, gen15.Scale())


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, quick: gen15.History) -> Path:
    root = tmp_path_factory.mktemp("peft")
    for file in quick.checkout_files:
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_text("")
    return root


def _node(file: str, classname: str, name: str) -> str:
    module = file[:-3].replace("/", ".")
    cls = classname[len(module) + 1:] if classname.startswith(module + ".") else ""
    return "::".join(p for p in (file, cls, name) if p)


def test_junit_reads_the_same_through_the_parser_and_etree(quick: gen15.History, tree: Path, tmp_path: Path) -> None:
    """Each report's failed cases and counts, by `parse_junit` in a checkout and by xml.etree."""
    checked = 0
    for run in quick.runs:
        for report in run.reports:
            path = tmp_path / "r.xml"
            path.write_text(report.xml, encoding="utf-8")
            parsed = parse_junit(path, root=tree, known_files=quick.checkout_files)
            suite = ET.fromstring(report.xml).find("testsuite")
            assert suite is not None
            cases = suite.findall("testcase")
            bad = {(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None}
            assert {(c.classname, c.name) for c in parsed.cases if c.outcome == FAILED} == bad
            assert int(suite.get("tests", "")) == len(cases) == len(parsed.cases)
            assert int(suite.get("failures", "")) == len(bad)
            assert int(suite.get("skipped", "")) == sum(c.outcome == SKIPPED for c in parsed.cases)
            assert all(c.file and c.file in quick.checkout_files for c in parsed.cases)
            checked += bool(bad)
    assert checked > 10


def test_each_failed_test_has_exactly_one_label(quick: gen15.History, tree: Path, tmp_path: Path) -> None:
    """Labels follow reports: one label per failed case, none for a passing or skipped one."""
    for run in quick.runs:
        for report in run.reports:
            path = tmp_path / "r.xml"
            path.write_text(report.xml, encoding="utf-8")
            failed = sorted(_node(c.file, c.classname, c.name)
                            for c in parse_junit(path, root=tree, known_files=quick.checkout_files).cases
                            if c.outcome in (FAILED, ERROR))
            assert sorted(label.node for label in report.labels) == failed
            assert all(label.tier == report.tier and label.every_attempt for label in report.labels)
            assert all(label.label in ("broken_on_main", "new", "infra", "flaky") for label in report.labels)


def test_the_introduced_window_breaks_exactly_its_commits(full: gen15.History) -> None:
    """#3006 fixes a bug introduced in #2960: GPU example tests fail in the nightlies of main
    inside [#2960, #3006) and in no run outside; CPU jobs skip them, so no pull request run sees it."""
    raw = json.loads(DATA.read_text(encoding="utf-8"))["commits"]
    start = next(i for i, c in enumerate(raw) if c["subject"].endswith("(#2960)"))
    end = next(i for i, c in enumerate(raw) if c["subject"].endswith("(#3006)"))
    why = "introduced window to " + raw[end]["sha"][:10]
    hits = [(run, label) for run in full.runs for label in run.labels if label.why.startswith(why)]
    assert hits and all(start <= run.commit < end for run, _ in hits)
    assert {run.event for run, _ in hits} == {"schedule"}
    window = next(w for w in full.world.windows if w.kind == "introduced")
    for run in full.runs:
        if run.event == "schedule" and start <= run.commit < end:
            for report in run.reports:
                if report.tier == "nightly single_gpu":
                    assert {c.node for c in window.cases} <= {lab.node for lab in report.labels}


def test_dependency_windows_end_at_their_fix(full: gen15.History) -> None:
    """A dependency break fails main's push runs from its onset until the fixing commit, never on
    or after the fix; tests-main (transformers main) sees a transformers break first."""
    for window in full.world.windows:
        if window.start is not None:
            continue
        why = f"{window.kind} window to {full.world.commits[window.end].sha[:10]}"
        runs = [r for r in full.runs if any(lab.why.startswith(why) for lab in r.labels)]
        assert all(r.commit < window.end for r in runs)
        pushes = [r for r in runs if r.event == "push"]
        assert all(r.started >= window.main_onset for r in pushes)
    main_first = [w for w in full.world.windows if w.main_onset < w.onset]
    assert main_first


def test_pull_requests_end_clean_and_their_breaks_are_new(full: gen15.History) -> None:
    """A merged pull request's last push carries no failure of its own; runs of a broken push fail
    its chosen tests with ``new`` in every job of the matching OS."""
    by_sha = {}
    for run in full.runs:
        by_sha.setdefault(run.sha, []).append(run)
    broken = 0
    for pr in full.pull_requests:
        if pr.merged is not None:
            last = by_sha.get(pr.pushes[-1].sha, [])
            assert all(lab.label != "new" for run in last for lab in run.labels if run.attempt == 1)
        for push in pr.pushes:
            for run in by_sha.get(push.sha, []):
                own = {lab.node for lab in run.labels if lab.why == "the pull request's own change"}
                assert own <= {c.node for c in pr.new_cases}
                broken += bool(own)
                assert push.broken or not own
    assert broken > 20


def test_flakes_fail_within_binomial_bounds(full: gen15.History) -> None:
    """Each flake's first-attempt failures over the jobs that ran it, pooled, within 4 sigma of its
    rates; a timing flake re-run after failing fails again far above its rate."""
    expected = variance = 0.0
    seen = again = trials = 0
    before = {(run.run_id, run.attempt, report.tier): {lab.node for lab in report.labels if lab.label == "flaky"}
              for run in full.runs for report in run.reports}
    for run in full.runs:
        for report in run.reports:
            failed = {lab.node: lab.why for lab in report.labels}
            for flake in full.flakes:
                marker = f'classname="{flake.case.classname}" name="{flake.case.name}"'
                if marker not in report.xml or (flake.cause == "winlock" and "windows" not in report.tier):
                    continue
                why = failed.get(flake.case.node, "")
                if flake.cause == "timing" and flake.case.node in before.get((run.run_id, run.attempt - 1, report.tier), ()):
                    trials += 1
                    again += why.endswith("(re-run on the same image)")
                    continue
                expected += flake.rate
                variance += flake.rate * (1 - flake.rate)
                seen += why.endswith("flake")
    assert abs(seen - expected) <= 4 * math.sqrt(variance) + 2, (seen, expected)
    assert trials >= 3 and again / trials > 0.15 > max(f.rate for f in full.flakes)


def test_gpu_tests_run_only_in_the_nightlies(quick: gen15.History) -> None:
    """A CPU job skips the GPU test files as PEFT's require_non_cpu does; the nightly runs them."""
    for run in quick.runs:
        for report in run.reports:
            root = ET.fromstring(report.xml)
            for case in root.iter("testcase"):
                file = case.get("classname", "").rsplit(".", 1)[0].replace(".", "/") + ".py"
                gpu = file in GPU_FILES or case.get("classname", "").replace(".", "/") + ".py" in GPU_FILES
                if gpu and run.event != "schedule":
                    assert case.find("skipped") is not None
            assert (run.event == "schedule") == report.tier.startswith("nightly")


def test_the_real_skeleton_is_kept(full: gen15.History) -> None:
    """At least 200 real commits with their pull request numbers; the matrix as tests.yml says it
    (3.9 dropped and 3.13 added, then macos-13 removed); runners lost leave runs short of a report."""
    raw = json.loads(DATA.read_text(encoding="utf-8"))
    assert len(raw["commits"]) >= 200 and len(DATA.read_bytes()) < 400_000
    for commit in raw["commits"]:
        m = re.search(r"\(#(\d+)\)\s*$", commit["subject"])
        assert commit["pr"] == (int(m.group(1)) if m else None)
    tiers = {report.tier for run in full.runs if run.event == "push" for report in run.reports}
    assert {"tests (macos-13, 3.9)", "tests (windows-latest, 3.13)", gen15.MAIN_TIER} <= tiers
    late = [r for r in full.runs if r.event == "push" and r.commit > full.world.shapes[-2].index]
    assert late and all("macos" not in rep.tier and "3.9" not in rep.tier for r in late for rep in r.reports)
    for shape in full.world.shapes:  # what this history models: no cancels, no reruns, no fail-fast
        assert not shape.fail_fast and not shape.cancel_in_progress and "--reruns" not in shape.make_test
        assert shape.make_test == "python -m pytest -n 3 tests/" and shape.cron == "0 2 * * *"
    sizes = {len(full.world.shape_at(r.commit).os) * len(full.world.shape_at(r.commit).python)
             for r in full.runs if r.event == "push" and r.reports and r.reports[0].tier != gen15.MAIN_TIER}
    assert sizes == {12, 8}
    short = [r for r in full.runs if r.event == "pull_request" and r.attempt == 1
             and len(r.reports) < len(full.world.shape_at(r.commit).os) * len(full.world.shape_at(r.commit).python)]
    assert short


def test_a_seed_gives_the_same_history(quick: gen15.History) -> None:
    again = gen15.generate(1, gen15.QUICK)
    assert [(r.run_id, r.attempt, r.sha, [x.xml for x in r.reports]) for r in again.runs] == \
        [(r.run_id, r.attempt, r.sha, [x.xml for x in r.reports]) for r in quick.runs]
    other = gen15.generate(2, gen15.QUICK)
    assert [r.run_id for r in other.runs] != [r.run_id for r in quick.runs]


def test_parametrize_ids_match_pytest_collection(tmp_path: Path) -> None:
    """The ids `read_tests` forms are the ones pytest collects (the oracle: pytest itself)."""
    source = textwrap.dedent('''
        import pytest
        MODELS = ["hf-internal-testing/tiny-random-gpt2", "facebook/opt-125m"]
        class LoraConfig: pass
        class IA3Config: pass
        CONFIGS = [(LoraConfig, {"r": 8}), (IA3Config, {})]
        class TestThing:
            @pytest.mark.parametrize("model_id", MODELS)
            @pytest.mark.parametrize("config_cls,config_kwargs", CONFIGS)
            def test_stacked(self, model_id, config_cls, config_kwargs):
                pass
            @pytest.mark.parametrize("n", [1, 2.5, True, "a b"])
            def test_scalars(self, n):
                pass
        def test_plain():
            pass
        ''')
    (tmp_path / "test_sample.py").write_text(source)
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "test_sample.py"], cwd=tmp_path, capture_output=True, text=True)
    collected = {line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line}
    mine = {"::".join(p for p in (f.cls, f"{f.name}[{i}]" if i else f.name) if p)
            for f in read_tests(source) for i in (f.ids or ("",))}
    assert collected and mine == collected
    assert [f.cases for f in read_tests(source)] == [4, 4, 1]


def test_the_window_finder_reads_reverts_introduced_and_dependency_fixes() -> None:
    commits = [{"pr": 1, "subject": "Add X (#1)", "files": []},
               {"pr": 2, "subject": "FIX Bug introduced in #1 (#2)", "files": ["tests/test_a.py", "src/x.py"]},
               {"pr": 3, "subject": "Add Y (#3)", "files": []},
               {"pr": 4, "subject": 'Revert "Add Y (#3)" (#4)', "files": []},
               {"pr": 5, "subject": "FIX: DynamicCache key_cache attribute deprecation (#5)", "files": []},
               {"pr": 6, "subject": "FIX typo in docs (#6)", "files": []},
               {"pr": 7, "subject": "CI: Fix Windows error for tests (#7)", "files": []}]
    found = [(w["kind"], w["start"], w["end"], w["tests"]) for w in windows(commits)]
    assert found == [("introduced", 0, 1, ["tests/test_a.py"]), ("revert", 2, 3, []),
                     ("dependency", None, 4, []), ("platform", None, 6, [])]


def test_verify_names_each_difference() -> None:
    assert differences({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == ["$.a[1].b: 2 != 3"]
    assert differences({"a": [1]}, {"a": [1, 2]}) == ["$.a: 1 items committed, 2 extracted"]
    assert differences({"a": 1}, {"a": 1}) == []


def test_the_extractor_refuses_a_directory_that_is_no_clone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert extract_main([str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "not a git repository" in err and "Traceback" not in err
    assert extract_main([]) == 2
