"""ci/lint.py and `python -m ci lint`: registry <-> tree checks, output formats, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.commands import lint as cli
from ci.lint import lint_registry, lint_repo
from ci.registry.writer import suggested_entry
from ci.registry import Problem, parse_registry, scan_test_tree

ROOT = Path(__file__).resolve().parents[2]

HEAD = """\
version: 1
run_all_paths: [ci/]
tiers:
  cpu:
    description: no GPU
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
tests:
"""
EMPTY = HEAD.replace("tests:\n", "tests: {}\n")


def entry(path: str, depends_on: str = "") -> str:
    deps = f"    depends_on: [{depends_on}]\n" if depends_on else ""
    return f"  {path}:\n    tiers: [cpu]\n    est_time: 1\n    owner: me\n    status: active\n{deps}"


def write(root: Path, files: dict[str, str]) -> None:
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))


def lines(problems: list[Problem]) -> list[str]:
    return [str(p).split("\n", 1)[0] for p in problems]


def test_tree_checks_point_at_the_right_place(tmp_path):
    write(tmp_path, {
        "ci/__init__.py": "",
        "registry.yaml": HEAD + entry("tests/a/test_x.py", "fp4kv/quant/, ci/") + entry("tests/gone/test_gone.py")
        + entry("tests/b/test_x.py"),
        "tests/a/test_x.py": "", "tests/b/test_x.py": "", "tests/a/test_new.py": "", "tests/a/helper.py": "",
    })
    assert lines(lint_repo(tmp_path)) == [
        "registry.yaml:10:3: L004 'tests/a/test_x.py' depends_on 'fp4kv/quant', which does not exist",
        "registry.yaml:16:3: L001 registered test file 'tests/gone/test_gone.py' does not exist",
        "tests/a/test_new.py:1:1: L002 test file is not registered in registry.yaml; add under 'tests:'",
        "tests/a/test_x.py:1:1: L003 basename 'test_x.py' is also used by tests/b/test_x.py; "
        "/rerun-test resolves files by basename: rename one, or set 'unique_basenames: false' under 'project:' "
        "(/rerun-test then asks for a path)",
        "tests/b/test_x.py:1:1: L003 basename 'test_x.py' is also used by tests/a/test_x.py; "
        "/rerun-test resolves files by basename: rename one, or set 'unique_basenames: false' under 'project:' "
        "(/rerun-test then asks for a path)",
    ]


def test_shared_basenames_are_allowed_when_the_project_says_so(tmp_path):
    head = HEAD.replace("tiers:", "project:\n  unique_basenames: false\ntiers:", 1)
    assert head != HEAD
    write(tmp_path, {"ci/__init__.py": "", "registry.yaml": head + entry("tests/a/test_x.py") + entry("tests/b/test_x.py"),
                     "tests/a/test_x.py": "", "tests/b/test_x.py": ""})
    assert lines(lint_repo(tmp_path)) == []
    # the default still refuses them: the same tree with the line removed
    (tmp_path / "registry.yaml").write_text(HEAD + entry("tests/a/test_x.py") + entry("tests/b/test_x.py"))
    assert [p.code for p in lint_repo(tmp_path)] == ["L003", "L003"]


def test_unregistered_message_carries_an_entry_that_parses(tmp_path):
    write(tmp_path, {"registry.yaml": HEAD + entry("tests/q/test_old.py"), "tests/q/test_old.py": "", "ci/x.py": "",
                     "tests/q/test_kvfp4_quant_dequant.py": ""})
    [problem] = lint_repo(tmp_path)
    snippet = problem.message.split("\n", 1)[1] + "\n"
    assert snippet == suggested_entry("tests/q/test_kvfp4_quant_dequant.py", parse_registry(HEAD + entry("tests/q/test_old.py"))[0])
    assert "owner: me" in snippet  # the directory's usual owner
    registry, problems = parse_registry(HEAD + entry("tests/q/test_old.py") + snippet)
    assert problems == [] and registry.entry("tests/q/test_kvfp4_quant_dequant.py").tiers == ("cpu",)


def test_registry_problems_are_lint_problems_and_imports_still_checked(tmp_path):
    write(tmp_path, {
        "registry.yaml": HEAD + "  tests/test_a.py:\n    tiers: [gpu_zz]\n    est_time: -1\n    owner: me\n"
                                "    status: active\n    status: active\n",
        "ci/__init__.py": "", "ci/x.py": "from ci import nothing\n",
    })
    assert [(p.path, p.line, p.code) for p in lint_repo(tmp_path)] == [
        ("ci/x.py", 1, "I001"),
        ("registry.yaml", 11, "R006"),
        ("registry.yaml", 12, "R007"),
        ("registry.yaml", 15, "R002"),
    ]


def test_missing_run_all_path(tmp_path):
    write(tmp_path, {"registry.yaml": EMPTY.replace("[ci/]", "[ci/, .github/workflows/]"), "ci/__init__.py": ""})
    assert lines(lint_repo(tmp_path)) == [
        "registry.yaml:0:0: L004 run_all_paths names '.github/workflows', which does not exist"]


def story_tree(root: Path) -> list[int]:
    """The incident: class renamed, 14 function-local imports of the old name, the one covering
    test in a manual folder nobody registered. Returns the pool's bad lines."""
    pool, bad = ["import torch", ""], []
    for i in range(14):
        pool += [f"def site_{i}(x):", "    from fp4kv.quant import KVFP4QuantizeUtil",
                 "    return KVFP4QuantizeUtil().quantize(x)", ""]
        bad.append(len(pool) - 2)
    write(root, {
        "registry.yaml": EMPTY,
        "ci/__init__.py": "",
        "fp4kv/__init__.py": "",
        "fp4kv/quant/__init__.py": "class BlockFP4KVQuantizeUtil:\n    def quantize(self, x):\n        return x\n",
        "fp4kv/mem_cache/__init__.py": "",
        "fp4kv/mem_cache/memory_pool.py": "\n".join(pool) + "\n",
        "tests/manual/test_kvfp4_quant_dequant.py": "from fp4kv.quant import BlockFP4KVQuantizeUtil\n",
    })
    return bad


