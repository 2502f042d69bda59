"""ci/registry.py (problems with file:line:col, duplicates, typed results) and its JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from ci import registry as reg
from ci.registry import Problem, Status, Tier, load_registry, parse_registry

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "ci" / "registry.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

GOOD = """\
version: 1
run_all_paths: [ci/]
tiers:
  cpu:
    description: no GPU
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
  gpu_b200:
    description: one B200
    runner_labels: [self-hosted, gpu-b200]
    gpu_count: 1
    arch: sm_100
    features: [fp8, fp4]
tests:
  tests/a/test_one.py:
    tiers: [cpu, gpu_b200]
    est_time: 12
    owner: "@me"
    status: active
    timeout: 60
    reruns: 1
    depends_on: [fp4kv/quant/, ci/registry.py]
  tests/a/test_two.py:
    tiers: [gpu_b200]
    est_time: 2.5
    owner: "@me"
    status: quarantined
    reason: flaky NCCL init
    issue: https://example.org/issues/7
"""


def problems_of(text: str) -> list[tuple[int, int, str]]:
    registry, problems = parse_registry(text, "r.yaml")
    assert (registry is None) == bool(problems)
    return [(p.line, p.col, p.code) for p in problems]


# --- the schema ----------------------------------------------------------------------------------

def test_repository_registry_matches_the_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    VALIDATOR.validate(yaml.safe_load((ROOT / "registry.yaml").read_text()))


def test_registry_references_the_schema_for_editors():
    first = (ROOT / "registry.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=./ci/registry.schema.json"


def test_schema_keys_equal_the_parser_keys():
    defs = SCHEMA["$defs"]
    assert set(SCHEMA["properties"]) == reg._TOP_KEYS
    assert set(SCHEMA["required"]) == {"version", "tiers", "tests"}
    assert set(defs["tier"]["properties"]) == reg._TIER_KEYS
    assert set(defs["tier"]["required"]) == reg._TIER_REQUIRED
    assert set(defs["test"]["properties"]) == reg._TEST_KEYS
    assert set(defs["test"]["required"]) == reg._TEST_REQUIRED
    assert defs["test"]["properties"]["status"]["enum"] == [s.value for s in Status]
    for obj in (SCHEMA, defs["tier"], defs["test"]):
        assert obj["additionalProperties"] is False


def _edit(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


BAD_DOCUMENTS = {
    "unknown top key": GOOD + "extra: 1\n",
    "unknown tier key": _edit("    arch: cpu\n", "    arch: cpu\n    memory: 80\n"),
    "unknown test key": _edit("    reruns: 1\n", "    reruns: 1\n    retries: 2\n"),
    "missing est_time": _edit("    est_time: 12\n", ""),
    "missing tier arch": _edit("    arch: cpu\n", ""),
    "zero est_time": _edit("est_time: 12", "est_time: 0"),
    "negative est_time": _edit("est_time: 12", "est_time: -3"),
    "string est_time": _edit("est_time: 12", "est_time: soon"),
    "boolean est_time": _edit("est_time: 12", "est_time: true"),
    "zero timeout": _edit("timeout: 60", "timeout: 0"),
    "negative reruns": _edit("reruns: 1", "reruns: -1"),
    "float reruns": _edit("reruns: 1", "reruns: 1.5"),
    "bad status": _edit("status: active", "status: disabled"),
    "quarantined without issue": _edit("    issue: https://example.org/issues/7\n", ""),
    "quarantined without reason": _edit("    reason: flaky NCCL init\n", ""),
    "blank reason": _edit("reason: flaky NCCL init", "reason: ' '"),
    "manual without reason": _edit("    status: active\n    timeout", "    status: manual\n    timeout"),
    "empty tiers list": _edit("tiers: [gpu_b200]", "tiers: []"),
    "duplicate tier in list": _edit("tiers: [gpu_b200]", "tiers: [gpu_b200, gpu_b200]"),
    "tiers not a list": _edit("tiers: [gpu_b200]", "tiers: gpu_b200"),
    "numeric owner": _edit('owner: "@me"', "owner: 7"),
    "negative gpu_count": _edit("gpu_count: 1", "gpu_count: -1"),
    "bad arch": _edit("arch: sm_100", "arch: blackwell"),
    "cpu arch with gpus": _edit("gpu_count: 0", "gpu_count: 2"),
    "gpu arch without gpus": _edit("gpu_count: 1", "gpu_count: 0"),
    "tier name not an identifier": _edit("  gpu_b200:\n    description", "  gpu-b200:\n    description"),
    "unsupported version": _edit("version: 1", "version: 2"),
    "path with ./": _edit("  tests/a/test_two.py:", "  ./tests/a/test_two.py:"),
    "path with ..": _edit("  tests/a/test_two.py:", "  tests/../test_two.py:"),
    "absolute path": _edit("  tests/a/test_two.py:", "  /tests/a/test_two.py:"),
    "empty run_all_paths": _edit("run_all_paths: [ci/]", "run_all_paths: []"),
    "tests not a mapping": GOOD[: GOOD.index("tests:")] + "tests: [tests/a/test_one.py]\n",
}


@pytest.mark.parametrize("name", sorted(BAD_DOCUMENTS))
def test_bad_documents_are_rejected_by_both_parser_and_schema(name):
    text = BAD_DOCUMENTS[name]
    registry, problems = parse_registry(text, "r.yaml")
    assert registry is None and problems, name
    assert not VALIDATOR.is_valid(yaml.safe_load(text)), name


@pytest.mark.parametrize("value", [".inf", ".nan", "-.inf"])
@pytest.mark.parametrize("key, line", [("est_time", "est_time: 12"), ("timeout", "timeout: 60")])
def test_non_finite_times_are_rejected(key, line, value):
    """YAML has .inf and .nan; JSON (and so the schema) has neither, so only the parser sees them."""
    registry, problems = parse_registry(_edit(line, f"{key}: {value}"), "r.yaml")
    assert registry is None
    assert [p.code for p in problems] == ["R007"] and "finite number > 0" in problems[0].message


@pytest.mark.parametrize("text", [
    GOOD,
    _edit("    reruns: 1\n", ""),
    _edit("    features: [fp8, fp4]\n", "    features: []\n"),
    _edit("status: quarantined", "status: manual").replace("    issue: https://example.org/issues/7\n", ""),
    GOOD.replace("run_all_paths: [ci/]\n", "").replace("version: 1", "version: 1"),
])
def test_good_documents_are_accepted_by_both(text):
    registry, problems = parse_registry(text, "r.yaml")
    assert problems == [] and registry is not None
    VALIDATOR.validate(yaml.safe_load(text))


# --- problems and their positions ------------------------------------------------------------------

def test_yaml_syntax_error_has_line_and_column():
    assert problems_of("version: 1\ntiers: [a, b\ntests: {}\n") == [(3, 6, "R001")]


def test_yaml_syntax_error_keeps_the_pure_python_message():
    _, problems = parse_registry("version: 1\ntiers: [a, b\ntests: {}\n", "r.yaml")
    assert str(problems[0]) == ("r.yaml:3:6: R001 YAML syntax error: while parsing a flow sequence "
                                "expected ',' or ']', but got ':'")


@pytest.mark.parametrize("text, where", [
    (GOOD + "version: 1\n", (31, 1)),                                                    # top level
    (_edit("  gpu_b200:\n", "  cpu:\n    description: again\n  gpu_b200:\n"), (9, 3)),  # tier names
    (_edit("    arch: sm_100\n", "    arch: sm_100\n    arch: sm_90\n"), (14, 5)),       # inside a tier
    (GOOD + "  tests/a/test_one.py:\n    tiers: [cpu]\n", (31, 3)),                      # test paths
    (_edit("    timeout: 60\n", "    timeout: 60\n    timeout: 61\n"), (22, 5)),         # inside a test
    (_edit("tiers: [gpu_b200]", "tiers: [gpu_b200, gpu_b200]"), (25, 23)),               # inside a list
], ids=["top", "tier-names", "tier-fields", "test-paths", "test-fields", "list-items"])
def test_duplicate_keys_are_found_at_every_level(text, where):
    found = problems_of(text)
    assert (*where, "R002") in found, found


def test_every_problem_code_with_position():
    text = """\
