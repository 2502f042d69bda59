"""ci/imports/graph.py and ci/selection/deps.py on synthetic repositories: closures, reasons, deleted and
renamed modules, and random module graphs checked against what Python really imports."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ci.selection.deps import TestDependencies
from ci.imports.graph import ImportGraph
from ci.imports.index import ModuleIndex
from ci.project import ProjectConfig
from ci.registry import parse_registry

from tree_testutil import CPU_REGISTRY_HEAD as HEAD, write



def registry_for(tests: dict[str, str]) -> str:
    """Registry text: test path -> flow-style depends_on list ("" for none)."""
    body = "".join(f"  {t}: {{tiers: [cpu], est_time: 1, owner: me, status: active"
                   + (f", depends_on: [{deps}]" if deps else "") + "}\n" for t, deps in tests.items())
    return HEAD + body


def deps_of(root: Path, tests: dict[str, str], **kwargs) -> TestDependencies:
    registry, problems = parse_registry(registry_for(tests), "registry.yaml")
    assert problems == []
    return TestDependencies(root, registry, cache=kwargs.pop("cache", None), **kwargs)


CHAIN = {
    "app/__init__.py": "",
    "reexp/__init__.py": "from .impl import thing\n",
    "reexp/impl.py": "thing = 1\n",
    "app/a.py": "def run():\n    from app import b\n    return b.go()\n",
    "app/b.py": "from .c import value\n\ndef go():\n    return value\n",
    "app/c.py": "import app.d as d\nvalue = d.X\n",
    "app/d.py": "X = 1\n",
    "app/cycle_x.py": "import app.cycle_y\n",
    "app/cycle_y.py": "from app import cycle_x\n",
    "app/star_src.py": "__all__ = ['helper', 'sub']\nfrom app.star_pkg import sub\ndef helper(): ...\n",
    "app/star_pkg/__init__.py": "__all__ = ['sub']\n",
    "app/star_pkg/sub.py": "Y = 2\n",
    "app/star_user.py": "from app.star_pkg import *\n",
    "app/unused.py": "Z = 3\n",
    "tests/conftest.py": "pytest_plugins = ['app.plugin']\n",
    "app/plugin.py": "",
    "tests/deep/er/test_chain.py": "from app.a import run\n\ndef test_it():\n    assert run() == 1\n",
    "tests/deep/er/test_cycle.py": "import app.cycle_x\nfrom reexp import thing\n",
    "tests/deep/er/test_star.py": "from app.star_user import *\n",
    "tests/other/test_plain.py": "def test_nothing():\n    pass\n",
}
CHAIN_TESTS = {"tests/deep/er/test_chain.py": "", "tests/deep/er/test_cycle.py": "",
               "tests/deep/er/test_star.py": "", "tests/other/test_plain.py": ""}


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    write(tmp_path, CHAIN)
    return tmp_path


def test_closure_follows_function_local_relative_and_package_imports(chain):
    deps = deps_of(chain, CHAIN_TESTS)
    closure = deps.closure("tests/deep/er/test_chain.py")
    assert set(closure) == {"tests/deep/er/test_chain.py", "tests/conftest.py", "app/plugin.py",
                            "app/__init__.py", "app/a.py", "app/b.py", "app/c.py", "app/d.py"}
    assert closure["app/b.py"] == ("app/a.py", 2, "from")       # function-local `from app import b`
    assert closure["app/c.py"] == ("app/b.py", 1, "from")       # relative `from .c import value`
    assert closure["app/d.py"] == ("app/c.py", 1, "import")     # `import app.d as d`
    assert closure["app/plugin.py"] == ("tests/conftest.py", 1, "plugin")  # conftest two levels up


def test_cycles_terminate_and_star_imports_reach_the_listed_submodules(chain):
    deps = deps_of(chain, CHAIN_TESTS)
    cycle = deps.closure("tests/deep/er/test_cycle.py")
    assert {"app/cycle_x.py", "app/cycle_y.py"} <= set(cycle)
    assert cycle["reexp/impl.py"] == ("reexp/__init__.py", 1, "from")  # a package __init__ re-export
    star = deps.closure("tests/deep/er/test_star.py")
    assert {"app/star_user.py", "app/star_pkg/__init__.py", "app/star_pkg/sub.py"} <= set(star)
    assert star["app/star_pkg/sub.py"][2] == "star"
    assert "app/unused.py" not in star and "app/d.py" not in star


def test_reasons_name_the_changed_file_and_the_module_that_imports_it(chain):
    deps = deps_of(chain, CHAIN_TESTS)
    impact = deps.impact(["app/d.py"])
    assert impact.reasons == {"tests/deep/er/test_chain.py": "imports app/d.py via app.c"}
    assert deps.impact(["app/a.py"]).reasons == {"tests/deep/er/test_chain.py": "imports app/a.py"}
    assert deps.impact(["tests/conftest.py"]).reasons == {
        t: "conftest tests/conftest.py changed" for t in CHAIN_TESTS}
    assert deps.impact(["app/plugin.py"]).reasons == {
        t: "conftest tests/conftest.py imports app/plugin.py" for t in CHAIN_TESTS}
    assert deps.impact(["app/unused.py"]).reasons == {}
    assert deps.impact(["app/unused.py"]).uncovered == ("app/unused.py",)


def test_a_deleted_module_selects_its_importers_and_a_rename_counts_at_both_paths(chain):
    (chain / "app" / "d.py").unlink()
    deps = deps_of(chain, CHAIN_TESTS)
    impact = deps.impact(["app/d.py"])
    assert impact.reasons == {"tests/deep/er/test_chain.py": "imports app/d.py (deleted) via app.c"}
    assert impact.uncovered == ()
    # rename: app/c.py -> app/c2.py with its importer updated; the old path has no importer left
    (chain / "app" / "c.py").rename(chain / "app" / "c2.py")
    (chain / "app" / "b.py").write_text("from .c2 import value\n")
    deps = deps_of(chain, CHAIN_TESTS)
    impact = deps.impact(["app/b.py", "app/c.py", "app/c2.py"])
    assert impact.reasons == {"tests/deep/er/test_chain.py": "imports app/b.py via app.a"}
    assert deps.impact(["app/c2.py"]).reasons == {"tests/deep/er/test_chain.py": "imports app/c2.py via app.b"}
    assert deps.impact(["app/c.py"]).uncovered == ("app/c.py",)


def test_a_deleted_conftest_selects_the_tests_below_it(chain):
    (chain / "tests" / "conftest.py").unlink()
    deps = deps_of(chain, CHAIN_TESTS)
    assert deps.impact(["tests/conftest.py"]).reasons == {t: "conftest tests/conftest.py deleted" for t in CHAIN_TESTS}
    assert deps.impact(["tests/deep/conftest.py"]).reasons == {
        t: "conftest tests/deep/conftest.py deleted" for t in CHAIN_TESTS if t.startswith("tests/deep/")}


def test_uncovered_changes_and_what_covers_them(chain):
    write(chain, {"data/table.csv": "1,2\n", "docs/guide.md": "x\n"})
    deps = deps_of(chain, {**CHAIN_TESTS, "tests/other/test_plain.py": "data/"})
    impact = deps.impact(["data/table.csv", "docs/guide.md", "ci/x.py", "tests/other/test_plain.py",
                          "app/unused.py", "tests/deep/conftest.py", "tests/other/test_plain.py"])
    assert impact.uncovered == ("app/unused.py", "docs/guide.md")


def test_imports_by_string_plugins_and_dash_m(tmp_path):
    write(tmp_path, {
        "tool/__init__.py": "", "tool/__main__.py": "from tool import cli\n", "tool/cli.py": "",
        "tool/commands/__init__.py": "", "tool/commands/one.py": "", "tool/commands/two.py": "",
        "tool/lazy.py": "", "tool/skipped.py": "", "tool/checked.py": "",
        "tests/test_dyn.py": """\
            import importlib, subprocess, sys
            import pytest
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from tool import checked
            pytest_plugins = "tool.cli"
            def test_it(name):
                importlib.import_module(f"tool.commands.{name}")
                importlib.import_module("tool.lazy")
                pytest.importorskip("tool.skipped")
                subprocess.run([sys.executable, "-m", "tool", "x"])
            """,
    })
    deps = deps_of(tmp_path, {"tests/test_dyn.py": ""})
    assert {rel: how for rel, (_, _, how) in deps.closure("tests/test_dyn.py").items()} == {
        "tests/test_dyn.py": "root", "tool/__init__.py": "from", "tool/checked.py": "from",
        "tool/cli.py": "plugin", "tool/commands/__init__.py": "string", "tool/commands/one.py": "string",
        "tool/commands/two.py": "string", "tool/lazy.py": "string", "tool/skipped.py": "string",
        "tool/__main__.py": "-m"}


def test_test_helpers_beside_the_test_are_edges(tmp_path):
    write(tmp_path, {"lib/__init__.py": "X = 1\n", "tests/area/helper.py": "import lib\n",
                     "tests/area/test_a.py": "from helper import *\n", "tests/other/test_b.py": "import helper\n"})
    deps = deps_of(tmp_path, {"tests/area/test_a.py": "", "tests/other/test_b.py": ""})
    assert deps.impact(["tests/area/helper.py"]).reasons == {"tests/area/test_a.py": "imports tests/area/helper.py"}
    assert deps.impact(["lib/__init__.py"]).reasons == {
        "tests/area/test_a.py": "imports lib/__init__.py via tests/area/helper.py"}


def test_registered_directory_or_missing_file_is_never_selected(tmp_path):
    """Issue 13: a registry key naming a directory would run every test in it."""
    write(tmp_path, {"tests/quant/test_a.py": "", "tests/quant/test_b.py": ""})
    deps = deps_of(tmp_path, {"tests/quant": "", "tests/gone.py": "", "tests/quant/test_a.py": ""})
    assert deps.not_files == {"tests/quant": "is a directory, not a test file (registry keys name files)",
                              "tests/gone.py": "does not exist"}
    assert set(deps.impact(["tests/quant/test_b.py"]).reasons) == set()


def test_src_layout_closure_uses_the_configured_roots(tmp_path):
    write(tmp_path, {"src/acme/__init__.py": "from acme import _version\n", "src/acme/core.py": "import beta\n",
                     "src/beta/__init__.py": "", "test/registered/core_test.py": "from acme.core import *\n"})
    registry, _ = parse_registry(HEAD + "  test/registered/core_test.py: {tiers: [cpu], est_time: 1, owner: me, "
                                 "status: active}\n")
    project = ProjectConfig(source_roots=("src",), test_roots=("test/registered",), test_patterns=("*_test.py",),
                            generated_modules=("acme._version",))
    deps = TestDependencies(tmp_path, registry, cache=None, index=ModuleIndex(tmp_path, project))
    assert set(deps.closure("test/registered/core_test.py")) == {
        "test/registered/core_test.py", "src/acme/__init__.py", "src/acme/core.py", "src/beta/__init__.py"}
    assert deps.impact(["src/beta/__init__.py"]).reasons == {
        "test/registered/core_test.py": "imports src/beta/__init__.py via acme.core"}


# -- random module graphs against Python's own import system ---------------------------------------

STYLES = [
    "import {pkg}.{m}",
    "from {pkg} import {m}",
    "from . import {m}",
    "from .{m} import VALUE",
    "import {pkg}.{m} as alias_{m}",
    "from {pkg}.{m} import *",
]


def random_package(rng: random.Random, pkg: str, size: int) -> dict[str, str]:
    """``size`` modules importing each other (cycles included) in random styles, some inside a
    function that runs at import time, so every import statement executes."""
    files = {f"{pkg}/__init__.py": ""}
    for i in range(size):
        lines, local = [], []
        for j in rng.sample(range(size), rng.randint(0, 3)):
            if j == i:
                continue
            style = rng.choice(STYLES)
            in_function = rng.random() < 0.3 and "import *" not in style  # a star is module-level only
            (local if in_function else lines).append(style.format(pkg=pkg, m=f"m{j}"))
        body = "VALUE = 1  # first: a module caught in a cycle already has it\n" + "\n".join(lines) + "\n"
        if local:
            body += "\ndef _load():\n" + "".join(f"    {s}\n" for s in local) + "\n_load()\n"
        files[f"{pkg}/m{i}.py"] = body
    return files


def test_random_graphs_match_what_python_imports(tmp_path):
    rng = random.Random(20260501)
    cases = []
    for n in range(12):
        pkg = f"rpkg{n}"
        write(tmp_path, random_package(rng, pkg, rng.randint(3, 9)))
        cases.append((pkg, f"m{rng.randrange(3)}"))
    script = ("import json, sys\nsys.path.insert(0, sys.argv[1])\nout = {}\n"
              "for pkg, mod in json.loads(sys.argv[2]):\n"
              "    __import__(f'{pkg}.{mod}')\n"
              "    out[f'{pkg}.{mod}'] = sorted(m for m in sys.modules if m.split('.')[0] == pkg)\n"
              "print(json.dumps(out))\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path), json.dumps(cases)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    graph = ImportGraph.build(ModuleIndex(tmp_path, ProjectConfig(test_roots=())))
    for pkg, mod in cases:
        static = {graph.label(rel) for rel in graph.closure([f"{pkg}/{mod}.py"])}
        assert static == set(loaded[f"{pkg}.{mod}"]), (pkg, mod)
