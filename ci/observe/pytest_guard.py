"""An observed pytest refuses to run unrecorded (``ci observe``, docs/depmaps.md).

``ci observe`` tells a pytest's test files apart through the recorder that `ci.pytest_plugin`
registers (`ci.observe.record`). A pytest that runs without it (``-p no:ci-registry``, ``-p
no:ci.pytest_plugin``, plugin autoload off without ``-p ci.pytest_plugin``, no registry at or
above its rootdir) ran every test unrecorded and left an empty map after the whole run. The
start-up hook (`ci.observe.child`) adds this module to ``PYTEST_PLUGINS`` in an observed
command's own pytest processes only; at configure, after every other plugin's, it ends such a run
with a usage error naming the cause, before anything is collected.

Where ci is importable but its entry point did not load (ci on ``PYTHONPATH`` only, as a runner
image may have it, or plugin autoload off), the guard loads it as the entry point would
(`ci.pytest_entry`), unless ``-p no:ci-registry`` turned it off: the observed command runs as
given and is recorded.

Contract: importing it takes it out of ``PYTEST_PLUGINS`` again, so no process this one starts
loads it; `pytest_load_initial_conftests` does what the ``ci-registry`` entry point does when that
entry point is neither loaded nor blocked; `pytest_configure` raises `pytest.UsageError` when no
recorder is registered.
"""

from __future__ import annotations

import os

import pytest

ENTRY_POINT = "ci-registry"  # ci.pytest_entry's name in pyproject.toml's pytest11 group
ENTRY = "ci.pytest_entry"
PLUGIN = "ci.pytest_plugin"

NAME = __name__
PLUGINS_ENV = "PYTEST_PLUGINS"


def without_guard(value: str) -> str:
    """``PYTEST_PLUGINS``'s value without this module."""
    return ",".join(name for name in value.split(",") if name.strip() and name.strip() != NAME)


def _restore() -> None:
    rest = without_guard(os.environ.get(PLUGINS_ENV, ""))
    if rest:
        os.environ[PLUGINS_ENV] = rest
    else:
        os.environ.pop(PLUGINS_ENV, None)


_restore()


def _cause(config: pytest.Config) -> str:
    manager = config.pluginmanager
    for name in (ENTRY_POINT, PLUGIN):
        if manager.is_blocked(name):
            return (f"`-p no:{name}` turns it off: drop that option (command line, PYTEST_ADDOPTS or the "
                    f"ini file's addopts)")
    if manager.get_plugin(PLUGIN) is not None:
        return f"it found no registry.yaml at or above the rootdir {config.rootpath}: run pytest from the tree"
    return "it was not loaded: add `-p ci.pytest_plugin`"


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    manager = early_config.pluginmanager
    if manager.get_plugin(ENTRY_POINT) is None and not manager.is_blocked(ENTRY_POINT):
        # through pytest's plugin loader, as PYTEST_PLUGINS would: a plugin registered during this
        # hook's call misses the call, so its implementation is called here
        manager.import_plugin(ENTRY)
        entry = manager.get_plugin(ENTRY)
        if entry is not None:  # None when blocked: -p no:ci.pytest_entry
            entry.pytest_load_initial_conftests(early_config, args)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.get_plugin("ci-depmap") is None:
        raise pytest.UsageError(f"ci observe: ci's pytest plugin is not recording this pytest, so no test file "
                                f"of it could be told apart and the map would have none of them; {_cause(config)}")