def test_story_lint_names_every_site_then_passes_after_the_fix(tmp_path, capsys):
    bad = story_tree(tmp_path)
    assert cli.main(["--root", str(tmp_path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[:14] == [
        f"fp4kv/mem_cache/memory_pool.py:{line}:5: I001 'fp4kv.quant' has no name 'KVFP4QuantizeUtil' "
        "(did you mean 'BlockFP4KVQuantizeUtil'?)" for line in bad]
    assert out[14].startswith("tests/manual/test_kvfp4_quant_dequant.py:1:1: L002 test file is not registered")

    write(tmp_path, {
        "fp4kv/quant/__init__.py": """\
            class BlockFP4KVQuantizeUtil:
                pass

            _DEPRECATED_ALIASES = {"KVFP4QuantizeUtil": "BlockFP4KVQuantizeUtil"}

            def __getattr__(name):
                if name in _DEPRECATED_ALIASES:
                    return globals()[_DEPRECATED_ALIASES[name]]
                raise AttributeError(name)
        """,
        "registry.yaml": HEAD + entry("tests/manual/test_kvfp4_quant_dequant.py"),
    })
    assert cli.main(["--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


def test_json_and_github_formats(tmp_path, capsys):
    story_tree(tmp_path)
    assert cli.main(["--root", str(tmp_path), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert len(data) == 15 and data[0] == {
        "path": "fp4kv/mem_cache/memory_pool.py", "line": 4, "col": 5, "code": "I001",
        "message": "'fp4kv.quant' has no name 'KVFP4QuantizeUtil' (did you mean 'BlockFP4KVQuantizeUtil'?)"}
    assert cli.main(["--root", str(tmp_path), "--format", "github"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("::error file=fp4kv/mem_cache/memory_pool.py,line=4,col=5,title=I001::'fp4kv.quant' has no "
                      "name 'KVFP4QuantizeUtil' (did you mean 'BlockFP4KVQuantizeUtil'?)")
    assert out[14].startswith("::error file=tests/manual/test_kvfp4_quant_dequant.py,line=1,col=1,title=L002::")
    assert "%0A  tests/manual/test_kvfp4_quant_dequant.py:%0A    tiers: [cpu]" in out[14]


def test_github_escaping():
    problem = Problem("dir,a/b:c.py", 3, 0, "X:1", "100% done\r\nnext, line: ok")
    assert cli.format_github([problem]) == "::error file=dir%2Ca/b%3Ac.py,line=3,title=X%3A1::100%25 done%0D%0Anext, line: ok"
    assert cli.format_github([Problem("r.yaml", 0, 0, "L004", "m")]) == "::error file=r.yaml,title=L004::m"


def test_json_clean_is_an_empty_list(tmp_path, capsys):
    write(tmp_path, {"registry.yaml": EMPTY, "ci/__init__.py": ""})
    assert cli.main(["--root", str(tmp_path), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.parametrize("argv", [["--format", "xml"], ["--root", "/nonexistent/dir"], ["--bogus"]])
def test_usage_errors_exit_2(argv, capsys):
    assert cli.main(argv) == 2


def test_missing_registry_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["--root", str(tmp_path)]) == 2
    assert "registry" in capsys.readouterr().err


def test_registry_option(tmp_path, capsys):
    write(tmp_path, {"conf/other.yaml": HEAD + entry("tests/test_a.py"), "tests/test_a.py": "", "ci/x.py": ""})
    assert cli.main(["--root", str(tmp_path), "--registry", str(tmp_path / "conf/other.yaml")]) == 0


def test_repository_is_lint_clean():
    problems = lint_repo(ROOT)
    assert problems == [], "\n".join(map(str, problems))


def test_python_dash_m_ci_lint_runs_from_a_subdirectory():
    result = subprocess.run([sys.executable, "-m", "ci", "lint", "--format", "json"], cwd=ROOT / "tests",
                            capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)}, timeout=60)
    assert result.returncode in (0, 1), result.stderr
    assert isinstance(json.loads(result.stdout), list)


# --- the project layout, links, directories, GPU timeouts -------------------------------------------

GPU_HEAD = HEAD.replace("tests:\n", "  gpu_h100: {description: h100, runner_labels: [gpu-h100], gpu_count: 1, arch: sm_90}\n"
                                    "tests:\n")


def test_test_roots_and_patterns_come_from_the_project_section(tmp_path):
    project = "project:\n  test_roots: [test/registered, more]\n  test_patterns: ['*_test.py']\n"
    write(tmp_path, {
        "registry.yaml": HEAD.replace("tiers:\n", project + "tiers:\n") + entry("test/registered/a/core_test.py"),
        "ci/x.py": "",
        "test/registered/a/core_test.py": "", "test/registered/b/new_test.py": "", "more/deep/er/x_test.py": "",
        "test/registered/b/test_style_other.py": "",  # not a pattern of this project
        "tests/old_test.py": "", "test/manual/hand_test.py": "",  # not under a test root
    })
    assert [(p.path, p.code) for p in lint_repo(tmp_path)] == [
        ("more/deep/er/x_test.py", "L002"), ("test/registered/b/new_test.py", "L002")]


def test_a_registered_directory_is_called_a_directory(tmp_path):
    write(tmp_path, {"registry.yaml": HEAD + entry("tests/quant") + entry("tests/quant/test_a.py"),
                     "tests/quant/test_a.py": "", "ci/x.py": ""})
    assert lines(lint_repo(tmp_path)) == [
        "registry.yaml:10:3: L001 registered test file 'tests/quant' is a directory, not a file: register the test "
        "files in it one by one"]


def test_symlinks_that_leave_the_repository_are_reported(tmp_path):
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    write(outside, {"test_evil.py": "", "lib/test_deep.py": ""})
    write(repo, {"registry.yaml": HEAD + entry("tests/test_evil.py") + entry("tests/test_inside.py"),
                 "tests/real/test_target.py": "", "ci/x.py": ""})
    (repo / "tests" / "test_evil.py").symlink_to(outside / "test_evil.py")
    (repo / "tests" / "test_inside.py").symlink_to(repo / "tests" / "real" / "test_target.py")  # stays inside: fine
    (repo / "tests" / "lib").symlink_to(outside / "lib", target_is_directory=True)
    found = [(p.path, p.code, p.message.split(";")[0]) for p in lint_repo(repo)]
    assert found == [
        ("tests/lib", "L006", f"is a symlink (or lies under one) to {outside / 'lib'}, outside the repository"),
        ("tests/real/test_target.py", "L002", "test file is not registered in registry.yaml"),
        ("tests/test_evil.py", "L006", f"is a symlink (or lies under one) to {outside / 'test_evil.py'}, outside the "
                                       f"repository"),
    ]


def test_a_dangling_test_file_link_is_reported(tmp_path):
    write(tmp_path, {"tests/real/test_a.py": "", "ci/x.py": ""})
    (tmp_path / "tests" / "test_gone.py").symlink_to(tmp_path / "tests" / "missing.py")
    registry, _ = parse_registry(HEAD + entry("tests/real/test_a.py"))
    tree = scan_test_tree(tmp_path, registry.project)
    assert tree.files == ["tests/real/test_a.py"] and tree.links == ["tests/test_gone.py"]
    assert lines(lint_registry(tmp_path, registry, tree.files, tree.links)) == [
        f"tests/test_gone.py:1:1: L006 is a symlink to {tmp_path / 'tests' / 'missing.py'}, which does not exist; "
        f"pytest refuses to collect it: keep test code in the repository"]
    # The whole lint too: the import check skips the dangling link instead of a traceback.
    (tmp_path / "registry.yaml").write_text(HEAD + entry("tests/real/test_a.py"))
    assert [(p.path, p.code) for p in lint_repo(tmp_path)] == [("tests/test_gone.py", "L006")]


@pytest.mark.parametrize("extra, expected", [
    ("", "'tests/test_g.py' runs on GPU tier(s) gpu_h100 without a timeout; add 'timeout: 120' "
         "(max(120, 4 x est_time 1))"),
    ("    timeout: 60\n", "'tests/test_g.py' has timeout 60, below the 120 its est_time derives "
                        "(max(120, 4 x est_time 1)); set 'timeout: 120' or more"),
    ("    timeout: 120\n", None),
    ("    timeout: 900\n", None),
])
def test_gpu_entries_need_a_timeout_derived_from_est_time(tmp_path, extra, expected):
    write(tmp_path, {"registry.yaml": GPU_HEAD + entry("tests/test_g.py").replace("[cpu]", "[cpu, gpu_h100]") + extra
                     + entry("tests/test_c.py"),
                     "tests/test_g.py": "", "tests/test_c.py": "", "ci/x.py": ""})
    found = [p.message for p in lint_repo(tmp_path) if p.code == "L007"]
    assert found == ([expected] if expected else [])


def test_lint_outside_any_repository_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main([]) == 2
    assert f"no registry.yaml in {tmp_path.resolve()} or any directory above it" in capsys.readouterr().err


QUARANTINED_TESTS = """\
import pytest
from base import Inherited


def test_plain():
    pass


@pytest.mark.parametrize("x", [1, 2])
def test_param(x):
    pass


test_generated = pytest.mark.skip(reason="made by a factory")(lambda: None)


class TestKind:
    def test_method(self):
        pass


class TestMore(Inherited):
    pass
"""


@pytest.mark.parametrize("node, known", [
    ("test_plain", True), ("test_param[1]", True), ("test_generated", True), ("TestKind::test_method", True),
    ("TestMore::test_from_base", True),  # maybe inherited: the file alone cannot say
    ("test_gone", False), ("TestKind::test_gone", False), ("TestGone::test_method", False),
    ("test_plain::test_inner", False), ("TestKind::test_method::deeper", False),
])
def test_a_quarantined_node_must_name_a_test_of_its_file(tmp_path, node, known):
    quarantined = (f"    quarantined_nodes:\n      - node: tests/q/test_k.py::{node}\n"
                   f"        reason: flaky on purpose\n")
    write(tmp_path, {"ci/__init__.py": "", "tests/q/test_k.py": QUARANTINED_TESTS,
                     "registry.yaml": HEAD + entry("tests/q/test_k.py") + quarantined})
    found = [p for p in lint_repo(tmp_path) if p.code == "L010"]
    assert found == [] if known else [(p.path, p.line) for p in found] == [("registry.yaml", 16)], found
