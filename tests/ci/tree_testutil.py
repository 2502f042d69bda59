"""Throw-away repository trees for the tests of ci/: one place that writes them."""

from __future__ import annotations

import textwrap
from pathlib import Path


# The smallest registry with a cpu tier, up to its `tests:` key: append entries to it.
CPU_REGISTRY_HEAD = """\
version: 1
run_all_paths: [ci/]
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
tests:
"""

# The cpu tier in block style, the fast registry parser's subset (the flow mapping above is not).
CPU_TIER_BLOCK = """\
  cpu:
    description: no GPU
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
"""


def cpu_entry(path: str) -> str:
    """A block-style registry entry for the test file ``path`` on the cpu tier."""
    return f"  {path}:\n    tiers: [cpu]\n    est_time: 1\n    owner: o\n    status: active\n"


def write(root: Path, files: dict[str, str]) -> None:
    """Write ``files`` (repo-relative path -> text, dedented) under ``root``, making folders."""
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))
