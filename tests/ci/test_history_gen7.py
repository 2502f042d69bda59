"""gen7, the held-out history on SGLang's real main branch: the real windows its data file gives
(`bench._history_gen7_verify` checks the file against a clone), its JUnit read by both
`ci.results.junit` and `xml.etree`, its labels against the attempts and the story, and its flake
rates within binomial bounds."""

from __future__ import annotations

import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import timedelta
from functools import lru_cache

import pytest

from bench import _history_gen7 as gen7
from bench._history_gen7_story import DATA, load
from bench._history_gen7_text import FLAKE_KINDS
from ci.results.junit import FAILED, ERROR, parse_junit

ROOT = DATA.parent.parent
# (kind, breaking commit, closing commit): SGLang's own reverts and fixes in the span
REAL_WINDOWS = [
    ("revert", "5d6b35eabb1b", "cfa4aa988fe3"),
    ("fix", "53318911cab4", "6309fb9abb65"),
    ("fix", "7976928c5776", "b7ae7149e82c"),
    ("fix", "1c6331cbd67f", "88c261c3f34c"),
    ("revert", "9691a29fe061", "7942d546d18c"),
    ("fix", "7942d546d18c", "5351800700e7"),
    ("revert", "6c212a5d6bbf", "d70726a31a5e"),
    ("revert", "de3ec2c43769", "4740f23e1f6a"),
    ("revert", "ab21dc984a31", "a65c68c1fb92"),
    ("revert", "b60185c41cb0", "ecab3f322e5e"),
    ("fix", "b2c8f7a22efb", "5338e4448300"),
]


@lru_cache(maxsize=None)
def history(seed: int, quick: bool = False, text: bool = True):
    scale = gen7.QUICK if quick else gen7.Scale()
    return gen7.generate(seed, scale if text else gen7.Scale(**{**scale.__dict__, "attempt_text": False}))


def test_windows_are_the_real_reverts_and_fixes():
    skeleton = load()
    commits = skeleton.commits
    assert (commits[0].sha, commits[-1].sha) == skeleton.span and len(commits) == 251
    found = [(w.kind, commits[w.start].subject, commits[w.end].subject) for w in skeleton.windows]
    for kind, start, end in found:  # each revert closes the commit it names; each fix is a fix
        if kind == "revert":
            assert end.lower().startswith("revert") and start.split(" (#")[0] in end
        else:
            assert "fix" in end.lower()
    assert [(w.kind, commits[w.start].sha[:12], commits[w.end].sha[:12]) for w in skeleton.windows] == REAL_WINDOWS
    assert all(len(w.files) <= 4 and w.start < w.end for w in skeleton.windows)


