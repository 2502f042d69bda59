"""Read a PEFT test file's source into its real tests (`python -m bench._history_gen15_extract`):
each test function's class, name, how many cases pytest's ``@pytest.mark.parametrize`` decorators
make of it and the first few of their ids, formed as pytest's id maker forms them (a string,
number or bool as written, a class or function by its name, anything else ``argname`` + index; a
tuple of several argnames joined by ``-``; stacked decorators joined innermost first).

Contract: `read_tests` never imports the file; a parametrize whose values are not a literal list
or a module-level literal list reads as one case of unknown id (count 0 then stands for unknown).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from itertools import product

MAX_IDS = 4


@dataclass(frozen=True)
class TestFunc:
    """One test function: ``cls`` its class ("" at module level), ``cases`` pytest's count of its
    parametrized cases (1 when not parametrized, 0 when the values could not be read), ``ids``."""

    cls: str
    name: str
    cases: int
    ids: tuple[str, ...]


def _module_lists(tree: ast.Module) -> dict[str, list[ast.expr]]:
    lists: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, (ast.List, ast.Tuple)):
                lists[node.targets[0].id] = list(node.value.elts)
    return lists


def _value_id(value: ast.expr, argname: str, index: int) -> str:
    if isinstance(value, ast.Constant) and isinstance(value.value, (str, int, float, bool)) and value.value != "":
        return str(value.value)
    if isinstance(value, ast.Name):
        return value.id
    if isinstance(value, ast.Attribute):
        return value.attr
    return f"{argname}{index}"


def _param_ids(call: ast.Call, lists: dict[str, list[ast.expr]]) -> list[str] | None:
    if len(call.args) < 2:
        return None
    names_node, values_node = call.args[0], call.args[1]
    if not (isinstance(names_node, ast.Constant) and isinstance(names_node.value, str)):
        return None
    argnames = [n.strip() for n in names_node.value.split(",") if n.strip()]
    if isinstance(values_node, (ast.List, ast.Tuple)):
        values = list(values_node.elts)
    elif isinstance(values_node, ast.Name) and values_node.id in lists:
        values = lists[values_node.id]
    else:
        return None
    ids = []
    for index, value in enumerate(values):
        if len(argnames) > 1 and isinstance(value, (ast.Tuple, ast.List)):
            parts = [_value_id(v, argnames[min(i, len(argnames) - 1)], index) for i, v in enumerate(value.elts)]
            ids.append("-".join(parts))
        else:
            ids.append(_value_id(value, argnames[0], index))
    return ids


def _is_parametrize(decorator: ast.expr) -> bool:
    return (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "parametrize")


def _func(cls: str, node: ast.FunctionDef, lists: dict[str, list[ast.expr]]) -> TestFunc:
    layers: list[list[str]] = []
    unknown = False
    for decorator in reversed(node.decorator_list):  # innermost first, as pytest joins ids
        if _is_parametrize(decorator):
            assert isinstance(decorator, ast.Call)
            ids = _param_ids(decorator, lists)
            if ids is None or not ids:
                unknown = True
            else:
                layers.append(ids)
    if unknown:
        return TestFunc(cls, node.name, 0, ())
    if not layers:
        return TestFunc(cls, node.name, 1, ())
    count = 1
    for layer in layers:
        count *= len(layer)
    first = ["-".join(combo) for _, combo in zip(range(MAX_IDS), product(*layers))]
    return TestFunc(cls, node.name, count, tuple(first))


def read_tests(source: str) -> list[TestFunc]:
    """The test functions pytest would collect by name (``test*`` in ``Test*`` classes or at module
    level), in file order; a file that does not parse reads as none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lists = _module_lists(tree)
    found: list[TestFunc] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
            found.append(_func("", node, lists))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name.startswith("test"):
                    found.append(_func(node.name, item, lists))
    return found
