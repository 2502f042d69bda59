"""The fourth labelled history (`bench._history_gen4`, a Liger-Kernel-like suite behind a merge
queue): its JUnit is what pytest + pytest-rerunfailures write (a real run in a subprocess is the
oracle) and reads the same with `ci.results.junit` and `xml.etree`; its flakes fail at their
rates within binomial bounds; every label matches its test's attempts and the story."""

from __future__ import annotations

import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import replace
from datetime import datetime
from functools import lru_cache
from pathlib import Path

import pytest

from bench import _history_gen2, _history_gen3, _history_gen4, _verdicts_records as records, verdicts
from bench._history_gen4_text import CaseOutcome, Failure, shard_xml
from bench._history_gen4_world import LABELS, History, Run, TestSpec
from bench._verdicts_score import _identity, checkout, checkout_files, score_history
from ci.history.ingest import prepare
from ci.history.model import MERGE_GROUP
from ci.results.junit import ERROR, FAILED, parse_junit

SEEDS = (1, 2, 3, 4, 5)


@lru_cache(maxsize=None)
def history(seed: int) -> History:
    return _history_gen4.generate(seed)


def _cases(xml: str, tmp_path: Path) -> dict[str, tuple[str, ...]]:
    """node -> attempt outcomes, as `ci.results.junit` reads the report."""
    path = tmp_path / "r.xml"
    path.write_text(xml, encoding="utf-8")
    return {f"{c.file}::{c.name}": tuple(a.outcome for a in c.attempts) for c in parse_junit(path).cases}


def _fixed(h: History, run: Run) -> bool:
    return run.pr == 1000 + _history_gen4.Scale().prs // 2 or h.fix_commit <= run.commit


def test_gen4_is_selectable_and_gen2_gen3_are_unchanged() -> None:
    assert verdicts.GENERATORS["gen4"].generate is _history_gen4.generate
    assert verdicts.GENERATORS["gen2"].generate is _history_gen2.generate
    assert verdicts.GENERATORS["gen3"].generate is _history_gen3.generate
    assert verdicts.GENERATORS["gen2"].scale == _history_gen2.Scale()


def test_its_junit_has_real_pytest_rerunfailures_shape(tmp_path: Path) -> None:
    """A real pytest --reruns 2 run: a test failing every attempt, one failing once then passing."""
    (tmp_path / "test_k.py").write_text(
        "_n = []\ndef test_always():\n    assert 1 == 2\n"
        "def test_once():\n    _n.append(1)\n    assert len(_n) > 1\ndef test_ok():\n    pass\n", encoding="utf-8")
    real = tmp_path / "real.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
                           "--reruns", "2", f"--junitxml={real}", "-o", "junit_family=xunit1", "test_k.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:]
    bad = Failure("AssertionError: assert 1 == 2", "E       assert 1 == 2")
    cases = [CaseOutcome(TestSpec("test_k.py", name, 0, 0.001), failures, passed, 0.001) for name, failures, passed in
             (("test_always", (bad,) * 3, False), ("test_once", (bad,), True), ("test_ok", (), True))]
    ours = tmp_path / "ours.xml"
    ours.write_text(shard_xml(cases, "gpu-runner-1", datetime(2026, 10, 5), False), encoding="utf-8")
    shape = lambda path: [(c.name, c.outcome, c.reruns, [a.outcome for a in c.attempts])  # noqa: E731
                          for c in parse_junit(path).cases]
    assert shape(ours) == shape(real)
    tags = lambda path: [(e.tag, sorted(e.attrib)) for e in ET.parse(path).iter()  # noqa: E731
                         if e.tag in ("testcase", "failure")]
    assert tags(ours) == tags(real)


def test_its_junit_reads_the_same_with_ci_and_etree(tmp_path: Path) -> None:
    h = _history_gen4.generate(2, _history_gen4.QUICK)
    for run in h.runs:
        for report in run.reports:
            seen: dict[str, list[bool]] = {}  # per element: has a <failure> (a rerun element is empty)
            for case in ET.fromstring(report.xml).iter("testcase"):
                seen.setdefault(f"{case.get('file')}::{case.get('name')}", []).append(case.find("failure") is not None)
            ours = _cases(report.xml, tmp_path)
            assert {n: len(v) for n, v in seen.items()} == {n: len(v) for n, v in ours.items()}
            assert {n for n, v in seen.items() if v[-1]} == {n for n, v in ours.items() if v[-1] == FAILED}
            assert {n for n, v in seen.items() if len(v) > 1 or v[-1]} == {lb.node for lb in report.labels}


