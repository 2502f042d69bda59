"""Static import integrity: every first-party name a file imports must exist.

Catches the stale function-local import that pyflakes and ruff miss: ``def f(): from fp4kv.quant
import KVFP4QuantizeUtil`` after the class was renamed. Nothing is imported; each file is parsed
once with `ast`.

Checked uses, wherever they appear (module level, function and class bodies, try/except,
``if TYPE_CHECKING``):

* ``from M import name`` (absolute or relative) where M is first-party: M must exist (I002) and
  define ``name`` (I001);
* ``import M`` of a first-party module: M must exist (I002);
* ``alias.name`` where ``alias`` is bound by ``import M as alias``, ``import M`` (the chain
  ``fp4kv.quant.name``) or ``from P import submodule``: ``name`` must exist (I001).

What a module defines: names bound at its top level (def, class, assignments including tuple and
annotated targets, imports and re-exports, for/with/except targets, inside top-level
if/try/with/for/while), names declared ``global`` in its functions, its submodules, what its
first-party ``from X import *`` brings (``__all__`` if literal, else public names), and for a
module with a PEP 562 ``__getattr__``: the string keys of module-level dict literals that function
reads plus the string literals it compares against. A module that star-imports a third-party
module, or whose ``__getattr__`` names nothing we can read, accepts every name.
"""

from __future__ import annotations

import ast
import difflib
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ci.registry import Problem

MISSING_NAME = "I001"
MISSING_MODULE = "I002"
SYNTAX_ERROR = "I003"

DEFAULT_FIRST_PARTY = ("fp4kv", "ci", "tools", "bench", "tests")
_SKIP_DIRS = {"__pycache__", ".git", ".venv", "node_modules"}


@dataclass(slots=True)  # one per .py file: 10,000 in a large tree
class _Module:
    """One first-party module (a .py file or a package directory)."""

    name: str
    path: str | None             # filesystem path; None for a namespace directory
    rel: str                     # repo-relative path, for messages
    is_package: bool
    submodules: set[str] = field(default_factory=set)
    tree: ast.Module | None = None
    source: bytes = b""
    parsed: bool = False
    own_names: set[str] = field(default_factory=set)
    star_from: list[str] = field(default_factory=list)   # resolved first-party star imports
    explicit_all: list[str] | None = None
    open_names: bool = False     # accepts any attribute (third-party star or opaque __getattr__)


class _Index:
    def __init__(self, root: Path, packages: tuple[str, ...]):
        self.root = os.fspath(root)
        self.packages = packages
        self.modules: dict[str, _Module] = {}
        self.problems: list[Problem] = []
        self._names_cache: dict[str, frozenset[str] | None] = {}

    # -- discovery (plain strings and os.scandir: pathlib costs more than parsing here) --------
    def discover(self) -> None:
        for package in self.packages:
            top = os.path.join(self.root, package)
            if os.path.isdir(top):
                self._walk(top, package, package)
            elif os.path.isfile(top + ".py"):
                self.modules[package] = _Module(package, top + ".py", package + ".py", False)

    def _walk(self, directory: str, rel: str, dotted: str) -> None:
        init = os.path.join(directory, "__init__.py")
        has_init = os.path.isfile(init)
        package = _Module(dotted, init if has_init else None, f"{rel}/__init__.py" if has_init else rel, True)
        self.modules[dotted] = package
        modules, submodules = self.modules, package.submodules  # hoisted: this loop runs per file
        with os.scandir(directory) as entries:
            for entry in entries:
                name = entry.name
                if entry.is_dir(follow_symlinks=False):
                    if name not in _SKIP_DIRS and name.isidentifier():
                        submodules.add(name)
                        self._walk(entry.path, f"{rel}/{name}", f"{dotted}.{name}")
                elif name.endswith(".py") and name != "__init__.py":
                    stem = name[:-3]
                    if stem.isidentifier():
                        submodules.add(stem)
                        child = f"{dotted}.{stem}"
                        modules[child] = _Module(child, entry.path, f"{rel}/{name}", False)

    def is_first_party(self, dotted: str) -> bool:
        return dotted.split(".", 1)[0] in self.packages

    # -- parsing ---------------------------------------------------------------------------------
    def tree(self, module: _Module, source: bytes | None = None) -> ast.Module | None:
        """The module's syntax tree, parsed once (None for a namespace dir or a syntax error)."""
        if module.parsed:
            return module.tree
        module.parsed = True
        if module.path is None:
            return None
        if source is None:
            source = _read(module.path)
        module.source = source
        try:
            module.tree = ast.parse(source, filename=module.rel)
        except SyntaxError as exc:
            self.problems.append(Problem(module.rel, exc.lineno or 0, exc.offset or 0, SYNTAX_ERROR,
                                         f"cannot parse: {exc.msg}"))
            module.open_names = True  # reported once; importers are not blamed for it
            return None
        # Full-tree walks are the expensive part; skip the ones whose syntax is absent.
        _collect_definitions(module, module.tree, self, walrus=b":=" in source, globals_=b"global" in source)
        return module.tree

    def resolve_relative(self, module: _Module, level: int, target: str | None) -> str | None:
        parts = module.name.split(".")
        base = parts if module.is_package else parts[:-1]
        if level - 1 >= len(base):
            return None
        base = base[: len(base) - (level - 1)]
        return ".".join([*base, target] if target else base) or None

    # -- names -----------------------------------------------------------------------------------
    def names(self, dotted: str) -> frozenset[str] | None:
        """Every attribute name module ``dotted`` provides; None means 'anything goes'."""
        if dotted not in self._names_cache:
            self._names_cache[dotted] = self._collect(dotted, set())
        return self._names_cache[dotted]

    def _collect(self, dotted: str, visiting: set[str]) -> frozenset[str] | None:
        # Not cached per step: inside a star-import cycle a partial answer would stick.
        visiting.add(dotted)
        module = self.modules[dotted]
        self.tree(module)
        if module.open_names:
            return None
        names = set(module.own_names) | module.submodules | _MODULE_ATTRIBUTES
        for source in module.star_from:
            if source not in self.modules or source in visiting:
                continue
            exported = self.modules[source]
            self.tree(exported)
            if exported.explicit_all is not None:
                names.update(exported.explicit_all)
                continue
            provided = self._collect(source, visiting)
            if provided is None:
                return None
            names.update(n for n in provided if not n.startswith("_"))
        return frozenset(names)


