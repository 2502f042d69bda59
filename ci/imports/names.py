"""What names a first-party module provides, read from its syntax tree (nothing is imported).

A module provides: names bound at its top level (def, class, assignments including tuple and
annotated targets, imports and re-exports, for/with/except targets, inside top-level
if/try/with/for/while/match), names declared ``global`` in its functions, its submodules, what
its first-party ``from X import *`` brings (``__all__`` if literal, else public names), and for a
module with a PEP 562 ``__getattr__``: the string keys of module-level dict literals that
function reads plus the string literals it compares against. A module that star-imports a
third-party module, or whose ``__getattr__`` names nothing we can read, accepts every name
(`provided_names` returns None).

The functions here take the module index as an argument (`ci.imports.index.ModuleIndex`, which
resolves relative and star imports) and never import it, so the index can call them.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from ci.imports.index import Module, ModuleIndex

# Attributes the import system gives every module (``__path__`` only packages; accepting it on a
# plain module is a miss we take rather than a false alarm).
MODULE_ATTRIBUTES = frozenset({
    "__name__", "__file__", "__path__", "__spec__", "__loader__", "__package__", "__doc__",
    "__dict__", "__cached__", "__builtins__", "__annotations__",
})

_BLOCKS = ("body", "orelse", "finalbody", "handlers", "cases")


def child_statements(stmt: ast.stmt) -> Iterator[ast.stmt]:
    """The statements directly inside ``stmt``'s blocks (body, else, finally, handlers, cases)."""
    for name in _BLOCKS:
        for child in getattr(stmt, name, None) or ():
            if isinstance(child, (ast.excepthandler, ast.match_case)):
                yield from child.body
            else:
                yield child


def statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in ``body`` and in nested blocks (function and class bodies, ``except``
    handlers, ``else``/``finally`` blocks, ``match`` cases), without visiting expressions: imports
    and ``global`` are statements, and this is ~10x cheaper than ast.walk on expression-heavy code."""
    stack = list(reversed(body))
    while stack:
        stmt = stack.pop()
        yield stmt
        stack.extend(reversed(list(child_statements(stmt))))


def provided_names(index: ModuleIndex, module: Module) -> frozenset[str] | None:
    """Every attribute name ``module`` provides; None means 'anything goes'. Cached on the module."""
    if not module.names_known:
        module.names = _collect(index, module, set())
        module.names_known = True
    return module.names


def _collect(index: ModuleIndex, module: Module, visiting: set[int]) -> frozenset[str] | None:
    # Not cached per step: inside a star-import cycle a partial answer would stick.
    visiting.add(id(module))
    ensure_definitions(index, module)
    if module.open_names:
        return None
    names = set(module.own_names) | module.submodules | MODULE_ATTRIBUTES
    for rel in module.star_from:
        source = index.by_rel[rel]
        if id(source) in visiting:
            continue
        ensure_definitions(index, source)
        if source.explicit_all is not None:
            names.update(source.explicit_all)
            continue
        provided = _collect(index, source, visiting)
        if provided is None:
            return None
        names.update(n for n in provided if not n.startswith("_"))
    return frozenset(names)


def ensure_definitions(index: ModuleIndex, module: Module) -> None:
    """Fill ``module``'s own names, star sources, ``__all__`` and openness from its tree, once."""
    if module.defined:
        return
    module.defined = True
    tree = index.tree(module)
    if tree is None:
        return
    source = module.source
    _collect_definitions(module, tree, index, walrus=b":=" in source, globals_=b"global" in source)


def _bound_names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for elt in target.elts for n in _bound_names(elt)]
    if isinstance(target, ast.Starred):
        return _bound_names(target.value)
    return []


def _collect_definitions(module: Module, tree: ast.Module, index: ModuleIndex, *,
                         walrus: bool = True, globals_: bool = True) -> None:
    names = module.own_names
    getattr_fn: ast.FunctionDef | None = None
    dicts: dict[str, ast.Dict] = {}

    def visit_block(body: list[ast.stmt]) -> None:
        nonlocal getattr_fn
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(stmt.name)
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
                        source, ours = index.import_target(module, stmt.level, stmt.module)
                        if source is not None:
                            module.star_from.append(source.rel)
                        elif not ours:
                            module.open_names = True  # third-party star: cannot know, accept
                    else:
                        bound = alias.asname or alias.name
                        names.add(bound)
                        if bound == alias.name and alias.name in module.submodules:
                            source, _ = index.import_target(module, stmt.level, stmt.module)
                            if source is module:  # `from . import sub` in pkg/__init__: the submodule itself
                                module.submodule_bindings.add(bound)
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
        for node in statements(tree.body):
            if isinstance(node, ast.Global):
                names.update(node.names)
    if getattr_fn is not None:
        dynamic = _getattr_names(getattr_fn, dicts)
        if dynamic:
            names.update(dynamic)
        else:
            module.open_names = True


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


__all__ = ["MODULE_ATTRIBUTES", "child_statements", "ensure_definitions", "provided_names", "statements"]
