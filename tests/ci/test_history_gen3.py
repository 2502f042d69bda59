"""The third labelled history (`bench._history_gen3`) and `python -m bench verdicts --generator gen3`.

Oracles independent of the generator: its JUnit read by `xml.etree` directly and by
`ci.results.junit` must agree, and its testcases have the shape a real pytest + pytest-rerunfailures
run with `ci.pytest_attempts` writes (a subprocess); flake counts must sit within binomial bounds of
the configured rates; each label must match what the JUnit shows and what the story planted; a
generated run ingested through `bench._verdicts_score` must land in the store with its own tier's
shard count.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from bench import _history_gen2, verdicts
from bench._history_gen3 import BROKEN_ON_MAIN, FLAKY, LABELS, NEW, QUICK, History, Run, Scale, generate
from bench._history_gen3_world import FLAKY as FLAKY_TESTS
from bench._history_gen3_text import failure, junit_xml
from bench._history_gen3_text import testcase as case_xml
from bench._history_gen3_world import NUMERIC, PORT, TIER, TIERS
from bench._history_gen3_world import Test as Case
from bench._verdicts_score import ingest_run
from ci.history.store import open_store
from ci.results.junit import ATTEMPT_OUTCOME, parse_junit


@pytest.fixture(scope="module")
def history() -> History:
    return generate(1, Scale(commits=40, prs=30))


def _etree_cases(xml: str) -> dict[str, list[str]]:
    """node -> each attempt's outcome, read straight off the elements (the oracle)."""
    out: dict[str, list[str]] = {}
    for case in ET.fromstring(xml).iter("testcase"):
        tags = {child.tag for child in case}
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        outcome = ("error" if "error" in tags else "failed" if "failure" in tags
                   else props.get(ATTEMPT_OUTCOME) or "passed")
        if case.get("name"):  # a crashed worker's rerun is a nameless element naming no test
            out.setdefault(f"{case.get('file')}::{case.get('name')}", []).append(outcome)
    return out


def _failed(outcomes: list[str]) -> bool:
    """A failed attempt, or a rerun at all (an element without its attempt's properties was rerun)."""
    return len(outcomes) > 1 or any(o in ("failed", "error") for o in outcomes)


def test_the_same_seed_is_the_same_history() -> None:
    one, two = generate(3, QUICK), generate(3, QUICK)
    assert [(r.run_id, r.attempt, [x.xml for x in r.reports], r.labels) for r in one.runs] == \
        [(r.run_id, r.attempt, [x.xml for x in r.reports], r.labels) for r in two.runs]
    assert [r.sha for r in generate(4, QUICK).runs] != [r.sha for r in one.runs]


def test_labels_are_the_benchs_truth_labels() -> None:
    assert LABELS == _history_gen2.LABELS


def test_the_suite_is_vllm_shaped() -> None:
    assert len(TIERS) == 6 and sum(len(t.tests) for t in TIERS) >= 100
    assert len({t.shards for t in TIERS}) >= 3 and len({t.reruns for t in TIERS}) == 3
    for tier in TIERS:
        assert sorted(t.node for s in range(tier.shards) for t in tier.shard(s)) == sorted(t.node for t in tier.tests)
        assert all(tier.shard(s) for s in range(tier.shards))


def test_its_junit_reads_the_same_with_ci_results_junit_and_etree(history: History, tmp_path: Path) -> None:
    checked = 0
    for run in history.runs[:150]:
        for report in run.reports:
            path = tmp_path / "r.xml"
            path.write_text(report.xml, encoding="utf-8")
            parsed = {f"{c.file}::{c.name}": [a.outcome for a in c.attempts]
                      for c in parse_junit(path).cases}
            assert parsed == _etree_cases(report.xml)
            checked += 1
    assert checked > 200


def test_every_test_that_failed_an_attempt_has_one_label_that_matches_it(history: History) -> None:
    causes: Counter[str] = Counter()
    for run in history.runs:
        labels = {(lab.node, lab.tier): lab for lab in run.labels}
        assert len(labels) == len(run.labels), run.run_id
        failing = {}
        for report in run.reports:
            failing.update({(node, report.tier): outcomes for node, outcomes
                            in _etree_cases(report.xml).items() if _failed(outcomes)})
        assert set(failing) == set(labels), run.run_id
        for key, outcomes in failing.items():
            label = labels[key]
            assert label.every_attempt == all(o != "passed" for o in outcomes), (run.run_id, key, outcomes)
            if label.label != FLAKY:  # a breakage or a stuck GPU fails every attempt
                assert label.every_attempt
            causes[label.why.partition(":")[0]] += 1
    assert set(causes) == {"breakage", "own-bug", "stuck-gpu", "flake"}


