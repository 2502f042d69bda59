"""Reading FlashInfer's tree for the eleventh history (`bench._history_gen11_extract`): a test file's
test functions with their parametrization counts and first node ids, the flashinfer modules it
imports, the csrc/include files the JIT builds for a module, and which test files a commit's touched
files plausibly affect. Pure functions of file texts, so `bench._history_gen11_verify` and the tests
run the same code on the committed data as the extract ran on the mirror.
"""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass, field

SAMPLE_IDS = 3  # node ids kept per test function (its first combinations, as pytest orders them)
_CSRC = re.compile(r"""["']([\w./-]+\.(?:cu|cuh|cpp|h|hpp))["']""")
_INCLUDE = re.compile(r'#include\s+"(flashinfer/[\w./-]+)"')
_GEN = re.compile(r"\b(gen_\w+_module\w*)\b")
_ATTR = re.compile(r"\bflashinfer\.(\w+)(?:\.(\w+))?")


@dataclass
class TestFunc:
    """One test function (``Class::name`` inside a class): its case count and first node ids."""

    name: str
    count: int
    ids: list[str]
    xfail: bool = False


@dataclass
class TestFile:
    """What a test file holds and reaches: its functions, its flashinfer module paths, whether it
    downloads from the Hugging Face hub, whether it is a multi-GPU comm test."""

    funcs: list[TestFunc] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    hub: bool = False
    comm: bool = False


def _tree(source: str) -> ast.Module | None:
    """The module's syntax tree, None for a file that does not parse (the tree's own, at that commit)."""
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _id_of(value: ast.expr, argname: str, index: int) -> str:
    """pytest's id for one literal parameter value (a non-literal reads argname + index)."""
    if isinstance(value, ast.Constant) and isinstance(value.value, (bool, int, float, str)) or (
            isinstance(value, ast.Constant) and value.value is None):
        return str(value.value)
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, ast.USub) and isinstance(value.operand, ast.Constant):
        return f"-{value.operand.value}"
    return f"{argname}{index}"


def _axis(call: ast.Call, names: dict[str, ast.expr]) -> list[str] | None:
    """The ids of one ``@pytest.mark.parametrize`` (None when its values are not a literal list)."""
    if len(call.args) < 2:
        return None
    first, values = call.args[0], call.args[1]
    if isinstance(values, ast.Name) and values.id in names:
        values = names[values.id]
    if not isinstance(values, (ast.List, ast.Tuple)):
        return None
    argnames = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else "arg"
    single = "," not in argnames
    ids = []
    for i, value in enumerate(values.elts):
        if isinstance(value, ast.Call) and getattr(value.func, "attr", "") == "param" and value.args:
            value = value.args[0] if single or len(value.args) == 1 else ast.Tuple(elts=list(value.args))
        if not single and isinstance(value, (ast.Tuple, ast.List)):
            parts = [n.strip() for n in argnames.split(",")]
            ids.append("-".join(_id_of(v, parts[min(j, len(parts) - 1)], i) for j, v in enumerate(value.elts)))
        else:
            ids.append(_id_of(value, argnames.strip(), i))
    return ids


def _marks(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> list[ast.expr]:
    return [d for d in node.decorator_list if "mark" in ast.unparse(d)]


def _func(node: ast.FunctionDef | ast.AsyncFunctionDef, prefix: str, outer: list[ast.expr],
          names: dict[str, ast.expr]) -> TestFunc:
    axes: list[list[str]] = []
    xfail = False
    # pytest ids read the decorator nearest the def first
    for deco in reversed(_marks(node) + outer):
        text = ast.unparse(deco)
        if "xfail" in text and "skipif" not in text:
            xfail = True
        if isinstance(deco, ast.Call) and text.startswith(("pytest.mark.parametrize", "mark.parametrize")):
            axis = _axis(deco, names)
            axes.append(axis if axis else ["unknown"])
    count = 1
    for axis in axes:
        count *= len(axis)
    ids = ["-".join(combo) for combo in itertools.islice(itertools.product(*axes), SAMPLE_IDS)] if axes else []
    name = f"{prefix}{node.name}"
    return TestFunc(name, count, [f"{name}[{i}]" for i in ids] if ids else [name], xfail)


def test_functions(source: str) -> list[TestFunc]:
    """Every ``test_*`` function of a test module (``Test*`` classes' methods as ``Class::name``)."""
    tree = _tree(source)
    if tree is None:
        return []
    names = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign)
             for t in n.targets if isinstance(t, ast.Name)}
    funcs = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            funcs.append(_func(node, "", [], names))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    funcs.append(_func(item, f"{node.name}::", _marks(node), names))
    return funcs


