"""The fifth labelled history (`bench._history_gen5`, PyTorch-CI-shaped, held out from the verdict
rules): its JUnit reads the same with `ci.results.junit` and `xml.etree`; its flakes fail at
their rates within binomial bounds (the load-dependent one at its load's rate); every label
matches its test's attempts, and each cause of the story shows where the story puts it.
The verdicts' score on it is not asserted here: the lead measures it once, when the rules are final."""

from __future__ import annotations

import math
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from functools import lru_cache
from pathlib import Path

import pytest

from bench import _history_gen2, _history_gen3, _history_gen4, _history_gen5, verdicts
from bench._history_gen5 import LABELS, QUICK, History, Report, Run, Scale
from bench._history_gen5_story import DAY
from bench._history_gen5_text import Attempt, CaseRun, shard_xml
from bench._history_gen5_world import (CASES, DISABLED_NODE, LOAD_NODE, NEW_GRAPHS, OLD_GRAPHS, PARTIAL_NODES,
                                       REVERT_NODE, ROCM_BUG_NODES, ROCM_DEFAULT, SLOW, SLOW_NODE, SRT, TIERS)
from ci.history.ingest import node_id
from ci.results.junit import ERROR, FAILED, SKIPPED, CaseResult, parse_junit
from tests.ci.rerun_oracle_support import COUNTER, real_junit, shape

SEEDS = (1, 2, 3, 4, 5)
MID = Scale(80, 32)  # half the default history: every story beat, half the time to read
TIER = {t.name: t for t in TIERS}
Parsed = list[tuple[Run, Report, dict[str, CaseResult]]]


@lru_cache(maxsize=None)
def history(seed: int, scale: Scale = MID) -> History:
    return _history_gen5.generate(seed, scale)


@lru_cache(maxsize=None)
def parsed(seed: int, scale: Scale = MID) -> Parsed:
    """Every report of the history as `ci.results.junit.parse_junit` reads it, by node id."""
    out: Parsed = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "report.xml"
        for run in history(seed, scale).runs:
            for report in run.reports:
                path.write_text(report.xml, encoding="utf-8")
                out.append((run, report, {node_id(c): c for c in parse_junit(path).cases}))
    return out


def failed(case: CaseResult) -> bool:
    return any(a.outcome in (FAILED, ERROR) for a in case.attempts)


def test_gen5_is_selectable_and_the_other_generators_are_unchanged() -> None:
    assert verdicts.GENERATORS["gen5"].generate is _history_gen5.generate
    assert verdicts.GENERATORS["gen5"].quick == QUICK
    assert verdicts.GENERATORS["gen4"].generate is _history_gen4.generate
    assert verdicts.GENERATORS["gen3"].generate is _history_gen3.generate
    assert verdicts.GENERATORS["gen2"].generate is _history_gen2.generate


def test_the_bench_runs_gen5_and_names_it_in_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert verdicts.main(["--generator", "gen5", "--quick", "--seeds", "1"]) == 0
    assert "verdicts on the gen5 history, seeds 1" in capsys.readouterr().out  # the score is not read here
    assert verdicts.main(["--generator", "gen-unknown"]) == 2
    err = capsys.readouterr().err
    assert "gen4, gen5, gen6, gen7, gen8, gen9, gen10, gen11, gen12, gen13, gen14, gen15, replay, both" in err and len(err.strip().splitlines()) == 1


def _etree_attempts(xml: str) -> dict[tuple[str, str, str], list[str]]:
    """Each test's attempt outcomes read with xml.etree alone (the registry plugin's properties
    name a rerun attempt's outcome; an element with no child and no property passed)."""
    out: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for case in ET.fromstring(xml).iter("testcase"):
        tags = {child.tag for child in case}
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        outcome = (ERROR if "error" in tags else FAILED if "failure" in tags else SKIPPED if "skipped" in tags
                   else props.get("ci.attempt.outcome", "passed"))
        out[(case.get("file", ""), case.get("classname", ""), case.get("name", ""))].append(outcome)
    return out