def test_flakes_fail_at_their_rates_within_binomial_bounds(tmp_path: Path) -> None:
    trials: Counter[str] = Counter()
    fails: Counter[str] = Counter()
    rates: dict[str, float] = {}
    for seed in SEEDS:
        h = history(seed)
        kinds = {f.node: f"{f.node.split('::')[1].split('[')[0]}: {f.error[:20]} at {f.rate}" for f in h.flakes}
        rates.update({kinds[f.node]: f.rate for f in h.flakes})
        fixable = {f.node for f in h.flakes if f.fixed_by}
        for run in h.runs:
            for report in run.reports:
                for node, outcomes in _cases(report.xml, tmp_path).items():
                    if node not in kinds:
                        continue
                    failed = sum(o == FAILED for o in outcomes)
                    if node in fixable and _fixed(h, run):
                        assert failed == 0, (seed, run.run_id, node)  # the fix landed: never again
                        continue
                    trials[kinds[node]] += len(outcomes)
                    fails[kinds[node]] += failed
    assert len(trials) >= 5
    for kind, n in trials.items():
        p = rates[kind]
        assert abs(fails[kind] - n * p) <= 4 * math.sqrt(n * p * (1 - p)) + 1, (kind, fails[kind], n, p)


@pytest.mark.parametrize("seed", SEEDS)
def test_labels_match_attempts_and_the_story(seed: int, tmp_path: Path) -> None:
    h = history(seed)
    geglu, race = h.breakages
    assert geglu.end - geglu.start >= 10 and race.rate == 0.4
    low, high = h.rerun_commits
    counts: Counter[str] = Counter()
    for run in h.runs:
        base = run.commit if not run.queue else h.main_shas.index(run.base_sha)
        for report in run.reports:
            cases = _cases(report.xml, tmp_path)
            if not (low <= run.commit < high):
                assert all(len(o) == 1 for o in cases.values()), "no reruns outside the config's stretch"
            for label in report.labels:
                outcomes = cases[label.node]
                assert FAILED in outcomes and label.label in LABELS
                assert label.every_attempt == (outcomes[-1] == FAILED)
                counts[label.label] += 1
                if label.label == "infra":
                    assert report.runner == h.infra.runner and label.node in h.infra.nodes
                    assert set(outcomes) == {FAILED}
                elif label.node in geglu.nodes or label.node in race.nodes:
                    b = geglu if label.node in geglu.nodes else race
                    assert b.active(run.commit) and label.label == ("broken_on_main" if b.start <= base else "new")
                    if b is geglu:
                        assert set(outcomes) == {FAILED}, "a reverted breakage fails every attempt"
                else:
                    assert label.label in ("flaky", "new") and (label.label == "new") == (label.why.startswith("the pull"))
            if run.event == "push" and report.complete:  # main fails geglu exactly in its window
                failing = {n for n, o in cases.items() if o[-1] == FAILED}
                in_window = {n for n in geglu.nodes if n in cases}
                assert (in_window <= failing) if geglu.active(run.commit) else not (in_window & failing)
    assert counts["flaky"] and counts["broken_on_main"] and counts["new"]


def test_the_story_has_its_shape() -> None:
    """Merge-queue batches, rebased pull requests, hung shards with no or a partial report."""
    killed = partial = rebased = 0
    for seed in SEEDS:
        h = history(seed)
        pushes = [r.commit for r in h.runs if r.event == "push"]
        assert len(pushes) < len(h.main_shas) and max(pushes) == len(h.main_shas) - 1  # batches
        bases: dict[int, set[str]] = {}
        for run in h.runs:
            if run.event == "pull_request" and not run.queue:
                bases.setdefault(run.pr, set()).add(run.base_sha)
            for shard in run.killed:
                killed += 1
                kept = [r for r in run.reports if r.shard == shard]
                assert not kept or not kept[0].complete
                partial += bool(kept)
                assert all(_history_gen4.HANG_NODE.split("::")[0] not in r.xml for r in kept)
        rebased += sum(len(b) > 1 for b in bases.values())
    assert killed > partial > 0 and rebased > 10


