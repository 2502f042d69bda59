"""Where one Python file references names: each site's function, and what may let its line run
without it running. The input of `ci.selection.reach`.

A site is one ``f(...)``, ``obj.f(...)``, ``f`` used as a value, ``obj.f`` read, ``obj.f``
bound to a plain name (``normalize = Style.normalize``: kind ``alias``, called later by the local
name), or syntax that calls a special method by itself (``str(x)`` for ``__str__``, ``a + b``
for ``__add__``: kind ``implicit``, `ci.selection.implicit_calls`). For each
the visit keeps the innermost function body it is in (`ci.selection.edit_scopes.Body`; None at
module level or in a class body), whether it is a lazy part of its line (the right side of
``and``/``or``, a branch of ``x if c else y``, a comprehension's body, a lambda's body), and the
``if``/``try`` blocks around it. Two answers are computed only when the walk asks, since most
sites never matter: whether one of those blocks stores state (`Site.memo`,
`ci.selection.state_stores`) and whether the name or the attribute's base is a local variable
of the function (`Site.on`).

Contract: `FileSites.of(path, tree)` visits a parsed module. Kernel bodies
(`ci.selection.edit_scopes.is_kernel`) are left out: compiled, never run as Python. Pure.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ci.selection.edit_scopes import Body, function_body
from ci.selection.implicit_calls import implicit_dunders
from ci.selection.kernels import decorator_name, is_kernel
from ci.selection.state_stores import MODULE_NAMES, FunctionNames, names_in, shared_store, stores_state

# Decorators that never let a call skip the body: a call through them that ran with no body of
# that name entered went to another function of the same name.
_ACCESSORS = frozenset({"setter", "getter", "deleter"})
_PLAIN_DECORATORS = frozenset({"staticmethod", "classmethod", "property", "abstractmethod", "override", "overload",
                               "wraps", "final"}) | _ACCESSORS


class _Function:
    """A function's node; its names (`FunctionNames`) computed on first use."""

    __slots__ = ("node", "_names")

    def __init__(self, node: ast.FunctionDef | ast.AsyncFunctionDef | None):
        self.node = node
        self._names: FunctionNames | None = None if node is not None else MODULE_NAMES

    @property
    def names(self) -> FunctionNames:
        if self._names is None:
            self._names = FunctionNames.of(self.node)  # type: ignore[arg-type]
        return self._names


_MODULE = _Function(None)


class _Block:
    """An ``if``/``try`` block: its statements, the names its condition reads, the block around
    it; whether it (or one around it) stores state, computed on first use."""

    __slots__ = ("stmts", "guard", "outer", "function", "_memo")

    def __init__(self, stmts: list[ast.stmt], guard: frozenset[str], outer: "_Block | None", function: _Function):
        self.stmts, self.guard, self.outer, self.function = stmts, guard, outer, function
        self._memo: bool | None = None

    @property
    def memo(self) -> bool:
        if self._memo is None:
            self._memo = ((self.outer is not None and self.outer.memo)
                          or stores_state(self.stmts, self.function.names, self.guard))
        return self._memo


class Site:
    """One reference (see the module docstring): ``path``:``line`` in ``body``; ``kind`` is
    ``call``, ``name`` (a bare name as a value), ``attribute`` (``obj.f`` read, not called),
    ``alias`` (``g = obj.f``) or ``implicit`` (syntax calling a special method);
    ``bare``: a name, not an attribute."""

    __slots__ = ("path", "line", "body", "lazy", "kind", "bare", "_base", "_function", "_block")

    def __init__(self, path: str, line: int, body: Body | None, lazy: bool, kind: str, base: str | None, bare: bool,
                 function: _Function, block: _Block | None):
        self.path, self.line, self.body, self.lazy, self.kind = path, line, body, lazy, kind
        self.bare, self._base, self._function, self._block = bare, base, function, block

    @property
    def base(self) -> str | None:
        """The bare name an attribute is read on (``Color`` of ``Color.parse``), else None."""
        return self._base

    @property
    def memo(self) -> bool:
        """Whether a block around the site stores state (`ci.selection.state_stores`)."""
        return self._block is not None and self._block.memo

    def on(self, name: str) -> str:
        """``local`` when the name (bare) or the attribute's base is a local variable or parameter
        (``x(...)`` with ``x`` assigned here, ``path.resolve()``, ``self.f()``); ``scope`` for
        another bare name; ``other`` for an attribute of anything else (``module.f()``)."""
        local = self._function.names.local
        if self.bare:
            return "local" if name in local else "scope"
        return "local" if self._base is not None and self._base in local else "other"


@dataclass(frozen=True)
class _Where:
    prefix: str = ""
    in_class: bool = False
    body: Body | None = None
    lazy: bool = False
    function: _Function = _MODULE
    block: _Block | None = None


