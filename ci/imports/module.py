"""One indexed module (`Module`) and a namespace of them: what `ci.imports.index` finds and the
import check, the names reader and the graph share."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

Namespace = dict  # dotted name -> Module: the first-party modules, or one basedir's test modules


@dataclass(slots=True, eq=False)  # one per .py file: 10,000 in a large tree
class Module:
    """One indexed module: a .py file, a package directory, or a generated module.

    ``name`` is dotted within its namespace: the first-party one when ``space`` is None, else
    pytest's name under basedir ``space``. ``rel`` is the repo-relative path used in messages and
    by the graph. Modules hold no references to other modules (``star_from`` holds ``rel``
    paths), so a dropped index is freed by reference counting, with the cyclic GC paused.
    """

    name: str
    path: str | None             # filesystem path; None for a namespace directory or a generated module
    rel: str                     # repo-relative path (a package: its __init__.py, or the directory)
    is_package: bool
    space: str | None = None     # None: first-party; else the basedir whose namespace holds it
    basedir: str | None = None   # set for files under a test root: pytest's sys.path entry for it
    submodules: set[str] = field(default_factory=set)
    tree: ast.Module | None = None
    source: bytes = b""
    parsed: bool = False
    scanned: bool = False        # `ModuleIndex.scan` has read it
    may_import: bool = False     # ... and found something that may import indexed code
    defined: bool = False        # definitions collected (ci.imports.names)
    own_names: set[str] = field(default_factory=set)
    # own names bound by importing this package's same-named submodule (``from . import sub``):
    # every other own name that is also a submodule's is an object shadowing that submodule
    submodule_bindings: set[str] = field(default_factory=set)
    star_from: list[str] = field(default_factory=list)   # rel paths of first-party star sources
    explicit_all: list[str] | None = None
    open_names: bool = False     # accepts any attribute (third-party star, opaque __getattr__, generated)
    names_known: bool = False
    names: frozenset[str] | None = None
    generated: bool = False


__all__ = ["Module", "Namespace"]
