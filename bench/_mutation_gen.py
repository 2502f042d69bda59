"""Seeded behaviour mutations of Python source, for ``python -m bench mutation``.

Contract:
- `sites(source)` lists every statement of a module with the mutations possible in its own
  expressions (not in nested statements). `generate` picks among the statements whose first line
  some test executed (``executed``: path -> line numbers, from coverage.py's data), seeded: an
  operator kind drawn uniformly among those still on offer, then a statement offering it, then
  one target of that kind; a draw that does not compile, or leaves the AST equal, is skipped.
  Same inputs and seed, same mutants.
- Operators: ``comparison`` (``<`` -> ``>=``, ``<=`` -> ``>``, ``==`` -> ``!=``, ``in`` ->
  ``not in``, ``is`` -> ``is not`` and back), ``constant`` (an int or float ``n`` -> ``n + 1``),
  ``boolean`` (``True`` <-> ``False``), ``boolop`` (``and`` <-> ``or``), ``not`` (``not x`` ->
  ``x``), ``pass`` (a simple statement -> ``pass``: never an import, a def or class, a docstring
  or a ``pass``), ``return`` (``return X`` -> ``return None``). An import is never a target.
- A mutant rewrites only the affected source segment (byte offsets from the AST: ``col_offset``
  counts UTF-8 bytes) and keeps the file's line count; a multi-line segment keeps its newlines.
- `Mutant.diff` is ``git diff -U0`` style: ``--- a/P``, ``+++ b/P``, one ``@@ -L +L @@`` hunk.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator, Mapping

_FLIP = {ast.Lt: ">=", ast.LtE: ">", ast.Gt: "<=", ast.GtE: "<", ast.Eq: "!=", ast.NotEq: "==",
         ast.In: "not in", ast.NotIn: "in", ast.Is: "is not", ast.IsNot: "is"}
_OP_TEXT = {ast.Lt: r"<", ast.LtE: r"<=", ast.Gt: r">", ast.GtE: r">=", ast.Eq: r"==", ast.NotEq: r"!=",
            ast.In: r"\bin\b", ast.NotIn: r"\bnot\s+in\b", ast.Is: r"\bis\b", ast.IsNot: r"\bis\s+not\b"}
_SIMPLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Assert, ast.Delete)
OPERATORS = ("comparison", "constant", "boolean", "boolop", "not", "pass", "return")


@dataclass(frozen=True)
class Edit:
    """Replace bytes ``start:end`` of the source with ``text`` (``line``: the 1-based first line)."""

    operator: str
    line: int
    start: int
    end: int
    text: bytes


@dataclass(frozen=True)
class Mutant:
    """One mutation of ``path`` (repo-relative POSIX) at ``line``; ``id`` is derived from the diff."""

    id: str
    path: str
    line: int
    operator: str
    diff: str
    source: str  # the whole mutated file


def added_line(diff: str) -> str:
    """The first ``+`` line of a `Mutant.diff` (the mutated line as it reads now), without the ``+``."""
    return next((ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")), "")


def _offsets(source: bytes) -> list[int]:
    starts = [0]
    for i, byte in enumerate(source):
        if byte == 0x0A:
            starts.append(i + 1)
    return starts


def _span(node: ast.AST, lines: list[int]) -> tuple[int, int]:
    return (lines[node.lineno - 1] + node.col_offset,  # type: ignore[attr-defined]
            lines[node.end_lineno - 1] + node.end_col_offset)  # type: ignore[attr-defined]


def _own_expressions(stmt: ast.stmt) -> Iterator[ast.AST]:
    """The expression nodes of ``stmt`` outside its nested statements, f-strings and annotations."""
    stack: list[ast.AST] = []
    for name, value in ast.iter_fields(stmt):
        if name in ("body", "orelse", "finalbody", "handlers", "cases", "decorator_list", "returns",
                    "annotation", "type_params"):
            continue
        stack += [v for v in (value if isinstance(value, list) else [value]) if isinstance(v, ast.AST)]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.stmt, ast.JoinedStr, ast.Lambda)):
            continue
        if isinstance(node, ast.expr):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _gap_edit(operator: str, source: bytes, start: int, end: int, pattern: str, new: str, line: int) -> Edit | None:
    """An edit of the one operator token matching ``pattern`` between two operands (bytes start:end)."""
    gap = source[start:end].decode("utf-8", "replace")
    found = [m for m in re.finditer(pattern, gap)]
    if len(found) != 1 or "#" in gap:
        return None
    m = found[0]
    return Edit(operator, line, start + len(gap[:m.start()].encode()), start + len(gap[:m.end()].encode()),
                new.encode())


def _expression_edits(node: ast.AST, source: bytes, lines: list[int]) -> Iterator[Edit]:
    line = node.lineno  # type: ignore[attr-defined]
    if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIP:
        op = type(node.ops[0])
        start, end = _span(node.left, lines)[1], _span(node.comparators[0], lines)[0]
        pattern = _OP_TEXT[op]
        if op is ast.In:
            pattern = r"(?<!not )\bin\b"
        if op is ast.Is:
            pattern = r"\bis\b(?!\s+not\b)"
        edit = _gap_edit("comparison", source, start, end, pattern, _FLIP[op], line)
        if edit is not None:
            yield edit
    elif isinstance(node, ast.Constant) and node.end_lineno == node.lineno:
        start, end = _span(node, lines)
        if isinstance(node.value, bool):
            yield Edit("boolean", line, start, end, str(not node.value).encode())
        elif isinstance(node.value, (int, float)) and not isinstance(node.value, complex):
            yield Edit("constant", line, start, end, repr(node.value + 1).encode())
    elif isinstance(node, ast.BoolOp):
        new, pattern = ("or", r"\band\b") if isinstance(node.op, ast.And) else ("and", r"\bor\b")
        start, end = _span(node.values[0], lines)[1], _span(node.values[1], lines)[0]
        edit = _gap_edit("boolop", source, start, end, pattern, new, line)
        if edit is not None:
            yield edit
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        start, operand = _span(node, lines)[0], _span(node.operand, lines)[0]
        removed = source[start:operand]
        if re.fullmatch(rb"not\s*", removed) and b"\n" not in removed:
            yield Edit("not", line, start, operand, b"")


def _statement_edits(stmt: ast.stmt, source: bytes, lines: list[int]) -> Iterator[Edit]:
    if isinstance(stmt, _SIMPLE) and not _is_docstring(stmt):
        if not (isinstance(stmt, ast.AnnAssign) and stmt.value is None):  # a bare annotation does nothing
            start, end = _span(stmt, lines)
            yield Edit("pass", stmt.lineno, start, end, b"pass" + b"\n" * source[start:end].count(b"\n"))
    if isinstance(stmt, ast.Return) and stmt.value is not None and not (
            isinstance(stmt.value, ast.Constant) and stmt.value.value is None):
        start, end = _span(stmt.value, lines)
        yield Edit("return", stmt.lineno, start, end, b"None" + b"\n" * source[start:end].count(b"\n"))
    for node in _own_expressions(stmt):
        yield from _expression_edits(node, source, lines)


@dataclass(frozen=True)
class Site:
    """One statement (its first ``line``) and the edits possible in it, grouped by operator."""

    line: int
    edits: Mapping[str, tuple[Edit, ...]]


def sites(source: str) -> list[Site]:
    """Every statement of ``source`` with at least one possible edit, in line order. Imports,
    ``def`` and ``class`` headers' own decorators and annotations are never edited."""
    raw = source.encode()
    lines = _offsets(raw)
    out = []
    for stmt in ast.walk(ast.parse(raw)):
        if not isinstance(stmt, ast.stmt) or isinstance(stmt, (ast.Import, ast.ImportFrom)):
            continue
        grouped: dict[str, list[Edit]] = {}
        for edit in _statement_edits(stmt, raw, lines):
            grouped.setdefault(edit.operator, []).append(edit)
        if grouped:
            out.append(Site(stmt.lineno, {k: tuple(v) for k, v in grouped.items()}))
    return sorted(out, key=lambda s: s.line)


