"""The eleventh labelled history (`bench._history_gen11`, FlashInfer's real skeleton): its JUnit
reads the same through `ci.results.junit` and `xml.etree`, its labels follow its reports and its
story (each real fix window on main and in the breaker's own pull request), its flake rates stay
within binomial bounds, and `bench._history_gen11_verify` compares data files line by line."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from bench import _history_gen11 as gen11
from bench import _history_gen11_verify as verify
from bench._history_gen11_extract import DATA
from bench._history_gen11_jobs import Rates
from ci.history.ingest import node_id
from ci.results.junit import FAILED, ERROR, SKIPPED, parse_junit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def history() -> gen11.History:
    return gen11.generate(1)


def _failing(xml: str) -> dict[str, str]:
    """node -> the failure's element tag, read with xml.etree alone."""
    out = {}
    for case in ET.fromstring(xml).iter("testcase"):
        kids = [k.tag for k in case if k.tag in ("failure", "error")]
        if kids:
            name = case.get("name")
            cls = case.get("classname")
            module = case.get("file")[:-3].replace("/", ".")
            inner = cls[len(module) + 1:].replace(".", "::") if cls != module else ""
            out[f"{case.get('file')}::{inner + '::' if inner else ''}{name}"] = kids[0]
    return out


def test_junit_reads_the_same_through_the_reader_and_etree(history: gen11.History, tmp_path: Path) -> None:
    reports = [r for run in history.runs for r in run.reports]
    for i, report in enumerate(reports[::7]):
        path = tmp_path / f"r{i}.xml"
        path.write_text(report.xml, encoding="utf-8")
        parsed = parse_junit(path)
        tree = ET.fromstring(report.xml)
        assert len(parsed.cases) == len(list(tree.iter("testcase"))) == int(tree.find("testsuite").get("tests"))
        failing = {node_id(c): c.outcome for c in parsed.cases if c.outcome in (FAILED, ERROR)}
        by_tree = _failing(report.xml)
        assert failing == {n: ("failed" if tag == "failure" else "error") for n, tag in by_tree.items()}
        assert set(failing) == {label.node for label in report.labels}
        assert all(label.tier == report.tier and label.every_attempt for label in report.labels)
        skipped = {node_id(c) for c in parsed.cases if c.outcome == SKIPPED}
        assert skipped <= {n.node for nodes in history.world.files.values() for n in nodes if n.xfail}


def test_every_real_window_fails_on_main_and_in_the_breakers_pull_request(history: gen11.History) -> None:
    world = history.world
    assert len(world.windows) >= 8  # the data file's real fixes inside the 250 commits
    for w in world.windows:
        covered = []
        for run in history.runs:
            own = _merges(history, run, w.breaker)
            inside = w.breaker <= run.commit < w.fixer and not _merges(history, run, w.fixer)
            for report in (r for r in run.reports if r.tier in w.tiers):
                labels = {label.node: label.label for label in report.labels}
                for node in set(w.nodes) & _cases(report.xml):
                    if own:
                        assert labels.get(node) == "new", (w, run.run_id, node)
                        covered.append("new")
                    elif inside:
                        assert labels.get(node) == "broken_on_main", (w, run.run_id, node)
                        covered.append(run.event)
                    elif not any(node in o.nodes and (o.breaker <= run.commit < o.fixer
                                                      or _merges(history, run, o.breaker)) for o in world.windows):
                        assert labels.get(node) not in ("broken_on_main", "new"), (w, run.run_id, node)
        # every window shows on main or in a pull request based inside it
        assert covered, f"window {w.breaker}..{w.fixer} failed no run"
    assert Counter(label.label for run in history.runs for label in run.labels)["new"]


def _merges(history: gen11.History, run, index: int) -> bool:
    """Whether ``run`` is a pull request run of the pull request that became main commit ``index``."""
    return run.event == "pull_request" and history.commits[index].pr == run.pr


