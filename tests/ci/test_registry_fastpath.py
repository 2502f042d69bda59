"""The lint fast paths: ci/registry.py's line scanner agrees with the node-tree parser, and
ci/imports/check.py's file reading and cycle-free index.

The fast path (`_parse_fast`) may only ever return a registry equal to the precise path's
(`_parse_precise`), and only when the precise path finds no problem; everything else must fall
back (None) so that every message, code and position comes from the precise path.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from bench.lint import registry_text
from ci.imports import check as import_check
from ci.registry import fast_parse as fast_mod
from ci.registry import parse as precise_mod
from ci.registry import Status, iter_test_files, parse_registry

ROOT = Path(__file__).resolve().parents[2]

# Every key the schema has, with comments, blank lines, both quoting styles, a block sequence and
# flow lists: the style the fast path is for.
DOC = """\
# a comment
version: 1   # trailing comment

run_all_paths:
  - ci/
  - 'registry.yaml'
  - "!ci/registry"
project:
  first_party: [acme, acme_tools]
  source_roots:
    - src
    - python/
  test_roots: [test/registered, "tests"]
  test_patterns: ["test_*.py", '*_test.py', check_*.py]
  generated_modules: [acme._version]
  unique_basenames: false
  dynamic_imports:
    acme.models.registry: ["acme.models.*", "acme.extra.model_?"]
tiers:
  cpu:
    description: x86-64 Linux, no GPU; C# and http://x (a=b), [ok]
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
  gpu_b200:
    description: "one B200 \u2014 'quoted' # not a comment"
    runner_labels: [ self-hosted , "gpu-b200", 'x y' ]
    gpu_count: 1
    arch: sm_100
    features: []
    device_name: B200|GB200   # a regular expression
    min_memory_gib: 170.5
  gpu_b200_x2:
    description: two B200
    runner_labels: [gpu-b200-x2]
    gpu_count: 2
    arch: sm_100
    features: [fp8, fp4, nvlink]
    schedule: nightly
    min_memory_gib: 170
    backend: cuda
    buildkite_queue: gpu-b200-x2
    pytest_args: [-m, "not slow", -rA]