def package_exports(init_source: str) -> dict[str, str]:
    """``flashinfer/__init__.py``'s ``from .mod import name`` lines: name -> ``mod``."""
    exports: dict[str, str] = {}
    for node in ast.walk(_tree(init_source) or ast.Module(body=[], type_ignores=[])):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                exports[alias.asname or alias.name] = node.module.split(".")[0]
    return exports


def imported_modules(source: str, exports: dict[str, str], known: set[str]) -> list[str]:
    """The flashinfer module paths (``flashinfer/decode``) a test imports or reaches through
    ``flashinfer.name``; ``known`` holds the module paths that exist (files without ``.py``)."""
    found: set[str] = set()
    tree = _tree(source)
    if tree is None:
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "flashinfer":
            base = node.module.replace(".", "/")
            for alias in node.names:
                found.add(f"{base}/{alias.name}" if f"{base}/{alias.name}" in known else base)
        elif isinstance(node, ast.Import):
            found.update(a.name.replace(".", "/") for a in node.names if a.name.startswith("flashinfer."))
    for first, second in _ATTR.findall(source):
        if f"flashinfer/{first}" in known:
            deeper = f"flashinfer/{first}/{second}"
            found.add(deeper if deeper in known else f"flashinfer/{first}")
        elif first in exports:
            found.add(f"flashinfer/{exports[first]}")
    found = {f"flashinfer/{exports[m.split('/')[1]]}" if m.count("/") == 1 and m not in known
             and m.split("/")[1] in exports else m for m in found}
    # the package root and the JIT package as a whole are every test's: they say nothing
    return sorted(m for m in found if m in known and m not in ("flashinfer", "flashinfer/jit"))


def jit_sources(module_source: str, gen_bodies: dict[str, str]) -> list[str]:
    """The csrc files the JIT builds for a module: the ``gen_*_module`` functions it calls and the
    source file names their bodies (``gen_bodies``: name -> text) spell out."""
    files: set[str] = set()
    for name in set(_GEN.findall(module_source)):
        for path in _CSRC.findall(gen_bodies.get(name, "")):
            files.add(path if path.startswith(("csrc/", "include/")) else f"csrc/{path.split('csrc/')[-1]}")
    return sorted(files)


def gen_function_bodies(jit_source: str) -> dict[str, str]:
    """Each top-level ``def gen_*`` of a flashinfer/jit module: name -> its text."""
    bodies: dict[str, str] = {}
    for node in getattr(_tree(jit_source), "body", []):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("gen_"):
            bodies[node.name] = ast.get_source_segment(jit_source, node) or ""
    return bodies


def includes(csrc_source: str) -> list[str]:
    """The ``include/flashinfer/...`` headers a csrc file includes (one level)."""
    return sorted({f"include/{path}" for path in _INCLUDE.findall(csrc_source)})


def affects(touched: list[str], test: str, deps: list[str]) -> bool:
    """Whether a commit touching ``touched`` plausibly changes ``test``: the file itself, a module
    it imports (a ``flashinfer/x`` path is the file ``x.py`` or the package ``x/``), or a csrc or
    include file the JIT builds for one of them."""
    for path in touched:
        if path == test:
            return True
        for dep in deps:
            if path == dep or path == f"{dep}.py" or path.startswith(f"{dep}/"):
                return True
    return False
