"""Adoption on a tree shaped like SGLang's (issue 19): shared basenames, JUnit paths relative to
pytest's rootdir (``test/``), and model modules loaded by a computed name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.registry import load_registry
from ci.results.junit import parse_junit
from ci.selection.deps import TestDependencies
from ci.selection.deps_lint import COMPUTED_IMPORT
from ci.lint import lint_repo
from sglang_like import PASSING, SGLANG_LIKE, write
from tools.rerun.resolve import Kind, resolve_target

# SGLang's model registry: every module of the models package, imported by a name it computes.
MODEL_REGISTRY = """\
import importlib
import pkgutil


def import_model_classes(package_name="sglang.srt.models"):
    package = importlib.import_module(package_name)
    found = {}
    for _, name, ispkg in pkgutil.iter_modules(package.__path__, package_name + "."):
        if not ispkg and not name.endswith(".registry"):
            module = importlib.import_module(name)
            found[module.EntryClass.__name__] = module.EntryClass
    return found
"""
MODELS = {
    "python/sglang/__init__.py": "",  # the fixture's tests import the package from source
    "python/sglang/srt/models/__init__.py": "",
    "python/sglang/srt/models/registry.py": MODEL_REGISTRY,
    "python/sglang/srt/models/llama.py": "class Llama:\n    pass\n\n\nEntryClass = Llama\n",
    "python/sglang/srt/models/qwen.py": "class Qwen:\n    pass\n\n\nEntryClass = Qwen\n",
    "test/registered/models/test_models.py": (
        "from sglang.srt.models.registry import import_model_classes\n\n\n"
        "def test_every_model_loads():\n    assert set(import_model_classes()) == {'Llama', 'Qwen'}\n"),
    "test/registered/core/test_gamma.py": PASSING,
    # two test files with one basename, as SGLang has about a hundred
    "test/registered/a/test_utils_x.py": PASSING,
    "test/registered/b/test_utils_x.py": PASSING,
}
DYNAMIC = "  dynamic_imports:\n    sglang.srt.models.registry: [\"sglang.srt.models.*\"]\n"


@pytest.fixture
def tree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    root = tmp_path / "sglang"
    write(root, {**SGLANG_LIKE, **MODELS})
    assert ci_main(["--root", str(root), "init", "--owner", "@sgl"]) == 0
    capsys.readouterr()
    return root


def add_dynamic_imports(root: Path) -> None:
    registry = root / "registry.yaml"
    text = registry.read_text()
    assert "\ntiers:" in text
    registry.write_text(text.replace("\ntiers:", "\n" + DYNAMIC.rstrip("\n") + "\ntiers:", 1))


def test_init_allows_shared_basenames_and_the_bot_asks_for_a_path(tree: Path) -> None:
    registry = load_registry(tree / "registry.yaml")
    assert registry.project.unique_basenames is False
    assert "  unique_basenames: false\n" in (tree / "registry.yaml").read_text()
    assert [p for p in lint_repo(tree) if p.code == "L003"] == []
    answer = resolve_target(registry, tree, "test_utils_x.py")
    assert answer.kind is Kind.AMBIGUOUS
    assert answer.candidates == ("test/registered/a/test_utils_x.py", "test/registered/b/test_utils_x.py")
    assert resolve_target(registry, tree, "test/registered/b/test_utils_x.py").kind is Kind.RESOLVED


def test_junit_paths_are_mapped_through_pytest_rootdir(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junit = tree / "out" / "j.xml"
    assert ci_main(["--root", str(tree), "run", "--no-plugin", "--junit", str(junit),
                    "test/registered/core/test_gamma.py"]) == 0
    out = capsys.readouterr().out
    assert 'file="registered/core/test_gamma.py"' in junit.read_text()  # the premise: rootdir is test/
    row = next(line for line in out.splitlines() if line.startswith("test/registered/core/test_gamma.py"))
    assert row.split()[1:4] == ["1", "1", "0"]  # tests, passed, failed: counted as the registered file
    assert ci_main(["--root", str(tree), "durations", str(junit)]) == 0
    assert "1 measured file(s) from 1 report(s)" in capsys.readouterr().out


def test_junit_tail_shared_by_two_known_files_is_settled_by_the_pytest_config(tmp_path: Path) -> None:
    write(tmp_path, {"test/pytest.ini": "[pytest]\n", "test/unit/test_a.py": PASSING,
                     "other/test/unit/test_a.py": PASSING, "r.xml": (
                         '<testsuite time="1"><testcase classname="unit.test_a" name="test_ok" '
                         'file="unit/test_a.py" time="0.5"/><testcase classname="unit.test_a" name="test_two" '
                         'time="0.5"/></testsuite>')})
    known = ["test/unit/test_a.py", "other/test/unit/test_a.py"]
    report = parse_junit(tmp_path / "r.xml", root=tmp_path, known_files=known)
    assert [c.file for c in report.cases] == ["test/unit/test_a.py", "test/unit/test_a.py"]
    # without a configuration to settle it, a shared tail is left as written (never guessed)
    (tmp_path / "test" / "pytest.ini").unlink()
    report = parse_junit(tmp_path / "r.xml", root=tmp_path, known_files=known)
    assert [c.file for c in report.cases] == ["unit/test_a.py", ""]
    # a path that is a file at the repository root stays as written
    write(tmp_path, {"unit/test_a.py": PASSING})
    assert parse_junit(tmp_path / "r.xml", root=tmp_path, known_files=known).cases[0].file == "unit/test_a.py"


def test_computed_model_imports_select_nothing_until_the_registry_says_what_they_load(tree: Path) -> None:
    changed = ["python/sglang/srt/models/qwen.py"]
    registry = load_registry(tree / "registry.yaml")
    impact = TestDependencies(tree, registry, cache=None).impact(changed)
    assert impact.reasons == {} and impact.uncovered == tuple(changed)
    hints = [p for p in lint_repo(tree, info=True) if p.code == COMPUTED_IMPORT]
    assert [(h.path, h.line) for h in hints] == [("python/sglang/srt/models/registry.py", 6),
                                                 ("python/sglang/srt/models/registry.py", 10)]
    # line 6 imports its parameter, whose only value in the tree is the default: the package itself;
    # line 10 imports names it builds from the package's modules: the package's modules
    assert hints[0].message.endswith('sglang.srt.models.registry: ["sglang.srt.models"]')
    assert 'sglang.srt.models.registry: ["sglang.srt.models.*"]' in hints[1].message
    assert ci_main(["--root", str(tree), "lint"]) == 0  # info level: shown, never failing

    add_dynamic_imports(tree)
    registry = load_registry(tree / "registry.yaml")
    impact = TestDependencies(tree, registry, cache=None).impact(changed)
    assert set(impact.reasons) == {"test/registered/models/test_models.py"}
    assert "sglang.srt.models.registry" in impact.reasons["test/registered/models/test_models.py"]
    assert impact.uncovered == ()
    assert [p for p in lint_repo(tree, info=True) if p.code == COMPUTED_IMPORT] == []


def test_a_broken_model_fails_only_selected_tests(tree: Path) -> None:
    """The safety property of tests/ci/test_selection_safety.py on this tree: break each model module
    for real; every test file that then fails was selected by that one-file change."""
    add_dynamic_imports(tree)
    registry = load_registry(tree / "registry.yaml")
    deps = TestDependencies(tree, registry, cache=None)
    runnable = ["test/registered/models/test_models.py", "test/registered/core/test_gamma.py"]
    for model in ("python/sglang/srt/models/llama.py", "python/sglang/srt/models/qwen.py"):
        selected = set(deps.impact([model]).reasons)
        source = (tree / model).read_text()
        (tree / model).write_text("raise ImportError('broken on purpose')\n" + source)
        try:
            for test in runnable:
                run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                      "-p", "no:randomly", test], cwd=tree, capture_output=True, text=True,
                                     env={"PYTHONPATH": str(tree / "python"), "PATH": "/usr/bin:/bin"})
                assert run.returncode == 0 or test in selected, (model, test, run.stdout[-2000:])
                if test in selected:  # the break is real: the selected test does fail
                    assert run.returncode != 0, (model, test)
        finally:
            (tree / model).write_text(source)
