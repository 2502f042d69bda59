"""The second labelled history (`bench._history_gen2`) and `python -m bench verdicts`.

The generator is the same per seed; its labels agree with what it generated (read back from its
own JUnit through `ci.results.junit`, the reader ingest uses); its JUnit has the shape a real
``pytest --reruns 1 -o junit_family=xunit1`` run writes (one run in a subprocess is the oracle);
and a quick bench run prints a row for every label. Verdict accuracy is a measurement
(docs/history.md), never asserted here.
"""

from __future__ import annotations

import random
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import verdicts
from bench._history_gen2 import BAD_RUNNER, LABELS, QUICK, History, Scale, generate
from bench._history_gen2_text import FLAKE_KINDS, Failure, JUnitCase, flake, junit_xml
from ci.results.junit import parse_junit
from tests.ci import verdict_replay_bench

SMALL = Scale(commits=40, prs=24)


@pytest.fixture(scope="module")
def history() -> History:
    return generate(7, SMALL)


def test_the_same_seed_is_the_same_history() -> None:
    first, again, other = generate(3, QUICK), generate(3, QUICK), generate(4, QUICK)
    assert [(r.sha, r.run_id, r.attempt, [x.xml for x in r.reports]) for r in first.runs] == \
        [(r.sha, r.run_id, r.attempt, [x.xml for x in r.reports]) for r in again.runs]
    assert [r.labels for r in first.runs] == [r.labels for r in again.runs]
    assert [x.xml for r in first.runs for x in r.reports] != [x.xml for r in other.runs for x in r.reports]


def test_runs_arrive_in_the_order_they_finish_and_pull_requests_interleave(history: History) -> None:
    assert [r.finished for r in history.runs] == sorted(r.finished for r in history.runs)
    events = [r.event for r in history.runs]
    first_pr, last_push = events.index("pull_request"), len(events) - 1 - events[::-1].index("push")
    assert first_pr < last_push
    assert {"push", "nightly", "pull_request"} <= set(events)
    assert any(r.attempt == 2 for r in history.runs), "some pull request run gets a /rerun-failed"
    main_index = {sha: i for i, sha in enumerate(history.main_shas)}
    for run in history.runs:
        if run.event == "pull_request":
            assert main_index[run.base_sha] == run.commit


def test_labels_agree_with_the_junit_it_wrote(history: History, tmp_path: Path) -> None:
    by_node = {t.node: t for t in history.tests}
    for run in history.runs:
        for report in run.reports:
            path = tmp_path / "r.xml"
            path.write_text(report.xml, encoding="utf-8")
            parsed = parse_junit(path)
            failing = {f"{c.file}::{c.classname.rsplit('.', 1)[1]}::{c.name}"
                       for c in parsed.cases if any(a.outcome != "passed" for a in c.attempts) or c.reruns}
            assert failing == {label.node for label in report.labels}, (run.run_id, report.tier, report.shard)
            for label in report.labels:
                assert label.label in LABELS
                spec = by_node[label.node]
                in_window = [b for b in history.breakages if b.node == label.node and b.covers(run.commit)]
                if label.label == "flaky":
                    assert spec.flake_rate > 0 and not in_window, label
                elif label.label == "broken_on_main":
                    assert in_window and label.every_attempt, label
                elif label.label == "infra":
                    assert label.why.startswith(report.runner) and not in_window, label
                else:
                    assert run.event == "pull_request" and not in_window, label


def test_the_story_holds_its_planted_breakages(history: History) -> None:
    why = {b.why: b for b in history.breakages}
    reverted, rebroken = why["broken, reverted 2 commits later"], why["re-broken by a merged pull request"]
    assert reverted.end == reverted.start + 2 and rebroken.node == reverted.node and rebroken.start > reverted.end
    assert why["broken and still open"].end is None
    flaky_broken = why["a flaky test broken with another message"]
    spec = next(t for t in history.tests if t.node == flaky_broken.node)
    assert spec.flake_rate > 0
    assert flaky_broken.line not in flake(spec.flake_kind, random.Random(0), "x").message
    labels = [(run, label) for run in history.runs for label in run.labels]
    assert any(label.label == "new" and label.node == rebroken.node and run.commit < rebroken.start
               for run, label in labels), "the pull request that re-breaks it fails it first as its own"
    assert any(label.label == "flaky" and label.every_attempt for _, label in labels)
    assert any(label.label == "infra" and label.why.startswith(BAD_RUNNER) for _, label in labels)


