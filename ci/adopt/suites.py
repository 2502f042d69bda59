"""Read SGLang-style suite definitions with `ast`, never executing them.

Two sources, each giving `Registration`s (a file, a suite, maybe an est_time, where it was found):

* a ``run_suite.py`` holding ``suites = {"<suite>": [TestFile("<path>", <seconds>), ...]}``, plus
  the dicts it merges in with ``suites.update(<name>)`` and ``suites["<suite>"] = [...]``. Paths are
  relative to the run_suite.py's directory. ``TestFile("<path>")`` without a time takes the
  default of the file's own ``TestFile`` dataclass (``estimated_time: float = 60``) when it has one;
  ``TestFile(name=..., estimated_time=...)`` works too;
* test files that call ``register_<backend>_ci(est_time, suite, nightly, disabled)`` at module level
  (``register_cuda_ci(est_time=60, suite="stage-b-test-small-1-gpu")``; ``stage=`` plus
  ``runner_config=`` name the suite ``<stage>-test-<runner_config>``).

Anything not written as literals (a computed suite, ``**`` merges, a variable est_time) is not
guessed at: it becomes a warning with ``file:line``.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ci.imports.scan import parse_python, read_bytes
from ci.registry import normalize_path

_REGISTER_ARGS = ("est_time", "suite", "nightly", "disabled")  # the positional order
_REGISTER_KWARGS = _REGISTER_ARGS + ("stage", "runner_config", "in_process_group")


@dataclass(frozen=True)
class Registration:
    """``path`` (repo-relative) is in ``suite``; ``est_time`` seconds or None (not given);
    ``where`` is ``file:line`` and ``how`` the construct (``TestFile`` or ``register_cuda_ci``)."""

    path: str
    suite: str
    est_time: float | None
    where: str
    how: str
    disabled: str | None = None
    nightly: bool = False

    @property
    def cadence(self) -> str:
        """``nightly`` for ``nightly=True`` or a suite named ``nightly-...`` (SGLang: "the stage name
        carries the cadence"), ``weekly`` for ``weekly-...``, else ``per-commit``."""
        if self.nightly or self.suite.startswith("nightly-"):
            return "nightly"
        return "weekly" if self.suite.startswith("weekly-") else "per-commit"

    @property
    def backend(self) -> str | None:
        """The machine kind a ``register_<backend>_ci`` call names (``cuda``, ``amd``, ``npu``,
        ``cpu``, ...); None for a run_suite.py ``TestFile``, which names none."""
        if self.how.startswith("register_") and self.how.endswith("_ci"):
            return self.how[len("register_"):-len("_ci")]
        return None


@dataclass
class Scan:
    registrations: list[Registration] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def extend(self, other: Scan) -> None:
        self.registrations += other.registrations
        self.warnings += other.warnings


def _literal(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


_NOT_LITERAL = object()


def _parse(path: Path, display: str, scan: Scan) -> ast.Module | None:
    """The file's syntax tree, or None with a warning: it is not a regular file, is over
    `ci.regular_file.MAX_SOURCE_BYTES`, cannot be read, or does not parse."""
    try:
        tree, failure = parse_python(read_bytes(os.fspath(path)), display)
    except OSError as exc:
        scan.warnings.append(f"{display}: cannot read it ({exc.strerror}); skipped")
        return None
    if failure is not None:
        where = f"{display}:{failure.line}" if failure.line else display
        scan.warnings.append(f"{where}: cannot read it as Python ({failure.message}); skipped")
    return tree


def _testfile_default(tree: ast.Module) -> float | None:
    """The ``estimated_time`` default of a ``class TestFile`` defined in the module, if literal."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "TestFile":
            for stmt in node.body:
                if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                        and stmt.target.id == "estimated_time" and stmt.value is not None):
                    value = _literal(stmt.value)
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        return float(value)
    return None


def _suite_dicts(tree: ast.Module) -> list[tuple[str | None, ast.AST]]:
    """(suite name or None for a whole dict, value node) for ``suites`` and what merges into it."""
    merged = {"suites"}
    for node in tree.body:  # suites.update(name)
        call = node.value if isinstance(node, ast.Expr) else None
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "update"
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "suites"):
            merged |= {a.id for a in call.args if isinstance(a, ast.Name)}
    out: list[tuple[str | None, ast.AST]] = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        value = getattr(node, "value", None)
        for target in targets:
            if isinstance(target, ast.Name) and target.id in merged and value is not None:
                out.append((None, value))
            elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                  and target.value.id == "suites" and value is not None):
                key = _literal(target.slice)
                out.append((key if isinstance(key, str) else "", value))
    return out


def read_run_suite(path: Path, root: Path) -> Scan:
    """Every ``TestFile`` of every suite in ``path`` (a run_suite.py below ``root``)."""
    scan = Scan()
    display = Path(os.path.relpath(path, root)).as_posix()
    tree = _parse(path, display, scan)
    if tree is None:
        return scan
    default = _testfile_default(tree)
    base = PurePosixPath(display).parent
    dicts = _suite_dicts(tree)
    if not dicts:
        scan.warnings.append(f"{display}: defines no suites (no `suites = {{...}}` dict, `suites[...] = [...]` or "
                             f"`suites.update(...)`); tests registered in-source with register_*_ci() calls under "
                             f"the test roots are read without --suites")
    for suite, value in dicts:
        if suite is None:
            if not isinstance(value, ast.Dict):
                scan.warnings.append(f"{display}:{value.lineno}: a suites dict that is not a literal {{...}}; skipped")
                continue
            for key, items in zip(value.keys, value.values):
                name = _literal(key) if key is not None else _NOT_LITERAL
                if not isinstance(name, str):
                    scan.warnings.append(f"{display}:{(key or items).lineno}: a suite whose name is not a string "
                                         f"literal (or a ** merge); skipped")
                    continue
                _suite_list(scan, display, base, name, items, default)
        elif suite:
            _suite_list(scan, display, base, suite, value, default)
        else:
            scan.warnings.append(f"{display}:{value.lineno}: suites[...] with a computed name; skipped")
    return scan


def _suite_list(scan: Scan, display: str, base: PurePosixPath, suite: str, node: ast.AST,
                default: float | None) -> None:
    if not isinstance(node, (ast.List, ast.Tuple)):
        scan.warnings.append(f"{display}:{node.lineno}: suite {suite!r} is not a literal list; skipped")
        return
    for item in node.elts:
        where = f"{display}:{item.lineno}"
        if not (isinstance(item, ast.Call) and isinstance(item.func, ast.Name) and item.func.id == "TestFile"):
            scan.warnings.append(f"{where}: suite {suite!r} holds something other than TestFile(...); skipped")
            continue
        args = dict(zip(("name", "estimated_time"), item.args))
        args.update({k.arg: k.value for k in item.keywords if k.arg is not None})
        name = _literal(args["name"]) if "name" in args else _NOT_LITERAL
        if not isinstance(name, str):
            scan.warnings.append(f"{where}: TestFile without a literal file name; skipped")
            continue
        est: object = default
        if "estimated_time" in args:
            est = _literal(args["estimated_time"])
            if not isinstance(est, (int, float)) or isinstance(est, bool):
                scan.warnings.append(f"{where}: TestFile({name!r}) has a time that is not a number literal; "
                                     f"its time is left open")
                est = None
        path = normalize_path(str(base / name))
        if path.startswith("/") or ".." in path.split("/"):
            scan.warnings.append(f"{where}: TestFile({name!r}) points outside the repository; skipped")
            continue
        scan.registrations.append(Registration(path, suite, None if est is None else float(est), where, "TestFile"))


def read_registrations(path: Path, rel: str) -> Scan:
    """Every module-level ``register_<backend>_ci(...)`` call in the test file ``path`` (``rel``
    is its repo-relative path)."""
    scan = Scan()
    tree = _parse(path, rel, scan)
    if tree is None:
        return scan
    for node in tree.body:
        call = node.value if isinstance(node, ast.Expr) else None
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                and call.func.id.startswith("register_") and call.func.id.endswith("_ci")):
            continue
        registration = _registration(call, rel, scan)
        if registration is not None:
            scan.registrations.append(registration)
    return scan


def _registration(call: ast.Call, rel: str, scan: Scan) -> Registration | None:
    how, where = call.func.id, f"{rel}:{call.lineno}"  # type: ignore[attr-defined]
    if len(call.args) > len(_REGISTER_ARGS) or any(isinstance(a, ast.Starred) for a in call.args):
        scan.warnings.append(f"{where}: {how}() with more than {len(_REGISTER_ARGS)} positional arguments; skipped")
        return None
    args: dict[str, object] = {k: _literal(v) for k, v in zip(_REGISTER_ARGS, call.args)}
    for keyword in call.keywords:
        if keyword.arg is None or keyword.arg not in _REGISTER_KWARGS:
            scan.warnings.append(f"{where}: {how}() with an unknown argument {keyword.arg or '**'}; skipped")
            return None
        args[keyword.arg] = _literal(keyword.value)
    est, suite = args.get("est_time"), args.get("suite")
    if suite is None and isinstance(args.get("stage"), str) and isinstance(args.get("runner_config"), str):
        suite = f"{args['stage']}-test-{args['runner_config']}"
    if not isinstance(suite, str):
        scan.warnings.append(f"{where}: {how}() names no literal suite (suite=, or stage= with runner_config=); skipped")
        return None
    if not isinstance(est, (int, float)) or isinstance(est, bool):
        scan.warnings.append(f"{where}: {how}() has no literal est_time; its time is left open")
        est = None
    disabled = args.get("disabled")
    return Registration(rel, suite, None if est is None else float(est), where, how,
                        disabled=disabled if isinstance(disabled, str) and disabled.strip() else None,
                        nightly=args.get("nightly") is True)


__all__ = ["Registration", "Scan", "read_registrations", "read_run_suite"]
