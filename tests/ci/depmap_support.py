"""The registry of the small projects the runtime-map tests record: package ``pkg``, tests under
``tests/``, one cpu tier; ``{entries}`` takes the test entries."""

from __future__ import annotations

from pathlib import Path

REGISTRY = """\
version: 1
project:
  first_party: [pkg, tests]
  source_roots: ["."]
  test_roots: [tests]
  test_patterns: ["test_*.py"]
tiers:
  cpu:
    description: cpu
    runner_labels: [ubuntu-latest]
    gpu_count: 0
    arch: cpu
tests:
{entries}
"""


def write_project(root: Path, files: dict[str, str]) -> None:
    """Writes ``files`` (repo-relative path: text) under ``root``, and a registry.yaml registering
    every ``tests/test_*`` among them on the cpu tier."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    tests = sorted(r for r in files if r.startswith("tests/test_"))
    entries = "".join(f"  {t}:\n    tiers: [cpu]\n    est_time: 1\n    owner: '@x'\n    status: active\n" for t in tests)
    (root / "registry.yaml").write_text(REGISTRY.format(entries=entries))
