"""ci/registry.py (problems with file:line:col, duplicates, typed results) and its JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from ci import registry as reg
from ci.registry import parse as registry_precise, rules
from ci.registry import Problem, Status, Tier, load_registry, parse_registry

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "ci" / "registry" / "schema.json").read_text())
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
    assert first == "# yaml-language-server: $schema=./ci/registry/schema.json"


def test_schema_keys_equal_the_parser_keys():
    defs = SCHEMA["$defs"]
    assert set(SCHEMA["properties"]) == rules.TOP_KEYS
    assert set(SCHEMA["required"]) == rules.TOP_REQUIRED == {"version", "tiers", "tests"}
    assert set(defs["project"]["properties"]) == rules.PROJECT_KEYS
    assert {k for k, v in defs["project"]["properties"].items() if v.get("minItems")} == rules.PROJECT_NON_EMPTY
    assert set(defs["tier"]["properties"]) == rules.TIER_KEYS
    assert set(defs["tier"]["required"]) == rules.TIER_REQUIRED
    assert set(defs["test"]["properties"]) == rules.TEST_KEYS
    assert set(defs["test"]["required"]) == rules.TEST_REQUIRED
    assert defs["test"]["properties"]["status"]["enum"] == [s.value for s in Status]
    assert defs["tier"]["properties"]["features"]["items"]["enum"] == list(rules.FEATURES)
    assert defs["seconds"]["maximum"] == reg.MAX_SECONDS
    assert defs["tier"]["properties"]["min_memory_gib"]["maximum"] == rules.MAX_MEMORY_GIB
    for obj in (SCHEMA, defs["tier"], defs["test"], defs["project"]):
        assert obj["additionalProperties"] is False


def test_schema_project_defaults_are_the_typed_defaults():
    defaults = reg.ProjectConfig()
    for key, spec in SCHEMA["$defs"]["project"]["properties"].items():
        default = spec["default"]
        typed = tuple(default) if isinstance(default, (list, dict)) else default
        assert typed == getattr(defaults, key), key


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
    "reruns over the bound": _edit("reruns: 1", "reruns: 11"),
    "a million reruns": _edit("reruns: 1", "reruns: 1000000"),
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
    # upper bounds: one day
    "est_time over a day": _edit("est_time: 12", "est_time: 86401"),
    "timeout over a day": _edit("timeout: 60", "timeout: 86400.5"),
    "309-digit est_time": _edit("est_time: 12", "est_time: " + "9" * 309),
    # tier identity
    "unknown feature": _edit("features: [fp8, fp4]", "features: [fp8, fp16]"),
    "feature on cpu": _edit("    arch: cpu\n", "    arch: cpu\n    features: [fp8]\n"),
    "device name on cpu": _edit("    arch: cpu\n", "    arch: cpu\n    device_name: Xeon\n"),
    "memory on cpu": _edit("    arch: cpu\n", "    arch: cpu\n    min_memory_gib: 4\n"),
    "zero memory": _edit("    arch: sm_100\n", "    arch: sm_100\n    min_memory_gib: 0\n"),
    "blank device name": _edit("    arch: sm_100\n", "    arch: sm_100\n    device_name: ' '\n"),
    "numeric device name": _edit("    arch: sm_100\n", "    arch: sm_100\n    device_name: 200\n"),
    # the project section
    "unknown project key": _edit("tiers:\n", "project:\n  test_dirs: [tests]\ntiers:\n", ),
    "project not a mapping": _edit("tiers:\n", "project: [tests]\ntiers:\n"),
    "first_party with a dot": _edit("tiers:\n", "project:\n  first_party: [acme.core]\ntiers:\n"),
    "test root above the repo": _edit("tiers:\n", "project:\n  test_roots: [../tests]\ntiers:\n"),
    "absolute source root": _edit("tiers:\n", "project:\n  source_roots: [/src]\ntiers:\n"),
    "empty test_roots": _edit("tiers:\n", "project:\n  test_roots: []\ntiers:\n"),
    "pattern with a slash": _edit("tiers:\n", "project:\n  test_patterns: [tests/test_*.py]\ntiers:\n"),
    "pattern not .py": _edit("tiers:\n", "project:\n  test_patterns: ['test_*']\ntiers:\n"),
    "bad generated module": _edit("tiers:\n", "project:\n  generated_modules: [acme-x._version]\ntiers:\n"),
    "duplicate test root": _edit("tiers:\n", "project:\n  test_roots: [tests, tests]\ntiers:\n"),
}

PROJECT = """\
project:
  first_party: [acme, acme_tools]
  source_roots: [src, python/]
  test_roots: [test/registered, tests]
  test_patterns: ["test_*.py", "*_test.py"]
  generated_modules: [acme._version]
