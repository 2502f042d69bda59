"""Which statement of a function body a changed line belongs to, for selection by statement.

A test that never ran a statement is not affected by a change to it: up to that statement its
run is the same as before, so it never gets there. That holds for a line whose change the map
can see: a line of a statement whose code runs line by line. So each changed line of a body is
mapped to the lines of its statement:

- a simple statement (an assignment, a call, ``return``, ``raise``...): all its lines;
- the header of ``if``, ``while``, ``for``, ``with`` and ``except E``: the lines before the
  block (its condition, iterable, context or exception type);
- a ``def`` or ``class`` inside the body: its decorators and header, or for a class its whole
  text (its body runs when the class statement does).

A line with no code of its own, or whose code the compiler may drop, maps to nothing, and the
whole body is then the unit (`Statements.whole`): ``else:``, ``try:``, ``finally:``, a bare
``except:``, ``pass``, ``break``, ``continue``, ``global``/``nonlocal``, an annotation without a
value, a bare constant, a constant condition (``while True:``), ``match``, and blank or comment
lines between statements. A pure insertion touches its two neighbouring lines
(`ci.selection.diff_hunks`), so it maps to the statements around it.

`Statements.guarded` is true when a changed statement lies in an ``if``/``try`` block of its
function that stores state (`ci.selection.state_stores`): a test that ran the function without
that statement may have found the state filled by an earlier test file.

Contract: `statements_of(function, lines)` answers for the changed ``lines`` of one function's
body (all inside it, none in a nested function's body). Pure.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Iterable

from ci.selection.state_stores import FunctionNames, names_in, stores_state

_NO_CODE = (ast.Pass, ast.Break, ast.Continue, ast.Global, ast.Nonlocal, ast.Try, ast.Match)
_HEADED = (ast.If, ast.While, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)


@dataclass(frozen=True)
class Statements:
    """The changed statements' lines (``spans``: first, last), or ``whole`` when some changed
    line is not a statement the map can see; see the module docstring for ``guarded``."""

    spans: tuple[tuple[int, int], ...] = ()
    whole: bool = False
    guarded: bool = False


def first_line(node: ast.stmt) -> int:
    """A statement's first line: its first decorator's, for a decorated ``def`` or ``class``."""
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])


def _span(node: ast.stmt) -> tuple[int, int] | None:
    """The lines of ``node`` a map sees run, or None (see the module docstring)."""
    if isinstance(node, _NO_CODE):
        return None
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return None
    if isinstance(node, ast.AnnAssign) and node.value is None:
        return None
    if isinstance(node, _HEADED):
        test = getattr(node, "test", None)
        if isinstance(test, ast.Constant):
            return None
        return node.lineno, max(node.lineno, node.body[0].lineno - 1)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return first_line(node), max(node.lineno, node.body[0].lineno - 1)
    if isinstance(node, ast.ClassDef):
        return first_line(node), node.end_lineno or node.lineno
    return node.lineno, node.end_lineno or node.lineno


def _blocks(node: ast.stmt) -> list[tuple[list[ast.stmt], list[ast.AST]]]:
    """The statement lists inside ``node`` with the expressions that guard each."""
    if isinstance(node, ast.If):
        return [(node.body, [node.test]), (node.orelse, [node.test])]
    if isinstance(node, (ast.Try, ast.TryStar)):
        return [(node.body, node.body), *((h.body, node.body) for h in node.handlers),
                (node.orelse, node.body), (node.finalbody, node.body)]
    if isinstance(node, (ast.While, ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
        return [(node.body, []), (node.orelse, [])] if hasattr(node, "orelse") else [(node.body, [])]
    return []


def _find(stmts: list[ast.stmt], line: int, names: FunctionNames, stored: bool) -> tuple[ast.stmt | None, bool, bool]:
    """(the statement holding ``line`` or None, whether ``line`` is its visible part, whether a
    block around it stores state)."""
    for node in stmts:
        end = node.end_lineno or node.lineno
        if not first_line(node) <= line <= end:
            continue
        span = _span(node)
        if span is not None and span[0] <= line <= span[1]:
            return node, True, stored
        if isinstance(node, (ast.Try, ast.TryStar)):
            for handler in node.handlers:
                if handler.lineno <= line < (handler.body[0].lineno if handler.body else line + 1):
                    visible = handler.type is not None
                    return (handler if visible else None), visible, stored  # type: ignore[return-value]
        for block, guard in _blocks(node):
            if block and block[0].lineno <= line <= (block[-1].end_lineno or block[-1].lineno):
                fills = stored or stores_state(block, names, names_in(guard))
                return _find(block, line, names, fills)
        return node, False, stored
    return None, False, stored


def statements_of(function: ast.FunctionDef | ast.AsyncFunctionDef, lines: Iterable[int]) -> Statements:
    """See the module docstring."""
    names = FunctionNames.of(function)
    spans: set[tuple[int, int]] = set()
    guarded = False
    for line in sorted(set(lines)):
        node, visible, stored = _find(function.body, line, names, False)
        if node is None or not visible:
            return Statements(whole=True, guarded=guarded or stored)
        if isinstance(node, ast.ExceptHandler):
            spans.add((node.lineno, max(node.lineno, node.body[0].lineno - 1)))
        else:
            span = _span(node)
            assert span is not None
            spans.add(span)
        guarded = guarded or stored
    return Statements(tuple(sorted(spans)), False, guarded)


__all__ = ["Statements", "first_line", "statements_of"]
