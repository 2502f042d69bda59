"""Which folders a suite runner reads its in-source registrations from, read with `ast`.

SGLang's ``test/run_suite.py`` does not list its tests: it globs the files whose
``register_<backend>_ci(...)`` calls it then collects, and only those run. Since d89b678d6 that is
``glob.glob(os.path.join(script_dir, "registered", "**", "*.py"), recursive=True)`` (plus, at
that commit, ``python/sglang/jit_kernel/tests/**/test_*.py`` and ``benchmark/**/bench_*.py``);
files elsewhere under ``test/`` (``test/manual/``) carry registrations too, and the runner never
reads them. `runner_folders` finds every ``glob(...)`` / ``iglob(...)`` call in a runner and
evaluates its pattern as far as it is built from:

* string literals, ``__file__``, names assigned once in the same function or at module level;
* ``os.path.join`` / ``dirname`` / ``abspath`` / ``realpath`` / ``normpath``;
* ``Path(...)``, ``.parent``, ``.resolve()``, ``/``.

A relative pattern is relative to the runner's own folder (SGLang's workflows run it from there).
Anything else (an f-string, a computed name, a pattern leaving the repository) is not guessed at:
that glob is skipped with a note, and with no usable glob the caller falls back to its test roots.
Nothing is executed.
"""

from __future__ import annotations

import ast
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path

from ci.imports.scan import parse_python, read_bytes

_PASS_THROUGH = {"abspath", "realpath", "normpath", "resolve", "absolute", "expanduser"}
_GLOB_CALLS = {"glob", "iglob"}


@dataclass(frozen=True)
class SourceFolder:
    """A repo-relative ``folder`` whose files matching ``pattern`` (a file-name glob such as
    ``*.py`` or ``test_*.py``) are read for registrations; ``where`` says who named it
    (``test/run_suite.py:318``, ``--registered-in``, ``test root``)."""

    folder: str
    pattern: str
    where: str


@dataclass
class RunnerFolders:
    """The folders a runner reads (empty: none could be evaluated) and why some globs were skipped."""

    folders: list[SourceFolder] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class _Unknown(Exception):
    """An expression this reader does not evaluate."""


class _Paths:
    """Evaluates path expressions to repo-relative posix strings; ``names`` are the assignments in scope."""

    def __init__(self, runner: str, names: dict[str, ast.AST]) -> None:
        self.runner, self.names, self.depth = runner, names, 0

    def eval(self, node: ast.AST) -> str:
        self.depth += 1
        try:
            if self.depth > 50:
                raise _Unknown
            return self._eval(node)
        finally:
            self.depth -= 1

    def _eval(self, node: ast.AST) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value if node.value.startswith("/") else posixpath.join(posixpath.dirname(self.runner),
                                                                                node.value)
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return self.runner
            if node.id in self.names:
                return self.eval(self.names[node.id])
            raise _Unknown
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            return posixpath.dirname(self.eval(node.value))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return posixpath.join(self.eval(node.left), self._part(node.right))
        if isinstance(node, ast.Call) and not node.keywords:
            name = _callee(node.func)
            if name in _PASS_THROUGH and isinstance(node.func, ast.Attribute) and not node.args:
                return self.eval(node.func.value)  # Path(...).resolve()
            if name in _PASS_THROUGH | {"Path", "PurePath", "PosixPath"} and len(node.args) == 1:
                return self.eval(node.args[0])
            if name == "dirname" and len(node.args) == 1:
                return posixpath.dirname(self.eval(node.args[0]))
            if name == "join" and node.args:
                return posixpath.join(self.eval(node.args[0]), *(self._part(a) for a in node.args[1:]))
        raise _Unknown

    def _part(self, node: ast.AST) -> str:
        """A later part of a join: a literal stays as written (never re-based on the runner)."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return self.eval(node)


def _callee(func: ast.AST) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _assignments(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """name -> value of the simple ``name = value`` statements directly in ``body`` (the last wins)."""
    out: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = node.value
    return out


def _folder(pattern: str, where: str) -> SourceFolder | str:
    """The folder before the pattern's first wildcard part, and its file-name glob; or why not."""
    parts = posixpath.normpath(pattern).split("/")
    if pattern.startswith("/") or ".." in parts:
        return f"{where}: glob {pattern!r} leaves the repository; skipped"
    fixed: list[str] = []
    for part in parts[:-1]:
        if any(c in part for c in "*?["):
            break
        fixed.append(part)
    name = parts[-1]
    if not name or not name.endswith(".py"):
        return f"{where}: glob {pattern!r} reads no .py files; skipped"
    return SourceFolder("/".join(fixed) or ".", name, where)


def runner_folders(root: Path, runner: Path) -> RunnerFolders:
    """The folders the suite runner ``runner`` (a file below ``root``) globs (see the module docstring)."""
    result = RunnerFolders()
    display = Path(os.path.relpath(runner, root)).as_posix()
    try:
        tree, failure = parse_python(read_bytes(os.fspath(runner)), display)
    except OSError as exc:
        result.notes.append(f"{display}: cannot read it ({exc.strerror}); skipped")  # as `ci.adopt.suites` says it
        return result
    if tree is None or failure is not None:
        result.notes.append(f"{display}: cannot read it as Python; its folders are not known")
        return result
    module_names = _assignments(tree.body)
    scopes: list[tuple[list[ast.stmt], dict[str, ast.AST]]] = [(tree.body, module_names)]
    scopes += [(f.body, {**module_names, **_assignments(f.body)}) for f in ast.walk(tree)
               if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))]
    seen: set[int] = set()
    for body, names in reversed(scopes):  # innermost first: a function's glob sees its own names
        for stmt in body:
            for node in ast.walk(stmt):
                if not (isinstance(node, ast.Call) and _callee(node.func) in _GLOB_CALLS and node.args) \
                        or id(node) in seen:
                    continue
                seen.add(id(node))
                where = f"{display}:{node.lineno}"
                try:
                    pattern = _Paths(display, names).eval(node.args[0])
                except _Unknown:
                    result.notes.append(f"{where}: a glob whose pattern is not built from literals and __file__; "
                                        f"skipped")
                    continue
                folder = _folder(posixpath.normpath(pattern), where)
                if isinstance(folder, str):
                    result.notes.append(folder)
                elif all((f.folder, f.pattern) != (folder.folder, folder.pattern) for f in result.folders):
                    result.folders.append(folder)
    return result


__all__ = ["RunnerFolders", "SourceFolder", "runner_folders"]
