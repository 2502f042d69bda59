"""Whether a module-level change only redefines names: a constant, a kernel's body.

A module-level change may affect every test that imports the module: the module's import-time
code is every importer's. Two kinds of change are narrower. An assignment of a pure value
(``CHUNK_BLOCKS = 16384`` -> ``16385``) runs at import exactly as before except for the value it
binds, so only code that reads the name sees the difference. A kernel's body (a function
decorated as a kernel, `ci.selection.edit_scopes.is_kernel`) runs on a device or through a
compiler, never at import, so only code that launches or calls the kernel sees it. Either way
the change is the names it (re)defines; which tests read them is `ci.selection.definition_uses`'s
question.

The old and new module are compared statement by statement at the top level (``ast.dump``,
which leaves line numbers out). Function bodies are left out of the comparison (a changed body
is a body scope of its own, `ci.selection.edit_scopes.scopes_of`), except a body on its ``def``
line (``def f(): return 1`` has no body scope) and kernels': a kernel
whose body differs and whose decorators, arguments and name do not is a redefined name. Every
top-level statement that differs otherwise must be such an assignment, on both sides:

- its targets are names (``A = B = 1``, ``A, B = 1, 2``, ``A: int = 1``);
- its value is built of constants, names, tuples, lists, sets and dicts of them, and the
  operators ``+ - * | & ^``, unary ``- + ~ not``: nothing that calls code, reads an attribute or
  an item, or can raise for the numbers it had (``/``, ``%``, ``<<``, ``**`` can);
- the new side reads no name the old side did not and binds every name the old side bound (a
  removed name breaks its readers at import), with the same annotations (they are the module's
  ``__annotations__``).

A plain function's default values (``def f(x=3)``: no decorator but ``staticmethod`` or
``classmethod``, in no decorated class or class with a metaclass, and a body of its own), all pure
values on both sides, reading no new name, are left out of the comparison when the caller asks
(``functions``): a new default is read only by a call, which runs the body, so such a function is
a changed body, not a changed name (`ci.selection.edit_scopes`).

A docstring of a function or class is part of what is compared: tools read it without running
anything. Contract: `changed_definitions(old, new)` returns the names, possibly none (nothing that
runs at import changed), or None when the change is not of that kind or a side does not parse.
Pure, never raises for bad Python.
"""

from __future__ import annotations

import ast
from difflib import SequenceMatcher

from ci.selection.kernels import is_kernel

_SAFE_BINARY = (ast.Add, ast.Sub, ast.Mult, ast.BitOr, ast.BitAnd, ast.BitXor)
_SAFE_UNARY = (ast.USub, ast.UAdd, ast.Invert, ast.Not)


def pure_value(node: ast.expr) -> bool:
    """Whether evaluating ``node`` only combines constants and names (see the module docstring)."""
    if isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(pure_value(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and pure_value(k) for k in node.keys) and all(pure_value(v) for v in node.values)
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, _SAFE_BINARY) and pure_value(node.left) and pure_value(node.right)
    if isinstance(node, ast.UnaryOp):
        return isinstance(node.op, _SAFE_UNARY) and pure_value(node.operand)
    return False


def _target_names(target: ast.expr) -> list[str] | None:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        names: list[str] = []
        for elt in target.elts:
            inner = _target_names(elt)
            if inner is None:
                return None
            names += inner
        return names
    return None


def pure_assignment(node: ast.stmt) -> tuple[frozenset[str], frozenset[str], tuple[str, ...]] | None:
    """(names bound, names read, annotations as dumped) of an assignment of a pure value to
    names, or None."""
    annotations: tuple[str, ...] = ()
    if isinstance(node, ast.Assign):
        targets, value = node.targets, node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None and node.simple:
        targets, value = [node.target], node.value
        annotations = (ast.dump(node.target) + ast.dump(node.annotation),)
    else:
        return None
    bound: list[str] = []
    for target in targets:
        names = _target_names(target)
        if names is None:
            return None
        bound += names
    if not pure_value(value):
        return None
    read = frozenset(n.id for n in ast.walk(value) if isinstance(n, ast.Name))
    return frozenset(bound), read, annotations


Defaults = dict[str, list[tuple[str, frozenset[str]]]]  # dotted function name -> (dump, names read) per def
_PLAIN_DECORATORS = frozenset({"staticmethod", "classmethod"})


