"""`python -m ci deps`, the record cache, lint L005 (redundant depends_on) and `ci lint --fix`."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from ci.commands import deps as deps_cmd
from ci.commands import lint as lint_cmd
from ci.selection.deps import TestDependencies
from ci.selection.deps_lint import _line_span, remove_dependencies
from ci.imports.cache import RecordCache
from ci.lint import lint_repo
from ci.registry import RegistryError, parse_registry

from tree_testutil import write

HEAD = """\
version: 1
run_all_paths: [ci/]
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  gpu: {description: gpu, runner_labels: [gpu], gpu_count: 1, arch: sm_90}
tests:
"""


TREE = {
    "ci/__init__.py": "",
    "lib/__init__.py": "",
    "lib/core.py": "from lib.util import helper\n",
    "lib/util.py": "def helper():\n    return 1\n",
    "lib/extra.py": "",
    "data/table.csv": "1,2\n",
    "tests/conftest.py": "",
    "tests/lib/test_core.py": "from lib.core import helper\n\n\ndef test_core():\n    assert helper() == 1\n",
    "tests/lib/test_util.py": "def test_util():\n    from lib import util\n    assert util.helper() == 1\n",
}
REGISTRY = HEAD + """\
  # the core tests
  tests/lib/test_core.py:
    tiers: [cpu, gpu]
    est_time: 1
    timeout: 120
    owner: me
    status: active
    depends_on: [lib/core.py, data/, lib/util.py]  # core reads the table
  tests/lib/test_util.py:
    tiers: [cpu]
    est_time: 1
    owner: me
    status: active
    depends_on:
      - tests/lib/test_util.py   # itself
      - lib/extra.py
      - ci/anything.py
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    write(tmp_path, {**TREE, "registry.yaml": REGISTRY, "ci/anything.py": ""})
    return tmp_path


def run(module, argv: list[str], capsys) -> tuple[int, str, str]:
    rc = module.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


# -- ci deps --------------------------------------------------------------------------------------

def test_deps_tree_flat_and_json(repo, capsys):
    reg = ["--registry", str(repo / "registry.yaml")]
    rc, out, err = run(deps_cmd, [*reg, "tests/lib/test_core.py"], capsys)
    assert rc == 0
    assert out.splitlines() == [
        "tests/lib/test_core.py",
        "  tests/conftest.py  (conftest)",
        "  lib/__init__.py  (line 1, from)",
        "  lib/core.py  (line 1, from)",
        "    lib/util.py  (line 1, from)",
    ]
    assert err.strip() == "5 file(s) in the closure of tests/lib/test_core.py"
    rc, out, _ = run(deps_cmd, [*reg, "tests/lib/test_util.py", "--flat"], capsys)
    # depends_on's .py files that the test does not import are scripts it runs by path: roots too.
    assert out.splitlines() == [
        "tests/lib/test_util.py  (root)",
        "tests/conftest.py  (root)",
        "lib/extra.py  (root)",
        "ci/anything.py  (root)",
        "lib/__init__.py  <- tests/lib/test_util.py:2 (from)",
        "lib/util.py  <- tests/lib/test_util.py:2 (from)",
        "ci/__init__.py  <- ci/anything.py:0 (package)",
    ]
    rc, out, _ = run(deps_cmd, [*reg, "tests/lib/test_util.py", "--format", "json"], capsys)
    data = json.loads(out)
    assert data["test"] == "tests/lib/test_util.py"
    assert data["closure"][5] == {"path": "lib/util.py", "imported_by": "tests/lib/test_util.py", "line": 2,
                                  "how": "from"}


def test_deps_reverse_by_module_or_file(repo, capsys):
    reg = ["--registry", str(repo / "registry.yaml")]
    rc, out, err = run(deps_cmd, [*reg, "--reverse", "lib.util"], capsys)
    assert rc == 0
    assert out.splitlines() == [
        "tests/lib/test_core.py  [cpu, gpu]  changed: lib/util.py (depends_on lib/util.py)",
        "tests/lib/test_util.py  [cpu]  imports lib/util.py",
    ]
    assert "2 of 2 registered tests would run if lib/util.py changed" in err
    rc, out, _ = run(deps_cmd, [*reg, "--reverse", "lib/core.py", "--format", "json"], capsys)
    assert json.loads(out) == {"changed": "lib/core.py", "of": 2, "tests": [
        {"path": "tests/lib/test_core.py", "tiers": ["cpu", "gpu"], "why": "changed: lib/core.py (depends_on lib/core.py)"}]}
    rc, out, err = run(deps_cmd, [*reg, "--reverse", "lib/__init__.py"], capsys)
    assert out.splitlines() == ["tests/lib/test_core.py  [cpu, gpu]  imports lib/__init__.py",
                                "tests/lib/test_util.py  [cpu]  imports lib/__init__.py"]


