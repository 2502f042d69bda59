"""Rename hints in a shallow clone (actions/checkout's default depth 1), against a real git
repository built here and cloned with ``git clone --depth 1 file://...``.

The trap is SGLang's: ``KVFP4QuantizeUtil`` was renamed to ``BlockFP4KVQuantizeUtil`` while a
module still defines ``NVFP4KVQuantizeUtil``, so spelling alone guesses the wrong class. Without
the rename commit lint must say history is missing, not guess; with ``--deepen`` allowed it
fetches enough history and names the rename.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ci.commands import lint as cli
from ci.imports.renames import find_renames, shallow_depth
from tests.ci.test_import_hints_history import git
from tests.ci.tree_testutil import write

REGISTRY = """\
version: 1
project: {source_roots: ["."], first_party: [pkg], test_roots: [tests]}
tiers:
  cpu: {description: no GPU, runner_labels: [x], gpu_count: 0, arch: cpu}
tests:
  tests/test_kv.py: {tiers: [cpu], est_time: 1, owner: me, status: active}
"""
BEFORE = "class NVFP4KVQuantizeUtil:\n    pass\n\n\nclass KVFP4QuantizeUtil:\n    pass\n"
AFTER = "class NVFP4KVQuantizeUtil:\n    pass\n\n\nclass BlockFP4KVQuantizeUtil:\n    pass\n"
LATER_COMMITS = 5
SHALLOW = ("history is shallow at depth 1: cannot tell what 'KVFP4QuantizeUtil' was renamed to; fetch full "
           "history (actions/checkout with fetch-depth: 0) or lint with --deepen N")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A repository whose rename commit lies ``LATER_COMMITS`` + 1 commits behind HEAD, HEAD
    holding the stale import; and the rename's short hash."""
    root = tmp_path_factory.mktemp("upstream")
    git(root, "init", "-q", "-b", "main")
    write(root, {"registry.yaml": REGISTRY, "pkg/__init__.py": "", "pkg/quant.py": BEFORE,
                 "tests/test_kv.py": "def test_kv():\n    pass\n"})
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "Add the FP4 quantizers (#1)")
    write(root, {"pkg/quant.py": AFTER})
    git(root, "commit", "-q", "-am", "Rename KVFP4QuantizeUtil to BlockFP4KVQuantizeUtil (#21954)")
    renamed = git(root, "rev-parse", "--short", "HEAD")
    for i in range(LATER_COMMITS):
        write(root, {"pkg/__init__.py": f"# {i}\n"})
        git(root, "commit", "-q", "-am", f"unrelated {i}")
    write(root, {"tests/test_kv.py": "def test_kv():\n    from pkg.quant import KVFP4QuantizeUtil\n"})
    git(root, "commit", "-q", "-am", "Use the quantizer in a test")
    return root, renamed


def shallow_clone(upstream: Path, into: Path) -> Path:
    git(into.parent, "clone", "-q", "--depth", "1", f"file://{upstream}", into.name)
    return into


def lint_out(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert cli.main(["--root", str(root), *args]) == 1
    return capsys.readouterr().out.splitlines()


def test_the_full_clone_names_the_rename(upstream, capsys) -> None:
    root, renamed = upstream
    assert shallow_depth(root) is None
    assert lint_out(root, capsys) == [
        "tests/test_kv.py:2:5: I001 'pkg.quant' has no name 'KVFP4QuantizeUtil' "
        f"(renamed to BlockFP4KVQuantizeUtil in {renamed} (#21954))"]


def test_a_depth_1_clone_says_history_is_missing_instead_of_guessing(upstream, tmp_path, capsys) -> None:
    clone = shallow_clone(upstream[0], tmp_path / "clone")
    assert shallow_depth(clone) == 1
    out = lint_out(clone, capsys)
    assert out == [f"tests/test_kv.py:2:5: I001 'pkg.quant' has no name 'KVFP4QuantizeUtil' ({SHALLOW})"]
    assert "NVFP4KVQuantizeUtil" not in out[0]
    assert git(clone, "rev-parse", "--is-shallow-repository") == "true"  # nothing was fetched


def test_deepening_allowed_finds_the_rename(upstream, tmp_path, capsys) -> None:
    root, renamed = upstream
    clone = shallow_clone(root, tmp_path / "clone")
    out = lint_out(clone, capsys, "--deepen", "50")
    assert out == ["tests/test_kv.py:2:5: I001 'pkg.quant' has no name 'KVFP4QuantizeUtil' "
                   f"(renamed to BlockFP4KVQuantizeUtil in {renamed} (#21954))"]


def test_deepening_stops_at_its_limit(upstream, tmp_path) -> None:
    # HEAD, 5 unrelated commits, then the rename: at depth 7 the rename is the shallow boundary,
    # whose parent (and so whose diff) is missing; depth 8 holds both.
    clone = shallow_clone(upstream[0], tmp_path / "clone")
    found = find_renames(clone, {("pkg/quant.py", "KVFP4QuantizeUtil")}, deepen=LATER_COMMITS + 2)
    assert shallow_depth(clone) == LATER_COMMITS + 2
    rename = found[("pkg/quant.py", "KVFP4QuantizeUtil")]
    assert (rename.commit, rename.shallow_depth) == (None, LATER_COMMITS + 2)
    assert "history is shallow at depth 7:" in rename.describe()
    found = find_renames(clone, {("pkg/quant.py", "KVFP4QuantizeUtil")}, deepen=LATER_COMMITS + 3)
    assert shallow_depth(clone) == LATER_COMMITS + 3
    assert found[("pkg/quant.py", "KVFP4QuantizeUtil")].replacement == "BlockFP4KVQuantizeUtil"


def test_without_a_remote_nothing_is_fetched_and_history_is_said_missing(upstream, tmp_path) -> None:
    clone = shallow_clone(upstream[0], tmp_path / "clone")
    git(clone, "remote", "remove", "origin")
    found = find_renames(clone, {("pkg/quant.py", "KVFP4QuantizeUtil")}, deepen=50)
    assert found[("pkg/quant.py", "KVFP4QuantizeUtil")].shallow_depth == 1
    assert shallow_depth(clone) == 1


def test_a_name_defined_elsewhere_says_where_even_when_shallow(upstream, tmp_path) -> None:
    clone = shallow_clone(upstream[0], tmp_path / "clone")
    found = find_renames(clone, {("pkg/__init__.py", "NVFP4KVQuantizeUtil")})
    assert found[("pkg/__init__.py", "NVFP4KVQuantizeUtil")].describe() == "defined in pkg/quant.py"


def test_the_shallow_marker_is_git_s_own(upstream, tmp_path) -> None:
    clone = shallow_clone(upstream[0], tmp_path / "clone")
    assert subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=clone, capture_output=True,
                          text=True, check=True).stdout.strip() == "true"
    assert shallow_depth(tmp_path) is None  # not a repository at all
