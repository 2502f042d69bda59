"""Root conftest: names the registry plugin, so a checkout without the package installed still
loads it (installed, its ``pytest11`` entry point loads it already; under the one name
``ci.pytest_plugin`` it is registered once either way).

See ci/pytest_plugin.py: registry tiers become markers, unregistered test files are collection
errors, tests whose hardware is absent are skipped, registry timeouts/reruns become markers.
"""

pytest_plugins = ["ci.pytest_plugin"]


def pytest_configure(config) -> None:
    """This repository's tests run `ci run`, the approval gate and others in process and in child
    processes; on GitHub each would append its summary of a throw-away run to the real job's
    $GITHUB_STEP_SUMMARY. The variable is dropped for the whole session (children inherit that);
    a test of the summary sets its own file (monkeypatch) or passes ``env=`` explicitly."""
    import os
    import sys

    os.environ.pop("GITHUB_STEP_SUMMARY", None)
    # Many tests edit a source file and run it again within the same second, often at the same
    # size; Python validates a written .pyc by the source's mtime (whole seconds) and size, so the
    # second run could import the first version. No process of the session writes bytecode
    # (children inherit the variable). Seen without it: test_definition_uses failing on a
    # different case per run.
    sys.dont_write_bytecode = True
    os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