@pytest.mark.parametrize("argv, message", [
    (["no.such.module", "--reverse"], "neither a file nor a first-party module"),
    (["data/table.csv"], "is not a Python file"),
])
def test_deps_usage_errors(repo, capsys, argv, message):
    rc, _, err = run(deps_cmd, ["--registry", str(repo / "registry.yaml"), *argv], capsys)
    assert rc == 2 and message in err


# -- the record cache -----------------------------------------------------------------------------

def load_registry_text(repo: Path):
    registry, problems = parse_registry((repo / "registry.yaml").read_text(), "registry.yaml")
    assert problems == []
    return registry


def test_the_cache_skips_parsing_unchanged_files_and_notices_changes(repo):
    registry = load_registry_text(repo)
    cache_file = repo / ".ci-cache" / "import-records.json"
    cold = TestDependencies(repo, registry, cache=cache_file)
    assert (cold.cache.hits, cold.cache.misses) == (0, 3)  # the three files that import something
    assert (repo / ".ci-cache" / ".gitignore").read_text().endswith("*\n")
    warm = TestDependencies(repo, registry, cache=cache_file)
    assert (warm.cache.hits, warm.cache.misses) == (3, 0)
    assert warm.graph.edges == cold.graph.edges == TestDependencies(repo, registry, cache=None).graph.edges
    (repo / "lib" / "core.py").write_text("from lib.util import helper\nimport lib.extra\n")
    changed = TestDependencies(repo, registry, cache=cache_file)
    assert (changed.cache.hits, changed.cache.misses) == (2, 1)
    assert "lib/extra.py" in changed.closure("tests/lib/test_core.py")


@pytest.mark.parametrize("content", [b"", b"{not json", b'{"key": "0/other-9.9", "files": {}}', b"[1, 2]",
                                     b'{"key": null, "files": {"lib/core.py": "x"}}'])
def test_a_corrupt_or_foreign_cache_is_ignored_and_rewritten(repo, content):
    cache_file = repo / "cache.json"
    cache_file.write_bytes(content)
    deps = TestDependencies(repo, load_registry_text(repo), cache=cache_file)
    assert deps.cache.hits == 0 and deps.cache.misses == 3
    assert json.loads(cache_file.read_bytes())["key"] == RecordCache(cache_file).key


def test_a_cache_entry_with_another_hash_is_a_miss(repo):
    cache_file = repo / "cache.json"
    TestDependencies(repo, load_registry_text(repo), cache=cache_file)
    data = json.loads(cache_file.read_bytes())
    data["files"]["lib/core.py"][1] = []  # wrong records, but the hash no longer matches either
    data["files"]["lib/core.py"][0] = "0" * 32
    cache_file.write_text(json.dumps(data))
    deps = TestDependencies(repo, load_registry_text(repo), cache=cache_file)
    assert "lib/util.py" in deps.closure("tests/lib/test_core.py")


@pytest.mark.parametrize("records", [[["i"]], [["f", 1, 0, "lib.util"]], [["i", "1", "lib.util"]], [[]], ["i"],
                                     [["f", 1, 0, "lib", [1]]], [["zz", 1, "x"]]])
def test_a_damaged_cache_entry_with_the_right_hash_is_parsed_again(repo, records):
    cache_file = repo / "cache.json"
    TestDependencies(repo, load_registry_text(repo), cache=cache_file)
    data = json.loads(cache_file.read_bytes())
    data["files"]["lib/core.py"][1] = records  # bit rot: the hash still matches the file
    cache_file.write_text(json.dumps(data))
    deps = TestDependencies(repo, load_registry_text(repo), cache=cache_file)
    assert "lib/util.py" in deps.closure("tests/lib/test_core.py")