def _cut_defaults(stmt: ast.FunctionDef | ast.AsyncFunctionDef, name: str, defaults: Defaults) -> None:
    """Move a plain function's pure default values out of ``stmt`` into ``defaults`` (see
    `changed_definitions`); anything else stays in the comparison."""
    args = stmt.args
    values = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
    if not values or not all(pure_value(v) for v in values):
        return
    if any(not (isinstance(d, ast.Name) and d.id in _PLAIN_DECORATORS) for d in stmt.decorator_list):
        return  # a decorator runs at import and may read the defaults
    read = frozenset(n.id for v in values for n in ast.walk(v) if isinstance(n, ast.Name))
    defaults.setdefault(name, []).append((ast.dump(ast.Tuple(elts=values, ctx=ast.Load())), read))
    args.defaults = [ast.Constant(None) for _ in args.defaults]
    args.kw_defaults = [None if d is None else ast.Constant(None) for d in args.kw_defaults]


def _skeleton(node: ast.stmt, kernels: dict[str, str], defaults: Defaults | None = None) -> str:
    """``node`` dumped with function bodies left out (docstrings kept); each kernel's body dump
    goes to ``kernels`` under its dotted name, and with ``defaults`` each plain function's pure
    default values there. They are cut out of ``node`` itself: the caller parsed the tree for
    this comparison alone."""

    def strip(stmt: ast.stmt, prefix: str, plain: bool) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = stmt.body
            doc = body[:1] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str) else []
            if is_kernel(stmt):
                kernels[prefix + stmt.name] = ast.dump(ast.Module(body=body[len(doc):], type_ignores=[]))
            elif body and body[0].lineno == stmt.lineno:
                return  # a body on the def line has no body scope of its own: it stays in the comparison
            elif defaults is not None and plain and body[len(doc):]:
                _cut_defaults(stmt, prefix + stmt.name, defaults)
            stmt.body = doc or [ast.Pass()]
        elif isinstance(stmt, ast.ClassDef):
            # a class decorator or metaclass runs at import over the class, its methods included
            plain = plain and not stmt.decorator_list and not stmt.keywords
            for inner in stmt.body:
                strip(inner, prefix + stmt.name + ".", plain)

    strip(node, "", True)
    return ast.dump(node)


def changed_definitions(old_source: str | bytes, new_source: str | bytes,
                        functions: set[str] | None = None) -> frozenset[str] | None:
    """See the module docstring. With ``functions``, a plain function whose pure default values
    alone differ is no reason for None: its dotted name goes into ``functions``."""
    old_defaults: Defaults | None = {} if functions is not None else None
    new_defaults: Defaults | None = {} if functions is not None else None
    try:
        old_tree, new_tree = ast.parse(old_source), ast.parse(new_source)
        old_kernels: dict[str, str] = {}
        new_kernels: dict[str, str] = {}
        old_dumps = [_skeleton(s, old_kernels, old_defaults) for s in old_tree.body]
        new_dumps = [_skeleton(s, new_kernels, new_defaults) for s in new_tree.body]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for name in (old_defaults or {}).keys() | (new_defaults or {}).keys():
        old_defs, new_defs = (old_defaults or {}).get(name, []), (new_defaults or {}).get(name, [])
        if old_defs != new_defs:
            if len(old_defs) != 1 or len(new_defs) != 1:
                return None  # a name defined twice: which function changed is not told by its name
            if not new_defs[0][1] <= old_defs[0][1]:
                return None  # a name the import did not read before may not exist
            functions.add(name)  # type: ignore[union-attr]
    names: set[str] = set()
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, old_dumps, new_dumps, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        old_side = [pure_assignment(s) for s in old_tree.body[i1:i2]]
        new_side = [pure_assignment(s) for s in new_tree.body[j1:j2]]
        if any(a is None for a in old_side + new_side):
            return None
        old_bound = frozenset().union(*(a[0] for a in old_side if a))
        new_bound = frozenset().union(*(a[0] for a in new_side if a))
        old_read = frozenset().union(*(a[1] for a in old_side if a))
        new_read = frozenset().union(*(a[1] for a in new_side if a))
        if not old_bound <= new_bound or not new_read <= old_read:
            return None
        if sorted(n for a in old_side if a for n in a[2]) != sorted(n for a in new_side if a for n in a[2]):
            return None  # the module's ``__annotations__`` changed
        names |= old_bound | new_bound
    for kernel in old_kernels.keys() & new_kernels.keys():
        if old_kernels[kernel] != new_kernels[kernel]:
            names.add(kernel.rpartition(".")[2])
    return frozenset(names)


__all__ = ["changed_definitions", "pure_assignment", "pure_value"]
