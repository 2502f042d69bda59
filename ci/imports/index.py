"""The module index: every first-party module and test-tree file of a repository, found once.

Layout comes from `ci.project.ProjectConfig` (the registry's ``project:`` section):

* ``source_roots`` hold the first-party packages: ``src/acme/x.py`` is module ``acme.x``;
* ``first_party`` names them; empty means every package directory (one with ``__init__.py``)
  and every ``.py`` module directly under a source root;
* ``test_roots`` hold the tests and their helpers; every ``.py`` file under them is indexed
  (helpers and ``conftest.py`` included, so ``test_patterns`` do not narrow it). Such a file is
  imported the way pytest's default ``prepend`` import mode does it: its *basedir* (the first
  directory upwards without ``__init__.py``) is on ``sys.path``, so ``from helper import x`` in
  ``tests/mem/test_a.py`` means ``tests/mem/helper.py``. The basedirs of the ``conftest.py``
  files above it are on the path too;
* ``generated_modules`` (``acme._version``) exist only after a build: never missing, any name;
  a glob among them (``acme.vendored.*``, what a build copies into a folder) makes every module
  it matches that the tree lacks such a module.

Nothing is imported. Files are read with ``os.read`` and parsed at most once (`tree`); the import
check (`ci.imports.check`) and the import graph (`ci.imports.graph`) share that parse.
"""

from __future__ import annotations

import ast
import os

from ci.imports.generated import GeneratedGlobs, is_glob
from ci.imports.module import Module, Namespace
from ci.imports.scan import DYNAMIC_IMPORT, IMPORTED_NAMES, parse_python, prefilter, read_bytes
from ci.project import ProjectConfig
from ci.registry import Problem, entry_is, normalize_path, unreadable_dir_problem

