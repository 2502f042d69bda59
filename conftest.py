"""Root conftest: names the registry plugin, so a checkout without the package installed still
loads it (installed, its ``pytest11`` entry point loads it already; under the one name
``ci.pytest_plugin`` it is registered once either way).

See ci/pytest_plugin.py: registry tiers become markers, unregistered test files are collection
errors, tests whose hardware is absent are skipped, registry timeouts/reruns become markers.
"""

pytest_plugins = ["ci.pytest_plugin"]
