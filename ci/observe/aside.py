"""The recorder's own modules, out of the way of the program's imports.

The start-up hook (`ci.observe.startup`) imports the recorder while ``site`` runs, before
the program's ``sys.path[0]`` (its script's folder, or the working directory) exists. Left in
``sys.modules`` under their names, those modules would answer the program's own ``import ci``: a
program whose folder holds a ``ci`` package of its own (a repository with a top-level ``ci/``, a
copy of this repository tested in a temporary folder) would run the recorder's code instead of
its own, and so run differently recorded than unrecorded.

`step_aside` takes them out of ``sys.modules`` and puts a finder first on ``sys.meta_path``. An
import of one of those names asks the finders behind it where the program's path leads; when
that is the very file the recorder's module came from (the program runs from the recorder's
checkout), the recorder's module object is handed back, so there is one module and its state is
shared (the child's log in `ci.observe.child`); otherwise the import goes on as if the
recorder had never been imported.

Contract: after ``step_aside(package)`` an import of ``package`` or any of its submodules gives
the file the program would get without the hook. The recorder keeps working with the modules it
holds (functions keep their module's globals), so it must have imported everything it needs
before the call. Calling it again sets aside what has been imported since; the finder is
installed once.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ModuleSpec
from types import ModuleType

from ci.observe.finder_guard import FinderGuard


class _ExistingModule:
    """A loader that hands back a module already loaded (and leaves its spec as it was)."""

    def __init__(self, module: ModuleType):
        self.module = module
        self.spec = module.__spec__

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self.spec  # the import system put the hand-over spec there


class SameFileFinder:
    """``sys.meta_path``'s first finder: the set-aside modules, given back where the rest of the
    import system finds the same file (see the module docstring)."""

    def __init__(self) -> None:
        self.aside: dict[str, ModuleType] = {}
        self._guard = FinderGuard()

    def find_spec(self, name: str, path=None, target: ModuleType | None = None) -> ModuleSpec | None:
        module = self.aside.get(name)
        if module is None:
            return None
        with self._guard.asking(name) as first:
            if not first:  # asked back by a finder that asks every other one (`ci.observe.finder_guard`)
                return None
            found = self._find_behind(name, path, target)
        if found is None or not _same_file(found.origin, getattr(module.__spec__, "origin", None)):
            return found  # the program's own module, or none: as without the hook
        del self.aside[name]  # back in sys.modules from here on
        return ModuleSpec(name, _ExistingModule(module), origin=found.origin,
                          is_package=found.submodule_search_locations is not None)

    def _find_behind(self, name: str, path, target) -> ModuleSpec | None:
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is None:  # itself among them: it answers None to a question it is asking
                continue
            spec = find(name, path, target)
            if spec is not None:
                return spec
        return None


def _same_file(one: str | None, other: str | None) -> bool:
    if not one or not other or not os.path.isabs(one) or not os.path.isabs(other):
        return False  # a namespace package or a built-in has no file to compare
    return os.path.normcase(os.path.realpath(one)) == os.path.normcase(os.path.realpath(other))


def step_aside(package: str) -> SameFileFinder:
    """Set ``package`` and its loaded submodules aside (see the module docstring); returns the
    finder that holds them."""
    finder = next((f for f in sys.meta_path if isinstance(f, SameFileFinder)), None)
    if finder is None:
        finder = SameFileFinder()
        sys.meta_path.insert(0, finder)
    prefix = package + "."
    for name in [n for n in sys.modules if n == package or n.startswith(prefix)]:
        finder.aside[name] = sys.modules.pop(name)
    return finder