@dataclass
class FileSites:
    """One file's function bodies, its sites by name, and the first lines of the bodies a
    decorator may skip (``skippable``: anything but `_PLAIN_DECORATORS`) or that are read as
    attributes (``properties``)."""

    path: str
    bodies: list[Body] = field(default_factory=list)
    sites: dict[str, list[Site]] = field(default_factory=dict)
    skippable: set[int] = field(default_factory=set)
    properties: set[int] = field(default_factory=set)
    _decorated: dict[int, str] = field(default_factory=dict)  # body.first -> a caching decorator's name
    _functions: dict[int, _Function] = field(default_factory=dict)

    def cached(self, first: int) -> str | None:
        """How the function whose body starts at line ``first`` keeps results across calls (and so
        across tests of one process): ``@lru_cache`` (any decorator naming a cache or memo:
        ``cache``, ``cached_property``), ``a store into _MEMO`` (its body writes a module-level or
        class-level container or a ``global``: `shared_store`); None when it keeps none."""
        if first in self._decorated:
            return f"@{self._decorated[first]}"
        function = self._functions.get(first)
        if function is None or function.node is None:
            return None
        store = shared_store(function.node.body, function.names)
        return f"a store into {store}" if store is not None else None

    @classmethod
    def of(cls, path: str, tree: ast.AST) -> "FileSites":
        found = cls(path)
        found._visit(tree, _Where())
        return found

    def _visit(self, node: ast.AST, where: _Where) -> None:
        for dunder in implicit_dunders(node):
            self._implicit(node, dunder, where)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self._function(node, where)
        elif isinstance(node, ast.ClassDef):
            for header in (*node.decorator_list, *node.bases, *node.keywords):
                self._visit(header, where)
            inside = _Where(where.prefix + node.name + ".", True, where.body, where.lazy, where.function, where.block)
            for stmt in node.body:
                self._visit(stmt, inside)
        elif isinstance(node, (ast.If, ast.Try, ast.TryStar)):
            self._branches(node, where)
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
            self._note(node.func, where, "call")
            for child in ast.iter_child_nodes(node.func):  # the callee's own parts: ``obj`` of ``obj.f()``
                self._visit(child, where)
            for child in (*node.args, *node.keywords):
                self._visit(child, where)
        elif _is_alias(node):  # ``normalize = Style.normalize``: the method taken to be called later
            assert isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
            self._note(node.value, where, "alias")
            for child in (node.value.value, *node.targets):
                self._visit(child, where)
        else:
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                self._note(node, where, "name" if isinstance(node, ast.Name) else "attribute")
            lazy = _lazy_parts(node) if not where.lazy else ()
            deferred = _Where(where.prefix, where.in_class, where.body, True, where.function, where.block) if lazy else where
            for child in ast.iter_child_nodes(node):
                self._visit(child, deferred if lazy and any(child is part for part in lazy) else where)

    def _note(self, node: ast.Name | ast.Attribute, where: _Where, kind: str) -> None:
        if isinstance(node, ast.Name):
            name, line, base, bare = node.id, node.lineno, None, True
        else:
            base = node.value.id if isinstance(node.value, ast.Name) else None
            name, line, bare = node.attr, node.end_lineno or node.lineno, False
        self.sites.setdefault(name, []).append(
            Site(self.path, line, where.body, where.lazy, kind, base, bare, where.function, where.block))

    def _implicit(self, node: ast.AST, dunder: str, where: _Where) -> None:
        anchor = node.context_expr if isinstance(node, ast.withitem) else node.iter if isinstance(
            node, ast.comprehension) else node
        line = getattr(anchor, "lineno", None)
        if line is not None:
            self.sites.setdefault(dunder, []).append(
                Site(self.path, line, where.body, where.lazy, "implicit", None, False, where.function, where.block))

    def _branches(self, node: ast.If | ast.Try | ast.TryStar, where: _Where) -> None:
        if isinstance(node, ast.If):
            self._visit(node.test, where)
            blocks, guard = [node.body, node.orelse], names_in([node.test])
        else:
            blocks, guard = [node.body, *(h.body for h in node.handlers), node.orelse, node.finalbody], names_in(node.body)
            for handler in node.handlers:
                if handler.type is not None:
                    self._visit(handler.type, where)
        for stmts in blocks:
            if not stmts:
                continue
            inside = _Where(where.prefix, where.in_class, where.body, where.lazy, where.function,
                            _Block(stmts, guard, where.block, where.function))
            for stmt in stmts:
                self._visit(stmt, inside)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, where: _Where) -> None:
        if is_kernel(node):
            return  # compiled, never run as Python: module level, like its references
        for header in (*node.decorator_list, node.args, *([node.returns] if node.returns else [])):
            self._visit(header, where)
        body = function_body(node, where.prefix, where.in_class)
        if body is not None:
            self.bodies.append(body)
            decorators = {decorator_name(d) for d in node.decorator_list}
            if decorators - _PLAIN_DECORATORS:
                self.skippable.add(body.first)
            if any("property" in d or d in _ACCESSORS for d in decorators):
                self.properties.add(body.first)
            caching = sorted(d for d in decorators if "cache" in d.lower() or "memo" in d.lower())
            if caching:
                self._decorated[body.first] = caching[0]
        function = _Function(node)
        if body is not None:
            self._functions[body.first] = function
        inside = _Where(where.prefix + node.name + ".", False, body if body is not None else where.body,
                        function=function)
        for stmt in node.body:
            self._visit(stmt, inside)


def _is_alias(node: ast.AST) -> bool:
    """``name = obj.attr`` (plain names only): a bound method kept under a local name and called by it."""
    return (isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute)
            and all(isinstance(target, ast.Name) for target in node.targets))


def _lazy_parts(node: ast.AST) -> tuple[ast.AST, ...]:
    """The children of ``node`` that may not be evaluated when its line runs."""
    if isinstance(node, ast.BoolOp):
        return tuple(node.values[1:])
    if isinstance(node, ast.IfExp):
        return node.body, node.orelse
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
        return node.elt, *node.generators[1:]
    if isinstance(node, ast.DictComp):
        return node.key, node.value, *node.generators[1:]
    if isinstance(node, ast.comprehension):
        return tuple(node.ifs)
    if isinstance(node, ast.Lambda):
        return (node.body,)
    return ()


__all__ = ["FileSites", "Site"]