# Attributes the import system gives every module (``__path__`` only packages; accepting it on a
# plain module is a miss we take rather than a false alarm).
_MODULE_ATTRIBUTES = frozenset({
    "__name__", "__file__", "__path__", "__spec__", "__loader__", "__package__", "__doc__",
    "__dict__", "__cached__", "__builtins__", "__annotations__",
})


def _bound_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _bound_names(elt)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def _collect_definitions(module: _Module, tree: ast.Module, index: _Index, *,
                         walrus: bool = True, globals_: bool = True) -> None:
    names = module.own_names
    getattr_fn: ast.FunctionDef | None = None
    dicts: dict[str, ast.Dict] = {}

    def visit_block(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(stmt.name)
                nonlocal getattr_fn
                if isinstance(stmt, ast.FunctionDef) and stmt.name == "__getattr__":
                    getattr_fn = stmt
            elif isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    names.update(_bound_names(target))
                    if isinstance(target, ast.Name) and isinstance(stmt.value, ast.Dict):
                        dicts[target.id] = stmt.value
                    if (isinstance(target, ast.Name) and target.id == "__all__"
                            and isinstance(stmt.value, (ast.List, ast.Tuple))):
                        values = [e.value for e in stmt.value.elts if isinstance(e, ast.Constant)]
                        if all(isinstance(v, str) for v in values):
                            module.explicit_all = values
            elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
                names.update(_bound_names(stmt.target))
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                        and isinstance(stmt.value, ast.Dict):
                    dicts[stmt.target.id] = stmt.value
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    names.add(alias.asname or alias.name.split(".", 1)[0])
            elif isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if alias.name == "*":
                        source = (index.resolve_relative(module, stmt.level, stmt.module)
                                  if stmt.level else stmt.module)
                        if source and index.is_first_party(source):
                            module.star_from.append(source)
                        else:
                            module.open_names = True  # third-party star: cannot know, accept
                    else:
                        names.add(alias.asname or alias.name)
            elif isinstance(stmt, (ast.For, ast.AsyncFor)):
                names.update(_bound_names(stmt.target))
                visit_block(stmt.body)
                visit_block(stmt.orelse)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                for item in stmt.items:
                    if item.optional_vars is not None:
                        names.update(_bound_names(item.optional_vars))
                visit_block(stmt.body)
            elif isinstance(stmt, (ast.If, ast.While)):
                visit_block(stmt.body)
                visit_block(stmt.orelse)
            elif isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                visit_block(stmt.body)
                for handler in stmt.handlers:
                    if handler.name:
                        names.add(handler.name)
                    visit_block(handler.body)
                visit_block(stmt.orelse)
                visit_block(stmt.finalbody)
            elif isinstance(stmt, ast.Match):
                for case in stmt.cases:
                    visit_block(case.body)
            # walrus targets at top level bind module names too
            if walrus and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                for node in _walk_no_scopes(stmt):
                    if isinstance(node, ast.NamedExpr):
                        names.update(_bound_names(node.target))

    visit_block(tree.body)
    # visit_block calls itself through its closure cell: a reference cycle that would keep
    # `index` (every module's tree and source) alive until the cyclic GC runs, and lint runs with
    # the GC paused. Emptying the cell frees all of it by reference counting.
    del visit_block
    if globals_:
        for node in _statements(tree.body):
            if isinstance(node, ast.Global):
                names.update(node.names)
    if getattr_fn is not None:
        dynamic = _getattr_names(getattr_fn, dicts)
        if dynamic:
            names.update(dynamic)
        else:
            module.open_names = True


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in ``body`` and in nested blocks (functions and classes included), without
    visiting expressions: imports and ``global`` are statements, and this is ~10x cheaper than
    ast.walk on expression-heavy code."""
    stack = list(reversed(body))
    while stack:
        stmt = stack.pop()
        yield stmt
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(stmt, name, None)
            if block:
                for child in reversed(block):
                    if isinstance(child, (ast.excepthandler, ast.match_case)):
                        stack.extend(reversed(child.body))
                    else:
                        stack.append(child)


def _walk_no_scopes(stmt: ast.AST) -> Iterator[ast.AST]:
    """Like ast.walk, without descending into nested functions, classes, lambdas, comprehensions."""
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
                                      ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
                stack.append(child)


def _getattr_names(fn: ast.FunctionDef, dicts: dict[str, ast.Dict]) -> set[str]:
    """PEP 562: keys of module-level dict literals ``fn`` reads, and strings it compares with."""
    found: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and node.id in dicts:
            found.update(k.value for k in dicts[node.id].keys
                         if isinstance(k, ast.Constant) and isinstance(k.value, str))
        elif isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                if isinstance(operand, ast.Constant) and isinstance(operand.value, str):
                    found.add(operand.value)
                elif isinstance(operand, (ast.Tuple, ast.List, ast.Set)):
                    found.update(e.value for e in operand.elts
                                 if isinstance(e, ast.Constant) and isinstance(e.value, str))
    return found


_NOQA = re.compile(r"#\s*noqa(?::\s*([A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_LOOKUP_ERRORS = {"AttributeError", "ImportError", "ModuleNotFoundError"}


def _expects_lookup_error(expr: ast.expr) -> bool:
    """``pytest.raises(AttributeError)`` / ``raises((ImportError, X), match=...)`` and the like."""
    if not (isinstance(expr, ast.Call) and expr.args):
        return False
    func = expr.func
    if not ((isinstance(func, ast.Attribute) and func.attr == "raises")
            or (isinstance(func, ast.Name) and func.id == "raises")):
        return False
    first = expr.args[0]
    candidates = first.elts if isinstance(first, ast.Tuple) else [first]
    return any(isinstance(c, ast.Name) and c.id in _LOOKUP_ERRORS for c in candidates)


class _UseChecker:
    """Walks one file's tree and reports first-party imports of names that do not exist."""

    def __init__(self, index: _Index, module: _Module, tree: ast.Module):
        self.index = index
        self.module = module
        self.tree = tree
        self.aliases: dict[str, str] = {}  # local name -> first-party module it is bound to

    def report(self, node: ast.AST, code: str, message: str) -> None:
        line = node.lineno
        if any(first <= line <= last for first, last in self.expected_failures) or self.noqa(line, code):
            return
        self.index.problems.append(Problem(self.module.rel, line, node.col_offset + 1, code, message))

    def noqa(self, line: int, code: str) -> bool:
        """flake8 convention: ``# noqa`` silences every code on the line, ``# noqa: I001,X`` those."""
        text = self.module.source.splitlines()[line - 1].decode("utf-8", "replace")
        match = _NOQA.search(text)
        return bool(match) and (match.group(1) is None or code in re.split(r"[,\s]+", match.group(1)))

    @functools.cached_property
    def expected_failures(self) -> list[tuple[int, int]]:
        """Line ranges of ``with pytest.raises(AttributeError | ImportError ...)`` bodies: a missing
        name there is what the test checks for."""
        ranges = []
        for stmt in _statements(self.tree.body):
            if isinstance(stmt, (ast.With, ast.AsyncWith)) and any(
                    _expects_lookup_error(item.context_expr) for item in stmt.items):
                ranges.append((stmt.body[0].lineno, stmt.end_lineno or stmt.body[-1].lineno))
        return ranges

    def missing_name(self, node: ast.AST, dotted: str, name: str) -> None:
        provided = self.index.names(dotted) or frozenset()
        close = difflib.get_close_matches(name, sorted(provided), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        self.report(node, MISSING_NAME, f"{dotted!r} has no name {name!r}{hint}")

    def has(self, dotted: str, name: str) -> bool:
        provided = self.index.names(dotted)
        return provided is None or name in provided

    def run(self) -> None:
        for stmt in _statements(self.tree.body):
            if isinstance(stmt, ast.Import):
                self.check_import(stmt)
            elif isinstance(stmt, ast.ImportFrom):
                self.check_import_from(stmt)
        if not self.aliases:
            return
        nodes = list(ast.walk(self.tree))  # only files that bind a first-party module name
        # An alias name that the file also assigns or takes as a parameter is ambiguous: skip it.
        for node in nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.aliases.pop(node.id, None)
            elif isinstance(node, ast.arg):
                self.aliases.pop(node.arg, None)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.aliases.pop(node.name, None)
        if self.aliases:
            self.check_attributes(nodes)

    def check_import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not self.index.is_first_party(alias.name):
                continue
            if alias.name not in self.index.modules:
                self.report(node, MISSING_MODULE, f"no first-party module {alias.name!r}")
                continue
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                top = alias.name.split(".", 1)[0]
                self.aliases[top] = top

    def check_import_from(self, node: ast.ImportFrom) -> None:
        if node.level:
            target = self.index.resolve_relative(self.module, node.level, node.module)
            if target is None:
                self.report(node, MISSING_MODULE, "relative import beyond the top-level package")
                return
        else:
            target = node.module or ""
            if not self.index.is_first_party(target):
                return
        if target not in self.index.modules:
            self.report(node, MISSING_MODULE, f"no first-party module {target!r}")
            return
        for alias in node.names:
            if alias.name == "*":
                continue
            if not self.has(target, alias.name):
                self.missing_name(node, target, alias.name)
            elif alias.name in self.index.modules[target].submodules:
                self.aliases[alias.asname or alias.name] = f"{target}.{alias.name}"

    def check_attributes(self, nodes: list[ast.AST]) -> None:
        attributes = [n for n in nodes if isinstance(n, ast.Attribute)]
        inner = {id(n.value) for n in attributes}
        for node in attributes:
            if not isinstance(node.ctx, ast.Load):
                continue
            chain: list[ast.Attribute] = []
            base: ast.AST = node
            while isinstance(base, ast.Attribute):
                chain.append(base)
                base = base.value
            # Only the outermost attribute of a chain starts a check, so each chain is seen once.
            if not isinstance(base, ast.Name) or base.id not in self.aliases or id(node) in inner:
                continue
            dotted = self.aliases[base.id]
            for attr_node in reversed(chain):
                attr = attr_node.attr
                module = self.index.modules[dotted]
                if attr in module.submodules and f"{dotted}.{attr}" in self.index.modules:
                    dotted = f"{dotted}.{attr}"
                    continue
                if not self.has(dotted, attr):
                    self.missing_name(attr_node, dotted, attr)
                break


def check_imports(root: Path, packages: tuple[str, ...] = DEFAULT_FIRST_PARTY) -> list[Problem]:
    """Check every .py file of the first-party ``packages`` (top-level dirs or modules of ``root``).

    Returns problems sorted by path, line, column; empty means every first-party import resolves.
    """
    index = _Index(root, packages)
    index.discover()
    prefilter = _prefilter(packages)
    for module in list(index.modules.values()):
        if module.path is None:
            continue
        tree = module.tree
        if not module.parsed:
            source = _read(module.path)
            # Most test files import nothing first-party: a C regex search costs far less than
            # ast.parse. Modules that others import from are parsed on demand for their names.
            if not prefilter.search(source):
                continue
            tree = index.tree(module, source)
        if tree is not None:
            _UseChecker(index, module, tree).run()
    return sorted(set(index.problems))


def _read(path: str) -> bytes:
    """The file's bytes. os.open/os.read, not open(): no buffered file object per file, which is
    about 3x faster over 10,000 small test files."""
    fd = os.open(path, _READ_FLAGS)
    try:
        chunks = [os.read(fd, _READ_SIZE)]
        while len(chunks[-1]) == _READ_SIZE:  # a large file (a regular file reads short only at its end)
            chunks.append(os.read(fd, _READ_SIZE))
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


_READ_SIZE = 1 << 16
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_BINARY", 0)


def _prefilter(packages: tuple[str, ...]) -> re.Pattern[bytes]:
    r"""Matches a file that may import first-party code: ``from <package>``, ``from .``, or an
    ``import`` line naming a package, the keyword at the start of a line or after whitespace,
    ``;`` or ``:``. The keyword comes first and the check of the character before it is a
    lookbehind, so the regex engine skips ahead to an ``f`` or ``i`` (3-4x faster than leading
    with ``(?:^|[\s;:])``, which it tries at every position)."""
    names = b"|".join(re.escape(p.encode()) for p in packages)
    return re.compile(rb"(?:from(?<![^\s;:]from)\s+(?:\.|(?:" + names + rb")\b)"
                      rb"|import(?<![^\s;:]import)\s[^\n]*\b(?:" + names + rb")\b)")


__all__ = ["DEFAULT_FIRST_PARTY", "MISSING_MODULE", "MISSING_NAME", "SYNTAX_ERROR", "check_imports"]