def _skeleton(xml: str) -> list[tuple[str, tuple[str, ...], str]]:
    """Each element's tag, attribute names and (for failures) message form, in document order."""
    out = []
    for element in ET.fromstring(xml).iter():
        message = element.get("message", "")
        form = "setup" if message.startswith('failed on setup with "') else ("message" if message else "")
        out.append((element.tag, tuple(sorted(k for k in element.attrib if k not in ("timestamp", "hostname"))), form))
    return out


def test_its_junit_has_real_pytest_rerunfailures_shape(tmp_path: Path) -> None:
    """A real pytest with pytest-rerunfailures writes the oracle: a test failing in setup twice,
    one failing then passing (its rerun attempt is an empty testcase), one failing twice."""
    (tmp_path / "test_real.py").write_text(
        "import pytest\n_n = []\n"
        "@pytest.fixture\ndef server():\n    raise TimeoutError('Server failed to start in 600 s')\n"
        "def test_startup(server):\n    pass\n"
        "def test_port():\n    _n.append(1)\n    if len(_n) < 2:\n        raise OSError(98, 'Address already in use')\n"
        "def test_numeric():\n    assert 0.031 <= 0.02, 'max abs diff 0.031 > 0.02'\n", encoding="utf-8")
    real = tmp_path / "real.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--reruns", "1",
                           f"--junitxml={real}", "-o", "junit_family=xunit1", "test_real.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:]
    rng = random.Random(1)
    ours = junit_xml([
        JUnitCase("test_real.py", "test_real", "test_startup", 6, (flake("startup", rng, "w"),) * 2, 0.001),
        JUnitCase("test_real.py", "test_real", "test_port", 8, (Failure("failure", "x", "y"), None), 0.001),
        JUnitCase("test_real.py", "test_real", "test_numeric", 12, (flake("numeric", rng, "w"),) * 2, 0.001),
    ], "vm", "2026-12-06T20:48:14.411462+00:00")
    assert _skeleton(ours) == _skeleton(real.read_text(encoding="utf-8"))
    (tmp_path / "ours.xml").write_text(ours, encoding="utf-8")
    mine, theirs = parse_junit(tmp_path / "ours.xml"), parse_junit(real)
    assert [(c.name, c.outcome, c.reruns, [a.outcome for a in c.attempts]) for c in mine.cases] == \
        [(c.name, c.outcome, c.reruns, [a.outcome for a in c.attempts]) for c in theirs.cases]
    assert mine.cases[0].attempts[-1].message == theirs.cases[0].attempts[-1].message


@pytest.mark.parametrize("kind", FLAKE_KINDS)
def test_numbers_in_a_flake_vary_but_its_kind_is_kept(kind: str) -> None:
    rng = random.Random(5)
    messages = {flake(kind, rng, "w").message for _ in range(20)}
    assert len(messages) > 1 if kind in ("nccl", "numeric") else len(messages) == 1


def test_a_quick_bench_run_prints_every_label_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert verdicts.main(["--quick", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    for row in (*LABELS, verdicts.EVERY, "overall"):
        assert any(line.startswith(row + " ") for line in out.splitlines()), (row, out)
    assert "answers changed between a commit's last ask and the end:" in out


def test_the_replay_prints_the_same_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert verdict_replay_bench.main(["--quick", "--seeds", "11"]) == 0
    out = capsys.readouterr().out
    for row in (*LABELS, verdicts.EVERY, "overall"):
        assert any(line.startswith(row + " ") for line in out.splitlines()), (row, out)


@pytest.mark.parametrize("argv, said", [(["--seeds", "x"], "--seeds 'x'"), (["--generator", "gen99"], "--generator"),
                                        (["--generator", "replay"], "tests/ci/verdict_replay_bench.py"),
                                        (["--seeds"], "--seeds needs a value"), (["--seeds", "5-1"], "names no seed")])
def test_bad_flags_are_one_line_and_exit_2(argv: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert verdicts.main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1


def test_with_attempt_text_a_retried_attempt_reads_back_its_own_error(tmp_path: Path) -> None:
    """`Scale.attempt_text`: the properties `ci.pytest_attempts` writes, read by the one JUnit parser."""
    rng = random.Random(3)
    first = flake("port", rng, "test_real.py:8: OSError")
    (tmp_path / "j.xml").write_text(junit_xml([JUnitCase("test_real.py", "test_real", "test_port", 8, (first, None),
                                                         0.001)], "vm", "2026-12-06T20:48:14+00:00",
                                              attempt_text=True), encoding="utf-8")
    (case,) = parse_junit(tmp_path / "j.xml").cases
    retried, final = case.attempts
    assert first.element == "error"  # the port is taken when the server starts: a setup error
    assert (retried.outcome, final.outcome) == ("error", "passed")
    assert "Address already in use" in retried.message and retried.detail == first.detail
