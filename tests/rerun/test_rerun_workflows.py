"""The two rerun workflows agree with the bot (inputs, file name) and keep their security rules."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import yaml

from ci.registry import find_repo_root
from tools.rerun.fake_github import FakeGitHub
from tools.rerun.handler import DISPATCH_WORKFLOW

from rerun_support import comment_payload

ROOT = find_repo_root()
WORKFLOWS = ROOT / ".github" / "workflows"


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads a bare `on` key as True
    return data


def _steps(data: dict[str, Any]) -> list[dict[str, Any]]:
    (job,) = data["jobs"].values()
    return job["steps"]


def test_comment_workflow_trigger_permissions_and_checkout() -> None:
    text = (WORKFLOWS / "rerun-test.yml").read_text(encoding="utf-8")
    data = _load("rerun-test.yml")
    assert data["on"] == {"issue_comment": {"types": ["created"]}}
    (job,) = data["jobs"].values()
    assert data["permissions"] == {} and job["permissions"] == {
        "actions": "write", "issues": "write", "pull-requests": "write", "contents": "read"}
    assert "github.event.issue.pull_request" in job["if"] and "'/rerun-test'" in job["if"]
    (checkout,) = [s for s in _steps(data) if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert checkout["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    assert checkout["with"]["persist-credentials"] is False
    assert "pull_request.head" not in text and "head_ref" not in text
    runs = [s["run"] for s in _steps(data) if "run" in s]
    assert runs[0] == 'python3 -m pip install "pyyaml>=6.0" "requests>=2.31"'
    assert runs[-1] == 'python3 -m tools.rerun handle --event "$GITHUB_EVENT_PATH"'


def test_the_bot_runs_on_pyyaml_and_requests_alone() -> None:
    """rerun-test.yml installs only those two: the bot must never import torch or triton."""
    code = ("import sys, tools.rerun.__main__, tools.rerun.handler, tools.rerun.server; "
            "heavy = sorted({'torch', 'triton', 'numpy'} & set(sys.modules)); "
            "sys.exit(f'bot imported {heavy}' if heavy else 0)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_dispatch_workflow_matches_the_inputs_the_bot_sends(fake: FakeGitHub, make_handler) -> None:
    outcome = make_handler(dry_run=True).handle(comment_payload("/rerun-test test_pack.py::t[1]"))
    sent = outcome.dispatches[0].inputs
    data = _load(DISPATCH_WORKFLOW)
    declared = data["on"]["workflow_dispatch"]["inputs"]
    assert set(declared) == set(sent) and len(declared) <= 10
    assert all(spec["type"] == "string" for spec in declared.values())
    assert {k for k, spec in declared.items() if spec.get("required")} == {"pr", "sha", "tier", "runner", "tests"}
    (job,) = data["jobs"].values()
    assert job["runs-on"] == "${{ fromJSON(inputs.runner) }}"
    assert data["permissions"] == {} and job["permissions"] == {"contents": "read"}


def test_dispatch_workflow_checks_out_sha_and_never_splices_inputs_into_scripts() -> None:
    data = _load(DISPATCH_WORKFLOW)
    steps = _steps(data)
    (checkout,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@")]
    assert checkout["with"]["ref"] == "${{ inputs.sha }}"
    for step in steps:
        assert not re.search(r"\$\{\{\s*(inputs|github\.event)\.", step.get("run", "")), step
    (run,) = [s for s in steps if "ci run" in s.get("run", "")]
    assert run["env"] == {"TIER": "${{ inputs.tier }}", "TESTS": "${{ inputs.tests }}"}
    assert '-m ci run --tier "$TIER"' in run["run"] and '"${tests[@]}"' in run["run"]
    assert any(str(s.get("uses", "")).startswith("actions/upload-artifact@") for s in steps)
    assert (ROOT / "ci" / "bootstrap.py").is_file()


def test_ci_run_accepts_what_the_dispatch_workflow_passes() -> None:
    run = pytest.importorskip("ci.commands.run", reason="ci run (another helper's module) is not there yet")
    args = run.build_parser().parse_args(
        ["--tier", "gpu_b200", "--junit", "reports/junit-rerun.xml", "tests/quant/test_x.py::test_y[bf16]",
         "tests/quant/test_z.py"])
    assert args.tier == "gpu_b200" and args.paths == ["tests/quant/test_x.py::test_y[bf16]", "tests/quant/test_z.py"]