@pytest.mark.parametrize("scale", [QUICK, Scale(30, 14, attempt_text=False)], ids=["attempt-text", "stock"])
@pytest.mark.parametrize("seed", SEEDS)
def test_every_report_reads_the_same_with_ci_results_junit_and_etree(seed: int, scale: Scale) -> None:
    for _, report, cases in parsed(seed, scale):
        by_etree = _etree_attempts(report.xml)
        by_junit = {(c.file, c.classname, c.name): [a.outcome for a in c.attempts] for c in cases.values()}
        assert by_junit == by_etree
        top = ET.fromstring(report.xml).find("testsuite")
        assert top is not None and int(top.get("tests", "-1")) == len(cases)
        assert int(top.get("failures", "-1")) == sum(c.outcome == FAILED for c in cases.values())


def check_labels(seed: int, scale: Scale) -> None:
    for run, report, cases in parsed(seed, scale):
        labels = {label.node: label for label in report.labels}
        assert len(labels) == len(report.labels), f"a node labelled twice in run {run.run_id}"
        assert {n for n, c in cases.items() if failed(c)} == set(labels), (run.event, run.sha, report.tier)
        for node, label in labels.items():
            assert label.label in LABELS and label.tier == report.tier and label.why
            assert label.every_attempt == (cases[node].attempts[-1].outcome in (FAILED, ERROR)), node
            if label.label in ("broken_on_main", "new", "infra"):
                assert label.every_attempt and all(a.outcome in (FAILED, ERROR) for a in cases[node].attempts)


@pytest.mark.parametrize("seed", SEEDS)
def test_every_failed_test_has_one_label_consistent_with_its_attempts(seed: int) -> None:
    check_labels(seed, MID)


@pytest.mark.parametrize("seed", [6, 17, 123456, 2**31 + 5])
def test_any_seed_and_a_small_scale_give_a_consistent_history(seed: int) -> None:
    for scale in (QUICK, Scale(12, 4)):
        check_labels(seed, scale)
        assert _history_gen5.generate(seed, scale).runs[-1].reports[0].xml == history(seed, scale).runs[-1].reports[0].xml


def _bound(fails: int, chances: list[float]) -> tuple[float, float]:
    mean = sum(chances)
    spread = 4.5 * math.sqrt(sum(p * (1 - p) for p in chances)) + 2
    assert mean - spread <= fails <= mean + spread, (fails, mean, spread)
    return fails, mean


def test_flakes_fail_at_their_rates_within_binomial_bounds() -> None:
    drawn: dict[str, list[float]] = defaultdict(list)
    fails: Counter[str] = Counter()
    by_load = {True: [0, 0], False: [0, 0]}
    for seed in SEEDS:
        for run, report, cases in parsed(seed):
            tier = TIER[report.tier]
            if tier.file_retry:
                continue  # the script keeps a passed earlier attempt out: only some draws are visible
            labels = {label.node: label.label for label in report.labels}
            for case in CASES:
                node = case.node if case.node in cases else case.node.replace(OLD_GRAPHS, NEW_GRAPHS)
                flake = case.flake
                if (flake is None or node not in cases or tier.platform not in flake.platforms
                        or labels.get(node, "flaky") != "flaky" or cases[node].outcome == SKIPPED):
                    continue
                for attempt in cases[node].attempts:
                    drawn[case.node].append(flake.chance(run.load))
                    fails[case.node] += attempt.outcome in (FAILED, ERROR)
                    if case.node == LOAD_NODE and (run.load >= 0.55 or run.load <= 0.35):
                        by_load[run.load >= 0.55][0] += attempt.outcome in (FAILED, ERROR)
                        by_load[run.load >= 0.55][1] += 1
    assert len(drawn) >= 8
    for node, chances in drawn.items():
        _bound(fails[node], chances)
    (busy_f, busy_n), (idle_f, idle_n) = by_load[True], by_load[False]
    assert busy_n > 100 and idle_n > 100 and busy_f / busy_n > 1.4 * idle_f / idle_n