def _unprivileged(check) -> int:
    """Exit status of ``check()`` (True: 0, False: 1, raised: 2) run in a forked child that is not
    root: root writes into read-only directories."""
    pid = os.fork()
    if pid == 0:
        try:
            if os.geteuid() == 0:
                os.setuid(65534)  # nobody
            os._exit(0 if check() else 1)
        except BaseException:
            os._exit(2)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_an_unwritable_cache_is_no_error():
    with tempfile.TemporaryDirectory() as where:  # not under tmp_path: its parents are root's alone
        repo = Path(where)
        repo.chmod(0o755)
        write(repo, {**TREE, "registry.yaml": REGISTRY, "ci/anything.py": ""})
        for path in repo.rglob("*"):
            path.chmod(0o755 if path.is_dir() else 0o644)
        (repo / "ro").mkdir(mode=0o555)
        registry = load_registry_text(repo)

        def check() -> bool:
            deps = TestDependencies(repo, registry, cache=repo / "ro" / "sub" / "cache.json")
            return deps.cache.save() is False and "lib/util.py" in deps.closure("tests/lib/test_core.py")

        assert _unprivileged(check) == 0
        assert not (repo / "ro" / "sub").exists()


def test_a_file_where_the_cache_folder_should_be_is_no_error(repo):
    (repo / "ro").write_text("not a folder")
    deps = TestDependencies(repo, load_registry_text(repo), cache=repo / "ro" / "sub" / "cache.json")
    assert deps.cache.save() is False and "lib/util.py" in deps.closure("tests/lib/test_core.py")


def test_a_cache_path_that_is_a_directory_is_no_error(repo):
    (repo / "cache.json").mkdir()
    deps = TestDependencies(repo, load_registry_text(repo), cache=repo / "cache.json")
    assert deps.cache.save() is False and "lib/util.py" in deps.closure("tests/lib/test_core.py")


# -- L005 and --fix -------------------------------------------------------------------------------

def test_redundant_depends_on_is_info_and_explains_itself(repo, capsys):
    problems = [str(p) for p in lint_repo(repo, info=True)]
    assert problems == [
        "registry.yaml:8:3: L005 'tests/lib/test_core.py' depends_on 'lib/core.py' is redundant: the test "
        "imports it (`python -m ci lint --fix` removes it)",
        "registry.yaml:8:3: L005 'tests/lib/test_core.py' depends_on 'lib/util.py' is redundant: the test "
        "imports it via lib.core (`python -m ci lint --fix` removes it)",
        "registry.yaml:15:3: L005 'tests/lib/test_util.py' depends_on 'ci/anything.py' is redundant: "
        "run_all_paths entry 'ci' already selects every test on a change there (`python -m ci lint --fix` removes it)",
        "registry.yaml:15:3: L005 'tests/lib/test_util.py' depends_on 'tests/lib/test_util.py' is redundant: "
        "the test file itself always counts (`python -m ci lint --fix` removes it)",
    ]
    assert lint_repo(repo) == []  # not asked for: callers that fail on any problem never see it
    rc, out, err = run(lint_cmd, ["--root", str(repo)], capsys)
    assert rc == 0 and len(out.splitlines()) == 4 and "0 problem(s), 4 note(s)" in err
    rc, out, _ = run(lint_cmd, ["--root", str(repo), "--format", "github"], capsys)
    assert rc == 0 and all(line.startswith("::notice file=registry.yaml,line=") for line in out.splitlines())
    (repo / "tests" / "lib" / "test_new.py").write_text("")
    rc, _, err = run(lint_cmd, ["--root", str(repo)], capsys)
    assert rc == 1 and "1 problem(s), 4 note(s)" in err  # an error still fails


def test_a_folder_is_redundant_only_when_every_file_in_it_is_imported(repo):
    registry_text = REGISTRY.replace("[lib/core.py, data/, lib/util.py]", "[lib/, data/]")
    (repo / "registry.yaml").write_text(registry_text)
    assert [p.message.split(" is ")[0] for p in lint_repo(repo, info=True)][:1] == [
        "'tests/lib/test_util.py' depends_on 'ci/anything.py'"]  # lib/extra.py is not imported: lib/ stays
    (repo / "lib" / "extra.py").unlink()
    (repo / "lib" / "__pycache__").mkdir()
    (repo / "lib" / "__pycache__" / "core.cpython-311.pyc").write_bytes(b"\0")
    messages = [p.message for p in lint_repo(repo, info=True)]
    assert "'tests/lib/test_core.py' depends_on 'lib' is redundant: the test imports all 3 file(s) under it " \
           "(`python -m ci lint --fix` removes it)" in messages


