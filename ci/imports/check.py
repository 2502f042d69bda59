"""Static import integrity: every first-party name a file imports must exist.

Catches the stale function-local import that pyflakes and ruff miss: ``def f(): from fp4kv.quant
import KVFP4QuantizeUtil`` after the class was renamed. Nothing is imported; each file is parsed
once with `ast` (`ci.imports.index` finds and parses, `ci.imports.names` says what a module defines).

Checked uses, wherever they appear (module level, function and class bodies, nested functions,
``try`` bodies, ``except`` handlers, ``else``/``finally`` blocks, ``if TYPE_CHECKING``):

* ``from M import name`` (absolute or relative) where M is first-party: M must exist (I002) and
  define ``name`` (I001);
* ``import M`` of a first-party module: M must exist (I002);
* ``alias.name`` where ``alias`` is bound by ``import M as alias``, ``import M`` (the chain
  ``fp4kv.quant.name``) or ``from P import submodule``: ``name`` must exist (I001).

"First-party" is what the project configuration says (`ci.project.ProjectConfig`): the packages
under its source roots, plus, for a file under a test root, the helper modules pytest lets it
import from its own folder (``from kvpool_testutil import make_pool``). Generated modules are
never missing. A use inside ``with pytest.raises(AttributeError | ImportError ...)`` is what
the test checks for, and ``# noqa: I001`` silences a line (a bare ``# noqa`` does not). A module imported where
the code goes on without it (``try`` ... ``except ImportError`` / ``Exception`` / bare
``except:`` that does not raise, ``with suppress(ImportError)``) may be absent (`guarded`).
"""

from __future__ import annotations

import ast
import difflib
import functools
import os
import re
from dataclasses import dataclass
from typing import Iterator

from ci.imports.index import SYNTAX_ERROR, Module, ModuleIndex
from ci.imports.renames import find_renames
from ci.imports.names import child_statements, ensure_definitions, provided_names, statements
from ci.imports.scan import prefilter, read_bytes
from ci.project import ProjectConfig
from ci.registry import Problem, gc_paused

MISSING_NAME = "I001"
MISSING_MODULE = "I002"

# This repository's first-party packages, for callers that still pass package names; the
# configured layout (`ProjectConfig`, the registry's ``project:`` section) replaces it.
DEFAULT_FIRST_PARTY = ("fp4kv", "ci", "tools", "bench", "tests")

# Kept under their old names: tests and benchmarks reach them here.
_read = read_bytes
_prefilter = prefilter

_NOQA = re.compile(r"#\s*noqa(?::\s*([A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.IGNORECASE)
_IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}
# What a fallback catches when it also catches a failed import: ImportError's own family and the
# classes above it (``except Exception`` / ``BaseException``, ``suppress(Exception)``).
_CATCHES_IMPORT_ERROR = _IMPORT_ERRORS | {"Exception", "BaseException"}
_LOOKUP_ERRORS = _IMPORT_ERRORS | {"AttributeError"}
_RAISES_CONTEXTS = {"raises", "assertRaises", "assertRaisesRegex"}
_FUNCTION_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
_AMBIGUOUS = None  # an alias bound to different modules in one scope: its uses are not checked


