"""The thirteenth labelled history (`bench._history_gen13`, TransformerEngine's real skeleton): its
JUnit reads the same through `ci.results.junit` and xml.etree, every failed test has exactly one
label and every label is a failure, the real windows break main where the data says and nowhere else,
flakes fail at their rates, a seed gives the same history twice, and the extractor's readers and the
verifier's comparison are checked on hand-written input."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from bench import _history_gen13 as gen13
from bench import verdicts
from bench._history_gen13_extract import main as extract_main
from bench._history_gen13_parse import Commit, qa_jobs, read_functions, windows
from bench._history_gen13_plan import NIGHTLY_LEVELS, PUSH_LEVELS
from bench._history_gen13_verify import compare
from bench._history_gen13_verify import main as verify_main
from bench._history_gen13_world import DATA
from bench._verdicts_records import LABELS, Label, Report, Run
from ci.results.junit import parse_junit

KNOWN = sorted(json.loads(DATA.read_text())["tests"])


@pytest.fixture(scope="module")
def full() -> gen13.History:
    return gen13.generate(1)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The test files and the JAX pytest.ini as a TransformerEngine checkout holds them (empty): JAX's
    classnames are relative to tests/jax, and tests/jax/test_fused_router.py shares its tail with
    tests/pytorch/test_fused_router.py, which only the config beside it settles."""
    root = tmp_path_factory.mktemp("te")
    for file in [*KNOWN, "tests/jax/pytest.ini"]:
        (root / file).parent.mkdir(parents=True, exist_ok=True)
        (root / file).write_text("")
    return root


@pytest.fixture(scope="module")
def quick() -> gen13.History:
    return gen13.generate(2, gen13.QUICK)


def _etree_nodes(xml: str) -> tuple[set[str], set[str]]:
    """(every node, failed nodes) of one JUnit text, read with xml.etree alone: the file is the known
    test file whose dotted path (relative to the repository or to tests/jax, the JAX config's folder)
    starts the classname."""
    ran, failed = set(), set()
    for case in ET.fromstring(xml).iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        file = next(f for f in KNOWN if classname + "." == f[:-3].replace("/", ".") + "."
                    or classname.startswith(f[:-3].replace("/", ".") + ".")
                    or classname.startswith(f[len("tests/jax/"):-3].replace("/", ".") + ".") and f.startswith("tests/jax/")
                    or classname == f[len("tests/jax/"):-3] and f.startswith("tests/jax/"))
        stem = Path(file).stem
        parts = classname.split(".")
        inner = parts[parts.index(stem) + 1:]
        node = "::".join([file, *inner, name])
        ran.add(node)
        if any(child.tag in ("failure", "error") for child in case):
            failed.add(node)
    return ran, failed


def _parsed_failed(report: Report, tmp_path: Path, root: Path) -> set[str]:
    path = tmp_path / "report.xml"
    path.write_text(report.xml)
    parsed = parse_junit(path, root=root, known_files=KNOWN)
    out = set()
    for case in parsed.cases:
        assert case.file in KNOWN, case
        parts = case.classname.split(".")
        inner = parts[parts.index(Path(case.file).stem) + 1:]
        if case.outcome in ("failed", "error"):
            out.add("::".join([case.file, *inner, case.name]))
        assert case.reruns == 0  # no rerun plugin in the qa scripts
    return out


def test_gen13_is_a_bench_generator(capsys: pytest.CaptureFixture[str]) -> None:
    generator = verdicts.GENERATORS["gen13"]
    assert generator.scale == gen13.Scale() and generator.quick == gen13.QUICK
    assert hasattr(generator.scale, "attempt_text") and generator.scale.attempt_text
    assert verdicts.main(["--generator", "gen99"]) == 2
    assert "gen13" in capsys.readouterr().err


def test_junit_reads_the_same_through_the_parser_and_etree(quick: gen13.History, full: gen13.History,
                                                           tmp_path: Path, checkout: Path) -> None:
    """Every failed testcase is one label of its report and every label a failed testcase, whether read
    with `parse_junit` (the JAX classnames relative to tests/jax resolved by the known files) or etree."""
    every = [r for run in quick.runs for r in run.reports]
    reports = [r for r in every if r.labels] + every[::10]
    reports += [r for run in full.runs[::25] for r in run.reports if r.labels][:150]
    checked_jax = 0
    frames: dict[tuple[str | None, str | None], set[str]] = {}
    for report in reports:
        ran, failed = _etree_nodes(report.xml)
        labelled = [label.node for label in report.labels]
        assert len(labelled) == len(set(labelled))
        assert set(labelled) == failed <= ran
        assert _parsed_failed(report, tmp_path, checkout) == failed
        checked_jax += report.xml.count('classname="test_')
        for case in ET.fromstring(report.xml).iter("testcase"):
            for child in case:
                frames.setdefault((case.get("classname"), case.get("name")), set()).add(child.text.split("\n")[0])
    assert checked_jax  # the JAX files' classnames are relative to tests/jax
    assert frames and all(len(lines) == 1 for lines in frames.values())  # a test's frame is its code's line


