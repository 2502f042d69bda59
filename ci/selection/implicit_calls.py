"""Which special methods a piece of syntax calls without naming them: ``str(x)`` calls
``x.__str__``, ``f"{x}"`` its ``__format__`` (and through ``object.__format__`` its ``__str__``),
``a + b`` ``__add__`` or ``__radd__``, ``x[k]`` ``__getitem__``, ``with x:`` ``__enter__``.

A walk back from a changed ``__str__`` by name finds only ``x.__str__()``; the calls that matter are
``str(style)`` inside an ``lru_cache``'d function another test file filled first. Types are not
known, so a node counts for every class's method of that name (the walk filters by the import
graph, as for names).

Contract: `implicit_dunders(node)` gives the special methods one AST node may call by itself,
not counting its children (each child is asked on its own); empty for a node that calls none
this table knows. `IMPLICIT` is every name it can give; a walk may treat a changed method of
another special name (``__bool__`` and ``__len__`` through truthiness, ``__hash__`` and
``__eq__`` through dict and set lookups, ``__del__``, ``__getattr__``, ``__call__``) as having no
implicit caller it can find. Pure.
"""

from __future__ import annotations

import ast

_STR = ("__str__", "__repr__")  # ``object.__str__`` falls back to ``__repr__``
_FORMAT = ("__format__", *_STR)

# Builtins called by their bare name, and what they call on their arguments.
_BUILTINS: dict[str, tuple[str, ...]] = {
    "str": _STR,
    "repr": ("__repr__",),
    "ascii": ("__repr__",),
    "format": _FORMAT,
    "print": _STR,
    "hash": ("__hash__",),
    "len": ("__len__",),
    "bool": ("__bool__", "__len__"),
    "iter": ("__iter__", "__getitem__"),
    "next": ("__next__",),
    "reversed": ("__reversed__", "__len__", "__getitem__"),
    "sorted": ("__lt__", "__gt__", "__iter__"),
    "min": ("__lt__", "__gt__", "__iter__"),
    "max": ("__lt__", "__gt__", "__iter__"),
    "sum": ("__add__", "__radd__", "__iter__"),
    "abs": ("__abs__",),
    "round": ("__round__",),
    "int": ("__int__", "__index__", "__trunc__"),
    "float": ("__float__", "__index__"),
    "complex": ("__complex__", "__float__", "__index__"),
    "divmod": ("__divmod__", "__rdivmod__"),
    "pow": ("__pow__", "__rpow__"),
    "dir": ("__dir__",),
    "list": ("__iter__", "__len__"),
    "tuple": ("__iter__", "__len__"),
    "set": ("__iter__", "__hash__"),
    "frozenset": ("__iter__", "__hash__"),
    "dict": ("__iter__", "__getitem__"),
    "enumerate": ("__iter__",),
    "zip": ("__iter__",),
    "map": ("__iter__",),
    "filter": ("__iter__",),
    "any": ("__iter__", "__bool__", "__len__"),
    "all": ("__iter__", "__bool__", "__len__"),
}
# Methods of str called on a format string, which format their arguments.
_FORMATTERS = frozenset({"format", "format_map"})

_BINARY: dict[type, str] = {
    ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.MatMult: "matmul", ast.Div: "truediv",
    ast.FloorDiv: "floordiv", ast.Mod: "mod", ast.Pow: "pow", ast.LShift: "lshift", ast.RShift: "rshift",
    ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
}
_UNARY: dict[type, tuple[str, ...]] = {
    ast.USub: ("__neg__",), ast.UAdd: ("__pos__",), ast.Invert: ("__invert__",), ast.Not: ("__bool__", "__len__"),
}
_COMPARE: dict[type, tuple[str, ...]] = {
    ast.Eq: ("__eq__",), ast.NotEq: ("__ne__", "__eq__"), ast.Lt: ("__lt__", "__gt__"), ast.Gt: ("__gt__", "__lt__"),
    ast.LtE: ("__le__", "__ge__"), ast.GtE: ("__ge__", "__le__"), ast.In: ("__contains__", "__iter__", "__eq__"),
    ast.NotIn: ("__contains__", "__iter__", "__eq__"),
}
_CONVERSION = {-1: _FORMAT, ord("s"): _STR, ord("r"): ("__repr__",), ord("a"): ("__repr__",)}


def _binary(op: ast.operator, augmented: bool) -> tuple[str, ...]:
    name = _BINARY.get(type(op))
    if name is None:
        return ()
    both = (f"__{name}__", f"__r{name}__")
    return (f"__i{name}__", *both) if augmented else both


def implicit_dunders(node: ast.AST) -> tuple[str, ...]:
    """See the module docstring."""
    if isinstance(node, ast.Call):
        if isinstance(node.func, ast.Name):
            return _BUILTINS.get(node.func.id, ())
        if isinstance(node.func, ast.Attribute) and node.func.attr in _FORMATTERS:
            return _FORMAT
        return ()
    if isinstance(node, ast.FormattedValue):
        return _CONVERSION.get(node.conversion, _FORMAT)
    if isinstance(node, ast.BinOp):
        found = _binary(node.op, False)
        formats = isinstance(node.op, ast.Mod) and isinstance(node.left, (ast.Constant, ast.JoinedStr))
        return (*found, *_FORMAT) if formats else found  # ``"%s" % x``
    if isinstance(node, ast.AugAssign):
        return _binary(node.op, True)
    if isinstance(node, ast.UnaryOp):
        return _UNARY.get(type(node.op), ())
    if isinstance(node, ast.Compare):
        return tuple(dict.fromkeys(name for op in node.ops for name in _COMPARE.get(type(op), ())))
    if isinstance(node, ast.Subscript):
        return {ast.Store: ("__setitem__",), ast.Del: ("__delitem__",)}.get(type(node.ctx), ("__getitem__",
                                                                                            "__class_getitem__"))
    if isinstance(node, (ast.For, ast.comprehension)):
        return ("__iter__", "__next__", "__getitem__")
    if isinstance(node, (ast.AsyncFor,)):
        return ("__aiter__", "__anext__")
    if isinstance(node, ast.withitem):
        return ("__enter__", "__exit__", "__aenter__", "__aexit__")
    if isinstance(node, ast.Await):
        return ("__await__",)
    return ()


IMPLICIT = frozenset(
    name for names in (*_BUILTINS.values(), _FORMAT, *_UNARY.values(), *_COMPARE.values()) for name in names
) | {f"__{p}{n}__" for n in _BINARY.values() for p in ("", "r", "i")} | {
    "__setitem__", "__delitem__", "__getitem__", "__class_getitem__", "__iter__", "__next__", "__aiter__",
    "__anext__", "__enter__", "__exit__", "__aenter__", "__aexit__", "__await__"}


__all__ = ["IMPLICIT", "implicit_dunders"]
