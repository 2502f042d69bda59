"""The registry plugin's state in one pytest process (`ci.pytest_plugin`, `ci.pytest_budget`).

Kept in the config's stash under `STATE` by ``pytest_configure``; absent where no registry drives
the run. `relative_test_path` is how every hook tells a project test file from anything else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from ci.registry import Registry, path_is_under
from ci.running.hardware import LazyHardware
from ci.running.watchdog import Watchdog


@dataclass
class PluginState:
    """What the plugin knows in one pytest process: the registry and options read at configure,
    and what the run has used up since (each budgeted file's seconds, the timeout records)."""

    registry: Registry
    root: Path
    tier: str | None
    include_inactive: bool
    named_files: set[Path]
    run_quarantined: bool
    is_test_name: Callable[[str], object]
    hardware: LazyHardware = field(default_factory=LazyHardware)
    spent: dict[Path, float] = field(default_factory=dict)  # seconds each budgeted file has used here
    paths: dict[Path, str | None] = field(default_factory=dict)  # memo of `relative_test_path`
    records: Path | None = None  # where a killed test's timeout is recorded (shared with xdist workers)
    owns_records: bool = False
    watchdog: Watchdog = field(default_factory=Watchdog)


STATE = pytest.StashKey[PluginState]()


def relative_test_path(state: PluginState, path: Path) -> str | None:
    """The repo-relative POSIX path if ``path`` is a test file of the project (under a test root,
    name matching a test pattern), else None. Symlinks are not resolved: a link is judged where
    it lies."""
    if path in state.paths:
        return state.paths[path]
    rel: str | None = None
    for root in (state.root, state.root.resolve()):
        try:
            candidate = Path(os.path.abspath(path)).relative_to(root).as_posix()
        except ValueError:
            continue
        if state.is_test_name(path.name) and any(path_is_under(candidate, r) for r in state.registry.project.test_roots):
            rel = candidate
        break
    state.paths[path] = rel
    return rel