def test_labels_follow_the_records(full: gen13.History) -> None:
    assert full.runs and all(isinstance(run, Run) for run in full.runs)
    assert [r.finished for r in full.runs] == sorted(r.finished for r in full.runs)
    for run in full.runs:
        assert run.started <= run.finished
        for report in run.reports:
            assert isinstance(report, Report) and 0 <= report.shard < report.shards
            for label in report.labels:
                assert type(label) is Label and label.label in LABELS and label.every_attempt
                assert label.tier == report.tier and label.why
    counts = Counter(label.label for run in full.runs if run.event == "pull_request" for label in run.labels)
    assert all(counts[name] >= 40 for name in LABELS), counts


def test_the_ci_shape_follows_the_scripts(full: gen13.History) -> None:
    """Main's pushes run L0, the nightly L0-L2, a pull request the levels its comment asked for, and a
    retry re-runs only failed levels under the same run id."""
    for run in full.runs:
        tiers = {r.tier for r in run.reports}
        allowed = {"push": set(PUSH_LEVELS), "schedule": set(NIGHTLY_LEVELS)}.get(run.event, set(NIGHTLY_LEVELS) - {"L2_jax_unittest"})
        assert tiers <= allowed, (run.event, tiers)
    assert any("L2_jax_unittest" in {r.tier for r in run.reports} for run in full.runs if run.event == "schedule")
    retries = [run for run in full.runs if run.attempt == 2]
    firsts = {(run.run_id, run.attempt): run for run in full.runs}
    assert retries
    for retry in retries:
        first = firsts[(retry.run_id, 1)]
        assert first.labels or {r.tier for r in retry.reports} - {r.tier for r in first.reports}
        assert retry.sha == first.sha and retry.started >= first.finished


def test_a_push_cancels_the_running_pipeline(full: gen13.History) -> None:
    """A cancelled pipeline ends at the pull request's next push and keeps only the JUnit of levels that
    had finished by then (GitLab uploads no artifacts of a cancelled job)."""
    pushes = {pr.number: {push.time for push in pr.pushes} for pr in full.prs}
    cancelled = [run for run in full.runs if (run.run_id, run.attempt) in full.cancelled]
    assert len(cancelled) >= 10
    for run in cancelled:
        assert run.event == "pull_request" and run.finished in pushes[run.pr] and run.finished > run.started
        for report in run.reports:
            suite = ET.fromstring(report.xml).find("testsuite")
            began = datetime.fromisoformat(suite.get("timestamp")).replace(tzinfo=run.started.tzinfo)
            assert began + timedelta(seconds=float(suite.get("time")) - 4.2) <= run.finished


def test_real_windows_break_main_where_the_data_says(full: gen13.History) -> None:
    """Inside each window every run that ran a broken node fails it (broken on main, or infra that hit
    it first), except the culprit's own change and the pull request that ends it; outside no run has
    a broken_on_main label."""
    commits = full.commits
    assert len(full.windows) == 5 and len(full.unmodelled) == 1
    for window, nodes in zip(full.windows, full.broken):
        culprit, end = commits[window.culprit], commits[window.end]
        if window.kind == "revert":
            assert end.subject.startswith(f'Revert "{re.sub(r" [(]#[0-9]+[)]$", "", culprit.subject)}')
        seen = 0
        for run in full.runs:
            ran = {label.node: label.label for r in run.reports for label in r.labels}
            present = {c for r in run.reports if any(f'name="{n.split("::")[-1]}"' in r.xml for n in nodes)
                       for c in _etree_nodes(r.xml)[0] & set(nodes)}
            own = run.pr == culprit.pr or (run.event == "push" and run.commit == window.culprit)
            for node in present:
                if window.culprit <= run.commit < window.end and run.pr != end.pr:
                    seen += 1
                    assert ran.get(node) in (("new", "infra") if own else ("broken_on_main", "infra")), (run, node)
        assert seen >= 2, window
    inside = [(w.culprit, w.end) for w in full.windows]
    for run in full.runs:
        if any(label.label == "broken_on_main" for label in run.labels):
            assert any(low <= run.commit < high for low, high in inside)