def _cases(xml: str) -> set[str]:
    out = set()
    for case in ET.fromstring(xml).iter("testcase"):
        cls, module = case.get("classname"), case.get("file")[:-3].replace("/", ".")
        inner = cls[len(module) + 1:].replace(".", "::") if cls != module else ""
        out.add(f"{case.get('file')}::{inner + '::' if inner else ''}{case.get('name')}")
    return out


def test_labels_follow_the_code_each_run_holds(history: gen11.History) -> None:
    for run in history.runs:
        for label in run.labels:
            if label.label == "new":
                assert run.event == "pull_request"
                assert any(history.commits[w.breaker].pr == run.pr and label.node in w.nodes
                           for w in history.world.windows)
            if label.label == "broken_on_main":
                assert any(w.breaker <= run.commit < w.fixer and label.node in w.nodes for w in history.world.windows)


def test_reruns_keep_the_run_id_and_sha_and_rerun_failed_jobs_only(history: gen11.History) -> None:
    runs = defaultdict(list)
    for run in history.runs:
        runs[run.run_id].append(run)
    reruns = [group for group in runs.values() if len(group) > 1]
    assert reruns
    for group in reruns:
        assert len({(r.sha, r.event, r.pr, r.commit) for r in group}) == 1
        assert sorted(r.attempt for r in group) == sorted({r.attempt for r in group})
        assert all(r.event == "pull_request" for r in group)
    assert all(r.event == "pull_request" for r in history.runs if r.attempt > 1)


def test_push_runs_superseded_by_the_next_push_are_cut_short(history: gen11.History) -> None:
    pushed = {run.commit for run in history.runs if run.event == "push"}
    assert len(pushed) < len(history.commits)  # cancel-in-progress on main drops whole runs
    partial = [run for run in history.runs if run.event == "push" and {r.tier for r in run.reports} == {"h100"}]
    assert partial  # a cancelled H100 job still uploads its finished batches


def _bound(hits: int, trials: int, p: float) -> None:
    sigma = math.sqrt(trials * p * (1 - p))
    assert abs(hits - trials * p) <= 4 * sigma + 1, (hits, trials, p)


def test_flake_and_infra_rates_stay_within_binomial_bounds(history: gen11.History) -> None:
    world, rates = history.world, Rates()
    counts: Counter = Counter()
    for run in history.runs:
        for report in run.reports:
            whys = {label.node: label.why for label in report.labels}
            for node in _cases(report.xml):
                why = whys.get(node, "")
                other = why and why not in ("numerical tolerance", "download 5xx/429", "NCCL/MPI error")
                if node in world.prone and not other:
                    counts["prone"] += 1
                    counts["tolerance"] += why == "numerical tolerance"
                if node in world.downloads and not other:
                    counts["dl"] += 1
                    counts["dl_hit"] += why == "download 5xx/429"
                if node in world.comms and not other:
                    counts["comm"] += 1
                    counts["comm_hit"] += why == "NCCL/MPI error"
    assert counts["prone"] > 500 and counts["dl"] > 500 and counts["comm"] > 500
    _bound(counts["tolerance"], counts["prone"], rates.tolerance)
    _bound(counts["dl_hit"], counts["dl"], rates.download)
    _bound(counts["comm_hit"], counts["comm"], rates.comm)


def test_xfail_nodes_are_skipped_until_they_pass_and_never_labelled(history: gen11.History) -> None:
    xfail = {n.node for nodes in history.world.files.values() for n in nodes if n.xfail}
    assert xfail
    seen = Counter()
    for run in history.runs:
        assert not xfail & {label.node for label in run.labels}
        for report in run.reports:
            for case in ET.fromstring(report.xml).iter("testcase"):
                skip = case.find("skipped")
                if skip is not None:
                    assert skip.get("type") == "pytest.xfail"
                    seen["xfail"] += 1
    assert seen["xfail"]


def test_the_same_seed_gives_the_same_history() -> None:
    a, b = gen11.generate(3, gen11.QUICK), gen11.generate(3, gen11.QUICK)
    assert [(r.run_id, r.attempt, [x.xml for x in r.reports]) for r in a.runs] == \
           [(r.run_id, r.attempt, [x.xml for x in r.reports]) for r in b.runs]
    assert a.runs and all(r.finished >= r.started for r in a.runs)


