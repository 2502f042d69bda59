"""action.yml, the one-line adoption: zizmor-clean, pinned like the workflows, its scripts run
for real against a throw-away repository, and the base install it makes needs no torch."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from workflow_support import ROOT, WORKFLOWS

ACTION = ROOT / "action.yml"
PINNED = re.compile(r"^\s*(?:-\s*)?uses:\s*(?P<action>[\w.-]+/[\w./-]+)@(?P<ref>\S+)(?P<comment>.*)$")
SCRIPTS = Path(sysconfig.get_path("scripts"))
GIT_ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x", "GIT_CONFIG_GLOBAL": os.devnull}


def action() -> dict[str, Any]:
    return yaml.safe_load(ACTION.read_text(encoding="utf-8"))


def zizmor_findings(path: Path) -> list[str]:
    exe = SCRIPTS / "zizmor"
    found = str(exe) if exe.is_file() else shutil.which("zizmor")
    if found is None:
        pytest.fail("zizmor is not installed: it is a test dependency, run `python3 ci/bootstrap.py`")
    result = subprocess.run([found, "--offline", "--no-config", "--persona", "pedantic", "--format", "json",
                             "--no-exit-codes", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return [f["ident"] for f in json.loads(result.stdout)]


def test_zizmor_finds_nothing_and_would_find_an_injection(tmp_path: Path) -> None:
    assert zizmor_findings(ACTION) == []
    planted = tmp_path / "action.yml"
    planted.write_text(ACTION.read_text().replace('fp4kv-ci lint --format github', 'echo "${{ inputs.tiers }}"'))
    assert "template-injection" in zizmor_findings(planted)


def test_actions_are_pinned_by_sha_to_the_versions_the_workflows_use() -> None:
    used_by_workflows = {}
    for path in WORKFLOWS:
        for line in path.read_text().splitlines():
            if m := PINNED.match(line):
                used_by_workflows[m["action"]] = (m["ref"], m["comment"])
    pins = [PINNED.match(line) for line in ACTION.read_text().splitlines() if PINNED.match(line)]
    assert pins, "the action uses setup-python"
    for m in pins:
        assert re.fullmatch(r"[0-9a-f]{40}", m["ref"]) and re.fullmatch(r" # v\d+\.\d+\.\d+", m["comment"])
        assert used_by_workflows.get(m["action"]) == (m["ref"], m["comment"]), m["action"]


def test_the_install_is_the_base_package_and_it_needs_no_torch() -> None:
    install = action()["runs"]["steps"][1]
    assert install["run"].endswith('"$ACTION_PATH"') and "[" not in install["run"]  # no extras
    import tomllib

    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[<>=!;\[ ]", d, maxsplit=1)[0].lower() for d in deps}
    assert names.isdisjoint({"torch", "triton", "numpy"}), names
    # ... and the CI half really runs without it: torch made unimportable, lint and plan still work
    blocked = ("import sys; sys.modules['torch'] = None; sys.modules['triton'] = None; "
               "from ci.__main__ import main; sys.exit(main(sys.argv[1:]))")
    for command in (["lint"], ["plan", "--tier", "cpu"], ["deps", "--reverse", "fp4kv/quant/e2m1.py"]):
        result = subprocess.run([sys.executable, "-c", blocked, "--root", str(ROOT), *command], capture_output=True,
                                text=True, timeout=120, cwd=ROOT)
        assert result.returncode == 0, f"{command}: {result.stderr[-2000:]}"


def _expand(value: str, inputs: dict[str, str]) -> str:
    return re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda m: inputs[m.group(1)], value)


def run_step(step: dict[str, Any], inputs: dict[str, str], cwd: Path, output: Path) -> subprocess.CompletedProcess:
    """One `run:` step as the runner would: bash, its `env:` with the inputs filled in, the
    working directory, and $GITHUB_OUTPUT; `fp4kv-ci` is this environment's console script."""
    env = {**os.environ, "GITHUB_OUTPUT": str(output), "PATH": f"{SCRIPTS}{os.pathsep}{os.environ['PATH']}"}
    env.update({k: _expand(str(v), inputs) for k, v in step.get("env", {}).items()})
    env.pop("PYTHONPATH", None)
    workdir = cwd / _expand(step.get("working-directory", "."), inputs)
    return subprocess.run(["bash", "-euo", "pipefail", "-c", step["run"]], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=120)


REGISTRY = textwrap.dedent("""\
    version: 1
    project: {first_party: [lib], test_roots: [tests]}
    tiers:
      cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
      gpu_a: {description: one GPU, runner_labels: [gpu-a], gpu_count: 1, arch: sm_90}
    tests:
      tests/test_core.py: {tiers: [cpu, gpu_a], est_time: 60, timeout: 300, owner: "@t", status: active}
      tests/test_other.py: {tiers: [gpu_a], est_time: 30, timeout: 300, owner: "@t", status: active}
    """)


