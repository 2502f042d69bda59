"""gen8, the held-out history on vLLM's real main and Buildkite steps (`bench._history_gen8`): its
JUnit has pytest-rerunfailures' shape (a real pytest run is the oracle) and reads the same with
`ci.results.junit` and `xml.etree`; every label matches its test's attempts and the real story
(each revert and fix window); its flakes fail at their rates within binomial bounds; the data file
checker names the first field that differs (run against a real clone by hand: docs/history.md)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import pytest

from bench import _history_gen7, _history_gen8 as gen8, _verdicts_records as records, verdicts
from bench._history_gen8_story import load
from bench._history_gen8_verify import first_difference
from bench._history_gen8_text import FLAKE_KINDS, INFRA_KINDS, Attempt, junit
from ci.results.junit import ATTEMPT_OUTCOME, FAILED, parse_junit

ROOT = Path(__file__).resolve().parents[2]
SEEDS = (1, 2, 3)


@lru_cache(maxsize=None)
def history(seed: int, quick: bool = False, text: bool = True) -> gen8.History:
    scale = gen8.QUICK if quick else gen8.Scale()
    return gen8.generate(seed, scale if text else replace(scale, attempt_text=False))


def _cases(xml: str, tmp_path: Path) -> dict[str, tuple[str, ...]]:
    """node -> attempt outcomes, as `ci.results.junit` reads the report."""
    path = tmp_path / "r.xml"
    path.write_text(xml, encoding="utf-8")
    return {f"{c.file}::{c.name}": tuple(a.outcome for a in c.attempts) for c in parse_junit(path).cases}


def test_gen8_is_selectable_and_the_others_are_unchanged() -> None:
    assert verdicts.GENERATORS["gen8"].generate is gen8.generate
    assert verdicts.GENERATORS["gen8"].quick == gen8.QUICK
    assert verdicts.GENERATORS["gen7"].generate is _history_gen7.generate
    runs = history(1, quick=True).runs
    assert runs and all(type(run) is records.Run for run in runs)
    assert all(type(label) is records.Label and label.label in records.LABELS for run in runs for label in run.labels)


def test_its_junit_has_real_pytest_rerunfailures_shape(tmp_path: Path) -> None:
    """A real pytest run of a file marked as vLLM marks its flaky tests, ``mark.flaky(reruns=2)``:
    a test failing every attempt, one failing once then passing, one passing."""
    program = ("import pytest\n_n = []\npytestmark = pytest.mark.flaky(reruns=2)\n\n"
               "def test_always():\n    assert 1 == 2\n\n"
               "def test_once():\n    _n.append(1)\n    assert len(_n) > 1\n\n"
               "def test_ok():\n    pass\n")
    (tmp_path / "test_k.py").write_text(program, encoding="utf-8")
    real = tmp_path / "real.xml"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-o",
            "junit_family=xunit1", f"--junitxml={real}", "test_k.py"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout[-2000:]
    bad = Attempt("AssertionError: assert 1 == 2", 0.001)
    ours = tmp_path / "ours.xml"
    ours.write_text(junit("k", [("test_k.py::test_always", [bad] * 3), ("test_k.py::test_once", [bad, Attempt()]),
                                ("test_k.py::test_ok", [Attempt()])], attempt_text=False), encoding="utf-8")
    shape = lambda path: [(c.name, c.outcome, c.reruns, [a.outcome for a in c.attempts])  # noqa: E731
                          for c in parse_junit(path).cases]
    assert shape(ours) == shape(real)
    tags = lambda path: [(e.tag, sorted(set(e.attrib) - {"line"})) for e in ET.parse(path).iter()  # noqa: E731
                         if e.tag in ("testcase", "failure")]
    assert tags(ours) == tags(real)


@pytest.mark.parametrize("text", [True, False])
def test_its_junit_reads_the_same_with_ci_and_etree_and_labels_match_attempts(text: bool, tmp_path: Path) -> None:
    for run in history(2, quick=True, text=text).runs:
        for report in run.reports:
            seen: dict[str, list[bool]] = {}  # per element: failed (a <failure>, or the attempt properties)
            for case in ET.fromstring(report.xml).iter("testcase"):
                props = {p.get("name"): p.get("value") for p in case.iter("property")}
                failed = case.find("failure") is not None or props.get(ATTEMPT_OUTCOME) == FAILED
                seen.setdefault(f"{case.get('file')}::{case.get('name')}", []).append(failed)
            ours = _cases(report.xml, tmp_path)
            assert {n: len(v) for n, v in seen.items()} == {n: len(v) for n, v in ours.items()}
            assert {n for n, v in seen.items() if v[-1]} == {n for n, v in ours.items() if v[-1] == FAILED}
            if text:  # stock pytest writes a rerun attempt empty: ci.results.junit reads it passed
                assert seen == {n: [o == FAILED for o in v] for n, v in ours.items()}
            failing = {n for n, v in seen.items() if len(v) > 1 or v[-1]}
            assert failing == {lb.node for lb in report.labels}
            assert all(lb.every_attempt == seen[lb.node][-1] and lb.tier == report.tier for lb in report.labels)


@lru_cache(maxsize=None)
def _nodes(xml: str) -> frozenset[str]:
    return frozenset(f"{c.get('file')}::{c.get('name')}" for c in ET.fromstring(xml).iter("testcase"))


def test_every_real_window_breaks_main_from_its_breaker_until_its_fix() -> None:
    """From each real window (`bench._history_gen8_story.windows`) alone: main's runs fail its tests
    from the breaker to the commit before the revert or fix, every attempt; the breaker's own PR
    runs call them ``new``; a PR whose base lies inside the window and that is not the fix,
    ``broken_on_main`` (main's breakage wins over the PR's own); a test no window breaks at a run's
    code is never ``broken_on_main``."""
    h = history(1)
    sk = load()
    windows = h.world.windows
    assert {w.kind for w in windows} == {"revert", "fix"} and len(windows) >= 5
    index = {c.sha: c.index for c in sk.commits}
    checked: Counter[tuple[int, int, str]] = Counter()
    for run in h.runs:
        for report in run.reports:
            labels = {lb.node: lb for lb in report.labels}
            for node in _nodes(report.xml):
                test = (report.tier, node)
                if run.event == "push":
                    main = [w for w in windows if w.start <= run.commit < w.end and test in w.tests]
                    own: list = []
                else:
                    base = index[run.base_sha]
                    main = [w for w in windows if w.start <= base < w.end and w.end != run.commit and test in w.tests]
                    own = [w for w in windows if w.start == run.commit and test in w.tests]
                for w, want in [(w, "broken_on_main") for w in main] or [(w, "new") for w in own]:
                    assert labels[node].label == want and labels[node].every_attempt, (w, run.run_id, node)
                    checked[(w.start, w.end, f"{run.event} {want}")] += 1
                if not main and node in labels:
                    assert labels[node].label != "broken_on_main", (run.run_id, node)
    for w in windows:
        assert checked[(w.start, w.end, "push broken_on_main")] >= (w.end - w.start) * len(w.tests), w
        assert checked[(w.start, w.end, "pull_request new")] or checked[(w.start, w.end, "pull_request broken_on_main")]


def test_retries_are_new_jobs_of_the_same_steps() -> None:
    """Buildkite's retries keep the build number and commit: a lost job comes back once as a new
    job of its step (attempt 2, none of attempt 1's jobs), a person retries only red jobs."""
    builds: dict[str, list[records.Run]] = {}
    for run in history(1).runs:
        builds.setdefault(run.run_id, []).append(run)
    kinds: Counter[str] = Counter()
    for runs in builds.values():
        runs.sort(key=lambda r: r.attempt)
        assert [r.attempt for r in runs] == list(range(1, len(runs) + 1))
        assert len({(r.sha, r.event, r.commit, r.pr) for r in runs}) == 1
        seen: dict[tuple[str, int], bool] = {}
        for run in runs:
            jobs = {(r.tier, r.shard): any(lb.every_attempt for lb in r.labels) for r in run.reports}
            if run.attempt > 1 and not set(jobs) & set(seen):
                kinds["lost"] += 1
            elif run.attempt > 1:
                assert all(seen[job] for job in jobs), run.run_id  # only red jobs are retried by hand
                kinds["manual"] += 1
            seen.update(jobs)
    assert kinds["lost"] and kinds["manual"]


def _attempts(xml: str) -> dict[str, tuple[int, bool]]:
    """node -> (attempts, whether the last failed), read with xml.etree (the reader's agreement with
    `ci.results.junit` is the test above)."""
    out: dict[str, tuple[int, bool]] = {}
    for case in ET.fromstring(xml).iter("testcase"):
        node = f"{case.get('file')}::{case.get('name')}"
        out[node] = (out.get(node, (0, False))[0] + 1, case.find("failure") is not None)
    return out


def test_flakes_fail_at_their_rates_within_binomial_bounds() -> None:
    trials: Counter[float] = Counter()
    fails: Counter[float] = Counter()
    kinds_seen: set[str] = set()
    for seed in SEEDS:
        h = history(seed)
        broken = {t for w in h.world.windows for t in w.tests}
        for run in h.runs:
            when = int(run.started.timestamp() + (gen8.IMAGE_BUILD if run.attempt == 1 else 0))
            for report in run.reports:
                if any(s.hits(report.runner, when) for s in h.world.stretches):
                    continue
                texts = {lb.node: lb.why for lb in report.labels}
                for node, (tries, failed) in _attempts(report.xml).items():
                    flake = h.world.flakes.get((report.tier, node))
                    if flake is None or (report.tier, node) in broken or "push" in texts.get(node, ""):
                        continue
                    trials[flake.p] += tries
                    fails[flake.p] += tries - 1 + failed  # every attempt but a last pass failed
                    kinds_seen.add(flake.kind)
    assert set(trials) == {0.03, 0.08, 0.15} and len(kinds_seen) >= 4
    for p, n in trials.items():
        q = p + gen8.Scale().hub_p  # a model step's test also meets the hub's own errors
        assert abs(fails[p] - n * q) <= 4 * math.sqrt(n * q * (1 - q)) + 2, (p, fails[p], n)


def test_failure_texts_name_their_causes() -> None:
    h = history(3)
    flake_lines = {text.split(":")[0] for text in FLAKE_KINDS.values()}
    for run in h.runs:
        for report in run.reports:
            for lb in report.labels:
                if lb.label == "infra":
                    assert any(line in report.xml for line in INFRA_KINDS.values())
                if lb.label == "flaky":
                    assert any(line in report.xml for line in flake_lines)


def test_the_same_seed_gives_the_same_history() -> None:
    a, b = gen8.generate(5, gen8.QUICK), gen8.generate(5, gen8.QUICK)
    assert [r.reports for r in a.runs] == [r.reports for r in b.runs]
    assert [r.reports for r in a.runs] != [r.reports for r in gen8.generate(6, gen8.QUICK).runs]


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_extract_and_verify_refuse_a_missing_clone_in_one_line(tmp_path: Path) -> None:
    for module in ("bench._history_gen8_extract", "bench._history_gen8_verify"):
        done = _run(module, str(tmp_path / "no-clone"))
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "no-clone" in done.stderr


def test_verify_names_the_first_field_where_the_data_file_and_a_clone_differ() -> None:
    # The clone itself is not here in CI: `python -m bench._history_gen8_verify GIT_DIR` is run by
    # hand against one (docs/history.md says when and at which commit); this pins what it compares.
    data = json.loads((ROOT / "bench" / "_history_gen8_data.json").read_text(encoding="utf-8"))
    assert first_difference(data, json.loads(json.dumps(data))) is None
    changed = json.loads(json.dumps(data))
    changed["commits"][7][2] = "Someone Else"
    found = first_difference(data, changed)
    assert found is not None and found.startswith("/commits[7][2]: data file ") and "'Someone Else'" in found
    changed = json.loads(json.dumps(data))
    changed["commits"].pop()
    assert first_difference(data, changed) == f"/commits: {len(data['commits'])} items in the data file, " \
        f"{len(data['commits']) - 1} from the clone"
    changed = json.loads(json.dumps(data))
    changed["extra"] = 1
    assert first_difference(data, changed) == "/extra: only in the clone"
