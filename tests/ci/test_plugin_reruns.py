"""The registry's ``reruns`` never retry breakage: a real pytest process, with pytest-rerunfailures,
on a file with ``reruns: 2`` whose tests raise ImportError, ModuleNotFoundError, SyntaxError, a
missing-GPU RuntimeError, and a plain flaky AssertionError. Each attempt appends a line to a file,
so what ran is counted outside pytest's own report, and the JUnit is read back through the history
classifier."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ci.history.ingest import case_rows
from ci.results.junit import parse_junit
from tests.ci.tree_testutil import CPU_REGISTRY_HEAD

ROOT = Path(__file__).resolve().parents[2]

REGISTRY = CPU_REGISTRY_HEAD + """\
  tests/test_seed.py:
    tiers: [cpu]
    est_time: 1
    owner: me
    status: active
    reruns: 2
"""

TESTS = '''\
import os

import pytest

LOG = os.environ["ATTEMPT_LOG"]


def ran(name):
    with open(LOG, "a") as f:
        f.write(name + "\\n")


def test_import_error():
    ran("import_error")
    from os import KVFP4QuantizeUtil  # noqa: F401  (the seed's rename: a name that is not there)


def test_module_not_found():
    ran("module_not_found")
    import fp4kv_no_such_module  # noqa: F401


def test_syntax_error():
    ran("syntax_error")
    compile("def f(:", "<generated>", "exec")


def test_no_gpu():
    ran("no_gpu")
    raise RuntimeError("No CUDA GPUs are available")


def test_chained_import_error():
    ran("chained")
    try:
        import fp4kv_no_such_module  # noqa: F401
    except ImportError as exc:
        raise RuntimeError("plugin load failed") from exc


def test_flaky_assertion():
    ran("flaky")
    assert sum(1 for line in open(LOG) if line == "flaky\\n") == 3, "accuracy 0.81 below 0.85"


@pytest.mark.flaky(reruns=1)
def test_own_marker_is_kept():
    ran("own")
    assert sum(1 for line in open(LOG) if line == "own\\n") == 2
'''


def run_pytest(tmp_path: Path, registry: str, files: dict[str, str], *args: str,
               env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    """A real pytest process with the plugin, pytest-rerunfailures and pytest-timeout in a
    throw-away repository; (the process, its xunit1 JUnit report). $ATTEMPT_LOG is a file."""
    (tmp_path / "registry.yaml").write_text(registry)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    junit = tmp_path / "junit.xml"
    env = {**os.environ, "ATTEMPT_LOG": str(tmp_path / "attempts.log"), "PYTHONPATH": str(ROOT),
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "CI_HARDWARE_OVERRIDE": "none", **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "-p", "pytest_rerunfailures", "-p", "pytest_timeout",
         "-p", "no:cacheprovider", "--junitxml", str(junit), "-o", "junit_family=xunit1", *args, "tests"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    return proc, junit


def test_breakage_runs_once_and_a_real_flake_is_still_rerun(tmp_path: Path) -> None:
    proc, junit = run_pytest(tmp_path, REGISTRY, {"tests/test_seed.py": TESTS})
    log = tmp_path / "attempts.log"
    assert proc.returncode == 1, proc.stdout + proc.stderr
    counts: dict[str, int] = {}
    for line in log.read_text().splitlines():
        counts[line] = counts.get(line, 0) + 1
    assert counts == {"import_error": 1, "module_not_found": 1, "syntax_error": 1, "no_gpu": 1, "chained": 1,
                      "flaky": 3, "own": 2}, proc.stdout
    # pytest agrees: 5 failed once, the flake passed on its third attempt, the own marker on its second
    assert "5 failed, 2 passed, 3 rerun" in proc.stdout, proc.stdout[-2000:]

    report = parse_junit(junit, root=tmp_path)
    kinds = {case.name: [row.kind for row in case_rows(case)] for case in report.cases}
    assert kinds["test_import_error"] == ["broken"]
    assert kinds["test_module_not_found"] == ["broken"]
    assert kinds["test_syntax_error"] == ["broken"]
    assert kinds["test_no_gpu"] == ["broken"]
    assert kinds["test_flaky_assertion"] == ["fail", "fail", "pass"]


def test_the_plugin_imports_nothing_above_its_layer() -> None:
    """The plugin sits in 'ci top'; the classifier it now imports is in ci.history, below it. The
    architecture test checks every edge; this one pins the new edge and that it points down."""
    from tests.ci.test_architecture import LAYERS, layer_of, repository_graph

    edges = repository_graph().edges["ci/pytest_plugin.py"]
    targets = {e.target for e in edges}
    assert "ci/history/classify.py" in targets
    plugin = layer_of("ci/pytest_plugin.py")
    above = [t for t in targets if (layer_of(t) or 0) > plugin]
    assert above == [], [(t, LAYERS[layer_of(t)][0]) for t in above]