@pytest.fixture
def adopter(tmp_path: Path) -> tuple[Path, str]:
    """A repository that adopted the action, in a subfolder, with one commit and one change."""
    repo = tmp_path / "adopter"
    (repo / "app" / "lib").mkdir(parents=True)
    (repo / "app" / "tests").mkdir()
    (repo / "app" / "registry.yaml").write_text(REGISTRY)
    (repo / "app" / "lib" / "__init__.py").write_text("")
    (repo / "app" / "lib" / "core.py").write_text("def f():\n    return 1\n")
    (repo / "app" / "tests" / "test_core.py").write_text("from lib.core import f\n\n\ndef test_f():\n    assert f() == 1\n")
    (repo / "app" / "tests" / "test_other.py").write_text("def test_o():\n    assert True\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=GIT_ENV, capture_output=True)
    base = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()
    (repo / "app" / "lib" / "core.py").write_text("def f():\n    return 1  # changed\n")
    for args in (["add", "-A"], ["commit", "-qm", "change core"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=GIT_ENV, capture_output=True)
    return repo, base


def test_lint_and_plan_steps_run_against_a_real_repository(adopter: tuple[Path, str], tmp_path: Path) -> None:
    repo, base = adopter
    steps = {s.get("id") or s.get("name"): s for s in action()["runs"]["steps"]}
    inputs = {**{k: str(v.get("default", "")) for k, v in action()["inputs"].items()},
              "tiers": "gpu_a", "base": base, "working-directory": "app"}
    output = tmp_path / "github_output"
    lint = run_step(steps["Lint registry, tests and imports"], inputs, repo, output)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    plan = run_step(steps["plan"], inputs, repo, output)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    written = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert written["has_tests"] == "true"
    matrix = json.loads(written["matrix"])
    assert [item["tier"] for item in matrix["include"]] == ["gpu_a"]
    assert "tests/test_core.py" in json.dumps(matrix) and "tests/test_other.py" not in json.dumps(matrix)

    # Every tier when `tiers` is empty; a broken import fails the lint step with an annotation.
    output.write_text("")
    assert run_step(steps["plan"], {**inputs, "tiers": "", "base": ""}, repo, output).returncode == 0
    assert {i["tier"] for i in json.loads(dict(l.split("=", 1) for l in output.read_text().splitlines())["matrix"])[
        "include"]} == {"cpu", "gpu_a"}
    (repo / "app" / "tests" / "test_other.py").write_text("from lib.core import g\n")
    lint = run_step(steps["Lint registry, tests and imports"], inputs, repo, output)
    assert lint.returncode == 1 and "::error file=tests/test_other.py,line=1" in lint.stdout


def test_the_plan_step_takes_stored_observations_and_counts_them_in_the_summary(adopter: tuple[Path, str],
                                                                             tmp_path: Path) -> None:
    """`history-store`: each file's stored map decides it, and the step summary says how many did."""
    repo, base = adopter
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    facts = {"format": "ci-depmap", "version": 1, "tier": "gpu_a", "recorded_at": when, "tests": {
        "tests/test_other.py": {"complete": True, "items": 1, "ran": 1, "executed": ["lib/core.py"], "opened": []}}}
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    store = repo / "app" / "h.sqlite"
    ingest = subprocess.run([sys.executable, "-m", "ci", "history", "ingest", str(tmp_path / "facts.json"), "--repo",
                             "o/r", "--event", "nightly", "--tier", "gpu_a", "--sha", "a" * 40, "--store", str(store)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert ingest.returncode == 0, ingest.stderr
    step = {s.get("id"): s for s in action()["runs"]["steps"]}["plan"]
    inputs = {**{k: str(v.get("default", "")) for k, v in action()["inputs"].items()},
              "tiers": "gpu_a", "base": base, "working-directory": "app", "history-store": "h.sqlite"}
    summary = tmp_path / "summary.md"
    step = {**step, "env": {**step["env"], "GITHUB_STEP_SUMMARY": str(summary)}}
    plan = run_step(step, inputs, repo, tmp_path / "github_output")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    matrix = json.loads(dict(line.split("=", 1) for line in (tmp_path / "github_output").read_text().splitlines())[
        "matrix"])
    assert "tests/test_other.py" in json.dumps(matrix)  # no import names lib/core.py: the observation did
    assert "- `gpu_a`: 1 files by observation (newest from run " in summary.read_text()
    assert "), 1 by the static graph" in summary.read_text()


def test_changed_files_are_relative_to_the_registry_root_and_unquoted(adopter: tuple[Path, str]) -> None:
    """The registry may sit in a subfolder of the git repository: `plan --base` must name changes
    as the registry does (relative to it), and a non-ASCII path must not come back octal-quoted."""
    from ci.selection.changes import git_changed_files

    repo, base = adopter
    (repo / "app" / "tests" / "data_ü.txt").write_text("x")
    (repo / "outside.txt").write_text("x")
    for args in (["add", "-A"], ["commit", "-qm", "more"]):
        subprocess.run(["git", *args], cwd=repo, check=True, env=GIT_ENV, capture_output=True)
    assert git_changed_files(base, repo / "app") == ["lib/core.py", "tests/data_ü.txt"]
    assert git_changed_files(base, repo) == ["app/lib/core.py", "app/tests/data_ü.txt", "outside.txt"]
