"""What a computed import's name can be, when it is a helper's parameter and every caller says.

``def compare_version(package, op, target): importlib.import_module(package)`` imports by a
computed name, but if every call in the indexed tree passes a string literal for ``package``
(``compare_version("triton", ...)``), those literals are all it can load. Lint's L009 uses this so
that a helper fed only third-party names (Liger's ``liger_kernel/ops/utils.py``) is not told to
describe first-party modules it never loads.

Contract: `literal_arguments(index, importers)` maps each ``(rel, line)`` of ``importers`` whose
call's first argument is a parameter of the innermost function around it (a plain function, not
a method; the parameter never rebound in its body) to the sorted literals the tree's calls pass
for it (positionally, by keyword, or its string default when a call omits it). A site is left out
when any call passes something else, or when nothing in the tree calls the function by name.
Calls are found by name (``f(...)`` or ``x.f(...)``), so another function of the same name counts
too: that can only keep a note, never drop one wrongly, unless it also passes literals only.
"""

from __future__ import annotations

import ast
from typing import Iterable

from ci.imports.graph import called_name
from ci.imports.index import ModuleIndex
from ci.imports.scan import read_bytes

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def literal_arguments(index: ModuleIndex, importers: Iterable[tuple[str, int]]) -> dict[tuple[str, int], tuple[str, ...]]:
    """See the module docstring."""
    wanted: dict[tuple[str, int], tuple[str, int | None, str, ast.expr | None]] = {}
    for rel, line in importers:
        module = index.by_rel.get(rel)
        tree = index.tree(module) if module is not None else None
        parameter = _parameter_at(tree, line) if tree is not None else None
        if parameter is not None:
            wanted[(rel, line)] = parameter
    if not wanted:
        return {}
    names = {function for function, _, _, _ in wanted.values()}
    values: dict[tuple[str, int | None, str], set[str] | None] = {(f, i, p): set() for f, i, p, _ in wanted.values()}
    for module in index.files():
        try:
            source = module.source or read_bytes(module.path or "")
        except OSError:
            continue
        if not any(f"{name}(".encode() in source for name in names):
            continue
        tree = index.tree(module, source)
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call) and called_name(node.func) in names:
                for function, position, parameter, default in wanted.values():
                    key = (function, position, parameter)
                    if function == called_name(node.func) and values[key] is not None:
                        value = _passed(node, position, parameter, default)
                        values[key] = None if value is None else values[key] | {value}  # type: ignore[operator]
    out = {}
    for site, (function, position, parameter, _) in wanted.items():
        found = values[(function, position, parameter)]
        if found:
            out[site] = tuple(sorted(found))
    return out


def _parameter_at(tree: ast.Module, line: int) -> tuple[str, int | None, str, ast.expr | None] | None:
    """(function, positional index or None for keyword-only, parameter, its default) for the
    import call at ``line`` whose first argument names a parameter of its innermost function."""
    owner: dict[ast.AST, ast.AST] = {}
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            owner[child] = parent
    for call in ast.walk(tree):
        if not (isinstance(call, ast.Call) and call.lineno == line and call.args
                and isinstance(call.args[0], ast.Name) and called_name(call.func) in ("import_module", "__import__")):
            continue
        function = owner.get(call)
        while function is not None and not isinstance(function, _FUNCS):
            function = owner.get(function)
        if function is None or isinstance(owner.get(function), ast.ClassDef):
            return None
        name = call.args[0].id
        positional = [*function.args.posonlyargs, *function.args.args]
        rebound = any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, (ast.Store, ast.Del))
                      for n in ast.walk(function))
        if rebound:
            return None
        defaults = dict(zip([a.arg for a in positional][len(positional) - len(function.args.defaults):],
                            function.args.defaults))
        defaults.update({a.arg: d for a, d in zip(function.args.kwonlyargs, function.args.kw_defaults) if d})
        for position, arg in enumerate(positional):
            if arg.arg == name:
                return function.name, position, name, defaults.get(name)
        if any(arg.arg == name for arg in function.args.kwonlyargs):
            return function.name, None, name, defaults.get(name)
        return None
    return None


def _passed(call: ast.Call, position: int | None, parameter: str, default: ast.expr | None) -> str | None:
    """The string literal ``call`` passes for the parameter; None when it passes anything else."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    if position is not None and position < len(call.args):
        value: ast.expr | None = call.args[position]
    else:
        value = next((k.value for k in call.keywords if k.arg == parameter), default)
    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None
