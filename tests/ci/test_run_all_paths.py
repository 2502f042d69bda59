"""``run_all_paths`` with ``!`` exclusions (`ci.registry.run_all`): the last match wins, both parsers
and the schema read them, a malformed or idle exclusion is refused at its line, and ``ci plan``
says which entry made a change select everything."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from ci.registry import covers_everything_under, deciding_pattern, parse_registry, run_all_rule
from ci.registry import fast_parse, parse as precise
from ci.registry.run_all import run_all_problems
from tests.ci.tree_testutil import CPU_TIER_BLOCK, cpu_entry

ROOT = Path(__file__).resolve().parents[2]
VALIDATOR = jsonschema.Draft202012Validator(json.loads((ROOT / "ci" / "registry" / "schema.json").read_text()))

# vLLM's shape: kernels and build files run everything, the CPU kernels do not.
VLLM = ("csrc", "cmake", "requirements", "!csrc/cpu", "csrc/cpu/api.h")


@pytest.mark.parametrize("path, rule", [
    ("csrc/attention/paged.cu", "csrc"),
    ("csrc", "csrc"),
    ("csrc/cpu/gemm.cpp", None),           # taken back
    ("csrc/cpu", None),                    # the excluded directory itself
    ("csrc/cpuinfo.cc", "csrc"),           # a sibling sharing the prefix's characters is not under it
    ("csrc/cpu/api.h", "csrc/cpu/api.h"),  # matched again after the exclusion: the last match wins
    ("csrc/cpu/api.hpp", None),
    ("csrc_extra/x.cu", None),
    ("cmake/utils.cmake", "cmake"),
    ("requirements/cuda.txt", "requirements"),
    ("requirements.txt", None),
    ("vllm/model_executor/x.py", None),
])
def test_the_last_matching_entry_decides(path, rule):
    assert run_all_rule(VLLM, path) == rule


def test_an_exclusion_before_any_match_and_a_reinclusion_of_a_directory():
    assert run_all_rule(("!csrc", "csrc"), "csrc/cpu/x") == "csrc"  # nothing matched yet: a no-op
    patterns = ("csrc", "!csrc/cpu", "csrc/cpu/x86")
    assert [run_all_rule(patterns, p) for p in ("csrc/cpu/x86/a.cc", "csrc/cpu/arm/a.cc")] == ["csrc/cpu/x86", None]
    assert run_all_rule((".", "!docs"), "docs/index.md") is None and run_all_rule((".", "!docs"), "setup.py") == "."


@pytest.mark.parametrize("patterns, path, decided", [
    (("a/b", "!a"), "a/b/x", "!a"),     # took back what a/b matched
    (("a/b", "!a"), "a/c", None),       # under the exclusion, but nothing above matched it: nothing decided
    (("a", "!a/b", "a/b/c"), "a/b/c/d", "a/b/c"),
    (("a", "!a/b"), "z", None),
    (("a", "!a", "!a/b"), "a/b/c", "!a"),  # a second exclusion has nothing left to take back
])
def test_the_deciding_entry_is_named_only_when_it_decided(patterns, path, decided):
    assert deciding_pattern(patterns, path) == decided


@pytest.mark.parametrize("prefix, covered", [
    ("csrc/attention", True), ("csrc", False), ("csrc/cpu", False), ("csrc/cpu/api.h", True), ("cmake", True),
    ("vllm", False), (".", False),
])
def test_covers_everything_under(prefix, covered):
    assert covers_everything_under(VLLM, prefix) is covered


# A brute-force oracle for "takes back nothing": every path of a small universe that holds each
# pattern, a child under each and a path beside each.
SEGMENTS = ("a", "b", "c")


def _universe() -> list[str]:
    paths = []
    for depth in range(1, 5):
        paths += ["/".join(parts) for parts in itertools.product(SEGMENTS + ("z",), repeat=depth)]
    return paths


UNIVERSE = _universe()


def _idle_by_enumeration(patterns: list[str], index: int) -> bool:
    target = patterns[index][1:]
    under = [p for p in UNIVERSE if p == target or p.startswith(target + "/")]
    return not any(run_all_rule(patterns[:index], p) is not None for p in under)


def test_idle_exclusions_agree_with_enumeration():
    rng = random.Random(31)
    candidates = ["/".join(parts) for depth in (1, 2, 3) for parts in itertools.product(SEGMENTS, repeat=depth)]
    checked = idle = 0
    for _ in range(3000):
        patterns = [("!" if rng.random() < 0.5 else "") + rng.choice(candidates) for _ in range(rng.randint(1, 5))]
        found = {i for i, _ in run_all_problems(patterns)}
        for i, pattern in enumerate(patterns):
            if pattern.startswith("!"):
                checked += 1
                idle += _idle_by_enumeration(patterns, i)
                assert (i in found) == _idle_by_enumeration(patterns, i), patterns
            else:
                assert i not in found
    assert checked > 1000 and 100 < idle < checked - 100  # both verdicts well exercised


REGISTRY = ('version: 1\nrun_all_paths:\n  - csrc/\n  - cmake\n  - "!csrc/cpu/"\ntiers:\n' + CPU_TIER_BLOCK
            + "tests:\n" + cpu_entry("tests/test_a.py"))


@pytest.mark.parametrize("text", [REGISTRY, REGISTRY.replace(
    '  - csrc/\n  - cmake\n  - "!csrc/cpu/"\n', "  [csrc/, cmake, '!csrc/cpu/']\n").replace(
    "run_all_paths:\n  [", "run_all_paths: [")])
def test_both_parsers_read_exclusions_alike(text):
    registry, problems = precise.parse_precise(text, "r.yaml")
    fast = fast_parse.parse_fast(text, "r.yaml")
    assert problems == [] and fast is not None
    assert fast.run_all_paths == registry.run_all_paths == ("csrc", "cmake", "!csrc/cpu")
    assert VALIDATOR.is_valid(yaml.safe_load(text))


def _with_items(*items: str) -> str:
    lines = "".join(f"  - {item}\n" for item in items)
    return REGISTRY.replace('  - csrc/\n  - cmake\n  - "!csrc/cpu/"\n', lines)


# (items, index of the refused item, col, message, does the schema refuse it too)
REFUSED = {
    "idle exclusion": (("csrc/", '"!docs/"'), 1, 5, "'!docs/' excludes nothing: no entry above it selects a path "
                       "under 'docs'", False),
    "exclusion above its match": (('"!csrc/cpu"', "csrc"), 0, 5, "'!csrc/cpu' excludes nothing", False),
    "excluded twice": (("csrc", '"!csrc/cpu"', '"!csrc/cpu/x.cc"'), 2, 5, "'!csrc/cpu/x.cc' excludes nothing", False),
    "bare !": (("csrc", '"!"'), 1, 5, "'!': '!' must be followed by a repo-relative path", True),
    "double !": (("csrc", '"!!csrc/cpu"'), 1, 5, "'!!csrc/cpu': '!' must be followed", True),
    "absolute": (("csrc", '"!/csrc/cpu"'), 1, 5, "'!/csrc/cpu': '!' must be followed", True),
    "dot dot": (("csrc", '"!csrc/../cmake"'), 1, 5, "'!csrc/../cmake': '!' must be followed", True),
    "space after !": (("csrc", '"! csrc/cpu"'), 1, 5, "'! csrc/cpu': '!' must be followed", True),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bad_exclusions_are_refused_at_their_item(name):
    items, index, col, message, schema_refuses = REFUSED[name]
    text = _with_items(*items)
    registry, problems = parse_registry(text, "r.yaml")
    assert registry is None and fast_parse.parse_fast(text, "r.yaml") is None
    [problem] = problems
    assert (problem.line, problem.col, problem.code) == (3 + index, col, "R009"), problem
    assert problem.message.startswith("run_all_paths item " + message), problem.message
    assert VALIDATOR.is_valid(yaml.safe_load(text)) is not schema_refuses


def _repo(tmp_path: Path, text: str) -> Path:
    (tmp_path / "registry.yaml").write_text(text)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text("def test_a():\n    pass\n")
    for path in ("csrc/cpu/gemm.cpp", "csrc/attention/paged.cu", "cmake/x.cmake"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    return tmp_path


def _ci(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ci", *args], cwd=ROOT, capture_output=True, text=True, check=False)


def test_lint_names_the_idle_exclusion_line(tmp_path):
    repo = _repo(tmp_path, _with_items("csrc/", '"!docs/"'))
    result = _ci("lint", "--root", str(repo))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert ("registry.yaml:4:5: R009 run_all_paths item '!docs/' excludes nothing" in result.stdout), result.stdout


def test_lint_of_a_good_exclusion_is_clean(tmp_path):
    repo = _repo(tmp_path, REGISTRY)
    result = _ci("lint", "--root", str(repo))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


@pytest.mark.parametrize("changed, trigger", [
    ("csrc/attention/paged.cu", "run-all triggered by csrc/attention/paged.cu (run_all_paths: csrc)"),
    ("csrc/cpu/gemm.cpp", None),
])
def test_plan_says_which_entry_selected_everything(tmp_path, changed, trigger):
    repo = _repo(tmp_path, REGISTRY)
    (repo / "changed.txt").write_text(changed + "\n")
    result = _ci("plan", "--registry", str(repo / "registry.yaml"), "--tier", "cpu",
                 "--changed-files", str(repo / "changed.txt"))
    assert result.returncode == 0, result.stderr
    head = result.stdout.splitlines()[0]
    if trigger is None:
        assert head == "tier cpu: 0 selected, 1 not run (1 changed files)", result.stdout
        assert "  run-all not triggered: csrc/cpu/gemm.cpp (run_all_paths: !csrc/cpu)" in result.stdout.splitlines()
    else:
        assert head == f"tier cpu: 1 selected, 0 not run (1 changed files; {trigger})", result.stdout
        assert "run-all not triggered" not in result.stdout
    as_json = _ci("plan", "--registry", str(repo / "registry.yaml"), "--tier", "cpu", "--format", "json",
                  "--changed-files", str(repo / "changed.txt"))
    [data] = json.loads(as_json.stdout)["plans"]
    assert data["run_all_excluded"] == ([] if trigger else ["csrc/cpu/gemm.cpp (run_all_paths: !csrc/cpu)"])


def test_a_depends_on_is_redundant_only_where_run_all_covers_all_of_it(tmp_path):
    """L005: ``csrc/attention`` lies wholly under ``csrc``; ``csrc`` itself does not (its cpu/ part is
    taken back), so naming it in depends_on still selects the test on a csrc/cpu change."""
    from ci.registry import load_registry
    from ci.selection.deps import TestDependencies
    from ci.selection.deps_lint import find_redundant

    text = REGISTRY.replace("    status: active\n", "    status: active\n    depends_on: [csrc/attention, csrc]\n")
    repo = _repo(tmp_path, text)
    found = find_redundant(TestDependencies(repo, load_registry(repo / "registry.yaml"), cache=None))
    assert [(r.test, r.dependency, r.reason) for r in found] == [
        ("tests/test_a.py", "csrc/attention", "run_all_paths entry 'csrc' already selects every test on a change there")]