def test_fix_removes_them_keeping_comments_order_and_style(repo, capsys):
    before_mode = (repo / "registry.yaml").stat().st_mode
    rc, out, err = run(lint_cmd, ["--root", str(repo), "--fix"], capsys)
    assert rc == 0 and out == ""
    assert err.count("removed") == 4
    assert (repo / "registry.yaml").read_text() == HEAD + """\
  # the core tests
  tests/lib/test_core.py:
    tiers: [cpu, gpu]
    est_time: 1
    timeout: 120
    owner: me
    status: active
    depends_on: [data/]  # core reads the table
  tests/lib/test_util.py:
    tiers: [cpu]
    est_time: 1
    owner: me
    status: active
    depends_on:
      - lib/extra.py
"""
    assert (repo / "registry.yaml").stat().st_mode == before_mode
    assert [p for p in lint_repo(repo, info=True)] == []


FLOW = HEAD + """\
  tests/a.py: {tiers: [cpu], est_time: 1, owner: me, status: active, depends_on: [x.py]}
  tests/b.py: {depends_on: [x.py], tiers: [cpu], est_time: 1, owner: me, status: active}
  tests/c.py:
    tiers: [cpu]
    depends_on:   # all of these go
      - x.py
      - y.py
    est_time: 1
    owner: me
    status: active
  tests/d.py:
    tiers: [cpu]
    est_time: 1
    depends_on: ["y.py",   x.py, 'z.py']
    owner: me
    status: active
"""


def test_remove_dependencies_in_every_layout():
    out = remove_dependencies(FLOW, {"tests/a.py": {"x.py"}, "tests/b.py": {"x.py"}, "tests/c.py": {"x.py", "y.py"},
                                     "tests/d.py": {"x.py"}})
    assert out == HEAD + """\
  tests/a.py: {tiers: [cpu], est_time: 1, owner: me, status: active}
  tests/b.py: {tiers: [cpu], est_time: 1, owner: me, status: active}
  tests/c.py:
    tiers: [cpu]
    est_time: 1
    owner: me
    status: active
  tests/d.py:
    tiers: [cpu]
    est_time: 1
    depends_on: ["y.py", 'z.py']
    owner: me
    status: active
"""
    assert remove_dependencies(FLOW, {}) == FLOW


def test_remove_dependencies_refuses_what_it_cannot_do_cleanly():
    with pytest.raises(RegistryError):
        remove_dependencies(FLOW + "  tests/a.py: {}\n", {"tests/a.py": {"x.py"}})  # duplicate key
    # a line is deleted only when nothing but indentation, a dash or a comment shares it
    assert _line_span("    - x.py  # note\n", 6, 10) == (0, 19, "")
    with pytest.raises(ValueError, match="line 1: depends_on shares its line"):
        _line_span("key: [x.py], y\n", 0, 11)
    block = HEAD + ("  tests/a.py:\n    tiers: [cpu]\n    est_time: 1\n    owner: me\n    status: active\n"
                    "    depends_on:\n      - x.py\n      - y.py\n")
    assert remove_dependencies(block, {"tests/a.py": {"x.py"}}).endswith("    depends_on:\n      - y.py\n")


def test_fix_leaves_the_registry_alone_when_it_does_not_parse(repo, capsys):
    broken = REGISTRY + "  tests/lib/test_core.py: {}\n"  # duplicate key
    (repo / "registry.yaml").write_text(broken)
    rc, _, err = run(lint_cmd, ["--root", str(repo), "--fix"], capsys)
    assert rc == 1 and "left as it was" in err
    assert (repo / "registry.yaml").read_text() == broken