def test_the_data_file_is_small_and_names_its_range() -> None:
    assert DATA.stat().st_size < 300_000
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert data["count"] == len(data["commits"]) == 250
    assert (data["first"], data["last"]) == (data["commits"][0]["sha"], data["commits"][-1]["sha"])
    assert data["command"].startswith("python -m bench._history_gen11_extract GIT_DIR --end ")
    order = {c["sha"]: i for i, c in enumerate(data["commits"])}
    for w in data["windows"]:
        assert order[w["breaker"]] < order[w["fixer"]]
        assert all("funcs" in data["tests"][t] for t in w["tests"])


def test_verify_compares_data_files_line_by_line() -> None:
    data = json.loads(DATA.read_text(encoding="utf-8"))
    assert verify.compare(data, copy.deepcopy(data)) == []
    changed = copy.deepcopy(data)
    changed["commits"][5]["time"] += 1
    del changed["tests"]["tests/utils/test_norm.py"]
    changed["windows"].append({"kind": "fix", "breaker": "a", "fixer": "b", "tests": []})
    problems = verify.compare(data, changed)
    assert problems[0].startswith("commits[5] differs: ")
    assert "tests: tests/utils/test_norm.py only in the data file" in problems
    assert any(p.startswith("windows: ") and "entries in the data file" in p for p in problems)
    assert len(problems) == 3


def test_verify_and_extract_refuse_a_missing_mirror_in_one_line(tmp_path: Path) -> None:
    for module in ("bench._history_gen11_verify", "bench._history_gen11_extract"):
        done = subprocess.run([sys.executable, "-m", module, str(tmp_path / "none")], cwd=ROOT,
                              capture_output=True, text=True, timeout=120,
                              input="")
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "cannot read" in done.stderr
        assert "Traceback" not in done.stderr


SAMPLE = '''import pytest
import torch
import flashinfer
from flashinfer.norm import rmsnorm
SIZES = [1, 7, 128]


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode,scale", [("NONE", 1.0), ("ROPE_LLAMA", -0.5)])
def test_decode(size, dtype, mode, scale):
    flashinfer.single_decode_with_kv_cache


@pytest.mark.xfail(reason="known")
def test_known():
    pass


class TestPage:
    @pytest.mark.parametrize("page", [1, 16])
    def test_append(self, page):
        pass
'''


def test_node_ids_and_counts_match_pytests_own_collection(tmp_path: Path) -> None:
    from bench._history_gen11_parse import imported_modules, test_functions
    # torch's dtypes read as any non-literal value: pytest names them argname + index
    (tmp_path / "test_sample.py").write_text(SAMPLE.replace("import torch\n", "torch = pytest\n"), encoding="utf-8")
    (tmp_path / "conftest.py").write_text("import pytest, sys, types\n"
                                          "sys.modules['flashinfer'] = types.ModuleType('f')\n"
                                          "sys.modules['flashinfer.norm'] = types.SimpleNamespace(rmsnorm=0)\n"
                                          "pytest.float16, pytest.bfloat16 = object(), object()\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "test_sample.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    collected = [line.split("::", 1)[1] for line in done.stdout.splitlines() if line.startswith("test_sample.py::")]
    assert done.returncode == 0, done.stdout[-2000:]
    funcs = test_functions(SAMPLE)
    assert sum(f.count for f in funcs) == len(collected) == 12 + 1 + 2
    for func in funcs:
        mine = [c for c in collected if c.split("[")[0] == func.name]
        assert func.ids == mine[:len(func.ids)], (func.ids, mine)
    assert [f.xfail for f in funcs] == [False, True, False]
    known = {"flashinfer/norm", "flashinfer/decode", "flashinfer/utils"}
    assert imported_modules(SAMPLE, {"single_decode_with_kv_cache": "decode"}, known) == \
           ["flashinfer/decode", "flashinfer/norm"]