def test_a_test_broken_on_main_fails_in_every_main_run_of_its_window_and_none_after(history: History) -> None:
    mains = [r for r in history.runs if r.event in ("push", "nightly")]
    for b in history.breakages:
        for node in b.nodes:
            tier = node_tier(node)
            ran = [r for r in mains if any(x.tier == tier for x in r.reports)]
            inside = [r for r in ran if b.start <= r.main_index < b.end]
            assert inside, (b.name, node)
            for run in ran:
                label = next((lab for lab in run.labels if lab.node == node), None)
                if b.start <= run.main_index < b.end:
                    assert label and label.label == BROKEN_ON_MAIN and label.every_attempt, (b.name, run.main_index)
                else:
                    assert label is None or label.label != BROKEN_ON_MAIN


def test_each_tier_reruns_as_its_policy_says_never_an_import_error_and_a_crash_rerun_is_nameless(
        history: History) -> None:
    most: dict[str, int] = {}
    once, nameless = 0, Counter()
    for run in history.runs:
        causes = {lab.node: lab.why for lab in run.labels}
        for report in run.reports:
            nameless[report.tier] += sum(1 for case in ET.fromstring(report.xml).iter("testcase")
                                         if case.attrib == {"time": "0.000"})
            for node, outcomes in _etree_cases(report.xml).items():
                if node == "":
                    continue
                most[report.tier] = max(most.get(report.tier, 0), len(outcomes))
                if causes.get(node) in ("flake:xdist", "breakage:transformers bump, fixed late"):
                    assert len(outcomes) == 1, (node, outcomes)
                    once += 1
    assert most == {t.name: 1 + t.reruns for t in TIERS} and once > 5
    assert set(+nameless) == {t.name for t in TIERS if t.xdist and t.reruns}


_REAL = """import pytest
_n = []
@pytest.fixture
def server():
    _n.append(1)
    if len(_n) < 2:
        raise OSError(98, "Address already in use")
def test_setup(server):
    pass
def test_numeric():
    raise AssertionError("Tensor-likes are not close!\\n\\nMismatched elements: 3 / 4096 (0.1%)")
"""
_RECORDER = """from ci.pytest_attempts import AttemptRecorder
def pytest_configure(config):
    config.pluginmanager.register(AttemptRecorder(), "attempts")
"""


def _shape(xml: str) -> list[tuple]:
    """Each testcase element but its times, line and failure texts: what a reader keys on."""
    out = []
    for case in ET.fromstring(xml).iter("testcase"):
        props = tuple((p.get("name"), p.get("value")) for p in case.iter("property")
                      if p.get("name") != "ci.attempt.text")
        children = tuple((c.tag, c.get("message")) for c in case if c.tag != "properties")
        out.append((case.get("classname"), case.get("name"), case.get("file"), props, children,
                    [c.tag for c in case]))
    return out