def test_a_chain_deeper_than_the_recursion_limit(tmp_path, capsys):
    depth = 1500
    files = {"registry.yaml": HEAD + "  tests/test_deep.py: {tiers: [cpu], est_time: 1, owner: me, status: active}\n",
             "chain/__init__.py": "", "tests/test_deep.py": "import chain.m0\n"}
    files.update({f"chain/m{i}.py": f"import chain.m{i + 1}\n" for i in range(depth - 1)})
    files[f"chain/m{depth - 1}.py"] = ""
    write(tmp_path, files)
    rc, out, _ = run(deps_cmd, ["--registry", str(tmp_path / "registry.yaml"), "tests/test_deep.py"], capsys)
    assert rc == 0
    lines = out.splitlines()
    assert lines[-1] == f"{'  ' * depth}chain/m{depth - 1}.py  (line 1, import)"
    assert len(lines) == depth + 2  # the test, chain/__init__.py, and each module once
    rc, out, _ = run(deps_cmd, ["--registry", str(tmp_path / "registry.yaml"), "--reverse", f"chain.m{depth - 1}"],
                     capsys)
    assert out.splitlines() == [f"tests/test_deep.py  [cpu]  imports chain/m{depth - 1}.py via chain.m{depth - 2}"]


# -- scripts a test runs by path ----------------------------------------------------------------

SCRIPT_TREE = {
    "tools/__init__.py": "",
    "tools/gen.py": "from lib.core import helper\n\nprint(helper())\n",
    "tests/lib/test_script.py": ("import subprocess, sys\n\n\ndef test_script():\n"
                                 "    subprocess.run([sys.executable, 'tools/gen.py'], check=True)\n"),
}
SCRIPT_ENTRY = """\
  tests/lib/test_script.py:
    tiers: [cpu]
    est_time: 1
    owner: me
    status: active
    depends_on: [tools/gen.py]  # run by path
"""


def test_a_script_in_depends_on_brings_its_imports_and_stays_needed(repo, capsys):
    """A test that runs a script by path: the script's imports select the test (the import graph
    cannot see them from the test), and L005 never calls the script entry redundant."""
    write(repo, {**SCRIPT_TREE, "registry.yaml": REGISTRY + SCRIPT_ENTRY})
    registry = load_registry_text(repo)
    deps = TestDependencies(repo, registry, cache=None)
    impact = deps.impact(["lib/util.py"])
    assert impact.reasons["tests/lib/test_script.py"] == "runs tools/gen.py, which imports lib/util.py via lib.core"
    assert "lib/util.py" in deps.closure("tests/lib/test_script.py")
    assert "lib/util.py" not in deps.closure("tests/lib/test_script.py", scripts=False)
    notes = [p.message for p in lint_repo(repo, info=True) if "test_script" in p.message]
    assert notes == []


def test_a_change_to_an_outer_conftest_selects_tests_that_also_have_a_nearer_one(tmp_path):
    """pytest loads every conftest.py above a test, not only the nearest: a change to any of them
    (or to what it imports) selects the test."""
    write(tmp_path, {
        "ci/__init__.py": "", "lib/__init__.py": "", "lib/fixtures.py": "", "lib/near.py": "",
        "conftest.py": "", "tests/conftest.py": "import lib.fixtures\n",
        "tests/deep/conftest.py": "import lib.near\n", "tests/deep/test_deep.py": "",
        "tests/test_top.py": "",
    })
    registry, problems = parse_registry(HEAD + "".join(
        f"  {p}:\n    tiers: [cpu]\n    est_time: 1\n    owner: me\n    status: active\n"
        for p in ("tests/deep/test_deep.py", "tests/test_top.py")))
    assert problems == []
    deps = TestDependencies(tmp_path, registry, cache=None)
    assert deps.conftests("tests/deep/test_deep.py") == ("conftest.py", "tests/conftest.py", "tests/deep/conftest.py")

    def selected(*changed: str) -> dict[str, str]:
        return deps.impact(list(changed)).reasons

    assert selected("conftest.py") == {"tests/deep/test_deep.py": "conftest conftest.py changed",
                                       "tests/test_top.py": "conftest conftest.py changed"}
    assert selected("tests/conftest.py") == {"tests/deep/test_deep.py": "conftest tests/conftest.py changed",
                                             "tests/test_top.py": "conftest tests/conftest.py changed"}
    assert selected("lib/fixtures.py") == {
        "tests/deep/test_deep.py": "conftest tests/conftest.py imports lib/fixtures.py",
        "tests/test_top.py": "conftest tests/conftest.py imports lib/fixtures.py"}
    assert selected("lib/near.py") == {"tests/deep/test_deep.py": "conftest tests/deep/conftest.py imports lib/near.py"}
