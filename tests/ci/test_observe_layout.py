"""``ci observe``'s read of the registry (`ci.observe.layout`): the test roots, patterns and tier
names, cached by the registry's content so the observing process parses it only when it changed
(docs/depmaps.md, "Observing an adopter's own command"). Real ``ci observe`` processes, their
imports read from ``-X importtime``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci.depmap_support import clean_env, write_project
from tests.ci.test_observe_command import FILES, REPO


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    write_project(root, FILES)
    return root


def _imports_of_observe(project: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """``ci observe ARGS`` under ``-X importtime`` in ``project``: the process and what it imported."""
    env = {**clean_env(), "PYTHONPATH": f"{REPO}{os.pathsep}{project}"}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "ci", "observe", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=240)
    return proc, {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


def test_a_second_observation_reads_the_registry_layout_from_its_cache_without_the_parser(project: Path) -> None:
    # the registry's parsers and PyYAML were half of the observing process's instructions
    # (355 of 720 million on rich); it needs the test roots, patterns and tier names only
    out = str(project.parent / "facts.json")
    command = ["--out", out, "--tier", "cpu", "--", sys.executable, "tests/test_calc.py"]
    first, imported = _imports_of_observe(project, *command)
    assert first.returncode == 0, first.stderr
    # a miss: the registry is parsed (PyYAML only where its fast parser gives up), and the cache written
    assert "ci.registry" in imported and (project / ".ci-cache" / "observe-layout.json").is_file()
    facts = json.loads(Path(out).read_text())["tests"]
    second, imported = _imports_of_observe(project, *command)
    assert second.returncode == 0, second.stderr
    assert not {"ci.registry", "yaml"} & imported and "ci.observe.layout" in imported
    assert json.loads(Path(out).read_text())["tests"].keys() == facts.keys() == {"tests/test_calc.py"}


def test_the_layout_cache_follows_the_registry_and_a_broken_cache_is_a_miss(project: Path) -> None:
    out = str(project.parent / "facts.json")
    registry, cache = project / "registry.yaml", project / ".ci-cache" / "observe-layout.json"
    assert _imports_of_observe(project, "--out", out, "--", "true")[0].returncode == 1  # no test file: cached
    assert cache.is_file()
    text = registry.read_text()
    registry.write_text(text.replace("tiers:\n  cpu:", "tiers:\n  nightly:\n    description: n\n    runner_labels: "
                                     "[ubuntu-latest]\n    gpu_count: 0\n    arch: cpu\n  cpu:", 1))
    proc, imported = _imports_of_observe(project, "--out", out, "--tier", "gpu", "--", "true")
    assert proc.returncode == 2 and "known tiers: nightly, cpu" in proc.stderr, proc.stderr  # edited: parsed again
    assert "ci.registry" in imported
    registry.write_text(text.replace("test_roots: [tests]", "test_roots: [tests"))
    proc, _ = _imports_of_observe(project, "--out", out, "--", "true")
    assert proc.returncode == 2 and "registry.yaml" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len([line for line in proc.stderr.splitlines() if not line.startswith("import time:")]) == 1
    registry.write_text(text)
    for broken in ("{not json", json.dumps({"key": "x"}), "[]"):
        cache.write_text(broken)
        proc, imported = _imports_of_observe(project, "--out", out, "--tier", "cpu", "--", sys.executable,
                                             "tests/test_calc.py")
        assert proc.returncode == 0 and "ci.registry" in imported, proc.stderr
