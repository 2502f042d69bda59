"""`ci init` on a tree shaped like SGLang's: test roots and patterns from its pytest
configuration (`ci.adopt.pytest_config`), modules that exist only after a build from its build
configuration (`ci.adopt.build_config`), and a first lint with no false report from either."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.adopt.build_config import dotted_under, generated_modules
from ci.adopt.pytest_config import PytestConfig, find_pytest_configs, read_pytest_config
from ci.adopt.starter import detect_project
from ci.project import ProjectConfig

from sglang_like import PASSING, SGLANG_LIKE, write

@pytest.fixture
def sglang_like(tmp_path: Path) -> Path:
    root = tmp_path / "sglang"
    write(root, SGLANG_LIKE)
    return root


def test_layout_comes_from_the_pytest_and_build_configuration(sglang_like: Path) -> None:
    assert detect_project(sglang_like) == ProjectConfig(
        first_party=("sglang",), source_roots=("python",), test_roots=("test",),
        test_patterns=("test_*.py", "*_test.py"),
        generated_modules=("sglang._version", "sglang.srt.fast._kernels", "sglang.srt.grpc._core"))


def test_init_then_lint_is_clean_on_the_first_try(sglang_like: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ci_main(["--root", str(sglang_like), "init", "--owner", "@sgl"]) == 0
    out = capsys.readouterr().out
    assert "2 test file(s)" in out and "test/pytest.ini" in out
    registry = (sglang_like / "registry.yaml").read_text()
    assert "test/registered/core/test_alpha.py:" in registry and "test/manual/test_beta.py:" in registry
    assert "sgl-kernel" not in registry.split("tests:", 1)[1] and "test_utils.py" not in registry
    assert "run_all_paths: [registry.yaml, test/pytest.ini]" in registry
    assert ci_main(["--root", str(sglang_like), "lint"]) == 0, capsys.readouterr().out


def test_without_a_pytest_configuration_the_tree_decides(tmp_path: Path) -> None:
    write(tmp_path, {"pkg/__init__.py": "", "tests/test_a.py": PASSING, "other/b_test.py": PASSING})
    project = detect_project(tmp_path)
    assert project.test_roots == ("other", "tests") and project.test_patterns == ("test_*.py", "*_test.py")


@pytest.mark.parametrize(("rel", "body", "roots", "files"), [
    ("pytest.ini", "[pytest]\ntestpaths = tests integration\npython_files = check_*.py\n",
     ("tests", "integration"), ("check_*.py",)),
    ("pytest.ini", "", (".",), ("test_*.py", "*_test.py")),  # an empty pytest.ini still makes a rootdir
    ("sub/pyproject.toml", "[tool.pytest.ini_options]\ntestpaths = ['t', './u/../v']\npython_files = ['t_*.py']\n",
     ("sub/t", "sub/v"), ("t_*.py",)),
    ("setup.cfg", "[tool:pytest]\ntestpaths =\n    a\n    b\n", ("a", "b"), ("test_*.py", "*_test.py")),
    ("tox.ini", "[pytest]\npython_files = *_spec.py\n", (".",), ("*_spec.py",)),
    ("c/pytest.ini", "[pytest]\ntestpaths = ../../outside /abs ok\n", ("c/ok",), ("test_*.py", "*_test.py")),
])
def test_pytest_settings_are_read_like_pytest(tmp_path: Path, rel: str, body: str, roots: tuple[str, ...],
                                              files: tuple[str, ...]) -> None:
    write(tmp_path, {rel: body})
    assert read_pytest_config(tmp_path, rel) == PytestConfig(rel, roots, files)


@pytest.mark.parametrize(("rel", "body"), [
    ("pyproject.toml", "[project]\nname = 'x'\n"),      # no [tool.pytest.ini_options]
    ("setup.cfg", "[metadata]\nname = x\n"),
    ("tox.ini", "[tox]\nenvlist = py3\n"),
])
def test_files_without_a_pytest_section_are_not_configurations(tmp_path: Path, rel: str, body: str) -> None:
    write(tmp_path, {rel: body})
    assert read_pytest_config(tmp_path, rel) is None
    assert find_pytest_configs(tmp_path) == []


def test_in_one_folder_pytest_ini_wins_and_vendored_folders_are_skipped(tmp_path: Path) -> None:
    write(tmp_path, {"pytest.ini": "[pytest]\ntestpaths = t\n",
                     "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = ['other']\n",
                     "3rdparty/lib/pytest.ini": "[pytest]\n", "node_modules/x/pytest.ini": "[pytest]\n",
                     "a/b/c/pytest.ini": "[pytest]\n", "a/b/c/d/pytest.ini": "[pytest]\n"})
    assert [(c.path, c.test_roots) for c in find_pytest_configs(tmp_path)] == [
        ("pytest.ini", ("t",)), ("a/b/c/pytest.ini", ("a/b/c",))]  # d/ is deeper than MAX_DEPTH


def test_unreadable_configurations_are_reported_not_fatal(tmp_path: Path) -> None:
    write(tmp_path, {"pyproject.toml": "[tool.pytest.ini_options\n", "w/setup.cfg": "[tool:pytest\n",
                     "x/pytest.ini": "\xff".encode("latin-1").decode("latin-1")})
    (tmp_path / "x" / "pytest.ini").write_bytes(b"[pytest]\n\xff\n")
    problems = {c.path: c.problem for c in find_pytest_configs(tmp_path)}
    assert set(problems) == {"pyproject.toml", "w/setup.cfg", "x/pytest.ini"}
    assert all(p and p.startswith(f"cannot read {path}") for path, p in problems.items())


def test_a_fifo_or_a_huge_file_named_pytest_ini_is_never_read_whole(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pytest.ini")  # reading it would block forever
    (tmp_path / "sub").mkdir()
    with open(tmp_path / "sub" / "pytest.ini", "wb") as handle:
        handle.truncate(64 << 20)  # sparse: 64 MiB of NUL bytes
    assert find_pytest_configs(tmp_path) == [PytestConfig("sub/pytest.ini", (), (), problem=find_pytest_configs(
        tmp_path)[0].problem)]
    assert "over the limit" in (find_pytest_configs(tmp_path)[0].problem or "")
    problem = read_pytest_config(tmp_path, "pytest.ini")
    assert problem is not None and "not a regular file" in (problem.problem or "")


def test_generated_modules_from_setup_py_stubs_and_maturin(tmp_path: Path) -> None:
    write(tmp_path, {"setup.py": "from setuptools import setup, Extension\nfrom setuptools_rust import RustExtension\n"
                                 "setup(ext_modules=[Extension('acme._C', ['a.c'])],\n"
                                 "      rust_extensions=[RustExtension('acme.native._core')])\n",
                     "pyproject.toml": "[tool.maturin]\nmodule-name = 'acme._rs'\n[tool.hatch.build.hooks.vcs]\n"
                                       "version-file = 'src/acme/_v.py'\n",
                     "src/acme/__init__.py": "", "src/acme/typed.pyi": "x: int\n", "src/acme/typed.py": "x = 1\n",
                     "src/acme/_stub_only.pyi": "y: int\n", "other/pyproject.toml": "[tool.maturin]\nmodule-name = 'zed._rs'\n",
                     # SGLang's rust/ workspace: each crate names its module in its own metadata
                     "rust/mm/Cargo.toml": "[package]\nname = 'mm'\n[package.metadata.sglang]\n"
                                           "python-module = 'acme.mm._core'\n",
                     "rust/old/Cargo.toml": "[package]\nname = 'old'\n[package.metadata.maturin]\nname = 'acme._old'\n",
                     "rust/plain/Cargo.toml": "[package]\nname = 'plain'\n[dependencies]\npyo3 = '0.22'\n"})
    assert generated_modules(tmp_path, ("src",), ("acme",)) == (
        "acme._C", "acme._old", "acme._rs", "acme._stub_only", "acme._v", "acme.mm._core", "acme.native._core")
    assert "zed._rs" in generated_modules(tmp_path, ("src",))  # no first-party filter: everything found


def test_broken_build_files_are_skipped(tmp_path: Path) -> None:
    write(tmp_path, {"setup.py": "def broken(:\n", "pyproject.toml": "not toml [", "a/setup.py": "x = " + "-" * 300_000 + "1\n"})
    assert generated_modules(tmp_path, (".",)) == ()


@pytest.mark.parametrize(("path", "roots", "dotted"), [
    ("python/sglang/_version.py", ("python",), "sglang._version"),
    ("python/sglang/_version.py", (".", "python"), "sglang._version"),  # the deepest root wins
    ("acme/_v.py", (".",), "acme._v"),
    ("elsewhere/x.py", ("python",), None),
])
def test_dotted_under(path: str, roots: tuple[str, ...], dotted: str | None) -> None:
    assert dotted_under(path, roots) == dotted
