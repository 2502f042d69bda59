"""Root conftest: loads the registry plugin for every pytest run (no flag to remember).

See ci/pytest_plugin.py: registry tiers become markers, unregistered test files are collection
errors, tests whose hardware is absent are skipped, registry timeouts/reruns become markers.
"""

pytest_plugins = ["ci.pytest_plugin"]