def test_extract_refuses_a_folder_that_is_no_clone(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bench._history_gen7_extract", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and str(tmp_path) in done.stderr


@pytest.mark.parametrize("text", [True, False])
def test_junit_reads_the_same_both_ways_and_matches_the_labels(tmp_path, text):
    h = history(3, quick=True, text=text)
    assert [r.finished for r in h.runs] == sorted(r.finished for r in h.runs)
    for run in h.runs:
        for n, report in enumerate(run.reports):
            path = tmp_path / f"{run.run_id}-{run.attempt}-{n}.xml"
            path.write_text(report.xml, encoding="utf-8")
            parsed = parse_junit(path)
            elements = ET.parse(path).getroot().iter("testcase")
            per_node = defaultdict(list)
            for case in elements:
                per_node[(case.get("file"), case.get("classname"), case.get("name"))].append(case)
            assert sorted((c.file, c.classname, c.name) for c in parsed.cases) == sorted(per_node)
            labels = {label.node: label for label in report.labels}
            for case in parsed.cases:
                els = per_node[(case.file, case.classname, case.name)]
                assert len(case.attempts) == len(els)
                module = case.file[:-3].replace("/", ".")
                inner = case.classname[len(module) + 1:]
                node = f"{case.file}::{inner}::{case.name}" if inner else f"{case.file}::{case.name}"
                failed = [a.outcome in (FAILED, ERROR) or i < len(els) - 1 for i, a in enumerate(case.attempts)]
                label = labels.pop(node, None)
                assert (label is not None) == any(failed), (run.run_id, node)
                if label:
                    assert label.every_attempt == (case.outcome in (FAILED, ERROR))
                    assert label.tier == report.tier
                    if text:  # every failed attempt, rerun ones too, keeps its outcome and error line
                        assert all(a.outcome in (FAILED, ERROR) and a.message for a in case.attempts[:-1])
                    else:  # stock pytest: a rerun attempt is an empty element
                        assert all(len(el) == 0 for el in els[:-1])
            assert not labels


def test_labels_follow_the_story():
    h = history(1)
    skeleton = load()
    own_commit = {c.pr: c.index for c in skeleton.commits}
    checked = defaultdict(int)
    for run in h.runs:
        for label in run.labels:
            if label.label == "infra":
                assert label.why in ("bad_runner", "outage") and label.every_attempt
                continue
            file = label.node.split("::")[0]
            covering = [w for w in skeleton.windows if w.start <= run.commit < w.end and file in w.files]
            if label.label == "broken_on_main":  # never on the revert's or fix's own run
                assert covering and label.every_attempt
                assert any(run.event != "pull_request" or own_commit[run.pr] != w.end for w in covering)
                checked[covering[0]] += 1
            elif label.label == "new":
                assert run.event == "pull_request" and label.every_attempt
                assert any(w.start == own_commit[run.pr] and file in w.files for w in skeleton.windows)
            else:
                assert label.label == "flaky" and label.why in FLAKE_KINDS
                if covering:  # only the revert or fix itself passes on a broken base
                    assert run.event == "pull_request" and any(w.end == own_commit[run.pr] for w in covering)
    # every real window is seen failing on main, and its tests pass again on runs from its end on
    # (the last, 246..250, closes four commits before the span ends: no run of seed 1 is based in it)
    assert set(skeleton.windows) - set(checked) <= {skeleton.windows[-1]} and len(checked) >= 10
    for run in h.runs:
        failing = {label.node.split("::")[0] for label in run.labels if label.label == "broken_on_main"}
        for w in skeleton.windows:
            if run.commit >= w.end and not any(o.start <= run.commit < o.end for o in skeleton.windows):
                assert not failing & set(w.files), (run.run_id, w)
            if w.start <= run.commit < w.end and run.pr != skeleton.commits[w.end].pr:
                infra = {label.node.split("::")[0] for label in run.labels if label.label == "infra"}
                assert set(w.files) - infra <= failing, (run.run_id, w)


def test_flake_rates_within_binomial_bounds():
    tried, failed = defaultdict(int), defaultdict(int)
    for seed in (1, 2):
        h = history(seed)
        rates = {f"{t.file}::{t.cls}::{t.name}" if t.cls else f"{t.file}::{t.name}": t.flake_rate for t in h.tests}
        for run in h.runs:
            labelled = {label.node: label for label in run.labels}
            for node, rate in rates.items():
                label = labelled.get(node)
                if label and label.label != "flaky":
                    continue
                tried[rate] += 1
                failed[rate] += bool(label)
    for rate, n in tried.items():
        sd = math.sqrt(n * rate * (1 - rate))
        assert abs(failed[rate] - n * rate) <= 4 * sd + 1, (rate, failed[rate], n)
    assert failed[0.0] == 0 and len(tried) == 4


def test_same_seed_same_history():
    a, b = gen7.generate(5, gen7.QUICK), gen7.generate(5, gen7.QUICK)
    assert [r.reports for r in a.runs] == [r.reports for r in b.runs]
    assert [r.reports for r in a.runs] != [r.reports for r in gen7.generate(6, gen7.QUICK).runs]


def test_infra_labels_are_the_bad_runners_and_the_outage():
    world = gen7.Builder(load(), gen7.Scale(), 1).world  # the same seed draws the same world
    tier, low, high = world.outage
    seen = set()
    for run in history(1).runs:
        for report in run.reports:
            whys = {label.why for label in report.labels if label.label == "infra"}
            if not whys:
                continue
            assert len(report.labels) == report.xml.count("<testcase") // gen7.ATTEMPTS  # every test failed
            assert all(label.label == "infra" for label in report.labels)
            for why in whys:
                seen.add(why)
                start, end = world.bad[report.runner] if why == "bad_runner" else (low, high)
                assert why == "bad_runner" or report.tier == tier
                assert start - timedelta(minutes=20) <= run.started < end
    assert seen == {"bad_runner", "outage"}
