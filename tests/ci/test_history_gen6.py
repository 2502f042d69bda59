"""The sixth labelled history (`bench._history_gen6`): its JUnit reads as pytest's (a real pytest run is
the oracle for the format), flakes fail at their rates, and every label agrees with its attempts and
with the cause the story gave it. The verdict bench itself is not run on it here (held out)."""

from __future__ import annotations

import math
import tempfile
import xml.etree.ElementTree as ET
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import pytest

from bench import _history_gen2, _history_gen3, _history_gen4, _history_gen5, _history_gen6, verdicts
from bench._history_gen2 import REPO
from bench._history_gen6 import ABORT, DECODE, FP8, LABELS, PIN_NODES, PREEMPT, QUICK, History, Scale, generate
from bench._history_gen6_text import Case, report_xml, text_for
from bench._history_gen6_world import ORDER_POLLUTER, ORDER_VICTIM, RERUNS, base_tests
from bench._history_gen6_world import Test as Spec
from ci.history.ingest import node_id, prepare
from ci.history.model import RunIdentity
from ci.results.junit import ERROR, FAILED, SKIPPED, CaseResult, parse_junit
from tests.ci.rerun_oracle_support import COUNTER, real_junit, shape

SEEDS = range(1, 11)


@lru_cache(maxsize=None)
def history(seed: int, scale: Scale = Scale()) -> History:
    return generate(seed, scale)


def _read(xml: str, folder: Path) -> dict[str, CaseResult]:
    path = folder / "r.xml"
    path.write_text(xml, encoding="utf-8")
    return {node_id(c): c for c in parse_junit(path).cases}


@lru_cache(maxsize=None)
def parsed(seed: int, scale: Scale = Scale()) -> list[tuple[object, object, dict[str, CaseResult]]]:
    """(run, report, {node: case}) for every report of the history, read by `ci.results.junit`."""
    with tempfile.TemporaryDirectory(prefix="gen6-") as tmp:
        return [(run, rep, _read(rep.xml, Path(tmp))) for run in history(seed, scale).runs for rep in run.reports]


def failed(outcome: str) -> bool:
    return outcome in (FAILED, ERROR)


def test_gen6_is_selectable_and_the_other_generators_are_unchanged() -> None:
    assert verdicts.GENERATORS["gen6"].generate is _history_gen6.generate
    for name, module in (("gen2", _history_gen2), ("gen3", _history_gen3), ("gen4", _history_gen4),
                         ("gen5", _history_gen5)):
        assert verdicts.GENERATORS[name].generate is module.generate
    assert verdicts.GENERATORS["gen6"].quick == QUICK and hasattr(QUICK, "attempt_text")


