"""The registry of the one-file projects the culprit tests build: ``tests/test_calc.py`` on one cpu tier."""

from __future__ import annotations

REGISTRY = """\
version: 1
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
tests:
  tests/test_calc.py: {tiers: [cpu], est_time: 1, owner: t, status: active}
"""