def test_a_quick_bench_run_prints_the_gen4_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert verdicts.main(["--generator", "gen4", "--quick", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "verdicts on the gen4 history, seeds 1" in out
    for row in (*LABELS, verdicts.EVERY, "overall"):
        assert any(line.startswith(row + " ") for line in out.splitlines()), (row, out)


def test_merge_group_stores_the_same_queue_runs_as_their_batchs() -> None:
    """``Scale.merge_group``: the same history, each queue run stored as the merge_group run of its
    batch (main before it as base, its pull requests, the tail last) instead of the tail pull
    request's pull_request run; the default stays as measured."""
    scale = replace(_history_gen4.QUICK, merge_group=True)
    plain, queued = _history_gen4.generate(3, _history_gen4.QUICK), _history_gen4.generate(3, scale)
    assert len(plain.runs) == len(queued.runs) and not any(r.event == "merge_group" for r in plain.runs)
    pairs = [(a, b) for a, b in zip(plain.runs, queued.runs) if a.queue]
    assert pairs and all(b.queue == a.queue and b.sha == a.sha and [r.xml for r in b.reports] == [r.xml for r in a.reports] for a, b in pairs)
    for a, b in pairs:
        assert (a.event, b.event, b.pr, b.base_sha) == ("pull_request", "merge_group", None, a.base_sha)
        assert b.batch[-1] == a.pr and list(b.batch) == list(range(b.batch[0], a.pr + 1))
    assert [(a.event, a.sha, a.pr) for a in plain.runs if not a.queue] == [
        (b.event, b.sha, b.pr) for b in queued.runs if not b.queue]


def test_merge_group_is_gen4s_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert verdicts.main(["--generator", "gen2", "--merge-group", "--quick", "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert "--merge-group: only gen4 has a merge queue, not gen2" in err and len(err.strip().splitlines()) == 1


def test_the_bench_judges_a_queue_run_as_its_batchs() -> None:
    """With ``--merge-group`` the bench asks each queue run's verdicts as gpu.yml does: against main
    before the batch, a failure of its own being the batch's."""
    score = score_history(_history_gen4.generate(1, replace(_history_gen4.QUICK, merge_group=True)), "gen4")
    batch = [j for j in score.at_time if j.detail.startswith("new in this batch (PR")]
    assert batch and all(j.verdict == "new" for j in batch)


@pytest.mark.parametrize("name", ["gen2", "gen3", "gen4", "gen5", "gen6", "gen7", "gen8", "gen9", "gen10", "gen11", "gen12", "gen13", "gen14", "gen15"])
def test_every_generator_fills_the_harness_records(name: str, tmp_path: Path) -> None:
    """The harness owns the records it ingests (`bench._verdicts_records`): every label and report
    a generator writes is one of them, and every run too but gen3's (its own shape, labels on it).
    Each judged run's labels are exactly the failing tests the harness's ingest reads from its
    JUnit (in the history's checkout, when it has one): a label the store keys otherwise would be
    scored as a miss whatever the verdict."""
    generator = verdicts.GENERATORS[name]
    history = generator.generate(1, generator.quick)
    runs = history.runs
    assert runs and all(isinstance(r, records.Report) for run in runs for r in run.reports)
    assert all(type(label) is records.Label for run in runs for label in run.labels)
    assert name == "gen3" or all(isinstance(run, records.Run) for run in runs)
    known = checkout_files(history)
    root = checkout(known, tmp_path)
    judged = 0
    for run in runs:  # every run is ingested (its event one the ingest takes); the judged ones checked
        failing = set()
        for report in run.reports:
            path = tmp_path / "report.xml"
            path.write_text(report.xml, encoding="utf-8")
            rows = prepare(path, _identity(run, report.tier, f"{report.shard + 1}/{report.shards}", report.runner),
                           root=root, known_files=known).rows
            failing |= {(row.node, report.tier) for row in rows if row.outcome in (FAILED, ERROR)}
        if run.event in ("pull_request", MERGE_GROUP):
            assert {(label.node, label.tier) for label in run.labels} == failing, run.run_id
            judged += bool(failing)
    assert judged


def test_a_judged_run_that_uploaded_nothing_is_not_asked() -> None:
    """A pull request run cancelled or lost before any upload leaves no report: the harness has
    nothing to ask of it (asking would find no report of its commit) and scores the rest."""
    history = _history_gen4.generate(1, _history_gen4.QUICK)
    first = next(run for run in history.runs if run.event == "pull_request")
    empty = replace(first, sha="f" * 40, run_id="999999", reports=[])
    whole = score_history(history, "gen4")
    history.runs.insert(history.runs.index(first) + 1, empty)
    assert len(score_history(history, "gen4").at_time) == len(whole.at_time)
