"""``project: dynamic_imports`` names its importer exactly (issue #32's mutation survivors).

An entry ``app.reg: ["app.models.*"]`` gives the module ``app.reg`` (and no other) an edge to
every module the glob matches: ``app.regx`` (a name that merely starts with it), ``app.re`` (a
name it starts with) and ``app.reg.sub`` (a module below it) load by a computed name too, but the
registry says nothing of them, so a change to a model selects only the tests that import
``app.reg`` (importing ``app.reg.sub`` runs ``app.reg`` first, so its tests are among them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.project import DynamicImport, ProjectConfig
from ci.registry import parse_registry
from ci.selection.deps import TestDependencies
from ci.selection.deps_lint import computed_import_problems
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


# -- a helper's parameter that every caller fills with a literal (Liger's compare_version) --------

UTILS = """\
import importlib
import operator


def compare_version(package, op, target="0"):
    try:
        pkg = importlib.import_module(package)
    except ImportError:
        return False
    return op(pkg.__version__, target)


NEW_TORCH = compare_version("torch", operator.ge, "2.4.0")
"""
LIGER_LIKE = {
    "acme/__init__.py": "",
    "acme/ops/__init__.py": "",
    "acme/ops/utils.py": UTILS,
    "acme/ops/geglu.py": "import operator\nfrom acme.ops.utils import compare_version\n\n"
                         "if compare_version(\"triton\", operator.ge, \"3.0.0\"):\n    pass\n",
    "acme/ops/xpu.py": "import operator\nfrom acme.ops import utils\n\n"
                       "OK = utils.compare_version(package=\"pytorch-triton-xpu\", op=operator.ge)\n",
    "tests/test_geglu.py": "import acme.ops.geglu\n",
}


def computed_notes(root: Path) -> list[str]:
    registry, problems = parse_registry(
        "version: 1\nproject:\n  first_party: [acme]\ntiers:\n"
        "  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}\ntests:\n"
        "  tests/test_geglu.py: {tiers: [cpu], est_time: 1, owner: me, status: active}\n", "registry.yaml")
    assert problems == [] and registry is not None
    deps = TestDependencies(root, registry, cache=None)
    return [f"{p.path}:{p.line}: {p.message.rpartition('e.g. ')[2]}" for p in computed_import_problems(deps)]


def test_a_helper_fed_only_third_party_names_gets_no_l009(tmp_path: Path) -> None:
    write(tmp_path, LIGER_LIKE)
    assert computed_notes(tmp_path) == []


def test_a_first_party_literal_is_what_l009_suggests(tmp_path: Path) -> None:
    write(tmp_path, {**LIGER_LIKE, "acme/ops/load.py": "from acme.ops.utils import compare_version\n\n"
                                                       "compare_version(\"acme.ops.geglu\", max)\n"})
    assert computed_notes(tmp_path) == ['acme/ops/utils.py:7: acme.ops.utils: ["acme.ops.geglu"]']


@pytest.mark.parametrize("caller", ["compare_version(name, max)", "compare_version(*names)", "compare_version(3, max)",
                                    "compare_version(op=max, target='1')"])
def test_a_caller_passing_anything_else_keeps_the_package_wide_suggestion(tmp_path: Path, caller: str) -> None:
    write(tmp_path, {**LIGER_LIKE, "acme/ops/load.py": f"from acme.ops.utils import compare_version\n\n{caller}\n"})
    assert computed_notes(tmp_path) == ['acme/ops/utils.py:7: acme.ops.utils: ["acme.ops.*"]']


def test_a_rebound_parameter_or_a_method_is_not_followed(tmp_path: Path) -> None:
    rebound = UTILS.replace("    try:\n", "    package = package.lower()\n    try:\n")
    # Bound, ``get``'s arguments shift by one: read as a function, "os" would pass for ``name``.
    method = "import importlib\n\n\nclass Loader:\n    def get(self, name, fallback=''):\n" \
             "        return importlib.import_module(name)\n\n\nLoader().get(\"acme.ops.geglu\", \"os\")\n"
    write(tmp_path, {**LIGER_LIKE, "acme/ops/utils.py": rebound, "acme/ops/loader.py": method})
    assert computed_notes(tmp_path) == ['acme/ops/loader.py:6: acme.ops.loader: ["acme.ops.*"]',
                                        'acme/ops/utils.py:8: acme.ops.utils: ["acme.ops.*"]']
