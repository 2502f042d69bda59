"""The static selectors ``bench mutation`` compares with the runtime map: import graph and path prefix.

Contract:
- `SelectionTree` is the copy as the selectors see it: its root, the generated registry and the
  universe (the test files measured); the static import graph is built once, on first use.
- `static_selection`: the test files of the universe that ``ci plan --tier T`` selects for a
  change of that one file, over every tier of the registry (`ci.selection.plan.plan` with the
  graph's `Impact`): the self tree's universe holds GPU-tier files too, which skip on CPU but fail
  at collection like any other when a module they import breaks.
- `path_prefix_selection`, the rule projects such as SGLang and vLLM write by hand: the changed
  module's name is its file name without ``.py``, or for an ``__init__.py`` the name of its
  package folder; a test file is selected exactly when that name is a substring of its
  repository-relative path. ``src/_pytest/junitxml.py`` -> every test path containing
  ``junitxml``, such as ``testing/test_junitxml.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ci.registry import Registry
from ci.selection.deps import TestDependencies
from ci.selection.plan import plan


@dataclass
class SelectionTree:
    """The copy as the selectors see it (see the module docstring)."""

    root: Path
    registry: Registry
    universe: frozenset[str]
    _deps: TestDependencies | None = field(default=None, repr=False)

    @property
    def deps(self) -> TestDependencies:
        if self._deps is None:
            self._deps = TestDependencies(self.root, self.registry)
        return self._deps


def static_selection(tree: SelectionTree, changed: str) -> set[str]:
    """Universe files the static import graph selects for a change of ``changed`` alone."""
    impact = tree.deps.impact([changed])
    chosen = {t.path for tier in tree.registry.tiers for t in plan(tree.registry, tier, [changed], impact=impact).selected}
    return chosen & tree.universe


def module_name(changed: str) -> str:
    """The name the path-prefix rule looks for (see the module docstring)."""
    path = PurePosixPath(changed)
    return path.parent.name if path.name == "__init__.py" else path.stem


def path_prefix_selection(universe: frozenset[str] | set[str], changed: str) -> set[str]:
    """Universe files whose path contains `module_name` of ``changed``."""
    name = module_name(changed)
    return {t for t in universe if name and name in t}


__all__ = ["SelectionTree", "module_name", "path_prefix_selection", "static_selection"]
