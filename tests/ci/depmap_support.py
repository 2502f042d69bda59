"""The registry of the small projects the runtime-map tests record: package ``pkg``, tests under
``tests/``, one cpu tier; ``{entries}`` takes the test entries."""

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