def test_a_window_breaks_from_its_culprit_to_the_commit_before_its_end(full: gen13.History) -> None:
    """At each window's edges: main at the commit before the culprit and at the revert or fix is clean,
    from the culprit to the commit before the end it is broken, the culprit's own pull request and push
    see their own change, the pull request that ends it sees nothing."""
    for window, nodes in zip(full.windows, full.broken):
        culprit_pr, end_pr = full.commits[window.culprit].pr, full.commits[window.end].pr

        def at(code: int, own: int | None = None, push_of: int | None = None) -> set[tuple[str, str]]:
            planted = gen13.planted_at(full.windows, full.broken, full.commits, code, own, push_of)
            return {(node, p.label) for node, p in planted.items() if node in nodes}
        assert at(window.culprit - 1) == set() and at(window.end) == set()
        for code in (window.culprit, window.end - 1):
            assert at(code) == {(node, "broken_on_main") for node in nodes}
            assert at(code, own=window.end) == set()
        assert at(window.culprit - 1, own=window.culprit) == {(node, "new") for node in nodes}
        assert at(window.culprit, push_of=window.culprit) == {(node, "new") for node in nodes}
        assert culprit_pr and end_pr


def test_flakes_fail_at_their_rates(full: gen13.History) -> None:
    """Each flaky node's failures are within 4.5 binomial deviations of its rate over the runs nothing
    else failed it in, and the flaky labels are exactly those failures."""
    causes = full.causes
    assert causes.flaky and sum(causes.trials.values()) > 2000
    labelled = Counter(label.node for run in full.runs for label in run.labels if label.label == "flaky")
    assert labelled == Counter({n: h for n, h in causes.hits.items() if h})
    expected = variance = 0.0
    for node, flake in causes.flaky.items():
        trials, hits = causes.trials.get(node, 0), causes.hits.get(node, 0)
        mean, var = trials * flake.rate, trials * flake.rate * (1 - flake.rate)
        assert abs(hits - mean) <= 4.5 * math.sqrt(var) + 1, (node, hits, trials, flake)
        expected, variance = expected + mean, variance + var
    assert abs(sum(causes.hits.values()) - expected) <= 4 * math.sqrt(variance)


def test_a_seed_gives_the_same_history() -> None:
    def shape(history: gen13.History) -> list[tuple]:
        return [(r.event, r.sha, r.commit, r.started, r.finished, r.run_id, r.attempt, r.pr,
                 tuple((p.tier, p.shard, p.runner, p.xml, tuple(p.labels)) for p in r.reports)) for r in history.runs]
    one, two = gen13.generate(3, gen13.QUICK), gen13.generate(3, gen13.QUICK)
    assert shape(one) == shape(two)
    assert shape(one) != shape(gen13.generate(4, gen13.QUICK))


def test_a_scale_past_the_data_is_refused() -> None:
    with pytest.raises(ValueError, match="fewer than 2 of the 240 real commits"):
        gen13.generate(1, gen13.Scale(start=239))


def test_qa_jobs_reads_the_scripts_pytest_lines() -> None:
    script = "\n".join([
        "# python3 -m pytest --junitxml=$XML_LOG_DIR/commented.xml $TE_PATH/tests/pytorch/test_x.py",
        'NVTE_A=1 B=0 python3 -m pytest --tb=auto --junitxml=$XML_LOG_DIR/pytest_a.xml $TE_PATH/tests/pytorch/test_a.py || test_fail "a"',
        "python3 -m pytest -c $TE_PATH/tests/jax/pytest.ini -v --junitxml=$XML_LOG_DIR/j.xml $TE_PATH/tests/jax "
        "--ignore=$TE_PATH/tests/jax/test_ep.py -k 'not distributed' || test_fail j",
        "CUDA_VISIBLE_DEVICES=0,1 python3 -m pytest -v -s --junitxml=$XML_LOG_DIR/cp.xml $TE_PATH/tests/pytorch/cp.py &",
        "python3 -m pytest --junitxml=$XML_LOG_DIR/pytest_a.xml $TE_PATH/tests/pytorch/other.py",
        "python3 -m pytest --junitxml=$XML_LOG_DIR/mnist.xml $TE_PATH/examples/jax/mnist || test_fail mnist",
        "python3 $TE_PATH/tests/pytorch/test_checkpoint.py --save-checkpoint all"])
    jobs = qa_jobs(script)
    assert [(j.xml, j.path) for j in jobs] == [("pytest_a.xml", "tests/pytorch/test_a.py"), ("j.xml", "tests/jax"),
                                               ("cp.xml", "tests/pytorch/cp.py")]
    assert jobs[0].env == "NVTE_A=1 B=0" and jobs[1].keyword == "not distributed"
    assert jobs[1].ignore == ["tests/jax/test_ep.py"] and jobs[1].config == "tests/jax/pytest.ini"