"""


@pytest.mark.parametrize("name", sorted(BAD_DOCUMENTS))
def test_bad_documents_are_rejected_by_both_parser_and_schema(name):
    text = BAD_DOCUMENTS[name]
    registry, problems = parse_registry(text, "r.yaml")
    assert registry is None and problems, name
    assert not VALIDATOR.is_valid(yaml.safe_load(text)), name


# Rules JSON Schema cannot state (the schema's description lists them): the parser alone rejects these.
PARSER_ONLY = {
    "fp4 before sm_100": (_edit("arch: sm_100", "arch: sm_90"), "feature 'fp4' needs sm_100 or newer"),
    "fp8 before sm_89": (_edit("arch: sm_100", "arch: sm_80").replace("[fp8, fp4]", "[fp8]"),
                         "feature 'fp8' needs sm_89 or newer"),
    "nvlink on one GPU": (_edit("features: [fp8, fp4]", "features: [fp8, nvlink]"), "it needs gpu_count >= 2"),
    "device name not a regex": (_edit("    arch: sm_100\n", "    arch: sm_100\n    device_name: 'B[200'\n"),
                                "is not a regular expression"),
    "first_party a keyword": (_edit("tiers:\n", "project:\n  first_party: [import]\ntiers:\n"),
                              "'import' is not a top-level package name"),
    # YAML 1.1 reads each of these as a number (JSON sees that number); only plain decimals count
    **{f"est_time {text}": (_edit("est_time: 12", f"est_time: {text}"), "est_time must be written as a plain decimal")
       for text in ("5_0", "0x10", "014", "1:30", "1.2e+1", "12.", "012.5", "+12", "1_000.5")},
    "timeout 0x3c": (_edit("timeout: 60", "timeout: 0x3c"), "timeout must be written as a plain decimal"),
    "reruns 0x1": (_edit("reruns: 1", "reruns: 0x1"), "reruns must be written as a plain decimal number such as 3"),
    "gpu_count 01": (_edit("gpu_count: 1", "gpu_count: 01"), "gpu_count must be written as a plain decimal"),
}


@pytest.mark.parametrize("name", sorted(PARSER_ONLY))
def test_rules_beyond_the_schema_are_the_parsers(name):
    text, message = PARSER_ONLY[name]
    registry, problems = parse_registry(text, "r.yaml")
    # (a tier with a problem is left out, so tests naming it also get R006 "unknown tier")
    [problem] = [p for p in problems if p.code != "R006"]
    assert registry is None and problem.code == "R009" and message in problem.message, problems
    assert VALIDATOR.is_valid(yaml.safe_load(text)), name  # what the schema's description warns about


@pytest.mark.parametrize("text, where", [
    (_edit("est_time: 12", "est_time: 86401"), (18, 15)),
    (_edit("timeout: 60", "timeout: " + "9" * 400), (21, 14)),
])
def test_times_over_a_day_are_rejected_where_they_are(text, where):
    registry, problems = parse_registry(text, "r.yaml")
    assert registry is None and [(p.line, p.col, p.code) for p in problems] == [(*where, "R007")]
    assert "at most 86400 seconds (one day)" in problems[0].message
    assert len(problems[0].message) < 200  # a 400-digit number is cut, never echoed whole


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
    _edit("tiers:\n", PROJECT + "tiers:\n"),
    _edit("tiers:\n", "project:\n  first_party: []\n  source_roots: ['.']\ntiers:\n"),
    _edit("    arch: sm_100\n", "    arch: sm_100\n    device_name: 'B200|GB200'\n    min_memory_gib: 170.5\n"),
    _edit("est_time: 12", "est_time: 86400").replace("timeout: 60", "timeout: 86400"),
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
    (GOOD + "version: 1\n", (31, 1)),
    (_edit("tiers:\n", "project:\n  test_roots: [a]\n  test_roots: [b]\ntiers:\n"), (5, 3)),  # project keys                                                    # top level
    (_edit("  gpu_b200:\n", "  cpu:\n    description: again\n  gpu_b200:\n"), (9, 3)),  # tier names
    (_edit("    arch: sm_100\n", "    arch: sm_100\n    arch: sm_90\n"), (14, 5)),       # inside a tier
    (GOOD + "  tests/a/test_one.py:\n    tiers: [cpu]\n", (31, 3)),                      # test paths
    (_edit("    timeout: 60\n", "    timeout: 60\n    timeout: 61\n"), (22, 5)),         # inside a test
    (_edit("tiers: [gpu_b200]", "tiers: [gpu_b200, gpu_b200]"), (25, 23)),               # inside a list
], ids=["top", "project", "tier-names", "tier-fields", "test-paths", "test-fields", "list-items"])
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
        "conf/registry.yaml:31:1: R003 unknown key 'extra' in registry; allowed: project, quarantine, run_all_paths, "
        "tests, tiers, version"]


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


def test_typed_project_and_tier_identity():
    text = _edit("tiers:\n", PROJECT + "tiers:\n").replace(
        "    arch: sm_100\n", "    arch: sm_100\n    device_name: B200\n    min_memory_gib: 170\n")
    registry, problems = parse_registry(text, "r.yaml")
    assert problems == []
    assert registry.project == reg.ProjectConfig(
        first_party=("acme", "acme_tools"), source_roots=("src", "python"), test_roots=("test/registered", "tests"),
        test_patterns=("test_*.py", "*_test.py"), generated_modules=("acme._version",))
    b200 = registry.tiers["gpu_b200"]
    assert (b200.device_name, b200.min_memory_gib, b200.features) == ("B200", 170.0, ("fp8", "fp4"))
    assert isinstance(b200.min_memory_gib, float)
    assert parse_registry(GOOD, "r.yaml")[0].project == reg.ProjectConfig()  # omitted: this repository's layout


def test_repository_registry_states_its_project_and_gpu_timeouts():
    registry = load_registry(ROOT / "registry.yaml")
    assert "project" in yaml.safe_load((ROOT / "registry.yaml").read_text())
    assert registry.project.test_roots == ("tests",) and "fp4kv" in registry.project.first_party
    gpu_entries = [e for e in registry.tests.values() if registry.has_gpu_tier(e)]
    assert gpu_entries
    for e in gpu_entries:
        assert e.timeout is not None and e.timeout >= rules.derived_timeout(e.est_time), e.path
    for tier in registry.tiers.values():
        if tier.needs_gpu:
            assert tier.device_name and tier.min_memory_gib, tier.name  # H100 vs H200: both sm_90


def test_derived_timeout():
    assert rules.derived_timeout(1) == 120 and rules.derived_timeout(30) == 120
    assert rules.derived_timeout(31) == 124 and rules.derived_timeout(30.1) == 121
    assert rules.derived_timeout(reg.MAX_SECONDS) == reg.MAX_SECONDS


def test_libyaml_and_pure_python_parses_agree(monkeypatch):
    assert registry_precise._CLoader is not None, "PyYAML without libyaml: the registry parse is several times slower"
    assert not yaml.SafeLoader.yaml_path_resolvers  # _CLoader skips the path-resolver hooks
    fast = parse_registry(GOOD, "r.yaml")
    monkeypatch.setattr(registry_precise, "_CLoader", None)
    assert parse_registry(GOOD, "r.yaml") == fast


def test_normalize_path_fast_path_matches_pathlib():
    from pathlib import PurePosixPath

    for raw in ["a", "a/b.py", "./a", "a//b", "a/", "a/.", "a/./b", ".", "", "/a", "//a", "a\\b", "../a", ".a/b"]:
        expected = PurePosixPath(raw.replace("\\", "/")).as_posix().removeprefix("./")
        assert reg.normalize_path(raw) == expected, raw


def test_problem_is_ordered_by_location():
    a, b = Problem("x", 2, 1, "R001", "m"), Problem("x", 10, 1, "R001", "m")
    assert sorted([b, a]) == [a, b]
