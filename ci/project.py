"""Where a repository keeps its code and tests: the registry's ``project:`` section, typed.

Every consumer (the pytest plugin, lint, the import check, plan, run, the rerun bot) reads these
from `ci.registry.Registry.project` instead of assuming this repository's layout, so another
repository adopts ``ci`` by describing itself in its own ``registry.yaml``.

Paths are repo-relative POSIX; ``"."`` is the repository root.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProjectConfig:
    """The repository's layout.

    * ``first_party``: top-level package (or module) names whose imports the import check
      verifies, e.g. ``("acme",)``. Empty means: every package directory (one with an
      ``__init__.py``) and every ``.py`` module directly under a source root.
    * ``source_roots``: directories that hold those packages (``"."``, ``"src"``, ``"python"``).
    * ``test_roots``: directories searched for test files (``"tests"``, ``"test/registered"``).
    * ``test_patterns``: file-name globs of test files (``"test_*.py"``, ``"*_test.py"``).
    * ``generated_modules``: dotted modules that exist only after a build (``"acme._version"``);
      importing them is never reported as missing.
    """

    first_party: tuple[str, ...] = ()
    source_roots: tuple[str, ...] = (".",)
    test_roots: tuple[str, ...] = ("tests",)
    test_patterns: tuple[str, ...] = ("test_*.py",)
    generated_modules: tuple[str, ...] = ()


__all__ = ["ProjectConfig"]
