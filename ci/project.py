"""Where a repository keeps its code and tests: the registry's ``project:`` section, typed.

Every consumer (the pytest plugin, lint, the import check, plan, run, the rerun bot) reads these
from `ci.registry.Registry.project` instead of assuming this repository's layout, so another
repository adopts ``ci`` by describing itself in its own ``registry.yaml``.

Paths are repo-relative POSIX; ``"."`` is the repository root.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class DynamicImport:
    """``importer`` (a dotted module) loads, by a name it computes, modules matching ``targets``
    (globs of dotted names: ``"acme.models.*"``; ``*`` also crosses dots, as in fnmatch)."""

    importer: str
    targets: tuple[str, ...]

    def loads(self, dotted: str) -> bool:
        """True if ``dotted`` is a module the importer may load."""
        return any(fnmatch.fnmatchcase(dotted, target) for target in self.targets)


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
      importing them is never reported as missing. A glob (``"acme.vendored.*"``) covers every
      module it matches that the tree lacks (`ci.imports.generated`).
    * ``unique_basenames``: True (default) makes two test files with one basename a lint error
      (L003); False allows it, and ``/rerun-test NAME.py`` then asks which path is meant.
    * ``dynamic_imports``: what modules that import by a computed name
      (``importlib.import_module(name)``) may load; the import graph gives each such importer an
      edge to every indexed module its globs match, so a change to one selects the importer's tests.
    """

    first_party: tuple[str, ...] = ()
    source_roots: tuple[str, ...] = (".",)
    test_roots: tuple[str, ...] = ("tests",)
    test_patterns: tuple[str, ...] = ("test_*.py",)
    generated_modules: tuple[str, ...] = ()
    unique_basenames: bool = True
    dynamic_imports: tuple[DynamicImport, ...] = ()

    def dynamic_targets(self, importer: str) -> tuple[str, ...]:
        """The globs ``importer`` may load by a computed name (none: an empty tuple)."""
        return tuple(t for d in self.dynamic_imports if d.importer == importer for t in d.targets)


# The files pytest reads its configuration from, in its order of precedence within one folder;
# the folder holding the one it used is its rootdir.
PYTEST_CONFIG_FILES = ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")

# A dotted module glob: identifier characters, dots between parts, and ``*``, ``?``, ``[...]``.
_DOTTED_GLOB = re.compile(r"(?:[A-Za-z_*?\[][\w*?\[\]!-]*)(?:\.[\w*?\[\]!-]+)*")


def dotted_glob_problem(glob: str) -> str | None:
    """None if ``glob`` is a usable module glob (not one matching everything)."""
    if not _DOTTED_GLOB.fullmatch(glob) or ".." in glob:
        return f"{glob!r} is not a glob of dotted module names such as 'acme.models.*'"
    if glob.strip("*?.") == "":
        return f"{glob!r} matches every module; name the package the importer loads from"
    return None


__all__ = ["DynamicImport", "PYTEST_CONFIG_FILES", "ProjectConfig", "dotted_glob_problem"]
