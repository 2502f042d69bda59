"""The ``pytest11`` entry point ``ci-registry``: loads `ci.pytest_plugin` only where a registry is.

An installed package's entry point is loaded by every pytest run in that environment, including
an adopter's developers' runs of trees that have no registry. So the entry point is this module,
which imports nothing but the standard library's root finder and decides once pytest knows its
rootdir and ini file (``pytest_load_initial_conftests``):

* ``--registry`` on the command line, or ``registry.yaml`` in the rootdir, the ini file's
  directory or a directory above either (`ci.repo_root.find_repo_root`, the rule every command
  uses) -> the registry plugin is registered under its module name, as ``-p ci.pytest_plugin``
  registers it, so a conftest naming it finds it and it never loads twice;
* otherwise nothing: no option, no option group, no marker, no hook; the run is what it would be
  without the package installed.

``-p no:ci-registry`` turns the entry point off (``PYTEST_ADDOPTS="-p no:ci-registry"`` in a
shell profile for every run); ``-p no:ci.pytest_plugin`` blocks the plugin however it is named.
"""

from __future__ import annotations

import pytest

from ci.repo_root import RepoRootNotFound, find_repo_root

ENTRY_POINT = "ci-registry"
PLUGIN = "ci.pytest_plugin"


def registry_configured(config: pytest.Config, args: list[str]) -> bool:
    """True when this run has a registry: ``--registry`` given, or one at or above the rootdir
    or the ini file's directory."""
    if any(arg == "--registry" or arg.startswith("--registry=") for arg in args):
        return True
    starts = [config.rootpath] + ([config.inipath.parent] if config.inipath is not None else [])
    for start in starts:
        try:
            find_repo_root(start)
            return True
        except RepoRootNotFound:
            continue
    return False


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, args: list[str]) -> None:
    manager = early_config.pluginmanager
    if manager.get_plugin(PLUGIN) is not None or not registry_configured(early_config, args):
        return
    manager.import_plugin(PLUGIN)
    plugin = manager.get_plugin(PLUGIN)
    if plugin is not None:  # None when blocked: -p no:ci.pytest_plugin
        # Registered during this hook's call, its own implementation of the hook was not called.
        plugin.pytest_load_initial_conftests(early_config)