def _enter(node: ast.AST, chain: tuple[int, ...], classes: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The scope chain and enclosing class ids inside ``node``: a function (or lambda) starts a
    scope that does not see the class bodies around it; a class body is a scope of its own."""
    if isinstance(node, _FUNCTION_SCOPES):
        return tuple(c for c in chain if c not in classes) + (id(node),), classes
    if isinstance(node, ast.ClassDef):
        return chain + (id(node),), classes + (id(node),)
    return chain, classes


def _scoped_statements(body: list[ast.stmt]) -> Iterator[tuple[ast.stmt, tuple[int, ...]]]:
    """`statements`, each with its scope chain as Python resolves names there: the ids of the
    enclosing function and class bodies, outermost first (the module is 0). A class body is in
    the chain of its own statements only: methods do not see names bound in the class body."""
    stack: list[tuple[ast.stmt, tuple[int, ...], tuple[int, ...]]] = [(s, (0,), ()) for s in reversed(body)]
    while stack:
        stmt, chain, classes = stack.pop()
        yield stmt, chain
        inner, inner_classes = _enter(stmt, chain, classes)
        for child_stmt in reversed(list(child_statements(stmt))):
            stack.append((child_stmt, inner, inner_classes))


def _scoped_nodes(tree: ast.Module) -> Iterator[tuple[ast.AST, tuple[int, ...]]]:
    """Every node of ``tree`` with its scope chain (as in `_scoped_statements`), iteratively."""
    stack: list[tuple[ast.AST, tuple[int, ...], tuple[int, ...]]] = [(tree, (0,), ())]
    while stack:
        node, chain, classes = stack.pop()
        yield node, chain
        inner, inner_classes = _enter(node, chain, classes)
        for child in ast.iter_child_nodes(node):
            stack.append((child, inner, inner_classes))


def _names_one_of(expr: ast.expr | None, names: set[str]) -> bool:
    """``expr`` is a name in ``names``, or a tuple holding one (``(ImportError, X)``)."""
    candidates = expr.elts if isinstance(expr, ast.Tuple) else [expr]
    return any(isinstance(c, ast.Name) and c.id in names for c in candidates)


def _call(expr: ast.expr) -> tuple[str, list[ast.expr]]:
    """The name a call calls and its positional arguments (``("suppress", [ImportError])`` for
    ``contextlib.suppress(ImportError)``); ``("", [])`` for anything but a call."""
    if not isinstance(expr, ast.Call):
        return "", []
    func = expr.func
    return (func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""), expr.args


def _expects_lookup_error(expr: ast.expr) -> bool:
    """``pytest.raises(AttributeError)`` / ``raises((ImportError, X), match=...)`` and unittest's
    ``self.assertRaises(ImportError)`` / ``assertRaisesRegex(AttributeError, ...)`` as a context."""
    name, args = _call(expr)
    return name in _RAISES_CONTEXTS and bool(args) and _names_one_of(args[0], _LOOKUP_ERRORS)


def _suppresses_import_error(expr: ast.expr) -> bool:
    """``contextlib.suppress(ImportError)`` / ``suppress(X, Exception)`` as a context: its body
    may fail to import and goes on, as a ``try`` whose handler catches ImportError does."""
    name, args = _call(expr)
    return name == "suppress" and any(_names_one_of(arg, _CATCHES_IMPORT_ERROR) for arg in args)


def _falls_back(handler: ast.ExceptHandler) -> bool:
    """A handler that catches a failed import (``except ImportError``, ``except Exception``, a bare
    ``except:``) and does not raise: the ``try`` body's imports are optional."""
    return (handler.type is None or _names_one_of(handler.type, _CATCHES_IMPORT_ERROR)) and not _raises(handler.body)


@dataclass(frozen=True)
class _Missing:
    """An I001 found, its message not yet written: ``module`` lacks ``name``, used at path:line:col."""

    path: str
    line: int
    col: int
    module: Module
    name: str
    written: str = ""  # the module as the import names it, when not ``module.name`` (pytest's)


def finish_missing(index: ModuleIndex, pending: list[_Missing], root: str | os.PathLike[str] | None,
                   *, deepen: int = 0) -> list[Problem]:
    """The I001 problems of ``pending``. With ``root`` (a git checkout) each says what history
    knows (`ci.imports.renames`: ``renamed to New in abc1234 (#123)``, or that a shallow clone's
    history cannot tell; ``deepen`` as there); otherwise, or where history has nothing, the
    nearest name by spelling."""
    wanted = {(m.module.rel, m.name) for m in pending if m.module.path is not None}
    history = find_renames(root, wanted, deepen=deepen) if root is not None else {}

    def label(rel: str) -> str:
        module = index.by_rel.get(rel)
        return module.name if module is not None else rel

    problems = []
    for missing in pending:
        found = history.get((missing.module.rel, missing.name))
        if found is not None:
            hint = f" ({found.describe(label)})"
        else:
            provided = provided_names(index, missing.module) or frozenset()
            close = difflib.get_close_matches(missing.name, sorted(provided), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
        problems.append(Problem(missing.path, missing.line, missing.col, MISSING_NAME,
                                f"{(missing.written or missing.module.name)!r} has no name {missing.name!r}{hint}"))
    return problems


def _raises(body: list[ast.stmt]) -> bool:
    """A ``raise`` anywhere in a handler's body (``except ImportError: raise`` or ``raise
    RuntimeError("install X")``): the import is required after all."""
    return any(isinstance(stmt, ast.Raise) for stmt in statements(body))


class _UseChecker:
    """Walks one file's tree and reports first-party imports of names that do not exist."""

    def __init__(self, index: ModuleIndex, module: Module, tree: ast.Module, pending: list[_Missing]):
        self.index = index
        self.module = module
        self.tree = tree
        self.pending = pending
        # local name -> {scope id: the first-party module it is bound to there, or _AMBIGUOUS}
        self.aliases: dict[str, dict[int, Module | None]] = {}

    def suppressed(self, line: int, code: str) -> bool:
        """Not reported: inside an expected-failure block, ``# noqa``, or a missing module inside
        a ``try`` that falls back on ImportError (`guarded`: the optional-module idiom; a name
        missing from a module that exists is still reported there, the fallback hides it)."""
        return (any(first <= line <= last for first, last in self.expected_failures) or self.noqa(line, code)
                or (code == MISSING_MODULE and any(first <= line <= last for first, last in self.guarded)))

    def report(self, node: ast.AST, code: str, message: str) -> None:
        if not self.suppressed(node.lineno, code):
            self.index.problems.append(Problem(self.module.rel, node.lineno, node.col_offset + 1, code, message))

    def noqa(self, line: int, code: str) -> bool:
        """``# noqa: I001,X`` (a code list naming ``code``) silences ``code`` on the line. A bare
        ``# noqa`` does not: it is written for flake8 or ruff, and silencing a missing first-party
        name with it would hide a broken import nobody meant to accept."""
        text = self.module.source.splitlines()[line - 1].decode("utf-8", "replace")
        return any(match.group(1) is not None and code in re.split(r"[,\s]+", match.group(1).upper())
                   for match in _NOQA.finditer(text))

    @functools.cached_property
    def expected_failures(self) -> list[tuple[int, int]]:
        """Line ranges of ``with pytest.raises(AttributeError | ImportError ...)`` bodies: a missing
        name there is what the test checks for."""
        ranges = []
        for stmt in statements(self.tree.body):
            if isinstance(stmt, (ast.With, ast.AsyncWith)) and any(
                    _expects_lookup_error(item.context_expr) for item in stmt.items):
                ranges.append((stmt.body[0].lineno, stmt.end_lineno or stmt.body[-1].lineno))
        return ranges

    def missing_name(self, node: ast.AST, module: Module, name: str, written: str = "") -> None:
        """Recorded in ``pending``: its message waits for what history says (`finish_missing`)."""
        if not self.suppressed(node.lineno, MISSING_NAME):
            self.pending.append(_Missing(self.module.rel, node.lineno, node.col_offset + 1, module, name,
                                         "" if written == module.name else written))

    def has(self, module: Module, name: str) -> bool:
        provided = provided_names(self.index, module)
        return (provided is None or name in provided
                or (module.space is None and self.index.generated(f"{module.name}.{name}") is not None))

    def submodule(self, package: Module, name: str) -> Module | None:
        """The submodule ``package.name`` is at run time; None when there is none, or when the
        package's own code binds ``name`` to something else (``from .registry import registry``:
        the attribute is then that object, not the submodule)."""
        if name not in package.submodules:
            return None
        ensure_definitions(self.index, package)
        if name in package.own_names and name not in package.submodule_bindings:
            return None
        return self.index.namespace(package).get(f"{package.name}.{name}")

    def bind(self, name: str, scope: int, module: Module) -> None:
        scopes = self.aliases.setdefault(name, {})
        scopes[scope] = module if scopes.get(scope, module) is module else _AMBIGUOUS

    def alias_at(self, name: str, chain: tuple[int, ...]) -> Module | None:
        """The module ``name`` is bound to where ``chain`` is the scope chain: the innermost scope
        that binds it decides; None when none does or that binding is ambiguous."""
        scopes = self.aliases.get(name)
        if scopes:
            for scope in reversed(chain):
                if scope in scopes:
                    return scopes[scope]
        return None

    @functools.cached_property
    def guarded(self) -> list[tuple[int, int]]:
        """Line ranges where a module imported may be absent (an optional module, a private fork's,
        a build's), see `suppressed`: ``try`` bodies with a handler that catches ImportError
        (``except ImportError`` / ``ModuleNotFoundError`` / ``Exception`` / ``BaseException``, a
        bare ``except:``) and falls back rather than raising, and ``with suppress(ImportError)``
        (or ``Exception``) bodies."""
        ranges = []
        for stmt in statements(self.tree.body):
            if isinstance(stmt, (ast.Try, getattr(ast, "TryStar", ast.Try))) and stmt.body and any(
                    _falls_back(handler) for handler in stmt.handlers):
                ranges.append((stmt.body[0].lineno, stmt.body[-1].end_lineno or stmt.body[-1].lineno))
            elif isinstance(stmt, (ast.With, ast.AsyncWith)) and any(
                    _suppresses_import_error(item.context_expr) for item in stmt.items):
                ranges.append((stmt.body[0].lineno, stmt.end_lineno or stmt.body[-1].lineno))
        return ranges

    def run(self) -> None:
        for stmt, chain in _scoped_statements(self.tree.body):
            if isinstance(stmt, ast.Import):
                self.check_import(stmt, chain[-1])
            elif isinstance(stmt, ast.ImportFrom):
                self.check_import_from(stmt, chain[-1])
        if not self.aliases:
            return
        nodes = list(_scoped_nodes(self.tree))  # only files that bind a first-party module name
        # An alias name that the file also assigns or takes as a parameter is ambiguous: skip it.
        for node, _ in nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                self.aliases.pop(node.id, None)
            elif isinstance(node, ast.arg):
                self.aliases.pop(node.arg, None)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.aliases.pop(node.name, None)
        if self.aliases:
            self.check_attributes(nodes)

    def check_import(self, node: ast.Import, scope: int) -> None:
        for alias in node.names:
            target, ours = self.index.lookup(self.module, alias.name)
            if not ours:
                continue
            if target is None:
                self.report(node, MISSING_MODULE, f"no first-party module {alias.name!r}")
                continue
            if alias.asname:
                self.bind(alias.asname, scope, target)
            else:
                top = alias.name.split(".", 1)[0]
                bound, _ = self.index.lookup(self.module, top)
                if bound is not None:
                    self.bind(top, scope, bound)

    def check_import_from(self, node: ast.ImportFrom, scope: int) -> None:
        if node.level:
            dotted = self.index.relative(self.module, node.level, node.module)
            if dotted is None:
                self.report(node, MISSING_MODULE, "relative import beyond the top-level package")
                return
            target = self.index.resolve(self.module, dotted)
        else:
            dotted = node.module or ""
            target, ours = self.index.lookup(self.module, dotted)
            if not ours:
                return
        if target is None:
            self.report(node, MISSING_MODULE, f"no first-party module {dotted!r}")
            return
        for alias in node.names:
            if alias.name == "*":
                continue
            if not self.has(target, alias.name):
                self.missing_name(node, target, alias.name, dotted)
                continue
            submodule = self.submodule(target, alias.name)
            if submodule is not None:
                self.bind(alias.asname or alias.name, scope, submodule)

    def check_attributes(self, nodes: list[tuple[ast.AST, tuple[int, ...]]]) -> None:
        attributes = [(n, chain) for n, chain in nodes if isinstance(n, ast.Attribute)]
        inner = {id(n.value) for n, _ in attributes}
        for node, chain_of_scopes in attributes:
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
            module = self.alias_at(base.id, chain_of_scopes)
            if module is None:
                continue
            for attr_node in reversed(chain):
                submodule = self.submodule(module, attr_node.attr)
                if submodule is not None:
                    module = submodule
                    continue
                if not self.has(module, attr_node.attr):
                    self.missing_name(attr_node, module, attr_node.attr)
                break


def project_for(packages: tuple[str, ...] | None, project: ProjectConfig | None) -> ProjectConfig:
    """The layout to index: ``project`` as given, else the legacy package list with this
    repository's other defaults, else `ProjectConfig`'s defaults (first-party found on disk)."""
    if project is not None:
        if packages is not None:
            raise TypeError("give packages or project, not both")
        return project
    return ProjectConfig() if packages is None else ProjectConfig(first_party=tuple(packages))


def check_imports(root: str | os.PathLike[str], packages: tuple[str, ...] | None = None, *,
                  project: ProjectConfig | None = None, index: ModuleIndex | None = None,
                  history: bool = False, deepen: int = 0) -> list[Problem]:
    """Check every .py file of the repository at ``root`` laid out as ``project`` says (or as
    first-party ``packages`` of ``root``); ``index`` reuses an index built for other work;
    ``history``: name what became of a missing name from git history (`finish_missing`; ``deepen``
    as there).

    Returns problems sorted by path, line, column; empty means every first-party import resolves.
    """
    # A tree of syntax trees is a million small containers and no cycles: the cyclic GC's
    # collections would cost 2-3x the parsing itself.
    with gc_paused():
        if index is None:
            index = ModuleIndex(root, project_for(packages, project))
        pending: list[_Missing] = []
        for module in index.files():
            if module.parsed:
                tree = module.tree
            else:
                # Most test files import nothing first-party: a C regex search costs far less than
                # ast.parse. Modules that others import from are parsed on demand for their names.
                source = index.scan(module)
                if source is None:
                    continue
                tree = index.tree(module, source)
            if tree is not None:
                _UseChecker(index, module, tree, pending).run()
        index.problems += finish_missing(index, pending, root if history else None, deepen=deepen)
        problems = sorted(set(index.problems))
        # Freed here by reference counting (unless the caller keeps it), rather than traversed by
        # the collection that re-enabling the GC triggers.
        index = module = tree = None  # noqa: F841
    return problems


__all__ = ["DEFAULT_FIRST_PARTY", "MISSING_MODULE", "MISSING_NAME", "SYNTAX_ERROR", "check_imports",
           "finish_missing", "project_for"]