version: 1
colour: blue
tiers:
  cpu:
    description: x
    runner_labels: [l]
    gpu_count: 0
    arch: cpu
tests:
  tests/test_a.py:
    tiers: [cpu, gpu_zz]
    est_time: 0
    owner: 5
    status: manual
  tests/test_b.py:
    tiers: [cpu]
    owner: me
    status: active
  tests/test_c.py:
    tiers: [cpu]
    est_time: 1
    owner: me
    status: maybe
"""
    assert problems_of(text) == [
        (2, 1, "R003"),    # unknown top-level key
        (11, 5, "R008"),   # manual without reason, at the entry's mapping
        (11, 18, "R006"),  # unknown tier, at the list item
        (12, 15, "R007"),  # est_time 0
        (13, 12, "R005"),  # owner not a string
        (16, 5, "R004"),   # missing est_time
        (23, 13, "R009"),  # bad status
    ]


def test_problem_string_format():
    _, problems = parse_registry(GOOD + "extra: 1\n", "conf/registry.yaml")
    assert [str(p) for p in problems] == [
        "conf/registry.yaml:31:1: R003 unknown key 'extra' in registry; allowed: run_all_paths, tests, tiers, version"]


def test_load_registry_raises_with_every_problem(tmp_path):
    path = tmp_path / "registry.yaml"
    path.write_text(_edit("est_time: 12", "est_time: 0").replace("status: active", "status: nope"))
    with pytest.raises(reg.RegistryError) as info:
        load_registry(path)
    assert [p.code for p in info.value.problems] == ["R007", "R009"]
    assert "R007" in str(info.value) and "R009" in str(info.value)


# --- typed results ---------------------------------------------------------------------------------

def test_typed_entries():
    registry, _ = parse_registry(GOOD, "r.yaml")
    assert registry.tiers["gpu_b200"] == Tier("gpu_b200", "one B200", ("self-hosted", "gpu-b200"), 1, "sm_100",
                                              ("fp8", "fp4"), line=9)
    one = registry.entry("./tests/a/test_one.py")
    assert one.tiers == ("cpu", "gpu_b200") and one.est_time == 12.0 and isinstance(one.est_time, float)
    assert one.status is Status.ACTIVE and one.timeout == 60.0 and one.reruns == 1
    assert one.depends_on == ("fp4kv/quant", "ci/registry.py") and (one.line, one.col) == (16, 3)
    two = registry.entry("tests/a/test_two.py")
    assert two.status is Status.QUARANTINED and not two.is_active and two.issue.endswith("/7")
    assert [e.path for e in registry.by_basename("test_two.py")] == ["tests/a/test_two.py"]
    assert [e.path for e in registry.tests_for_tier("gpu_b200")] == ["tests/a/test_one.py"]
    assert len(registry.tests_for_tier("gpu_b200", include_inactive=True)) == 2
    assert registry.run_all_paths == ("ci",)


def test_libyaml_and_pure_python_parses_agree(monkeypatch):
    assert reg._CLoader is not None, "PyYAML without libyaml: the registry parse is several times slower"
    assert not yaml.SafeLoader.yaml_path_resolvers  # _CLoader skips the path-resolver hooks
    fast = parse_registry(GOOD, "r.yaml")
    monkeypatch.setattr(reg, "_CLoader", None)
    assert parse_registry(GOOD, "r.yaml") == fast


def test_normalize_path_fast_path_matches_pathlib():
    from pathlib import PurePosixPath

    for raw in ["a", "a/b.py", "./a", "a//b", "a/", "a/.", "a/./b", ".", "", "/a", "//a", "a\\b", "../a", ".a/b"]:
        expected = PurePosixPath(raw.replace("\\", "/")).as_posix().removeprefix("./")
        assert reg.normalize_path(raw) == expected, raw


def test_problem_is_ordered_by_location():
    a, b = Problem("x", 2, 1, "R001", "m"), Problem("x", 10, 1, "R001", "m")
    assert sorted([b, a]) == [a, b]