def test_a_wrong_generator_is_refused_naming_gen6(capsys: pytest.CaptureFixture[str]) -> None:
    assert verdicts.main(["--generator", "gen-unknown"]) == 2
    err = capsys.readouterr().err
    assert "gen6" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def _etree(xml: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for case in ET.fromstring(xml).iter("testcase"):
        tags = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        node = f"{case.get('file')}::{case.get('classname').rsplit('.', 1)[1]}::{case.get('name')}"
        out[node].append(tags[0] if tags else {"failed": FAILED, "error": ERROR}.get(
            props.get("ci.attempt.outcome", ""), "passed"))
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_every_report_reads_the_same_with_ci_results_junit_and_etree(seed: int) -> None:
    for _, report, cases in parsed(seed, QUICK):
        tree = _etree(report.xml)
        mapped = {"failure": FAILED, "error": ERROR, "skipped": SKIPPED}
        assert {n: [mapped.get(o, o) for o in outs] for n, outs in tree.items()} == \
            {n: [a.outcome for a in c.attempts] for n, c in cases.items()}


def check_labels(seed: int, scale: Scale) -> None:
    """One label per test whose first attempt failed, none for others; every_attempt as the attempts say."""
    for run, report, cases in parsed(seed, scale):
        labels = {lb.node: lb for lb in report.labels}
        assert len(labels) == len(report.labels)
        for node, case in cases.items():
            outcomes = [a.outcome for a in case.attempts]
            first_failed = failed(outcomes[0]) or (len(outcomes) > 1)
            assert (node in labels) == first_failed, (run.event, node, outcomes)
            if node in labels:
                lb = labels[node]
                assert lb.label in LABELS and lb.tier == report.tier
                assert lb.every_attempt == failed(outcomes[-1])
                assert len(outcomes) <= RERUNS + 1


@pytest.mark.parametrize("seed", SEEDS)
def test_every_failed_test_has_one_label_consistent_with_its_attempts(seed: int) -> None:
    check_labels(seed, QUICK)


@pytest.mark.parametrize("seed", (1, 2))
def test_stock_junit_reads_the_same_outcomes_and_ingest_accepts_every_report(seed: int, tmp_path: Path) -> None:
    """``--stock-junit``: no ``ci.attempt.*`` properties, so a rerun reads passed (rerun); labels still hold."""
    stock = Scale(QUICK.commits, QUICK.prs, attempt_text=False)
    check_labels(seed, stock)
    for (run, report, cases), (_, _, plain) in zip(parsed(seed, QUICK), parsed(seed, stock)):
        assert list(cases) == list(plain)
        for node, case in cases.items():
            assert [a.outcome for a in case.attempts][-1] == [a.outcome for a in plain[node].attempts][-1]
            assert all(not a.message for a in plain[node].attempts[:-1])
        path = tmp_path / "r.xml"
        path.write_text(report.xml, encoding="utf-8")
        shard = f"{report.shard + 1}/{report.shards}"
        prepare(path, RunIdentity(REPO, run.sha, run.event, report.tier, pr=run.pr, shard=shard,
                                  runner=report.runner, base_sha=run.base_sha, attempt=run.attempt))


def test_the_full_scale_history_is_consistent_and_labels_every_cause() -> None:
    check_labels(1, Scale())
    whys = {lb.why.split(":")[0].split(" ")[0] for seed in (1, 2) for run in history(seed).runs
            for lb in run.labels if run.event == "pull_request"}
    assert whys >= {"hf_outage", "image_bump", "disk_full", "pin_bump", "hidden", "masked", "pr_bug",
                    "pr_param", "pr_segv", "order", "flaky", "timeout"}


def _bound(fails: int, trials: int, rate: float) -> bool:
    spread = 4 * math.sqrt(trials * rate * (1 - rate)) + 2
    return abs(fails - trials * rate) <= spread


def test_flakes_fail_at_their_rates_within_binomial_bounds() -> None:
    rates = {t.node: t.rate for t in base_tests() if t.rate}
    counts: dict[tuple[str, bool], list[int]] = defaultdict(lambda: [0, 0])
    for seed in (1, 2, 3):
        jump = next(w for w in history(seed).windows if w.cause == "flaky_jump")
        for run, report, cases in parsed(seed):
            steady = {lb.node for lb in report.labels if not lb.why.startswith(("flaky at", "timeout at"))}
            for node, case in cases.items():
                if node in rates and node not in steady:
                    key = (node, node == ABORT and jump.start <= run.started < jump.end)
                    counts[key][0] += sum(failed(a.outcome) or i < len(case.attempts) - 1
                                          for i, a in enumerate(case.attempts))
                    counts[key][1] += len(case.attempts)
    for (node, jumped), (fails, trials) in counts.items():
        assert trials > 100 or jumped
        assert _bound(fails, trials, 0.35 if jumped else rates[node]), (node, jumped, fails, trials)
    assert counts[(ABORT, True)][1] > 20


def _pushes(seed: int) -> list[tuple[object, object, dict[str, CaseResult]]]:
    return sorted((x for x in parsed(seed) if x[0].event == "push"), key=lambda x: x[0].commit)


@pytest.mark.parametrize("seed", (1, 2))
def test_main_breakages_pin_hidden_and_masked_by_a_skip(seed: int) -> None:
    pin, first, second, masked = history(seed).breaks
    errors = []
    for run, report, cases in _pushes(seed):
        labels = {lb.node: lb for lb in report.labels}
        for node in PIN_NODES:
            if node in cases and report.tier == "h100":
                assert (node in labels and labels[node].label == "broken_on_main") == \
                       (pin.start <= run.commit < pin.end), (run.commit, node)
            if node in labels and report.tier == "l4":
                assert labels[node].why.startswith("image_bump")  # the pin breaks h100 only
        if DECODE in cases and report.tier == "l4":
            assert cases[DECODE].outcome == SKIPPED and DECODE not in labels
        if DECODE in cases and report.tier == "h100" and masked.start <= run.commit < masked.end:
            assert labels[DECODE].label == "broken_on_main"
        if PREEMPT in cases:
            errors.append((run.commit, cases[PREEMPT].attempts[-1].message.split(":")[0] or "passed"))
    assert second.start < first.end  # the second breakage lands while the first still fails the test
    for commit, error in errors:  # the older error hides the newer until the first fix reveals it
        if first.start <= commit < second.end:
            assert error == ("ImportError" if commit < first.end else "AssertionError"), (commit, error)
    assert {e for c, e in errors if first.end <= c < second.end} == {"AssertionError"}
    assert all(e == "passed" for c, e in errors if c < first.start or c >= second.end)
    fixer = [r for r in history(seed).runs if r.event == "pull_request" and r.commit == pin.end - 1
             and not any(lb.why.startswith("pin_bump") for lb in r.labels)]
    assert fixer, "the pull request that fixes the pin passes where main fails"


@pytest.mark.parametrize("seed", (1, 2, 3))
def test_infra_windows_hf_outage_image_and_one_full_disk(seed: int) -> None:
    h = history(seed)
    win = {w.cause: w for w in h.windows}
    weights = {t.node for t in h.tests if t.weights}
    for run, report, cases in parsed(seed):
        for lb in report.labels:
            cause = lb.why.split(":")[0]
            if cause in win:
                assert lb.label == "infra" and lb.every_attempt
                assert win[cause].start <= run.started < win[cause].end
            if cause == "hf_outage":
                assert lb.node in weights and "huggingface.co" in cases[lb.node].attempts[-1].message
            if cause == "image_bump":
                assert report.tier == "l4" and lb.node in FP8
            if cause == "disk_full":
                assert report.runner == win["disk_full"].runner and "Errno 28" in cases[lb.node].attempts[0].message
    pushed = [r for r in h.runs if r.event == "push" and win["image_bump"].start <= r.started < win["image_bump"].end]
    assert pushed and all(any(lb.why.startswith("image_bump") for lb in r.labels) for r in pushed)


@pytest.mark.parametrize("seed", (1, 2, 3))
def test_order_dependence_follows_the_shard_layout(seed: int) -> None:
    both = alone = 0
    for run, report, cases in parsed(seed):
        if ORDER_VICTIM not in cases:
            continue
        nodes = list(cases)
        before = any(n.startswith(ORDER_POLLUTER) for n in nodes[:nodes.index(ORDER_VICTIM)])
        label = next((lb for lb in report.labels if lb.node == ORDER_VICTIM), None)
        if before:
            both += 1
            assert label is not None and label.every_attempt
            assert label.label == "flaky" or not label.why.startswith("order")
        else:
            alone += 1
            assert label is None or not label.why.startswith("order")
    assert both and alone


@pytest.mark.parametrize("seed", (1, 2, 3))
def test_pull_request_bugs_one_parametrization_one_gpu_and_a_segfault(seed: int) -> None:
    segv = param = 0
    for run, report, cases in parsed(seed):
        for lb in report.labels:
            if lb.why.startswith("pr_param"):
                param += 1
                assert run.event == "pull_request" and report.tier == "h100" and lb.node.endswith("[fp16-128]")
            if lb.why.startswith("pr_segv"):
                segv += 1
                case = cases[lb.node]
                assert lb.label == "new" and [a.outcome for a in case.attempts] == [ERROR]
                assert list(cases)[-1] == lb.node  # nothing after the crash in this job's JUnit
                assert "Segmentation fault" in case.attempts[0].message
            if lb.why.startswith("timeout"):
                assert lb.label == "flaky" and "pytest-timeout" in cases[lb.node].attempts[0].message
    assert param and segv


_REAL_TESTS = COUNTER + '''
class TestReal:
    def test_flaky(self):
        if _attempt("flaky.count") < 2:
            raise TimeoutError("engine core did not report ready within 120 s")

    def test_broken(self):
        raise OSError("[Errno 28] No space left on device")

    @pytest.mark.skip(reason="no sm90")
    def test_skipped(self):
        pass

    def test_fine(self):
        pass
'''


@pytest.mark.parametrize("attempt_text", [True, False], ids=["registry-plugin", "stock"])
def test_a_job_is_written_as_real_pytest_with_rerunfailures_writes_it(tmp_path: Path, attempt_text: bool) -> None:
    real = real_junit(tmp_path, _REAL_TESTS, attempt_text)

    def spec(name: str) -> Spec:
        return Spec("test_real.py", "TestReal", name, ("cpu",))
    flake = text_for("flaky", spec("test_flaky"))
    disk = text_for("disk_full", spec("test_broken"))
    mine = report_xml([Case(spec("test_flaky"), (flake, flake, None), 0.1),
                       Case(spec("test_broken"), (disk,) * 3, 0.1),
                       Case(spec("test_skipped"), (None,), 0.0, skipped="no sm90"),
                       Case(spec("test_fine"), (None,), 0.1)], attempt_text, "h")
    assert shape(mine) == shape(real)
    (tmp_path / "mine.xml").write_text(mine, encoding="utf-8")
    read = [{node_id(c): ([a.outcome for a in c.attempts], [a.message.split(":")[0] for a in c.attempts])
             for c in parse_junit(tmp_path / name).cases} for name in ("mine.xml", "real.xml")]
    assert read[0] == read[1]
