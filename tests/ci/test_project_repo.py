"""Another repository, described by its own registry.yaml: a src layout with two first-party
packages, tests under test/registered (not tests/), a generated _version module and a stale
function-local import in a nested function. Every command runs from an unrelated directory,
through the console script or ``python -m ci --root``, and takes the layout from ``project:``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.registry import load_registry
from tools.rerun.resolve import Kind, resolve_target

CONSOLE_SCRIPT = Path(sys.executable).with_name("fp4kv-ci")

REGISTRY = """\
version: 1
project:
  first_party: [acme, acme_tools]
  source_roots: [src]
  test_roots: [test/registered]
  test_patterns: ["test_*.py", "*_test.py"]
  generated_modules: [acme._version]
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  gpu_h100:
    description: one H100
    runner_labels: [gpu-h100]
    gpu_count: 1
    arch: sm_90
    device_name: H100
    min_memory_gib: 75
    features: [fp8]
tests:
  test/registered/core/test_engine.py:
    tiers: [cpu, gpu_h100]
    est_time: 2
    timeout: 120
    owner: "@acme/core"
    status: active
    depends_on: [src/acme]
  test/registered/tools/cli_test.py:
    tiers: [cpu]
    est_time: 1
    owner: "@acme/tools"
    status: active
    depends_on: [src/acme_tools]
"""

FILES = {
    "pyproject.toml": '[project]\nname = "acme"\n\n[tool.pytest.ini_options]\npythonpath = ["src"]\n',
    "registry.yaml": REGISTRY,
    "src/acme/__init__.py": "from acme._version import version  # written by the build\n",
    "src/acme/core.py": "class Engine:\n    def run(self):\n        return 42\n",
    "src/acme_tools/__init__.py": "",
    "src/acme_tools/cli.py": textwrap.dedent("""\
        def main():
            def load():
                from acme.core import OldEngine  # renamed to Engine; nothing imports this at module level
                return OldEngine()
            return load
        """),
    "test/registered/core/test_engine.py": "def test_engine():\n    pass\n",
    "test/registered/tools/cli_test.py": "def test_cli():\n    pass\n",
    "test/manual/test_by_hand.py": "def test_by_hand():\n    pass\n",  # outside the test roots
}


@pytest.fixture
def acme(tmp_path: Path) -> Path:
    root = tmp_path / "acme"
    for rel, body in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(body)
    return root


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    path = tmp_path / "unrelated"
    path.mkdir()
    return path


def ci(elsewhere: Path, *argv: str, script: bool = True) -> subprocess.CompletedProcess:
    command = [str(CONSOLE_SCRIPT)] if script else [sys.executable, "-m", "ci"]
    return subprocess.run([*command, *argv], cwd=elsewhere, capture_output=True, text=True, timeout=120)


def test_lint_finds_the_stale_nested_import_at_file_and_line(acme, elsewhere):
    result = ci(elsewhere, "--root", str(acme), "lint")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "src/acme_tools/cli.py:3:9: I001 'acme.core' has no name 'OldEngine' (did you mean 'Engine'?)"]
    # acme._version exists only after a build: never reported


def test_lint_checks_the_configured_test_roots(acme, elsewhere):
    (acme / "test/registered/io").mkdir()
    (acme / "test/registered/io/reader_test.py").write_text("def test_reader():\n    pass\n")
    result = ci(elsewhere, "--root", str(acme), "lint", script=False)
    assert "test/registered/io/reader_test.py:1:1: L002 test file is not registered" in result.stdout
    assert "test/manual" not in result.stdout  # outside the test roots


def test_plan_selects_by_the_configured_layout(acme, elsewhere):
    (elsewhere / "changed.txt").write_text("src/acme/core.py\n")
    result = ci(elsewhere, "--root", str(acme), "plan", "--tier", "cpu", "--changed-files",
                str(elsewhere / "changed.txt"), "--format", "json", script=False)
    assert result.returncode == 0, result.stderr
    [plan] = json.loads(result.stdout)["plans"]
    [selected] = plan["selected"]
    assert selected["path"] == "test/registered/core/test_engine.py"
    assert selected["why"].startswith("changed: src/acme/core.py")
    assert [t["path"] for t in plan["not_run"]] == ["test/registered/tools/cli_test.py"]


def test_run_and_the_plugin_use_the_test_roots_and_patterns(acme, elsewhere):
    result = ci(elsewhere, "--root", str(acme), "run", "--tier", "cpu", "--workers", "0")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    (acme / "test/registered/tools/new_test.py").write_text("def test_new():\n    pass\n")
    collect = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "test"],
                             cwd=acme, capture_output=True, text=True, timeout=120)
    assert collect.returncode == 2  # the unregistered *_test.py under test/registered
    assert "test/registered/tools/new_test.py is not registered in registry.yaml" in collect.stdout
    # outside the test roots: collected like any pytest file, no registration asked for
    assert "test/manual/test_by_hand.py::test_by_hand" in collect.stdout
    assert "test/manual/test_by_hand.py is not registered" not in collect.stdout


def test_a_gpu_run_on_the_wrong_card_fails_with_exit_3(acme, elsewhere):
    env = {"CI_HARDWARE_OVERRIDE": "sm_90:name=NVIDIA H200:mem=139.8", "PATH": "/usr/bin:/bin"}
    result = subprocess.run([str(CONSOLE_SCRIPT), "--root", str(acme), "run", "--tier", "gpu_h100"], cwd=elsewhere,
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 3
    assert "name 'NVIDIA H200' does not match 'H100'" in result.stderr


def test_the_bot_resolves_a_basename_under_test_registered(acme):
    registry = load_registry(acme / "registry.yaml")
    found = resolve_target(registry, acme, "test_engine.py")
    assert (found.kind, found.path, found.tiers) == (Kind.RESOLVED, "test/registered/core/test_engine.py",
                                                     ("gpu_h100",))
    assert resolve_target(registry, acme, "cli_test.py::test_cli").test_id == "test/registered/tools/cli_test.py::test_cli"
