"""Tier backends (`Tier.backend`, `Tier.queue`) in both registry parsers and the schema, and the
`register_<name>_ci` -> backend map of `ci.adopt.suite_import`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from ci.adopt.suite_import import import_suites, registration_backend
from ci.adopt.suites import Registration, Scan
from ci.registry import Registry, Tier, parse_registry
from ci.registry import fast_parse, parse as precise
from tests.ci.tree_testutil import BACKEND_TIERS_BLOCK, CPU_TIER_BLOCK, cpu_entry

ROOT = Path(__file__).resolve().parents[2]
VALIDATOR = jsonschema.Draft202012Validator(json.loads((ROOT / "ci" / "registry" / "schema.json").read_text()))

TIERS = "version: 1\ntiers:\n" + CPU_TIER_BLOCK + BACKEND_TIERS_BLOCK + """\
tests:
""" + cpu_entry("tests/test_a.py")


def both(text: str) -> Registry:
    """The registry both parsers read from ``text``; they must agree (the fast path may defer)."""
    registry, problems = precise.parse_precise(text, "r.yaml")
    assert problems == [] and registry is not None
    fast = fast_parse.parse_fast(text, "r.yaml")
    assert fast is not None, "the plain block style is the fast path's"
    assert list(fast.tiers.items()) == list(registry.tiers.items())
    assert VALIDATOR.is_valid(yaml.safe_load(text))
    return registry


def test_backends_default_from_arch_and_are_named_for_the_rest():
    tiers = both(TIERS).tiers
    assert {name: t.backend for name, t in tiers.items()} == {
        "cpu": "cpu", "h100": "cuda", "mi300": "rocm", "pvc": "xpu", "ascend": "npu", "v5e": "tpu"}
    assert {name: t.queue for name, t in tiers.items()} == {
        "cpu": "cpu", "h100": "h100", "mi300": "amd-mi300", "pvc": "pvc", "ascend": "ascend", "v5e": "v5e"}


def test_a_named_backend_equal_to_the_default_is_the_same_tier():
    named = both(TIERS.replace("    arch: gfx942\n", "    arch: gfx942\n    backend: rocm\n"))
    assert named.tiers["mi300"] == both(TIERS).tiers["mi300"]
    assert Tier("t", "d", ("l",), 1, "gfx90a").backend == "rocm"  # the constructor derives it too


def _edit(old: str, new: str) -> str:
    assert old in TIERS, old
    return TIERS.replace(old, new, 1)


# (document, the offending line as written, col, message); every one also fails the schema.
BAD = {
    "unknown backend": (_edit("backend: xpu", "backend: gpu"), "    backend: gpu", 14,
                        "backend must be one of cuda, rocm, xpu, npu, tpu, cpu, got 'gpu'"),
    "backend in capitals": (_edit("backend: xpu", "backend: XPU"), "    backend: XPU", 14, "got 'XPU'"),
    "cuda with a gfx arch": (_edit("    arch: gfx942\n", "    arch: gfx942\n    backend: cuda\n"), "    arch: gfx942", 11,
                             "backend 'cuda' needs arch 'sm_<major><minor>'"),
    "rocm with an sm arch": (_edit("    arch: sm_90\n", "    arch: sm_90\n    backend: rocm\n"), "    arch: sm_90", 11,
                             "backend 'rocm' needs arch 'gfx<target>'"),
    "cpu backend on a gpu arch": (_edit("    arch: sm_90\n", "    arch: sm_90\n    backend: cpu\n"), "    arch: sm_90",
                                  11, "backend 'cpu' needs arch 'cpu'"),
    "xpu with an sm arch": (_edit("arch: pvc", "arch: sm_90"), "    arch: sm_90\n    backend: xpu", 11,
                            "backend 'xpu' needs an arch label"),
    "npu with arch cpu": (_edit("arch: ascend910b", "arch: cpu"), "    arch: cpu\n    backend: npu", 11,
                          "backend 'npu' needs an arch label"),
    "a label without a backend": (_edit("    arch: pvc\n    backend: xpu\n", "    arch: pvc\n"), "    arch: pvc", 11,
                                  "an xpu, npu or tpu tier names its backend"),
    "not quite gfx": (_edit("arch: gfx942", "arch: gfx94"), "    arch: gfx94", 11, "got 'gfx94'"),
    "fp8 on a rocm tier": (_edit("    arch: gfx942\n", "    arch: gfx942\n    features: [fp8]\n"),
                           "    features: [fp8]", 16,
                           "feature 'fp8' is checked only on cuda tiers; this tier's backend is 'rocm'"),
    "queue with a space": (_edit("buildkite_queue: amd-mi300", "buildkite_queue: amd mi300"),
                           "    buildkite_queue: amd mi300", 22,
                           "buildkite_queue must be a queue name without spaces, got 'amd mi300'"),
}


def line_of(text: str, written: str) -> int:
    """The 1-based line where ``written`` (one or more whole lines) starts; it must occur once."""
    lines = text.split("\n")
    width = written.count("\n") + 1
    starts = [i + 1 for i in range(len(lines)) if "\n".join(lines[i:i + width]) == written]
    assert len(starts) == 1, (written, starts)
    return starts[0]


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_backends_are_refused_at_their_line_by_parser_and_schema(name):
    text, written, col, message = BAD[name]
    line = line_of(text, written)
    registry, problems = parse_registry(text, "r.yaml")
    assert registry is None and fast_parse.parse_fast(text, "r.yaml") is None
    [problem] = problems
    assert (problem.line, problem.col, problem.code) == (line, col, "R009"), problem
    assert message in problem.message, problem.message
    assert not VALIDATOR.is_valid(yaml.safe_load(text)), name


def test_a_bad_backend_is_one_line_from_lint(tmp_path):
    (tmp_path / "registry.yaml").write_text(BAD["unknown backend"][0])
    result = subprocess.run([sys.executable, "-m", "ci", "lint", "--root", str(tmp_path)], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    line = line_of(BAD["unknown backend"][0], "    backend: gpu")
    assert f"registry.yaml:{line}:14: R009 tier 'pvc': backend must be one of cuda, rocm, xpu, npu, tpu, cpu, got 'gpu'" \
        in result.stdout + result.stderr


@pytest.mark.parametrize("name, backend", [
    ("amd", "rocm"), ("cuda", "cuda"), ("nvidia", "cuda"), ("npu", "npu"), ("xpu", "xpu"), ("cpu", "cpu"),
    ("tpu", "tpu"), ("mlx", None), ("musa", None), ("AMD", None),
])
def test_registration_names_map_to_backends(name, backend):
    assert registration_backend(name) == backend


def test_a_registration_lands_only_on_tiers_of_its_backend(tmp_path):
    base = both(TIERS)
    (tmp_path / "test_x.py").write_text("")
    scan = Scan([Registration("test_x.py", suite, 10.0, f"test_x.py:{i}", f"register_{how}_ci")
                 for i, (suite, how) in enumerate([("s-amd", "amd"), ("s-cuda", "cuda"), ("s-mlx", "mlx")], 1)])
    tier_map = {"s-amd": ["mi300", "h100"], "s-cuda": ["h100", "mi300"], "s-mlx": ["h100", "mi300"]}
    imported = import_suites(tmp_path, base, scan, tier_map, owner="o", manual_tier="cpu")
    entry = imported.registry.tests["test_x.py"]
    assert entry.tiers == ("h100", "mi300")  # amd -> mi300, cuda -> h100, in the registry's tier order
    refusals = sorted(n.split(":")[0] for n in imported.notes if "refused" in n)
    assert refusals == ["suite 's-amd' -> tier 'h100' refused for 1 file(s) (e.g. test_x.py)",
                        "suite 's-cuda' -> tier 'mi300' refused for 1 file(s) (e.g. test_x.py)",
                        "suite 's-mlx' -> tier 'h100' refused for 1 file(s) (e.g. test_x.py)",
                        "suite 's-mlx' -> tier 'mi300' refused for 1 file(s) (e.g. test_x.py)"]


# `culprit:` (issue 51): the opt-in of automatic culprit searches, read by the precise parser only.
CULPRIT = _edit("    arch: sm_90\n", "    arch: sm_90\n    culprit: {auto: true, budget: 20, runners: 2}\n")


def test_culprit_opt_in_is_read_with_defaults_and_written_back():
    from ci.registry import CulpritPolicy
    from ci.registry.writer import render_tier

    registry, problems = precise.parse_precise(CULPRIT, "r.yaml")
    assert problems == [] and registry is not None
    assert fast_parse.parse_fast(CULPRIT, "r.yaml") is None  # the nested mapping is the precise parser's
    assert registry.tiers["h100"].culprit == CulpritPolicy(auto=True, budget=20, runners=2)
    assert registry.tiers["cpu"].culprit is None and VALIDATOR.is_valid(yaml.safe_load(CULPRIT))
    partial = _edit("    arch: sm_90\n", "    arch: sm_90\n    culprit: {auto: true}\n")
    assert precise.parse_precise(partial, "r.yaml")[0].tiers["h100"].culprit == CulpritPolicy(True, 12, 1)
    rendered = "\n".join(render_tier(registry.tiers["h100"]))
    assert "    culprit: {auto: true, budget: 20, runners: 2}" in rendered


@pytest.mark.parametrize("value, col, message", [
    ("{auto: yes please}", 21, "tier 'h100' culprit auto must be bool, got 'yes please'"),
    ("{auto: true, budget: 0}", 35, "tier 'h100' culprit budget must be a whole number >= 1, got 0"),
    ("{auto: true, runners: 65}", 36, "tier 'h100' culprit runners must be a whole number from 1 to 64, got 65"),
    ("{auto: true, budget: 2.5}", 35, "tier 'h100' culprit budget must be int, got '2.5'"),
    ("{auto: true, runner: 2}", 27, "unknown key 'runner' in tier 'h100' culprit; allowed: auto, budget, runners"),
    ("true", 14, "tier 'h100' culprit must be a mapping, got 'true'"),
])
def test_a_bad_culprit_key_is_one_problem_at_its_line(value, col, message):
    text = _edit("    arch: sm_90\n", f"    arch: sm_90\n    culprit: {value}\n")
    registry, problems = precise.parse_precise(text, "r.yaml")
    [problem] = problems
    assert registry is None and (problem.line, problem.col) == (line_of(text, f"    culprit: {value}"), col), problem
    assert problem.message == message
    assert not VALIDATOR.is_valid(yaml.safe_load(text))