def _push_failures(seed: int, tier: str) -> dict[int, set[str]]:
    out: dict[int, set[str]] = defaultdict(set)
    for run, report, cases in parsed(seed):
        if run.event == "push" and report.tier == tier:
            out[run.commit].update(n for n, c in cases.items() if failed(c))
            out[run.commit].add("")  # the commit was seen
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_main_breakages_rocm_only_bug_partial_fix_revert_and_reland(seed: int) -> None:
    story = history(seed).story
    cuda, rocm = _push_failures(seed, "cuda-sm90-default"), _push_failures(seed, ROCM_DEFAULT.name)
    rocm_bug, first, second, landed, relanded, _ = story.breakages
    outage = {r.commit for r in history(seed).runs if r.event == "push" and r.started.timestamp() and
              (r.started - _history_gen5.EPOCH).total_seconds() in story.outage}
    for commit, nodes in rocm.items():
        if commit not in outage:
            assert all((n in nodes) == (rocm_bug.start <= commit < rocm_bug.end) for n in ROCM_BUG_NODES), commit
    assert not any(n in nodes for nodes in cuda.values() for n in ROCM_BUG_NODES)
    for commit, nodes in cuda.items():
        assert {n for n in PARTIAL_NODES if n in nodes} == (
            set(PARTIAL_NODES) if first.start <= commit < first.end else
            set(PARTIAL_NODES[2:]) if first.end <= commit < second.end else set()), commit
        assert (REVERT_NODE in nodes) == (landed.start <= commit < landed.end or relanded.start <= commit < relanded.end)
    assert landed.end < relanded.start and first.end < second.end


@pytest.mark.parametrize("seed", SEEDS)
def test_the_rocm_outage_is_infra_on_rocm_only(seed: int) -> None:
    h = history(seed)
    hit = 0
    for run, report, cases in parsed(seed):
        inside = (run.started - _history_gen5.EPOCH).total_seconds() in h.story.outage
        for label in report.labels:
            assert (label.label == "infra") == (inside and report.tier == ROCM_DEFAULT.name), label
        if inside and report.tier == ROCM_DEFAULT.name:
            hit += 1
            assert all(c.outcome in (ERROR, SKIPPED) and "hipErrorNoDevice" in c.attempts[0].message
                       for c in cases.values() if c.outcome != SKIPPED)
    missing = [m for r in h.runs + h.silent for m in r.missing if m[0] == ROCM_DEFAULT.name and not r.cancelled]
    assert hit and missing  # some jobs wrote JUnit full of device errors, some failed at setup and wrote none