def test_test_functions_counts_literal_parametrizations() -> None:
    text = "\n".join([
        "import pytest", "SIZES = [1, 2, 3]", "def helper(): pass",
        "@pytest.mark.parametrize('a,b', [(1, 2), (3, 4)])", "@pytest.mark.parametrize('n', SIZES)",
        "def test_one(a, b, n): pass",
        "@pytest.mark.parametrize('x', make())", "def test_two(x): pass",
        "@pytest.mark.parametrize(['dt'], (1, 2))", "class TestK:",
        "    def test_m(self, dt): pass", "    def other(self): pass",
        "class Helper:", "    def test_not(self): pass"])
    found = [(f.cls, f.name, f.argnames, f.count) for f in read_functions(text)]
    assert found == [("", "test_one", ["a", "b", "n"], 6), ("", "test_two", ["x"], 0), ("TestK", "test_m", ["dt"], 2)]
    assert read_functions("def test_(:\n") == []


def _commit(i: int, subject: str, files: list[str], body: str = "") -> Commit:
    return Commit(f"{i:040x}", "2026-01-01T00:00:00+00:00", "a", 100 + i, f"{subject} (#{100 + i})", body, files, len(files))


def test_windows_come_from_reverts_and_named_fixes() -> None:
    commits = [_commit(0, "Add grouped GEMM path", ["transformer_engine/common/gemm/g.cu"]),
               _commit(1, "Tune attention mask", ["transformer_engine/pytorch/attention/m.py"]),
               _commit(2, 'Revert "Add grouped GEMM path"', ["transformer_engine/common/gemm/g.cu"]),
               _commit(3, "Rename attention helpers", ["transformer_engine/pytorch/attention/m.py"]),
               _commit(4, "Fix mask tuning regression", ["transformer_engine/pytorch/attention/m.py"]),
               _commit(5, "Fix typo in docs", ["transformer_engine/pytorch/attention/m.py"]),
               _commit(6, "[PyTorch] Fix crash", ["transformer_engine/pytorch/x.py"], body="Regressed in #100.")]
    found = [(w.culprit, w.end, w.kind) for w in windows(commits)]
    # the unnamed fix skips the nearer commit that shares its file but not a subject word
    assert found == [(0, 2, "revert"), (1, 4, "fix"), (0, 6, "fix")]
    far = [_commit(i, "Unrelated change", [f"transformer_engine/u{i}.py"]) for i in range(14)]
    far[0] = _commit(0, "Add mask tuning", ["transformer_engine/pytorch/attention/m.py"])
    far.append(_commit(14, "Fix mask tuning", ["transformer_engine/pytorch/attention/m.py"]))
    assert windows(far) == []  # 14 commits back is past FIX_REACH


def test_the_verifier_tells_a_changed_data_set_apart() -> None:
    data = json.loads(DATA.read_text())
    assert compare(data, json.loads(json.dumps(data))) == []
    changed = json.loads(json.dumps(data))
    changed["commits"][7]["author"] = "someone else"
    changed["commits"][9]["sha"] = data["commits"][9]["sha"][:-1] + ("0" if data["commits"][9]["sha"][-1] != "0" else "1")
    changed["windows"].pop()
    del changed["dirs"]["tests/jax"]
    assert compare(data, changed) == ["/commits[7]/author: " + repr(data["commits"][7]["author"]) + " != 'someone else'",
                                      f"/commits[9]/sha: {data['commits'][9]['sha']!r} != {changed['commits'][9]['sha']!r}",
                                      "/dirs/tests/jax: present in the committed data",
                                      f"/windows: {len(data['windows'])} items committed, {len(data['windows']) - 1} re-extracted"]


def test_the_data_is_real_and_small() -> None:
    data = json.loads(DATA.read_text())
    assert DATA.stat().st_size < 400_000
    assert len(data["commits"]) == 240 and sum(c["pr"] is not None for c in data["commits"]) >= 200
    assert all(re.fullmatch(r"[0-9a-f]{40}", c["sha"]) for c in data["commits"])


@pytest.mark.parametrize("module", [extract_main, verify_main])
def test_the_extractor_and_verifier_refuse_bad_input(module, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert module([]) == 2
    assert "usage:" in capsys.readouterr().err
    assert module([str(tmp_path / "missing")]) in (1, 2)
    err = capsys.readouterr().err
    assert "missing" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
