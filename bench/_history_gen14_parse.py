"""The test functions a pytest file of bitsandbytes' kind collects, read with `ast` (gen14's extractor).

`collected(source)` gives, per test function pytest would select under the project's
``-m 'not slow and not benchmark and not deprecated'``, its class (``""`` for a module-level
function), name, how many parametrized cases it has (the product of its ``parametrize``
decorators' value counts) and the ids of its first `MAX_IDS` cases, built the way pytest builds them:
the decorator nearest the ``def`` first, an ``ids=`` callable of the project's helpers
(``id_formatter(label)`` gives ``label=value`` with ``T``/``F`` for booleans, ``describe_dtype``
gives ``fp16``) applied, a plain int, float, str or bool as itself and anything else as the argument
name with its index. A value list this reader cannot evaluate counts as two cases (stated, in the
bench docs, as an assumption).
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass

MAX_IDS = 4
DESELECTED_MARKS = frozenset({"slow", "benchmark", "deprecated"})
DTYPES = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64", "int8": "int8",
          "int32": "int32", "int64": "int64", "bool": "bool", "uint8": "uint8", "float8_e4m3fn": "float8_e4m3fn"}
# The project's tests/helpers.py constants, as its source defines them.
HELPER_VALUES: dict[str, list[object]] = {
    "TRUE_FALSE": [True, False],
    "BOOLEAN_TUPLES": [(a, b) for a in (True, False) for b in (True, False)],
    "BOOLEAN_TRIPLES": [(a, b, c) for a in (True, False) for b in (True, False) for c in (True, False)],
}
UNKNOWN_COUNT = 2


@dataclass(frozen=True)
class Dtype:
    """A ``torch.<name>`` value in a parameter list."""

    name: str


@dataclass(frozen=True)
class TestFunction:
    """One collected test function: ``cases`` parametrized cases, ``ids`` the first of them."""

    cls: str
    name: str
    cases: int
    ids: tuple[str, ...]


class _Opaque:
    """A value this reader cannot evaluate (its id is the argument name and index)."""


def _value(node: ast.expr, names: dict[str, list[object]]) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "torch":
        return Dtype(node.attr)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_value(e, names) for e in node.elts)
    if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "param" and node.args:
        return _value(node.args[0], names) if len(node.args) == 1 else tuple(_value(a, names) for a in node.args)
    return _Opaque()


def _values(node: ast.expr, names: dict[str, list[object]]) -> list[object] | None:
    """The parameter list ``node`` spells, or None where it cannot be evaluated here."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_value(e, names) for e in node.elts]
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Call):
        func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
        if func == "get_available_devices":
            return ["cuda"]  # BNB_TEST_DEVICE=cuda on the GPU runners
        if func == "range" and all(isinstance(a, ast.Constant) and isinstance(a.value, int) for a in node.args):
            return list(range(*[a.value for a in node.args]))  # type: ignore[misc]
        if func == "get_test_dims":
            count = next((k.value.value for k in node.keywords if k.arg == "n" and isinstance(k.value, ast.Constant)), None)
            return [_Opaque() for _ in range(int(count))] if isinstance(count, int) else None
        if func == "list" and node.args:
            return _values(node.args[0], names)
    return None


def _fmt_label(label: str, value: object, index: int) -> str:
    if isinstance(value, _Opaque) or (isinstance(value, tuple) and any(isinstance(v, _Opaque) for v in value)):
        text = f"v{index}"  # a value this reader cannot evaluate: named by its index
    elif isinstance(value, bool):
        text = "T" if value else "F"
    elif isinstance(value, tuple) and value and all(isinstance(v, bool) for v in value):
        text = "".join("T" if v else "F" for v in value)
    elif isinstance(value, Dtype):
        text = DTYPES.get(value.name, value.name)
    else:
        text = str(value)
    return f"{label}={text}"


def _plain_id(arg: str, value: object, index: int) -> str:
    if isinstance(value, (bool, int, float, str)) or value is None:
        return str(value)
    return f"{arg}{index}"


def _ids(decorator: ast.Call, args: list[str], values: list[object]) -> list[str]:
    ids_kw = next((k.value for k in decorator.keywords if k.arg == "ids"), None)
    if isinstance(ids_kw, (ast.List, ast.Tuple)) and len(ids_kw.elts) == len(values):
        return [str(ast.literal_eval(e)) if isinstance(e, ast.Constant) else f"{args[0]}{i}"
                for i, e in enumerate(ids_kw.elts)]
    if isinstance(ids_kw, ast.Call) and getattr(ids_kw.func, "id", "") == "id_formatter" and ids_kw.args \
            and isinstance(ids_kw.args[0], ast.Constant):
        return [_fmt_label(str(ids_kw.args[0].value), v, i) for i, v in enumerate(values)]
    if isinstance(ids_kw, ast.Name) and ids_kw.id == "describe_dtype":
        return [DTYPES.get(v.name, v.name) if isinstance(v, Dtype) else f"{args[0]}{i}" for i, v in enumerate(values)]
    if len(args) > 1:
        return ["-".join(_plain_id(a, v[j] if isinstance(v, tuple) and j < len(v) else v, i)
                         for j, a in enumerate(args)) for i, v in enumerate(values)]
    return [_plain_id(args[0], v, i) for i, v in enumerate(values)]


def _mark(decorator: ast.expr) -> tuple[str, ast.Call | None]:
    """(``slow``, None) for ``@pytest.mark.slow``; (``parametrize``, the call) for a parametrize."""
    call = decorator if isinstance(decorator, ast.Call) else None
    target = call.func if call is not None else decorator
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute) and target.value.attr == "mark":
        return target.attr, call
    return "", None


def _function(cls: str, node: ast.FunctionDef, names: dict[str, list[object]]) -> TestFunction | None:
    axes: list[list[str]] = []
    counts: list[int] = []
    for decorator in reversed(node.decorator_list):  # nearest the def first, as pytest applies them
        mark, call = _mark(decorator)
        if mark in DESELECTED_MARKS:
            return None
        if mark != "parametrize" or call is None or len(call.args) < 2:
            continue
        first = call.args[0]
        spec = ast.literal_eval(first) if isinstance(first, (ast.Constant, ast.Tuple, ast.List)) else "arg"
        args = [a.strip() for a in spec.split(",")] if isinstance(spec, str) else [str(a) for a in spec]
        values = _values(call.args[1], names)
        if values is None:
            values = [_Opaque() for _ in range(UNKNOWN_COUNT)]
        if not values:
            return TestFunction(cls, node.name, 0, ())
        axes.append(_ids(call, args, values))
        counts.append(len(values))
    cases = 1
    for count in counts:
        cases *= count
    ids = tuple("-".join(combo) for combo in itertools.islice(itertools.product(*axes), MAX_IDS)) if axes else ()
    return TestFunction(cls, node.name, cases, ids)


def collected(source: str) -> list[TestFunction]:
    """The test functions of one test file's ``source`` (see the module docstring); [] if it does
    not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names = dict(HELPER_VALUES)
    out: list[TestFunction] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values = _values(node.value, names)
            if values is not None:
                names[node.targets[0].id] = values
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            found = _function("", node, names)  # type: ignore[arg-type]
            out += [found] if found else []
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            if any(_mark(d)[0] in DESELECTED_MARKS for d in node.decorator_list):
                continue
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    found = _function(node.name, item, names)  # type: ignore[arg-type]
                    out += [found] if found else []
    return out