@lru_cache(maxsize=8)
def _dump(raw: bytes) -> str:
    return ast.dump(ast.parse(raw))


def apply_edit(path: str, source: str, edit: Edit) -> Mutant | None:
    """The mutant ``edit`` makes of ``source``, or None when it does not compile, changes the
    line count or leaves the AST as it was."""
    raw = source.encode()
    new_raw = raw[:edit.start] + edit.text + raw[edit.end:]
    new = new_raw.decode("utf-8")
    if new.count("\n") != source.count("\n"):
        return None
    try:
        compile(new_raw, path, "exec", dont_inherit=True)
        if ast.dump(ast.parse(new_raw)) == _dump(raw):
            return None
    except (SyntaxError, ValueError):
        return None
    diff = unified_diff(path, source, new)
    first = int(re.search(r"^@@ -(\d+)", diff, re.M).group(1))  # type: ignore[union-attr]
    digest = hashlib.sha1(diff.encode()).hexdigest()[:10]
    return Mutant(digest, path, first, edit.operator, diff, new)


def unified_diff(path: str, old: str, new: str) -> str:
    """``git diff -U0`` style text of one file's change (no ``diff --git`` or index lines)."""
    return "\n".join(difflib.unified_diff(old.splitlines(), new.splitlines(), f"a/{path}", f"b/{path}",
                                          n=0, lineterm="")) + "\n"


def generate(sources: Mapping[str, str], executed: Mapping[str, frozenset[int]], count: int,
             seed: int) -> list[Mutant]:
    """Up to ``count`` distinct mutants of ``sources`` (path -> text) at executed statements: each
    draw takes an operator uniformly among those some executed statement still offers (so the
    common ``pass`` does not crowd out the rest), then one such statement, then one edit of it."""
    by_operator: dict[str, list[tuple[str, Site]]] = {}
    for path in sorted(sources):
        hit = executed.get(path, frozenset())
        try:
            found = sites(sources[path])
        except (SyntaxError, ValueError):
            continue
        for site in found:
            if site.line in hit:
                for operator in site.edits:
                    by_operator.setdefault(operator, []).append((path, site))
    rng = random.Random(seed)
    for operator in sorted(by_operator):
        rng.shuffle(by_operator[operator])
    out: list[Mutant] = []
    seen: set[str] = set()
    while len(out) < count:
        left = sorted(op for op, candidates in by_operator.items() if candidates)
        if not left:
            break
        operator = rng.choice(left)
        path, site = by_operator[operator].pop()
        mutant = apply_edit(path, sources[path], rng.choice(site.edits[operator]))
        if mutant is not None and mutant.id not in seen:
            seen.add(mutant.id)
            out.append(mutant)
    return out


__all__ = ["Edit", "Mutant", "added_line", "OPERATORS", "Site", "apply_edit", "generate", "sites", "unified_diff"]