@pytest.mark.parametrize("seed", SEEDS)
def test_disabled_renamed_sharded_and_nightly(seed: int) -> None:
    h = history(seed)
    story = h.story
    shards: dict[tuple[str, str], set[int]] = defaultdict(set)
    for run, report, cases in parsed(seed):
        start = (run.started - _history_gen5.EPOCH).total_seconds()
        renamed = run.commit >= story.renamed
        assert all((OLD_GRAPHS in n) != renamed for n in cases if "TestCudaGraphs" in n)
        node = DISABLED_NODE.replace(OLD_GRAPHS, NEW_GRAPHS) if renamed else DISABLED_NODE
        if node in cases:
            skipped = cases[node].outcome == SKIPPED
            assert skipped == (report.tier == ROCM_DEFAULT.name and start in story.disabled)
            assert not skipped or "disabled because an issue exists" in cases[node].attempts[0].message
        for c in cases.values():
            shards[(report.tier, c.file)].add(report.shard)
        assert (run.event == "nightly") == (report.tier == SLOW.name)  # the slow tier runs nightly only
        if run.event == "nightly":
            assert report.tier == SLOW.name and run.sha == story.shas[run.commit]
            assert run.commit in story.day_ends() and run.started.timestamp() > 0
    assert any(len(s) > 1 for (tier, _), s in shards.items() if tier != SRT.name)  # a file moved shard
    nightly = [r for r in h.runs if r.event == "nightly"]
    assert len(nightly) == story.days and any(lb.node == SLOW_NODE for r in nightly for lb in r.labels)
    assert all((r.started - _history_gen5.EPOCH).total_seconds() // DAY > story.times[r.commit] // DAY for r in nightly)


@pytest.mark.parametrize("seed", SEEDS)
def test_pull_requests_cancelled_stale_stacked_and_rerun(seed: int) -> None:
    h = history(seed)
    story = h.story
    prs = {pr.number: pr for pr in story.prs}
    cancelled = [r for r in h.runs if r.cancelled]
    assert cancelled and all(r.event == "pull_request" for r in cancelled + h.silent if r.cancelled)
    assert any(rep.partial for r in cancelled for rep in r.reports)
    assert any(story.tip_at(pr.pushes[0].time) - pr.base >= 30 for pr in story.prs)
    stacked = [pr for pr in story.prs if pr.stack]
    assert stacked and all(prs[pr.stack[0]].base == pr.base for pr in stacked)
    runs = {r.pr: r for r in h.runs if r.pr in {pr.number for pr in stacked} and not r.cancelled}
    assert any(lb.label == "new" and "ghstack" in lb.why for r in runs.values() for lb in r.labels)
    for run in h.runs:
        if run.attempt == 2:
            assert {rep.tier for rep in run.reports} <= {ROCM_DEFAULT.name} and run.event == "pull_request"
        assert all(lb.label != "new" for lb in run.labels) or run.event == "pull_request"


def test_flakes_of_each_kind_and_the_file_retried_tier() -> None:
    texts: Counter[str] = Counter()
    retried = late = 0
    for seed, scale in [(seed, scale) for seed in SEEDS for scale in (MID, QUICK)]:
        for run, report, cases in parsed(seed, scale):
            for label in report.labels:
                if label.label == "flaky":
                    message = cases[label.node].attempts[0].message or cases[label.node].attempts[-1].message
                    texts.update(k for k in ("WorkNCCL", "EADDRINUSE", "Address already in use", "not close",
                                             "Triton compile", "Server failed to start") if k in message)
            if TIER[report.tier].file_retry:
                retried += sum(1 for c in cases.values() if len(c.attempts) == 2 and failed(c))
                # passed in the file's first run (kept out of the report), failed in its retry
                late += sum(1 for lb in report.labels if lb.label == "flaky" and len(cases[lb.node].attempts) == 1
                            and lb.every_attempt and any(k in lb.why for k in ("Server failed", "Address already")))
    assert len(texts) == 6 and retried and late


_REAL_TESTS = COUNTER + '''
def test_flaky():
    if _attempt("flaky.count") < 2:
        raise RuntimeError("NCCL watchdog timeout")

def test_broken():
    raise AssertionError("Tensor-likes are not close!")

@pytest.mark.skip(reason="Test is disabled because an issue exists disabling it")
def test_disabled():
    pass

def test_fine():
    pass
'''


@pytest.mark.parametrize("attempt_text", [True, False], ids=["registry-plugin", "stock"])
def test_a_shard_is_written_as_real_pytest_with_rerunfailures_writes_it(tmp_path: Path, attempt_text: bool) -> None:
    real = real_junit(tmp_path, _REAL_TESTS, attempt_text)
    fail = Attempt(True, "RuntimeError: NCCL watchdog timeout")
    broken = Attempt(True, "AssertionError: Tensor-likes are not close!")
    mine = shard_xml([CaseRun("test_real.py", "test_real", "test_flaky", 0.1, (fail, fail, Attempt(False))),
                      CaseRun("test_real.py", "test_real", "test_broken", 0.1, (broken,) * 3),
                      CaseRun("test_real.py", "test_real", "test_disabled", 0.0,
                              skipped="Test is disabled because an issue exists disabling it"),
                      CaseRun("test_real.py", "test_real", "test_fine", 0.1)],
                     attempt_text=attempt_text, file_retry=False, hostname="h")
    assert shape(mine) == shape(real)
    (tmp_path / "mine.xml").write_text(mine, encoding="utf-8")
    read = [{node_id(c): ([a.outcome for a in c.attempts], [a.message.split(":")[0] for a in c.attempts])
             for c in parse_junit(tmp_path / name).cases} for name in ("mine.xml", "real.xml")]
    assert read[0] == read[1]