tests:
    # an indented comment
    tests/a/test_one.py:
      tiers: [cpu, gpu_b200]
      est_time: 12
      owner: "@me"
      status: active
      timeout: 60.5
      reruns: 0
      depends_on: [fp4kv/quant/, ./ci//registry.py, README.md]
      may_skip: true

    tests/a/test_two.py:
      status: quarantined
      tiers:
        - gpu_b200
      est_time: 0.25
      owner: '@me'
      reason: flaky NCCL init
      issue: https://example.org/issues/7
    tests/b/test_three.py: # a comment after a key
      tiers: [cpu]
      est_time: 3
      owner: someone
      status: manual
      reason: "needs a person"
      depends_on: []
      pytest_args: [-k, 'not gpu and x', --deselect, 'tests/b/test_three.py::t', --deselect, "tests/b/test_three.py::u"]
"""


def both(text: str, *, dispatch: bool = True):
    """(fast, precise) for ``text``, checking the contract between them on the way (and that
    `parse_registry` returns the fast result or else the precise one, unless not ``dispatch``)."""
    fast = fast_mod.parse_fast(text, "r.yaml")
    precise = precise_mod.parse_precise(text, "r.yaml")
    if dispatch or fast is not None:
        assert parse_registry(text, "r.yaml") == ((fast, []) if fast is not None else precise)
    if fast is not None:
        registry, problems = precise
        assert problems == [], "the fast path accepted a registry with problems"
        assert fast == registry
        # Same order and same types, not just equal values (12 == 12.0, ("a",) == ("a",)).
        assert list(fast.tests.items()) == list(registry.tests.items())
        assert list(fast.tiers.items()) == list(registry.tiers.items())
        for a, b in zip(fast.tests.values(), registry.tests.values()):
            assert [type(v) for v in vars(a).values()] == [type(v) for v in vars(b).values()]
        assert fast.run_all_paths == registry.run_all_paths and fast.version == registry.version
    return fast, precise


def test_the_fast_path_reads_the_block_style():
    fast, _ = both(DOC)
    assert fast is not None
    assert fast.tiers["gpu_b200"].runner_labels == ("self-hosted", "gpu-b200", "x y")
    assert fast.tiers["gpu_b200"].description == "one B200 \u2014 'quoted' # not a comment"
    assert fast.tests["tests/a/test_one.py"].depends_on == ("fp4kv/quant", "ci/registry.py", "README.md")
    assert (fast.tests["tests/a/test_two.py"].line, fast.tests["tests/a/test_two.py"].col) == (56, 5)
    assert fast.project.source_roots == ("src", "python")
    assert fast.project.test_patterns == ("test_*.py", "*_test.py", "check_*.py")
    assert (fast.tiers["gpu_b200"].device_name, fast.tiers["gpu_b200"].min_memory_gib) == ("B200|GB200", 170.5)
    assert fast.tiers["gpu_b200_x2"].features == ("fp8", "fp4", "nvlink")
    assert (fast.tiers["gpu_b200_x2"].schedule, fast.tiers["gpu_b200"].schedule) == ("nightly", "per-commit")
    assert fast.tests["tests/b/test_three.py"].status is Status.MANUAL
    assert (fast.tests["tests/a/test_one.py"].may_skip, fast.tests["tests/b/test_three.py"].may_skip) == (True, False)
    assert fast.run_all_paths == ("ci", "registry.yaml", "!ci/registry")
    assert (fast.tiers["gpu_b200_x2"].backend, fast.tiers["gpu_b200_x2"].queue) == ("cuda", "gpu-b200-x2")
    assert fast.project.unique_basenames is False
    assert fast.tiers["gpu_b200_x2"].pytest_args == ("-m", "not slow", "-rA")
    assert fast.tests["tests/b/test_three.py"].pytest_args == (
        "-k", "not gpu and x", "--deselect", "tests/b/test_three.py::t", "--deselect", "tests/b/test_three.py::u")
    assert [(d.importer, d.targets) for d in fast.project.dynamic_imports] == [
        ("acme.models.registry", ("acme.models.*", "acme.extra.model_?"))]


def test_the_fast_path_reads_the_benchmark_registry():
    fast, _ = both(registry_text(300))
    assert fast is not None and len(fast.tests) == 300


def test_the_repository_registry_parses_the_same_both_ways():
    both((ROOT / "registry.yaml").read_text(encoding="utf-8"))


def _swap(old: str, new: str) -> str:
    assert old in DOC, old
    return DOC.replace(old, new, 1)


# Valid YAML and a valid registry, outside the subset: the precise path reads them.
OUTSIDE_THE_SUBSET = {
    "indentless sequence": _swap("  - ci/\n  - 'registry.yaml'\n", "- ci/\n- 'registry.yaml'\n").replace(
        '  - "!ci/registry"\n', '- "!ci/registry"\n'),
    "multi-line plain scalar": _swap("flaky NCCL init\n", "flaky NCCL\n        init\n"),
    "explicit tag": _swap("owner: someone", "owner: !!str someone"),
    "escape in double quotes": _swap('owner: "@me"', 'owner: "\\x40me"'),
    "escaped single quote": _swap("owner: '@me'", "owner: 'it''s me'"),
    "flow mapping": (DOC[:DOC.index("    tests/b/")]
                     + "    tests/b/test_three.py: {tiers: [cpu], est_time: 3, owner: o, status: active}\n"),
    "block scalar": _swap("reason: flaky NCCL init", "reason: |\n        flaky NCCL init"),
    "document markers": "---\n" + DOC + "...\n",
    "tab in a value": _swap("no GPU;", "no\tGPU;"),
    "CRLF line ends": DOC.replace("\n", "\r\n"),
    "byte order mark": "\ufeff" + DOC,
    "quoted key": _swap("    tests/b/test_three.py:", '    "tests/b/test_three.py":'),
    "key with a space": _swap("    tests/b/test_three.py:", "    tests/b/test three.py:"),
    "flow list over two lines": _swap("[cpu, gpu_b200]", "[cpu,\n        gpu_b200]"),
    "trailing comma in a flow list": _swap("[fp4kv/quant/, ./ci//registry.py, README.md]",
                                          "[fp4kv/quant/, README.md,]"),
    "all on one indented document": "".join("  " + line + "\n" for line in DOC.splitlines()),
    "project list over two lines": _swap("first_party: [acme, acme_tools]", "first_party: [acme,\n    acme_tools]"),
    "escaped pattern": _swap("'*_test.py'", '"\\x2a_test.py"'),
    "YAML 1.1 boolean spelling": _swap("unique_basenames: false", "unique_basenames: no"),
}


@pytest.mark.parametrize("name", sorted(OUTSIDE_THE_SUBSET))
def test_valid_registries_outside_the_subset_take_the_precise_path(name):
    fast, (registry, problems) = both(OUTSIDE_THE_SUBSET[name])
    assert fast is None
    assert registry is not None and problems == [], problems


# A problem of every kind: the fast path must never accept these.
WITH_PROBLEMS = {
    "duplicate top key": DOC + "version: 1\n",
    "duplicate test key": _swap("      reruns: 0\n", "      reruns: 0\n      reruns: 1\n"),
    "duplicate test path": DOC + "    tests/a/test_one.py:\n      tiers: [cpu]\n",
    "duplicate list item": _swap("[cpu, gpu_b200]", "[cpu, cpu]"),
    "unknown key": _swap("      reruns: 0\n", "      reruns: 0\n      retries: 2\n"),
    "missing key": _swap("      est_time: 3\n", ""),
    "null value": _swap("      est_time: 3\n", "      est_time:\n"),
    "quoted number": _swap("est_time: 12", 'est_time: "12"'),
    "boolean number": _swap("est_time: 12", "est_time: yes"),
    "boolean string": _swap("owner: someone", "owner: yes"),
    "null string": _swap("owner: someone", "owner: ~"),
    "date string": _swap("owner: someone", "owner: 2024-01-01"),
    "numeric string": _swap("owner: someone", "owner: 7"),
    "numeric list item": _swap("[cpu, gpu_b200]", "[cpu, 1]"),
    "zero est_time": _swap("est_time: 12", "est_time: 0"),
    "zero float est_time": _swap("est_time: 12", "est_time: 0.0"),
    "negative reruns": _swap("reruns: 0", "reruns: -1"),
    "float reruns": _swap("reruns: 0", "reruns: 1.0"),
    "bad status": _swap("status: active", "status: enabled"),
    "manual without reason": _swap('      reason: "needs a person"\n', ""),
    "blank reason": _swap('reason: "needs a person"', "reason: ' '"),
    "quarantined without issue": _swap("      issue: https://example.org/issues/7\n", ""),
    "unknown tier": _swap("[cpu, gpu_b200]", "[cpu, gpu_zz]"),
    "empty tiers": _swap("      tiers: [cpu]\n", "      tiers: []\n"),
    "empty run_all_paths": _swap("run_all_paths:\n  - ci/\n  - 'registry.yaml'\n", "run_all_paths: []\n"),
    "tiers as a string": _swap("      tiers: [cpu]\n", "      tiers: cpu\n"),
    "entry as a list": _swap("    tests/b/test_three.py: # a comment after a key\n",
                             "    tests/b/test_three.py: [cpu]\n    tests/b/test_four.py:\n"),
    "path with ./": _swap("    tests/b/test_three.py:", "    ./tests/b/test_three.py:"),
    "path with ..": _swap("    tests/b/test_three.py:", "    tests/../test_three.py:"),
    "absolute path": _swap("    tests/b/test_three.py:", "    /tests/b/test_three.py:"),
    "trailing slash path": _swap("    tests/b/test_three.py:", "    tests/b/:"),
    "tier name not an identifier": _swap("  gpu_b200:\n", "  gpu-b200:\n").replace("gpu_b200]", "gpu-b200]"),
    "cpu arch with a GPU": _swap("gpu_count: 0", "gpu_count: 1"),
    "GPU arch without one": _swap("gpu_count: 1", "gpu_count: 0"),
    "bad arch": _swap("arch: sm_100", "arch: sm_x"),
    "unsupported version": _swap("version: 1 ", "version: 2 "),
    "float version": _swap("version: 1 ", "version: 1.0 "),
    "mapping in a scalar's place": _swap("owner: someone", "owner:\n        name: someone"),
    "nested mapping value on the key line": _swap("owner: someone", "owner: name: someone"),
    "bad indentation": _swap("      est_time: 3\n", "     est_time: 3\n"),
    "over-indented key": _swap("      est_time: 3\n", "        est_time: 3\n"),
    "syntax error": _swap("[cpu, gpu_b200]", "[cpu, gpu_b200"),
    "empty": "",
    "only comments": "# nothing\n\n",
    "top level list": "- a\n- b\n",
    "anchor and alias": _swap("owner: \"@me\"", "owner: &me \"@me\"").replace("owner: '@me'", "owner: *me"),
    "alias as a list": _swap("tiers: [cpu, gpu_b200]", "tiers: &t [cpu, gpu_b200]").replace(
        "      tiers:\n        - gpu_b200\n", "      tiers: *t\n"),
    "est_time over a day": _swap("est_time: 12", "est_time: 86401"),
    "timeout over a day": _swap("timeout: 60.5", "timeout: 100000.5"),
    "unknown feature": _swap("features: [fp8, fp4, nvlink]", "features: [fp8, fp4, nvlink, hbm]"),
    "nvlink on one GPU": _swap("    features: []\n", "    features: [nvlink]\n"),
    "fp4 on sm_90": _swap("arch: sm_100\n    features: []", "arch: sm_90\n    features: [fp4]"),
    "device name not a regex": _swap("device_name: B200|GB200", "device_name: B200["),
    "device name a number": _swap("device_name: B200|GB200", "device_name: 200"),
    "zero memory": _swap("min_memory_gib: 170.5", "min_memory_gib: 0"),
    "memory on cpu": _swap("    arch: cpu\n", "    arch: cpu\n    min_memory_gib: 4\n"),
    "device name on cpu": _swap("    arch: cpu\n", "    arch: cpu\n    device_name: x\n"),
    "unknown schedule": _swap("schedule: nightly", "schedule: weekly"),
    "schedule a list": _swap("schedule: nightly", "schedule: [nightly]"),
    "unknown project key": _swap("  generated_modules:", "  generated:"),
    "bad first_party": _swap("[acme, acme_tools]", "[acme, acme.tools]"),
    "keyword first_party": _swap("[acme, acme_tools]", "[acme, class]"),
    "test root above": _swap('[test/registered, "tests"]', '[test/registered, "../tests"]'),
    "empty test_roots": _swap('[test/registered, "tests"]', "[]"),
    "empty source_roots": _swap("  source_roots:\n    - src\n    - python/\n", "  source_roots: []\n"),
    "pattern with a slash": _swap("check_*.py", "t/check_*.py"),
    "pattern not .py": _swap("check_*.py", "check_*"),
    "duplicate pattern": _swap("check_*.py", "test_*.py"),
    "bad generated module": _swap("[acme._version]", "[acme.-version]"),
    "unique_basenames a string": _swap("unique_basenames: false", "unique_basenames: 'false'"),
    "unique_basenames a number": _swap("unique_basenames: false", "unique_basenames: 0"),
    "dynamic glob of everything": _swap('["acme.models.*", "acme.extra.model_?"]', '["*"]'),
    "dynamic importer not dotted": _swap("    acme.models.registry:", "    acme/models/registry:"),
    "dynamic targets empty": _swap('["acme.models.*", "acme.extra.model_?"]', "[]"),
    "dynamic targets a string": _swap('["acme.models.*", "acme.extra.model_?"]', '"acme.models.*"'),
    "dynamic_imports a list": _swap("    acme.models.registry: [", "    - ["),
    "project as a list": _swap("  first_party: [acme, acme_tools]\n", "  - acme\n"),
    # YAML reads these as numbers; the registry takes plain decimals only (issue #22)
    "underscored int": _swap("est_time: 12", "est_time: 1_2"),
    "octal int": _swap("est_time: 12", "est_time: 014"),
    "hex int": _swap("est_time: 12", "est_time: 0xC"),
    "sexagesimal": _swap("est_time: 12", "est_time: 1:30"),
    "exponent float": _swap("est_time: 12", "est_time: 1.2e+1"),
    "float without fraction": _swap("est_time: 12", "est_time: 12."),
    "float with a leading zero": _swap("est_time: 12", "est_time: 012.5"),
    "hex gpu_count": _swap("gpu_count: 1", "gpu_count: 0x1"),
    "reruns over the bound": _swap("reruns: 0", "reruns: 1000000"),
    "numeric may_skip": _swap("may_skip: true", "may_skip: 1"),
    "quoted may_skip": _swap("may_skip: true", 'may_skip: "true"'),
    "reruns just over the bound": _swap("reruns: 0", "reruns: 11"),
    "a path in pytest_args": _swap("[-m, \"not slow\", -rA]", "[-m, \"not slow\", -rA, tests/x.py]"),
    "a refused pytest option": _swap("[-m, \"not slow\", -rA]", "[-m, \"not slow\", -xrA]"),
    "a number in pytest_args": _swap("[-m, \"not slow\", -rA]", "[--maxfail-ish, 3]"),
}


@pytest.mark.parametrize("name", sorted(WITH_PROBLEMS))
def test_registries_with_problems_take_the_precise_path(name):
    fast, (registry, problems) = both(WITH_PROBLEMS[name])
    assert fast is None
    assert registry is None and problems, name


VALUES = [
    "yes", "No", "on", "OFF", "true", "false", "~", "null", "''", '""', "0", "00", "012", "0x1A", "0o7", "1_0", "+1", "-1", "1.", ".5",
    "1e3", "1.0e+3", ".inf", "-.inf", ".nan", "1:30", "2024-01-01", "2024-01-01 10:00:00", "=", "<<", "3", "2.5",
    "99999999999999999999", '"a"', "'a'", '"a\\"b"', "'it''s'", "[a, b]", "[]", "[a, a]", "[yes]", "[1]", "['1']",
    "{a: b}", "&x a", "*x", "!!str 5", "|", ">", "a: b", "a:", "a #c", "a#c", "- a", "@x", "`x", "%x", "? x",
    "[a,]", "[a b]", "[a, [b]]", "x86-64 Linux, no GPU", "sm_90", "sm_100", "cpu", "gpu_b200", "[cpu]", "active",
    "manual", "quarantined", "a\u00a0", "caf\u00e9", "\u2028", "\x85", "https://x/y?q=1#frag",
    "test_*.py", "*_test.py", "'*_test.py'", "[test_*.py]", "[*_test.py]", "[a*]", "[a, *b]", "B[200", "B200|GB200",
    "fp8", "nvlink", "[fp8, nvlink]", "[fp4]", "80", "86400", "86401", "86400.0", "1e400", "99999999999999999999999",
    "[.]", "[src/]", "[../x]", "[/x]", "[a.b]", "[a-b]", "[if]", "[x.py]", "[.py]",
    "10", "11", "1000000", "05.5", "0.5", "00.5", "\u0665", "\u0665.\u0665", "1_000.5", "+5", "-0",
    "gfx942", "gfx94", "pvc", "xpu", "rocm", "tpu", "CUDA", '"!ci/x"', "'!'", '"!!ci"', '"! ci"', "amd mi300",
]


@pytest.mark.parametrize("value", VALUES)
def test_every_value_in_every_field_agrees(value):
    """Each tricky scalar in each field of a tier and of an entry, and as a list item."""
    lines = DOC.split("\n")
    fields = [i for i, line in enumerate(lines) if ": " in line and line.startswith(("  ", "v"))]
    for i in fields:
        key, _, _ = lines[i].partition(": ")
        both("\n".join([*lines[:i], f"{key}: {value}", *lines[i + 1:]]), dispatch=False)
    both(DOC.replace("  - ci/\n", f"  - {value}\n"), dispatch=False)


@pytest.mark.parametrize("edit", ["delete", "duplicate", "indent", "dedent", "swap"])
def test_every_line_edit_agrees(edit):
    """Structural damage anywhere: a line removed, repeated, shifted or swapped with the next."""
    lines = DOC.split("\n")
    for i in range(len(lines) - 1):
        changed = list(lines)
        if edit == "delete":
            del changed[i]
        elif edit == "duplicate":
            changed.insert(i, lines[i])
        elif edit == "indent":
            changed[i] = " " + lines[i]
        elif edit == "dedent":
            changed[i] = lines[i][1:]
        else:
            changed[i], changed[i + 1] = lines[i + 1], lines[i]
        both("\n".join(changed), dispatch=False)


def test_plain_scalar_types_are_yamls():
    assert fast_mod._plain("12") == 12 and type(fast_mod._plain("12")) is int
    assert fast_mod._plain("2.5") == 2.5 and fast_mod._plain("active") == "active"
    for text in ["yes", "~", "014", "1_0", "2024-01-01", ".inf", "="]:
        with pytest.raises(fast_mod._NotSimple):
            fast_mod._plain(text)


def test_the_ascii_character_check_equals_the_regex():
    samples = [f"a: b\n{chr(c)}x" for c in range(128)]
    samples += ["", "\n", "caf\u00e9", "a\u00e9\tb", "\u2028", "\ufeff", "\x85"]
    for text in samples:
        assert fast_mod._has_odd_char(text) == (fast_mod._ODD_CHAR.search(text) is not None), repr(text)


# --- ci/imports/check.py ------------------------------------------------------------------------

@pytest.mark.parametrize("size", [0, 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 3 * (1 << 16)])
def test_read_returns_the_whole_file(tmp_path, size):
    file = tmp_path / "m.py"
    data = bytes(i % 251 for i in range(size))
    file.write_bytes(data)
    assert import_check._read(str(file)) == data


def test_the_import_check_leaves_no_reference_cycles(tmp_path):
    """lint runs with the cyclic GC paused: a cycle would keep every syntax tree alive until the
    next collection (which then costs more than the check)."""
    package = tmp_path / "fp4kv"
    package.mkdir()
    (package / "__init__.py").write_text("from fp4kv.mod import *\n__all__ = ['f']\n")
    (package / "mod.py").write_text(
        "import os\nX = 1\nif X:\n    (Y := 2)\ntry:\n    Z = 3\nexcept ImportError as e:\n    pass\n"
        "def f():\n    global G\n    G = 1\ndef __getattr__(name):\n    if name == 'A':\n        return 1\n"
        "    raise AttributeError(name)\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text("import fp4kv.mod as m\nfrom fp4kv import f, nope\n\ndef test():\n    m.X, m.Q\n")
    gc.collect()
    gc.disable()
    try:
        problems = import_check.check_imports(tmp_path, ("fp4kv", "tests"))
        garbage = gc.collect()
    finally:
        gc.enable()
    assert [p.code for p in problems] == ["I001", "I001"]
    assert garbage == 0


def test_the_import_prefilter_matches_what_the_line_anchored_regex_matched():
    """The prefilter's lookbehind form against the plain form it replaced, on random sources."""
    import random
    import re

    packages = ("fp4kv", "ci", "tests")
    names = b"|".join(re.escape(p.encode()) for p in packages)
    reference = re.compile(rb"(?:^|[\s;:])(?:from\s+(?:\.|(?:" + names + rb")\b)"
                           rb"|import\s[^\n]*\b(?:" + names + rb")\b)", re.MULTILINE)
    prefilter = import_check._prefilter(packages)
    pieces = [b"from", b"import", b" ", b"\n", b"\t", b"\r", b";", b":", b".", b"fp4kv", b"ci", b"tests", b"x", b"_",
              b"(", b"#", b"from ", b"import ", b"\\\n"]
    rng = random.Random(1234)
    for _ in range(20_000):
        source = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 10)))
        assert bool(prefilter.search(source)) == bool(reference.search(source)), source
    for source in (ROOT / "ci").glob("*.py"):
        text = source.read_bytes()
        assert bool(prefilter.search(text)) == bool(reference.search(text)), source


