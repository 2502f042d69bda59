"""Which blocks of a function store state that outlives the call: the shape of a cache fill.

``if key not in _CACHE: _CACHE[key] = build(key)``, ``if self._table is None: self._table =
make()``, ``global _X; if _X is None: _X = load()``: the block that runs on a cache miss writes
into something the next call (or the next test file) reads without running the block again. A
block "stores state" when a statement in it, outside nested functions and classes:

- assigns to an item of anything that is not a plain local, or of the object's own attributes
  (``_CACHE[k] = ...``, ``self._t[k] = ...``; not ``item.stash[k] = ...`` of a parameter), or
  calls a mutating method (`MUTATORS`) on it (``_CACHE.setdefault(k, v)``, ``self._seen.add(x)``),
- assigns to a name the function declares ``global`` or ``nonlocal``,
- or assigns to an attribute the branch's condition reads (``if self._t is None: self._t =
  ...``). Other attribute stores are left out: error and reporting branches set attributes all
  the time (``report.outcome = "failed"``), and counting them made every such branch a cache.

Contract: `FunctionNames.of(fn)` gives the function's plain locals and declared shared names;
`stores_state(block, names, guard)` answers for one block (a list of statements) whose
condition names ``guard`` (`names_in`); `shared_store(body, names)` names what a whole function
body stores into that every call shares (a module-level or class-level container, a ``global``:
a memo), leaving out the instance's own (``self._seen``), which dies with the object. Pure.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterator, Sequence

_OWN = frozenset({"self", "cls"})
MUTATORS = frozenset({"setdefault", "update", "append", "add", "extend", "insert", "appendleft", "__setitem__"})


@dataclass(frozen=True)
class FunctionNames:
    """A function's plain local names and the names it declares ``global``/``nonlocal``."""

    local: frozenset[str]
    shared: frozenset[str]

    @classmethod
    def of(cls, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> "FunctionNames":
        stored, shared = set(), set()
        args = node.args
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
            if arg is not None:
                stored.add(arg.arg)
        body = node.body if isinstance(node.body, list) else [node.body]
        for child in _own_nodes(body):
            if isinstance(child, (ast.Global, ast.Nonlocal)):
                shared.update(child.names)
            elif isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
                stored.add(child.id)
        return cls(frozenset(stored - shared), frozenset(shared))


MODULE_NAMES = FunctionNames(frozenset(), frozenset())


def _own_nodes(stmts: Sequence[ast.AST]) -> Iterator[ast.AST]:
    """Every node of ``stmts``, not entering nested functions, lambdas or classes."""
    stack = list(stmts)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _base(node: ast.expr) -> ast.expr:
    while isinstance(node, (ast.Subscript, ast.Attribute, ast.Starred)):
        node = node.value
    return node


def names_in(nodes: Sequence[ast.AST]) -> frozenset[str]:
    """The names and attribute names ``nodes`` read (not entering nested functions)."""
    found = set()
    for node in _own_nodes(nodes):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return frozenset(found)


def _outlives_call(target: ast.expr, names: FunctionNames, guard: frozenset[str]) -> bool:
    if isinstance(target, ast.Attribute):
        return target.attr in guard
    if isinstance(target, ast.Name):
        return target.id in names.shared
    if isinstance(target, ast.Subscript):
        base = _base(target)
        return not (isinstance(base, ast.Name) and base.id in names.local) or (
            base.id in _OWN and isinstance(target.value, ast.Attribute))
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_outlives_call(t, names, guard) for t in target.elts)
    if isinstance(target, ast.Starred):
        return _outlives_call(target.value, names, guard)
    return False


def stores_state(block: Sequence[ast.stmt], names: FunctionNames, guard: frozenset[str]) -> bool:
    """See the module docstring."""
    for node in _own_nodes(block):
        if isinstance(node, ast.Assign) and any(_outlives_call(t, names, guard) for t in node.targets):
            return True
        if isinstance(node, (ast.AugAssign, ast.AnnAssign)) and _outlives_call(node.target, names, guard):
            return True
        if isinstance(node, ast.NamedExpr) and node.target.id in names.shared:
            return True
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS
                and _outlives_call(ast.Subscript(value=node.func.value, slice=ast.Constant(0)), names, guard)):
            return True
    return False


def _shared_base(target: ast.expr, names: FunctionNames) -> str | None:
    """The shared name an item store writes into: ``_MEMO`` of ``_MEMO[k]``, ``cls._t`` of
    ``cls._t[k]``; None for a local's or the instance's (``self._t[k]``)."""
    if isinstance(target, ast.Subscript):
        base = _base(target)
        if isinstance(base, ast.Name) and base.id not in names.local:
            return base.id
        if isinstance(base, ast.Name) and base.id == "cls" and isinstance(target.value, ast.Attribute):
            return f"cls.{target.value.attr}"
    return None


def shared_store(body: Sequence[ast.stmt], names: FunctionNames) -> str | None:
    """See the module docstring: the first shared container or ``global`` the body writes, or None."""
    for node in _own_nodes(body):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            targets = [ast.Subscript(value=node.func.value, slice=ast.Constant(0))]
        for target in targets:
            if isinstance(target, ast.Name) and target.id in names.shared:
                return target.id
            found = _shared_base(target, names)
            if found is not None:
                return found
    return None


__all__ = ["FunctionNames", "MODULE_NAMES", "MUTATORS", "names_in", "shared_store", "stores_state"]
