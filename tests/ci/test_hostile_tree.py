"""Hostile repository trees (issue #22): every command reports one clear problem at the path and
goes on; none prints a traceback, hangs, or reads without bound."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main

from tree_testutil import write

HEAD = """\
version: 1
run_all_paths: [ci/]
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
tests:
"""


def entry(path: str) -> str:
    return f"  {path}:\n    tiers: [cpu]\n    est_time: 1\n    owner: me\n    status: active\n"


def run_ci(capsys, root: Path, *args: str) -> tuple[int, str, str]:
    rc = ci_main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


# -- item 1: an expression too deep for Python's parser --------------------------------------------

@pytest.mark.parametrize("body", ["X = " + "+".join(["1"] * 200_000), "X = " + "-" * 300_000 + "1"],
                         ids=["200k-terms", "300k-unary-minus"])
def test_an_expression_too_deep_to_parse_is_i003_at_that_file(tmp_path, capsys, body):
    write(tmp_path, {"ci/__init__.py": "", "lib/__init__.py": "", "lib/core.py": "",
                     "registry.yaml": HEAD + entry("tests/test_deep.py") + entry("tests/test_ok.py"),
                     "tests/test_ok.py": "import lib.core\n"})
    (tmp_path / "tests/test_deep.py").write_text("import lib.core\n" + body + "\n")
    rc, out, _ = run_ci(capsys, tmp_path, "lint")
    assert rc == 1
    assert [line for line in out.splitlines() if " I003 " in line] == [
        "tests/test_deep.py:0:0: I003 cannot parse: an expression is nested too deeply for Python's parser"]
    (tmp_path / "changed.txt").write_text("lib/core.py\n")
    rc, out, _ = run_ci(capsys, tmp_path, "plan", "--tier", "cpu", "--changed-files",
                        str(tmp_path / "changed.txt"), "--format", "json")
    assert rc == 0
    assert [t["path"] for t in json.loads(out)["plans"][0]["selected"]] == ["tests/test_ok.py"]  # it goes on
    rc, out, _ = run_ci(capsys, tmp_path, "deps", "tests/test_deep.py")
    assert rc == 0 and out.splitlines()[0] == "tests/test_deep.py"