def test_iter_test_files_matches_any_of_its_patterns(tmp_path):
    """The patterns are joined into one regex: a file matching any of them counts, none: nothing."""
    for rel in ["tests/test_a.py", "tests/b_test.py", "tests/sub/test_c.py", "tests/sub/c.py", "tests/test_d.pyc",
                "tests/xtest_e.py", "tests/sub/deeper/e_test.py"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert iter_test_files(tmp_path) == ["tests/sub/test_c.py", "tests/test_a.py"]
    assert iter_test_files(tmp_path, ("test_*.py", "*_test.py")) == [
        "tests/b_test.py", "tests/sub/deeper/e_test.py", "tests/sub/test_c.py", "tests/test_a.py"]
    assert iter_test_files(tmp_path, iter(["*_test.py"])) == ["tests/b_test.py", "tests/sub/deeper/e_test.py"]
    assert iter_test_files(tmp_path, ()) == []


def test_duplicate_basenames_are_reported_in_sorted_path_order(tmp_path):
    """lint groups only the shared basenames; the order is the one grouping every path gives."""
    from ci.lint import DUPLICATE_BASENAME, lint_registry

    on_disk = ["tests/b/test_x.py", "tests/a/test_y.py", "tests/c/test_x.py", "tests/a/test_z.py", "tests/d/test_y.py"]
    for rel in on_disk:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    text = DOC.replace("  unique_basenames: false\n", "").replace("tests/a/test_one.py", "tests/e/test_y.py").replace("tests/a/test_two.py", "tests/a/test_x.py")
    registry, problems = parse_registry(text, "r.yaml")
    assert problems == []
    found = [(p.path, p.message) for p in lint_registry(tmp_path, registry, sorted(on_disk))
             if p.code == DUPLICATE_BASENAME]
    by_name: dict[str, list[str]] = {}
    for path in sorted(set(on_disk) | registry.tests.keys()):
        by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
    expected = [(path, f"basename {name!r} is also used by {', '.join(p for p in paths if p != path)}; "
                       f"/rerun-test resolves files by basename: rename one, or set 'unique_basenames: false' "
                       f"under 'project:' (/rerun-test then asks for a path)")
                for name, paths in by_name.items() if len(paths) > 1 for path in paths]
    assert found == expected and len(found) == 6
