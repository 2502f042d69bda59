"""``project: dynamic_imports`` names its importer exactly (issue #32's mutation survivors).

An entry ``app.reg: ["app.models.*"]`` gives the module ``app.reg`` (and no other) an edge to
every module the glob matches: ``app.regx`` (a name that merely starts with it), ``app.re`` (a
name it starts with) and ``app.reg.sub`` (a module below it) load by a computed name too, but the
registry says nothing of them, so a change to a model selects only the tests that import
``app.reg`` (importing ``app.reg.sub`` runs ``app.reg`` first, so its tests are among them).
"""

from __future__ import annotations

from pathlib import Path

from ci.project import DynamicImport, ProjectConfig
from ci.registry import parse_registry
from ci.selection.deps import TestDependencies
from tests.ci.tree_testutil import write

COMPUTED = "import importlib\n\n\ndef load(name):\n    return importlib.import_module(name)\n"
FILES = {
    "app/__init__.py": "",
    "app/models/__init__.py": "",
    "app/models/llama.py": "X = 1\n",
    "app/reg/__init__.py": COMPUTED,
    "app/reg/sub.py": COMPUTED,
    "app/regx.py": COMPUTED,
    "app/re.py": COMPUTED,
    "tests/test_reg.py": "from app.reg import load\n",
    "tests/test_reg_sub.py": "from app.reg.sub import load\n",
    "tests/test_regx.py": "from app.regx import load\n",
    "tests/test_re.py": "from app.re import load\n",
}
TESTS = ("tests/test_re.py", "tests/test_reg.py", "tests/test_reg_sub.py", "tests/test_regx.py")
REGISTRY = ("version: 1\nproject:\n  dynamic_imports:\n    app.reg: [\"app.models.*\"]\ntiers:\n"
            "  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}\ntests:\n"
            + "".join(f"  {t}: {{tiers: [cpu], est_time: 1, owner: me, status: active}}\n" for t in TESTS))


def test_dynamic_targets_match_the_importer_exactly() -> None:
    project = ProjectConfig(dynamic_imports=(DynamicImport("app.reg", ("app.models.*",)),))
    assert project.dynamic_targets("app.reg") == ("app.models.*",)
    assert project.dynamic_targets("app.regx") == ()
    assert project.dynamic_targets("app.re") == ()
    assert project.dynamic_targets("app.reg.sub") == ()
    assert project.dynamic_targets("app") == ()


def test_a_change_to_a_dynamically_loaded_module_selects_only_the_named_importers_tests(tmp_path: Path) -> None:
    write(tmp_path, FILES)
    registry, problems = parse_registry(REGISTRY, "registry.yaml")
    assert problems == [] and registry is not None
    assert registry.project.dynamic_targets("app.reg") == ("app.models.*",)
    impact = TestDependencies(tmp_path, registry, cache=None).impact(["app/models/llama.py"])
    # importing app.reg.sub runs app/reg/__init__.py: test_reg_sub.py depends on app.reg itself
    assert set(impact.reasons) == {"tests/test_reg.py", "tests/test_reg_sub.py"}