SYNTAX_ERROR = "I003"
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages"}
class ModuleIndex:
    """Discovers modules under ``root`` as ``project`` describes; see the module docstring."""

    def __init__(self, root: str | os.PathLike[str], project: ProjectConfig | None = None):
        self.root = os.fspath(root)
        self.project = project or ProjectConfig()
        self.modules: Namespace = {}                 # first-party dotted name -> Module
        self.local: dict[str, Namespace] = {}        # basedir -> pytest-importable names there
        self.by_rel: dict[str, Module] = {}          # every file (and package dir) by repo-relative path
        self.top_names: set[str] = set()             # first-party top-level names
        self.problems: list[Problem] = []
        self._init_cache: dict[str, bool] = {}
        self._search: dict[str, tuple[Namespace, ...]] = {}
        self._test_roots = tuple(_rel_dir(r) for r in self.project.test_roots)
        self._generated_globs = GeneratedGlobs(self.project.generated_modules)
        self.discover()
        self._first_party = prefilter(tuple(sorted(self.top_names)))

    # -- discovery (plain strings and os.scandir: pathlib costs more than parsing here) ------------
    def discover(self) -> None:
        explicit = self.project.first_party
        self.top_names.update(explicit)
        for source_root in self.project.source_roots:
            base = _rel_dir(source_root)
            top = os.path.join(self.root, base) if base else self.root
            if explicit:
                for name in explicit:
                    if name in self.modules:
                        continue  # found under an earlier source root, as Python's path order would
                    if os.path.isdir(os.path.join(top, name)):
                        self._walk_package(_join(base, name), name)
                    elif os.path.isfile(os.path.join(top, name + ".py")):
                        self._add(name, os.path.join(top, name + ".py"), _join(base, name + ".py"), False)
                continue
            try:
                entries = sorted(os.scandir(top), key=lambda e: e.name)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                self.problems.append(unreadable_dir_problem(base, exc))
                continue
            for entry in entries:
                name = entry.name
                if entry.is_dir(follow_symlinks=False):
                    if (name.isidentifier() and name not in self.modules and name not in _SKIP_DIRS
                            and self._has_init(_join(base, name))):
                        self.top_names.add(name)
                        self._walk_package(_join(base, name), name)
                elif name.endswith(".py") and name[:-3].isidentifier() and entry_is(entry, "file"):
                    if name[:-3] not in self.modules:
                        self.top_names.add(name[:-3])
                        self._add(name[:-3], entry.path, _join(base, name), False)
        for dotted in self.project.generated_modules:
            self._add_generated(dotted)
        for test_root in self._test_roots:
            self._walk_tests(test_root)

    def _add(self, name: str, path: str | None, rel: str, is_package: bool) -> Module:
        """A first-party module."""
        module = Module(name, path, rel, is_package)
        self.modules[name] = module
        self.by_rel.setdefault(rel, module)
        return module

    def namespace(self, module: Module) -> Namespace:
        """The namespace ``module``'s name lives in (where its relative imports resolve)."""
        return self.modules if module.space is None else self.local[module.space]

    def _walk_package(self, rel: str, dotted: str) -> None:
        directory = os.path.join(self.root, rel)
        has_init = self._has_init(rel)
        package = self._add(dotted, os.path.join(directory, "__init__.py") if has_init else None,
                            f"{rel}/__init__.py" if has_init else rel, True)
        modules, submodules = self.modules, package.submodules  # hoisted: this loop runs per file
        try:
            entries = list(os.scandir(directory))
        except OSError as exc:  # unreadable (or gone): one problem at it, the package stays empty
            self.problems.append(unreadable_dir_problem(rel, exc))
            return
        for entry in entries:
            name = entry.name
            if entry.is_dir(follow_symlinks=False):
                if name not in _SKIP_DIRS and name.isidentifier():
                    submodules.add(name)
                    self._walk_package(f"{rel}/{name}", f"{dotted}.{name}")
            elif name.endswith(".py") and name != "__init__.py":
                stem = name[:-3]
                # is_file() follows a symlink: a dangling one or a loop is no module (and no traceback)
                if stem.isidentifier() and entry_is(entry, "file"):
                    submodules.add(stem)
                    child = f"{dotted}.{stem}"
                    module = Module(child, entry.path, f"{rel}/{name}", False)
                    modules[child] = module
                    self.by_rel[module.rel] = module

    def _add_generated(self, dotted: str) -> None:
        if is_glob(dotted):
            return  # matched on demand: `generated`
        if dotted in self.modules:
            return  # built already: the real file is indexed
        module = self._add(dotted, None, f"<generated {dotted}>", False)
        module.generated = module.open_names = module.parsed = module.defined = True
        parent, _, leaf = dotted.rpartition(".")
        if parent in self.modules:
            self.modules[parent].submodules.add(leaf)
        elif not parent:
            self.top_names.add(dotted)

    def first_party(self, dotted: str) -> Module | None:
        """The first-party module ``dotted``: indexed, named in ``generated_modules`` or matched by
        one of its globs; None when there is none."""
        return self.modules.get(dotted) or self.generated(dotted)

    def generated(self, dotted: str) -> Module | None:
        """The module ``dotted`` when a ``generated_modules`` glob makes it (`GeneratedGlobs`)."""
        return self._generated_globs.match(dotted, self.modules)

    def _walk_tests(self, top: str) -> None:
        """Index every .py file under test root ``top`` with pytest's prepend-mode name, and, in a
        folder without ``__init__.py`` inside a regular package, also with the name Python gives
        it there: ``aliases`` are a folder's (basedir, dotted name) pairs besides pytest's own."""
        if not os.path.isdir(os.path.join(self.root, top)):
            return
        basedir, prefix = self.package_context(top)
        stack: list[tuple[str, str, str, tuple[tuple[str, str], ...]]] = [(top, basedir, prefix, ())]
        while stack:
            rel, basedir, prefix, aliases = stack.pop()
            namespace = self.local.setdefault(basedir, {})
            package = None
            if prefix:
                package = namespace.get(prefix)
                if package is None:
                    init_rel = f"{rel}/__init__.py"
                    package = self.by_rel.get(init_rel) or Module(
                        prefix, os.path.join(self.root, rel, "__init__.py"), init_rel, True, basedir)
                    namespace[prefix] = package
                    self.by_rel.setdefault(init_rel, package)
                package.basedir = basedir
            alias_packages = [self._alias_package(space, dotted, rel, package) for space, dotted in aliases]
            try:
                entries = list(os.scandir(os.path.join(self.root, rel) if rel else self.root))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:  # the test-tree scan reports the same problem: lint shows it once
                self.problems.append(unreadable_dir_problem(rel, exc))
                continue
            for entry in entries:
                name = entry.name
                child_rel = _join(rel, name)
                if entry.is_dir(follow_symlinks=False):
                    if name in _SKIP_DIRS or name.startswith("."):
                        continue
                    inner = tuple((space, f"{alias}.{name}") for space, alias in aliases)
                    if self._has_init(child_rel):
                        stack.append((child_rel, basedir, f"{prefix}.{name}" if prefix else name, inner))
                    else:
                        # pytest gives it a basedir of its own; Python, under a regular package,
                        # imports it as a PEP 420 portion too (``tests.v1.attention`` when only
                        # ``tests/`` and ``tests/v1/`` have an ``__init__.py``). Not a bare folder
                        # at a basedir: an installed package of that name would win over it.
                        outer = ((basedir, f"{prefix}.{name}"),) if prefix else ()
                        stack.append((child_rel, child_rel, "", outer + inner))
                    if package is not None:
                        package.submodules.add(name)
                    for alias_package in alias_packages:
                        alias_package.submodules.add(name)
                elif name.endswith(".py") and name != "__init__.py" and entry_is(entry, "file"):
                    stem = name[:-3]
                    dotted = f"{prefix}.{stem}" if prefix else stem
                    module = self.by_rel.get(child_rel)
                    if module is None:
                        module = Module(dotted, entry.path, child_rel, False, basedir, basedir)
                        self.by_rel[child_rel] = module
                    module.basedir = basedir
                    namespace.setdefault(dotted, module)
                    if package is not None:
                        package.submodules.add(stem)
                    for (space, alias), alias_package in zip(aliases, alias_packages):
                        self.local[space].setdefault(f"{alias}.{stem}", module)
                        alias_package.submodules.add(stem)

    def _alias_package(self, space: str, dotted: str, rel: str, package: Module | None) -> Module:
        """The package ``dotted`` of basedir ``space``'s namespace for folder ``rel``: the folder's
        own package module when it has an ``__init__.py`` (one file, two names), else a namespace
        package (no file)."""
        names = self.local.setdefault(space, {})
        known = names.get(dotted)
        if known is None:
            known = names[dotted] = package or Module(dotted, None, rel, True, space)
        return known

    def package_context(self, rel: str) -> tuple[str, str]:
        """(basedir, dotted package name of ``rel``, "" if it is no package) by pytest's rule."""
        parts = rel.split("/") if rel else []
        names: list[str] = []
        while parts and self._has_init("/".join(parts)):
            names.insert(0, parts.pop())
        return "/".join(parts), ".".join(names)

    def _has_init(self, rel_dir: str) -> bool:
        known = self._init_cache.get(rel_dir)
        if known is None:
            known = self._init_cache[rel_dir] = os.path.isfile(os.path.join(self.root, rel_dir, "__init__.py"))
        return known

    def add_file(self, rel: str) -> Module | None:
        """The module for a regular .py file outside the configured roots (a registered test in an
        unusual place, a root ``conftest.py``), indexed on demand by pytest's rule; None if it is
        not a regular file."""
        known = self.by_rel.get(rel)
        if known is not None:
            return known
        rel = normalize_path(rel)
        known = self.by_rel.get(rel)
        if known is not None:
            return known
        path = os.path.join(self.root, rel)
        if not (rel.endswith(".py") and os.path.isfile(path)):
            return None
        folder, _, name = rel.rpartition("/")
        basedir, prefix = self.package_context(folder)
        stem = name[:-3]
        dotted = f"{prefix}.{stem}" if prefix else stem
        namespace = self.local.setdefault(basedir, {})
        module = Module(dotted, path, rel, False, basedir, basedir)
        namespace.setdefault(dotted, module)
        self.by_rel[rel] = module
        return module

    # -- name resolution -----------------------------------------------------------------------------
    def search_path(self, importer: Module) -> tuple[Namespace, ...]:
        """The test namespaces ``importer`` sees before the first-party ones: its own basedir, then
        those of the conftest.py files above it, deepest first (pytest inserts each at the front)."""
        if importer.basedir is None:
            return ()
        folder = importer.rel.rpartition("/")[0]
        cached = self._search.get(folder)
        if cached is None:
            found = [self.local[importer.basedir]] if importer.basedir in self.local else []
            parts = folder.split("/") if folder else []
            for depth in range(len(parts), -1, -1):
                directory = "/".join(parts[:depth])
                if os.path.isfile(os.path.join(self.root, directory, "conftest.py")):
                    conftest = self.add_file(_join(directory, "conftest.py"))
                    space = None if conftest is None else self.namespace(conftest)
                    if space is not None and all(space is not f for f in found):
                        found.append(space)
            cached = self._search[folder] = tuple(found)
        return cached

    def lookup(self, importer: Module, dotted: str) -> tuple[Module | None, bool]:
        """(module, ours) for an absolute import in ``importer``: ``ours`` is True when the top-level
        name is first-party or a test-tree name on its search path (a missing one is an error)."""
        top = dotted.partition(".")[0]
        if importer.basedir is not None:
            for namespace in self.search_path(importer):
                if top in namespace:
                    return self._in(namespace, dotted), True
        if top in self.top_names:
            return self.first_party(dotted), True
        return None, False

    def relative(self, module: Module, level: int, target: str | None) -> str | None:
        """The dotted name ``from <level dots><target>`` means in ``module``; None beyond the top."""
        parts = module.name.split(".")
        base = parts if module.is_package else parts[:-1]
        if level - 1 >= len(base):
            return None
        base = base[: len(base) - (level - 1)]
        return ".".join([*base, target] if target else base) or None

    def import_target(self, module: Module, level: int, target: str | None) -> tuple[Module | None, bool]:
        """(module, ours) for the module part of ``from <level dots><target> import ...``."""
        if level:
            dotted = self.relative(module, level, target)
            return (None if dotted is None else self.resolve(module, dotted)), True
        return self.lookup(module, target or "")

    def resolve(self, module: Module, dotted: str) -> Module | None:
        """The module ``dotted`` names in ``module``'s namespace (a relative import's target)."""
        return self.first_party(dotted) if module.space is None else self._in(self.local[module.space], dotted)

    def _in(self, namespace: Namespace, dotted: str) -> Module | None:
        """``dotted`` in a test namespace; where its top-level package is the first-party one
        (a test root holding the source root), a generated module of it too."""
        found = namespace.get(dotted)
        if found is None:
            top = dotted.partition(".")[0]
            if top in self.modules and namespace.get(top) is self.modules[top]:
                return self.generated(dotted) or self.modules.get(dotted)
        return found

    # -- reading and parsing -----------------------------------------------------------------------
    def scan(self, module: Module) -> bytes | None:
        """The module's source if it may import indexed code (a cheap regex test), else None."""
        if module.scanned:
            return module.source if module.may_import else None
        module.scanned = True
        if module.path is None:
            return None
        try:
            source = read_bytes(module.path)
        except OSError as exc:  # vanished or unreadable since discovery: say so, never a traceback
            self.problems.append(Problem(module.rel, 0, 0, SYNTAX_ERROR, f"cannot read: {exc.strerror}"))
            module.parsed = True
            return None
        module.may_import = self._may_import(module, source)
        if module.may_import:
            module.source = source
            return source
        return None

    def _may_import(self, module: Module, source: bytes) -> bool:
        if self._first_party.search(source) or DYNAMIC_IMPORT.search(source):
            return True
        namespaces = self.search_path(module)
        if not namespaces:
            return False
        # A test-tree file may import its neighbours by bare name; one generic regex lists the
        # names it imports (a few per file), instead of one alternation per folder.
        for from_name, import_names in IMPORTED_NAMES.findall(source):
            for name in (from_name,) if from_name else import_names.split(b","):
                top = name.strip().split(b" ", 1)[0].split(b".", 1)[0].decode("ascii", "replace")
                if any(top in namespace for namespace in namespaces):
                    return True
        return False

    def tree(self, module: Module, source: bytes | None = None) -> ast.Module | None:
        """The module's syntax tree, parsed once (None: no file, a syntax error, unreadable)."""
        if module.parsed:
            return module.tree
        module.parsed = True
        if module.path is None:
            return None
        if source is None:
            try:
                source = module.source or read_bytes(module.path)
            except OSError as exc:
                self.problems.append(Problem(module.rel, 0, 0, SYNTAX_ERROR, f"cannot read: {exc.strerror}"))
                return None
        module.source = source
        module.tree, failure = parse_python(source, module.rel)
        if failure is not None:
            self.problems.append(Problem(module.rel, failure.line, failure.col, SYNTAX_ERROR, failure.message))
            module.open_names = True  # reported once; importers are not blamed for it
        return module.tree

    def files(self) -> list[Module]:
        """Every indexed module that is a file, in path order."""
        return [m for rel, m in sorted(self.by_rel.items()) if m.path is not None]


def _rel_dir(path: str) -> str:
    rel = normalize_path(path)
    return "" if rel in ("", ".") else rel


def _join(base: str, name: str) -> str:
    return f"{base}/{name}" if base else name


__all__ = ["Module", "ModuleIndex", "SYNTAX_ERROR"]
