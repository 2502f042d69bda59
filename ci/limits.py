"""Bounds shared by the registry, the JUnit reader and the durations writer (no dependencies, so
the lightweight commands that read reports never import YAML)."""

# Upper bound for est_time, timeout and any measured time, in seconds (one day): a larger number is
# a typo or a corrupt timing report, never a real test file.
MAX_SECONDS = 86_400

__all__ = ["MAX_SECONDS"]
