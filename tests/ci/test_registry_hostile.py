"""Damaged and hostile registries: nested aliases, UTF-16 and stray bytes, a huge number. Each gets
one clear problem at file:line (R010 aliases, R011 encoding, R007 times) in lint, plan and the
plugin (tests/ci/test_plugin.py), never a hang, a traceback or an INTERNALERROR."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci.registry import parse as registry_precise
from ci.__main__ import main as ci_main
from ci.lint import lint_repo
from ci.registry import RegistryError, decode_registry, load_registry, parse_registry

ROOT = Path(__file__).resolve().parents[2]

HEAD = """\
version: 1
tiers:
  cpu:
    description: no GPU
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
tests:
"""


DEPTH, WIDTH = 12, 83


def alias_bomb(depth: int = DEPTH, width: int = WIDTH) -> str:
    """A registry whose ``depends_on`` lists nest aliases ``depth`` deep, ``width`` wide: a walk of
    the alias graph visits width**depth (about 5e21) leaves; the text is about 6.7 KB."""
    lines = [HEAD]
    for level in range(depth):
        items = ", ".join(["fp4kv"] * width if level == 0 else [f"*x{level - 1}"] * width)
        lines.append(f"  tests/test_{level}.py:\n    tiers: [cpu]\n    est_time: 1\n    owner: o\n    status: active\n"
                     f"    depends_on: &x{level} [{items}]\n")
    lines.append(f"  tests/test_last.py:\n    tiers: *x{depth - 1}\n    est_time: 1\n    owner: o\n"
                 f"    status: active\n")
    return "".join(lines)


def test_the_bomb_is_the_size_the_issue_reported():
    assert 6_000 <= len(alias_bomb().encode()) <= 7_500


def test_aliases_are_refused_before_any_node_tree_is_built(monkeypatch):
    def refuse(text):  # composing builds the node graph the aliases describe
        raise AssertionError("the registry was composed")

    monkeypatch.setattr(registry_precise, "_compose", refuse)
    registry, problems = parse_registry(alias_bomb(), "registry.yaml")
    assert registry is None
    assert {p.code for p in problems} == {"R010"}
    assert len(problems) == DEPTH + (DEPTH - 1) * WIDTH + 1  # every anchor and alias, each at its own place
    assert str(problems[0]) == ("registry.yaml:14:17: R010 anchor '&x0': anchors and aliases are not allowed "
                                "in the registry; write the value out")
    last = max(problems)
    assert (last.line, last.col, last.message.split(":")[0]) == (8 + 6 * DEPTH + 2, 12, f"alias '*x{DEPTH - 1}'")


def test_a_harmless_anchor_is_refused_too():
    text = HEAD + "  tests/test_a.py: &e\n    tiers: [cpu]\n    est_time: 1\n    owner: o\n    status: active\n"
    registry, problems = parse_registry(text, "r.yaml")
    assert registry is None and [(p.line, p.code) for p in problems] == [(9, "R010")]


@pytest.fixture
def bomb_repo(tmp_path: Path) -> Path:
    (tmp_path / "tests").mkdir()
    (tmp_path / "registry.yaml").write_text(alias_bomb())
    return tmp_path


@pytest.mark.parametrize("argv", [["lint"], ["plan", "--tier", "cpu"]])
def test_lint_and_plan_fail_fast_on_the_bomb(bomb_repo, argv):
    # A hang here is the bug this guards against: the subprocess is bounded, not timed.
    result = subprocess.run([sys.executable, "-m", "ci", "--root", str(bomb_repo), *argv], capture_output=True,
                            text=True, timeout=60, cwd=bomb_repo.parent, env={"PYTHONPATH": str(ROOT)})
    assert result.returncode == (1 if argv == ["lint"] else 2), result.stderr
    assert f"R010 alias '*x{DEPTH - 1}'" in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_pytest_fails_fast_on_the_bomb(bomb_repo):
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "-p", "no:cacheprovider", "tests"],
                            capture_output=True, text=True, timeout=60, cwd=bomb_repo,
                            env={"PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert result.returncode == 4, result.stdout + result.stderr  # usage error
    assert "R010 anchor '&x0'" in result.stderr and "INTERNALERROR" not in result.stdout + result.stderr


ENCODINGS = {
    "utf-16 with a byte order mark": (lambda t: t.encode("utf-16"), (1, 1),
                                      "is UTF-16-encoded (byte order mark at byte offset 0)"),
    "utf-16 without": (lambda t: t.encode("utf-16-be"), (1, 1),
                       "has a NUL byte at byte offset 0 (UTF-16 without a byte order mark?)"),
    "utf-32": (lambda t: t.encode("utf-32"), (1, 1), "is UTF-32-encoded (byte order mark at byte offset 0)"),
    "latin-1 byte": (lambda t: t.replace("no GPU", "no GPU \xb5").encode("latin-1"), (4, 25),
                     "is not valid UTF-8 at byte offset 49 (byte 0xB5)"),
    "truncated sequence": (lambda t: t.encode() + b"\xe2\x82", (10, 1), "is not valid UTF-8 at byte offset 129 (byte 0xE2)"),
}


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_decoding_names_the_byte(name):
    damage, (line, col), what = ENCODINGS[name]
    data = damage(HEAD + "  x: 1\n")
    with pytest.raises(RegistryError) as info:
        decode_registry(data, "registry.yaml")
    [problem] = info.value.problems
    assert (problem.path, problem.line, problem.col, problem.code) == ("registry.yaml", line, col, "R011")
    assert problem.message == f"registry.yaml {what}; save it as UTF-8"


def test_a_utf8_byte_order_mark_is_fine():
    assert decode_registry(b"\xef\xbb\xbfversion: 1\n", "r.yaml") == "\ufeffversion: 1\n"


def test_lint_and_plan_report_an_undecodable_registry_once(tmp_path, monkeypatch, capsys):
    (tmp_path / "registry.yaml").write_bytes((HEAD + "  tests/test_a.py: {}\n").encode("utf-16"))
    problems = lint_repo(tmp_path)
    assert [str(p) for p in problems if p.code.startswith("R")] == [
        "registry.yaml:1:1: R011 registry.yaml is UTF-16-encoded (byte order mark at byte offset 0); save it as UTF-8"]
    monkeypatch.chdir(tmp_path)
    assert ci_main(["plan", "--tier", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "registry.yaml:1:1: R011 registry.yaml is UTF-16-encoded (byte order mark at byte offset 0)" in err
    with pytest.raises(RegistryError):
        load_registry(tmp_path / "registry.yaml")


def test_a_registry_path_that_is_a_directory_is_one_problem(tmp_path):
    (tmp_path / "registry.yaml").mkdir()
    with pytest.raises(RegistryError, match="cannot read registry: it is a directory"):
        load_registry(tmp_path / "registry.yaml")