def test_its_testcases_have_the_shape_a_real_pytest_rerunfailures_run_writes(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(_REAL, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(_RECORDER, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--reruns", "1",
                    "--junitxml=real.xml", "-o", "junit_family=xunit1", "test_x.py"], cwd=tmp_path, env=env,
                   capture_output=True, timeout=120)
    setup, numeric = Case("t", "test_x.py", "test_setup", 0, 7, 0.1), Case("t", "test_x.py", "test_numeric", 0, 9, 0.1)
    bad = failure(numeric, "AssertionError: Tensor-likes are not close!\n\nMismatched elements: 3 / 4096 (0.1%)")
    ours = junit_xml([case_xml(setup, [failure(setup, "OSError: [Errno 98] Address already in use", setup=True), None],
                               [0.1, 0.1], True), case_xml(numeric, [bad, bad], [0.1, 0.1], True)], 1, 0, 0.4, "h", "")
    assert _shape(ours) == _shape((tmp_path / "real.xml").read_text(encoding="utf-8"))


def node_tier(node: str) -> str:
    return next(t.name for t in TIERS for case in t.tests if case.node == node)


def test_the_story_holds_its_planted_breakages(history: History) -> None:
    by_name = {b.name: b for b in history.breakages}
    fp8 = by_name["fp8 cases of a parametrized test"]
    cases = [t.node for t in TIER["kernels-attention"].tests if "test_varlen_with_paged_kv[" in t.node]
    assert len(fp8.nodes) == 3 and len(cases) == 9 and set(fp8.nodes) < set(cases)
    forward = by_name["fixed forward three commits later"]
    assert forward.end - forward.start == 3
    dep = [b for b in history.breakages if b.name.startswith("transformers bump")]
    assert len({b.start for b in dep}) == 1 and sum(len(b.nodes) for b in dep) >= 15
    assert len({node_tier(n) for b in dep for n in b.nodes}) >= 3
    flaky_nodes = {f.node for f in FLAKY_TESTS}
    assert set(by_name["a download-flaky test, another message"].nodes) <= flaky_nodes
    # the plugin never reruns an ImportError: one attempt although models-language reruns once
    late = by_name["transformers bump, fixed late"]
    assert late.once and all(e.startswith("ImportError") for e in late.errors)
    merged = by_name["merged although its own runs failed"]
    pr = next(p for p in history.pull_requests if p.merged_at == merged.start)
    own = [lab for r in history.runs if r.pr == pr.number for lab in r.labels if lab.node in merged.nodes]
    assert own and all(lab.label == NEW for lab in own)
    landed = next(r.started for r in history.runs if r.event == "push" and r.main_index == merged.start)
    assert max(r.finished for r in history.runs if r.pr == pr.number) < landed


def test_pull_requests_lag_main_rerun_failed_jobs_and_break_their_own_tests(history: History) -> None:
    prs = [r for r in history.runs if r.event == "pull_request"]
    pushed = {r.main_index: r.started for r in history.runs if r.event == "push" and r.attempt == 1}
    lags = Counter()
    for run in prs:
        assert history.commits[run.base_index] == run.base_sha
        lags[max(i for i, t in pushed.items() if t <= run.started) - run.base_index] += 1
    assert min(lags) >= 0 and max(lags) <= 10 and len(lags) >= 6, lags
    assert any(lab.label == NEW and lab.why == "own-bug" for r in prs for lab in r.labels)
    first = {(r.run_id, r.attempt): r for r in history.runs}
    seconds = [r for r in history.runs if r.attempt == 2]
    assert seconds
    for run in seconds:
        one = first[(run.run_id, 1)]
        assert one.sha == run.sha and one.finished < run.started
        failed = {(x.tier, x.shard) for x in one.reports
                  if any(outs[-1] != "passed" for outs in _etree_cases(x.xml).values())}
        assert {(x.tier, x.shard) for x in run.reports} == failed


def _first_attempts(runs: list[Run], nodes: set[str]) -> Counter[tuple[str, bool]]:
    """(node, failed) of each run's first attempt of ``nodes``, where nothing but a flake was there."""
    seen: Counter[tuple[str, bool]] = Counter()
    for run in runs:
        other = {lab.node for lab in run.labels if not lab.why.startswith("flake:")}
        for report in run.reports:
            for node, outcomes in _etree_cases(report.xml).items():
                if node in nodes and node not in other:
                    seen[(node, outcomes[0] != "passed")] += 1
    return seen


def test_flakes_fail_at_their_configured_rate_within_binomial_bounds() -> None:
    # no trigger changes these rates on a first attempt (a crash's first attempt is nameless: not here)
    steady = {f.node: f.rate for f in FLAKY_TESTS if f.kind in (NUMERIC, PORT)}
    runs = [r for seed in (1, 2) for r in generate(seed, Scale(commits=60, prs=60)).runs]
    seen = _first_attempts(runs, set(steady))
    for node, rate in steady.items():
        n, k = seen[(node, True)] + seen[(node, False)], seen[(node, True)]
        assert n >= 60, node
        slack = 4.5 * math.sqrt(n * rate * (1 - rate))
        assert abs(k - n * rate) <= slack, (node, k, n, rate)


def test_an_ingested_report_carries_its_own_tiers_shard_count(history: History) -> None:
    run = next(r for r in history.runs if any(x.tier == "models-language" for x in r.reports))
    with tempfile.TemporaryDirectory() as tmp, open_store(str(Path(tmp) / "h.sqlite")) as store:
        ingest_run(store, run, Path(tmp))
        shards = {tier: shard for tier, shard in store.fetchall("SELECT tier, shard FROM reports")}
    assert shards["models-language"] in {f"{s}/4" for s in range(1, 5)}
    assert shards["basic-correctness"] == "1/1"


def test_the_bench_scores_gen3_and_names_it_in_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert verdicts.main(["--generator", "gen3", "--quick", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "verdicts on the gen3 history, seeds 1" in out
    for row in (*LABELS, verdicts.EVERY, "overall"):
        assert any(line.startswith(row + " ") for line in out.splitlines()), (row, out)
    assert verdicts.main(["--generator", "gen-unknown"]) == 2
    err = capsys.readouterr().err
    assert "gen2, gen3, " in err and "replay, both" in err and len(err.strip().splitlines()) == 1
