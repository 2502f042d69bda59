"""Reading DeepSpeed's test files and GPU workflows as data for gen12 (`bench._history_gen12_extract`).

`parse_test_file` lists a test file's tests as pytest collects them, read with `ast` without
importing anything: each ``test_*`` function (module level or in a ``Test*`` class) with its pytest
markers (its own, its class's and the module's ``pytestmark``) and its ``parametrize`` id lists,
written as pytest writes ids (literal values as text, anything else ``argnameN``; at most
`MAX_VALUES` per list). `parse_workflow` keeps what a workflow says about when and where tests run:
its events, path filters, cron lines, concurrency, runner labels and pytest command lines.
"""

from __future__ import annotations

import ast
from typing import Any

import yaml

MAX_VALUES = 6
# The dependencies a workflow installs unpinned whose releases have broken DeepSpeed's tests.
THIRD_PARTY = frozenset({"transformers", "diffusers", "triton", "accelerate", "peft"})


def _mark_name(node: ast.expr) -> str | None:
    """``pytest.mark.NAME`` or ``pytest.mark.NAME(...)`` -> NAME."""
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute) \
            and target.value.attr == "mark":
        return target.attr
    return None


def _value_id(node: ast.expr, argname: str, index: int) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float, str)) or \
            isinstance(node, ast.Constant) and node.value is None:
        value = node.value
        text = value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
        return text.encode("unicode_escape").decode("ascii") if isinstance(text, str) else str(text)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return "-" + _value_id(node.operand, argname, index)
    return f"{argname}{index}"


def _param_ids(call: ast.Call) -> list[str]:
    if len(call.args) < 2:
        return []
    names_node, values = call.args[0], call.args[1]
    names = names_node.value if isinstance(names_node, ast.Constant) and isinstance(names_node.value, str) else "arg"
    argnames = [n.strip() for n in names.split(",") if n.strip()] or ["arg"]
    if not isinstance(values, (ast.List, ast.Tuple)):
        return [f"{argnames[0]}{i}" for i in range(2)]  # a name or a call: its length is not in the source
    ids = []
    for index, value in enumerate(values.elts[:MAX_VALUES]):
        if len(argnames) > 1 and isinstance(value, (ast.Tuple, ast.List)):
            ids.append("-".join(_value_id(v, a, index) for v, a in zip(value.elts, argnames)))
        elif len(argnames) > 1:
            ids.append("-".join(f"{a}{index}" for a in argnames))
        else:
            ids.append(_value_id(value, argnames[0], index))
    return ids


def _marks(decorators: list[ast.expr]) -> tuple[list[str], list[list[str]]]:
    """Marker names and parametrize id lists, the lowest decorator's first (pytest's id order)."""
    names: list[str] = []
    params: list[list[str]] = []
    for node in reversed(decorators):
        name = _mark_name(node)
        if name == "parametrize" and isinstance(node, ast.Call):
            ids = _param_ids(node)
            if ids:
                params.append(ids)
        elif name and name not in names:
            names.append(name)
    return names, params


def _module_marks(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            return [n for n in (_mark_name(v) for v in values) if n]
    return []


def parse_test_file(source: str) -> dict[str, Any]:
    """``{"tests": [[class, name, markers, params], ...], "imports": [...]}`` (class ``""`` at
    module level; ``imports`` the `THIRD_PARTY` modules it imports);
    ``{"tests": [], "unparsable": True}`` for a file Python cannot parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {"tests": [], "unparsable": True}
    module = _module_marks(tree)
    tests: list[list[Any]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            marks, params = _marks(node.decorator_list)
            tests.append(["", node.name, sorted(set(module + marks)), params])
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            class_marks, class_params = _marks(node.decorator_list)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    marks, params = _marks(item.decorator_list)
                    tests.append([node.name, item.name, sorted(set(module + class_marks + marks)),
                                  params + class_params])
    imports = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}
    imports |= {node.module.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    return {"tests": tests, "imports": sorted(imports & THIRD_PARTY)}


def parse_workflow(text: str) -> dict[str, Any] | None:
    """A workflow's triggers, concurrency, runner labels and pytest lines; None if it is not YAML."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    if not isinstance(doc, dict):
        return None
    on = doc.get("on", doc.get(True)) or {}
    on = {name: None for name in on} if isinstance(on, list) else {on: None} if isinstance(on, str) else on
    events = sorted(on)
    pull = on.get("pull_request") or {}
    crons = [entry.get("cron", "") for entry in (on.get("schedule") or []) if isinstance(entry, dict)]
    concurrency = doc.get("concurrency") or {}
    runners: list[str] = []
    pytest_lines: list[str] = []
    for job in (doc.get("jobs") or {}).values():
        labels = job.get("runs-on", [])
        runners.append(",".join(labels) if isinstance(labels, list) else str(labels))
        for step in job.get("steps") or []:
            for line in str(step.get("run", "")).splitlines():
                if "pytest" in line and not line.strip().startswith("#"):
                    pytest_lines.append(line.strip())
    return {"events": events, "paths": list(pull.get("paths") or []),
            "paths_ignore": list(pull.get("paths-ignore") or []), "crons": crons,
            "cancel_in_progress": bool(concurrency.get("cancel-in-progress")) if isinstance(concurrency, dict) else False,
            "runners": runners, "pytest": pytest_lines}
