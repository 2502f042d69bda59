"""Constants and payload builders shared by the /rerun-test bot tests (imported by conftest)."""

from __future__ import annotations

import functools
import itertools
import textwrap
import time
from typing import Any

import yaml

from ci.registry import find_repo_root

ROOT = find_repo_root()
WORKFLOWS = ROOT / ".github" / "workflows"
REPO = "acme/llm-serving"
PR = 42
HEAD_SHA = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "test-token"

REGISTRY = """\
version: 1
tiers:
  cpu:
    description: no GPU
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
  gpu_h100:
    description: one H100
    runner_labels: [self-hosted, linux, gpu-h100]
    gpu_count: 1
    arch: sm_90
  gpu_b200:
    description: one B200
    runner_labels: [self-hosted, linux, gpu-b200]
    gpu_count: 1
    arch: sm_100
tests:
  tests/quant/test_kvfp4_quant_dequant.py:
    tiers: [cpu, gpu_b200]
    est_time: 30
    owner: quant
    status: active
  tests/quant/test_pack.py:
    tiers: [cpu, gpu_h100, gpu_b200]
    est_time: 10
    owner: quant
    status: active
  tests/cpu_only/test_cpu_only.py:
    tiers: [cpu]
    est_time: 5
    owner: ci
    status: active
  tests/a/test_dup.py:
    tiers: [gpu_h100]
    est_time: 5
    owner: ci
    status: active
  tests/b/test_dup.py:
    tiers: [gpu_h100]
    est_time: 5
    owner: ci
    status: active
  tests/mem_cache/test_old_pool.py:
    tiers: [gpu_h100]
    est_time: 120
    owner: "@mem-team"
    status: manual
    reason: needs 8 GPUs and a model checkpoint
  tests/quant/test_broken.py:
    tiers: [gpu_b200]
    est_time: 20
    owner: quant
    status: quarantined
    reason: flaky NaN on sm_100
    issue: https://github.com/acme/llm-serving/issues/7
"""

TREE_FILES = [
    "tests/quant/test_kvfp4_quant_dequant.py", "tests/quant/test_pack.py", "tests/cpu_only/test_cpu_only.py",
    "tests/a/test_dup.py", "tests/b/test_dup.py", "tests/mem_cache/test_old_pool.py",
    "tests/quant/test_broken.py",
    # Lives in a manual folder and is registered nowhere: the story's situation.
    "tests/manual/test_legacy_fp4_server.py",
]


_ids = itertools.count(5000)


def comment_payload(body: str, *, user: str = "maintainer", number: int = PR, comment_id: int | None = None,
                    action: str = "created", on_pr: bool = True) -> dict[str, Any]:
    """A minimal issue_comment payload with the fields GitHub sends and the bot reads."""
    issue: dict[str, Any] = {"number": number, "title": "fix fp4"}
    if on_pr:
        issue["pull_request"] = {"url": f"https://api.github.com/repos/{REPO}/pulls/{number}"}
    return {
        "action": action,
        "issue": issue,
        "comment": {"id": comment_id if comment_id is not None else next(_ids), "body": body,
                    "user": {"login": user, "type": "User"},
                    "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        "repository": {"full_name": REPO, "default_branch": "main"},
    }


def pull_request_payload(number: int, head_sha: str, *, action: str = "synchronize") -> dict[str, Any]:
    """A minimal pull_request(_target) payload with the fields GitHub sends and the workflows read."""
    return {"action": action, "number": number,
            "pull_request": {"number": number, "state": "open", "head": {"sha": head_sha, "ref": "feature"},
                             "base": {"ref": "main"}},
            "repository": {"full_name": REPO, "default_branch": "main"}}


class StubPool:
    """A worker pool that takes no work (``accepts=False``: its queue is full, the server answers
    503) or takes every delivery and never handles it (a server killed after its 202)."""

    def __init__(self, accepts: bool):
        self.accepts = accepts

    def start(self, report: Any) -> None:
        pass

    def put(self, delivery: str, payload: dict[str, Any], *, force: bool = False) -> bool:
        return self.accepts

    def stop(self, timeout: float = 10.0) -> None:
        pass


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


def load_workflow(name: str) -> dict[str, Any]:
    """A workflow file as YAML data, with the ``on`` key restored (YAML 1.1 reads it as True)."""
    data = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    data["on"] = data.pop(True, data.get("on"))
    return data


@functools.lru_cache(maxsize=1)
def workflow_run_name() -> str:
    """The ``run-name`` template of rerun-test-dispatch.yml: the fake renders runs' titles with it."""
    return str(load_workflow("rerun-test-dispatch.yml")["run-name"])


@functools.lru_cache(maxsize=1)
def pr_workflow_run_names() -> dict[str, str]:
    """The ``run-name`` of each workflow that runs for pull requests from the base branch."""
    return {"pr-gpu.yml": str(load_workflow("pr-gpu.yml")["run-name"])}
