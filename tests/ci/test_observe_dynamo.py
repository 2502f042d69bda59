"""Recording does not change a ``torch.compile`` test's outcome (issue #46; docs/depmaps.md,
"torch.compile under the recorder").

A tiny project whose test compiles a repository function (``backend="eager"``: dynamo traces it,
no C++ compiler runs) is recorded by ``ci observe`` in real processes: on 3.11 (the slipcover
core, whose probes dynamo once failed on: "Cannot construct ConstantVariable ... built-in
function signal") and under ``.venv-py312`` (coverage.py's sysmon core) where torch is there.
The lines are asserted against line numbers known by construction.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci.depmap_support import write_project
from tests.ci.test_observe_command import PY312, _observe

WORK = """\
def double(x):
    y = x * 2
    if y.sum() > 100:
        y = y - 1
    return y


def plain(n):
    if n > 5:
        n = 0
    return n + 1
"""
TEST = """\
import torch

from pkg.work import double, plain


def test_compiled():
    assert torch.compile(double, backend="eager")(torch.ones(2)).tolist() == [2.0, 2.0]
    assert plain(1) == 2
"""


def _with_torch(python: Path | str) -> bool:
    return Path(python).exists() and subprocess.run([str(python), "-c", "import torch._dynamo"],
                                                    capture_output=True, timeout=120).returncode == 0


@pytest.mark.parametrize("python, compiled_lines", [
    # 3.11: dynamo reads the probes of what it traces as NOPs and records all of its probed lines,
    # line 4 (not taken) included; 3.12: sysmon sees no line of the graph (line 2 went into it),
    # so every line of each code object dynamo reads is recorded (#46), the same lines
    pytest.param(sys.executable, "1-5", id="slipcover-3.11"),
    pytest.param(PY312, "1-5", id="sysmon-3.12"),
])
def test_a_recorded_torch_compile_passes_and_its_lines_are_recorded(
        tmp_path: Path, python: Path | str, compiled_lines: str) -> None:
    if not _with_torch(python):
        pytest.skip(f"no torch under {python}")
    root = tmp_path / "project"
    write_project(root, {"pkg/__init__.py": "", "pkg/work.py": WORK, "tests/test_compiled.py": TEST})
    proc, facts = _observe(python, root, str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", "tests")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 passed" in proc.stdout
    # plain is not compiled: its probes stay and its untaken branch (line 10) is not recorded
    assert facts["tests"]["tests/test_compiled.py"]["executed"]["pkg/work.py"] == f"{compiled_lines},8-9,11"
