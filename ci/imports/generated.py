"""Globs among ``project.generated_modules`` (``acme.vendored.*``): what a build copies into a
folder of a package, by names no configuration lists. A module the tree lacks and a glob
matches exists after the build; one the tree has is checked as written."""

from __future__ import annotations

import fnmatch

from ci.imports.module import Module, Namespace


def is_glob(dotted: str) -> bool:
    """True for a glob (``*``, ``?``, ``[``) rather than one dotted name."""
    return any(c in dotted for c in "*?[")


class GeneratedGlobs:
    """The glob entries of a ``generated_modules`` list, and the modules they made so far."""

    def __init__(self, entries: tuple[str, ...]):
        self.globs = tuple(e for e in entries if is_glob(e))
        self._made: dict[str, Module] = {}

    def match(self, dotted: str, modules: Namespace) -> Module | None:
        """The generated module ``dotted`` (made once, on demand, with any name) when a glob
        matches it, ``modules`` (the first-party ones) lacks it, and the nearest module above it
        that ``modules`` has is a package (a name in ``acme/vendored/interface.py`` is no
        submodule, whatever a glob matches); None otherwise."""
        if not self.globs or dotted in modules:
            return None
        known = self._made.get(dotted)
        if known is None and _may_hold(dotted, modules) and any(fnmatch.fnmatchcase(dotted, g) for g in self.globs):
            known = self._made[dotted] = Module(dotted, None, f"<generated {dotted}>", False)
            known.generated = known.open_names = known.parsed = known.defined = True
        return known


def _may_hold(dotted: str, modules: Namespace) -> bool:
    parent = dotted.rpartition(".")[0]
    while parent and parent not in modules:
        parent = parent.rpartition(".")[0]
    return not parent or modules[parent].is_package or modules[parent].generated


__all__ = ["GeneratedGlobs", "is_glob"]
