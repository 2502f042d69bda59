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


# One tier of each accelerator backend, in block style: cuda and rocm by arch, xpu, npu and tpu named.
BACKEND_TIERS_BLOCK = """\
  h100:
    description: one H100
    runner_labels: [gpu-h100]
    gpu_count: 1
    arch: sm_90
  mi300:
    description: one MI300X
    runner_labels: [amd]
    gpu_count: 1
    arch: gfx942
    device_name: MI300X
    min_memory_gib: 180
    buildkite_queue: amd-mi300
  pvc:
    description: one Intel Data Center GPU Max
    runner_labels: [intel]
    gpu_count: 1
    arch: pvc
    backend: xpu
    device_name: Max 1550
  ascend:
    description: two Ascend 910B
    runner_labels: [npu]
    gpu_count: 2
    arch: ascend910b
    backend: npu
    device_name: 910B
  v5e:
    description: a TPU v5e host
    runner_labels: [tpu]
    gpu_count: 4
    arch: v5e
    backend: tpu
    device_name: v5 lite
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
