"""Where a change lies in a Python file: which function bodies it touches, or the module level.

Line-level selection (`ci.selection.depmap_select`) asks, for each changed Python file, the
scopes of the changed lines of its OLD version (the version the maps' line numbers are of):

- a line inside a function's body (after its ``def`` header and docstring) belongs to the
  innermost such function: a test can only be affected when it ran some line of that body;
- any other line is module level: a ``def`` header (its default values and decorators run at
  import; but a change of a plain function's pure default values alone is a change of its whole
  body: only a call reads them, `diff_scopes`), a docstring (read without running the body: ``pytest --fixtures``, ``--help`` texts), a class body outside its methods, a module-level statement, a blank line or comment
  between definitions (an insertion there may be anything). A module-level change may affect every
  test that loaded the module;
- a function decorated as a kernel (a decorator whose last name ends in ``jit`` or is one of
  `KERNEL_DECORATORS`: ``triton.jit``, ``triton.autotune``, ``torch.compile``, ``numba.njit``...)
  is module level too: its body runs on a device or through a compiler, never line by line as
  Python, so no map records it (a Triton interpreter run on CPU would, a GPU run does not).

Contract: `scopes_of` returns the distinct scopes of ``old_lines`` (sorted by first line), or
None when the source does not parse (then the whole file is the unit of selection). It never
raises for bad Python.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass, replace
from typing import Callable, Iterable, Mapping, Sequence

from ci.selection.diff_hunks import Hunk, apply_hunks
from ci.selection.kernels import KERNEL_DECORATORS, decorator_name, is_kernel
from ci.selection.module_definitions import changed_definitions
from ci.selection.statement_spans import Statements, statements_of

@dataclass(frozen=True)
class Scope:
    """A changed function body (``first``..``last`` are its body's lines) or, with ``first`` None,
    the module level; ``name`` is the dotted function name or ``<module>``, ``line`` the first
    changed line in it (for messages); ``statements``: the changed statements of a body
    (`ci.selection.statement_spans`); ``names``, for the module level: the change only redefines
    these names (`ci.selection.module_definitions`), None when it may be anything."""

    name: str
    first: int | None
    last: int | None
    line: int
    statements: Statements | None = None
    names: frozenset[str] | None = None

    @property
    def is_module(self) -> bool:
        return self.first is None


@dataclass(frozen=True)
class Body:
    """A function's body: its dotted ``name`` (``Cls.method``, ``outer.inner``), its lines
    ``first``..``last`` (after the ``def`` header and docstring), and ``in_class`` when it is a
    method (defined directly in a class body)."""

    name: str
    first: int
    last: int
    in_class: bool = False


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def function_body(node: ast.FunctionDef | ast.AsyncFunctionDef, prefix: str, in_class: bool) -> Body | None:
    """``node``'s body (``prefix`` is its enclosing dotted name with a trailing dot), or None when
    it has no line of its own after the header and docstring. Kernels are the caller's to leave out."""
    # The def line itself is header (defaults, a one-line body's header): module level.
    # So is a docstring: tools read it without running the body (`pytest --fixtures`).
    body = node.body[1:] if _is_docstring(node.body[0]) else node.body
    if not body:
        return None
    first = max(body[0].lineno, node.lineno + 1)
    if node.end_lineno is None or first > node.end_lineno:
        return None
    return Body(prefix + node.name, first, node.end_lineno, in_class)


def function_bodies(tree: ast.AST) -> list[Body]:
    """Every non-kernel function's body, with dotted names; a kernel's nested functions are left
    out with it (they are compiled with it)."""
    return [body for body, _ in bodies_and_nodes(tree)]


def bodies_and_nodes(tree: ast.AST) -> list[tuple[Body, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """`function_bodies` with each body's function node."""
    out: list[tuple[Body, ast.FunctionDef | ast.AsyncFunctionDef]] = []

    def walk(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if is_kernel(child):
                    continue
                body = function_body(child, prefix, in_class)
                if body is not None:
                    out.append((body, child))
                walk(child, prefix + child.name + ".", False)
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".", True)
            else:
                walk(child, prefix, in_class)

    walk(tree, "", False)
    return out


def scopes_of(old_source: str | bytes, old_lines: Iterable[int]) -> tuple[Scope, ...] | None:
    """See the module docstring."""
    try:
        tree = ast.parse(old_source)
        bodies = bodies_and_nodes(tree)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # NUL bytes; a very deep expression
        return None
    found: dict[tuple[int | None, int | None], Scope] = {}
    lines_in: dict[tuple[int | None, int | None], list[int]] = {}
    nodes: dict[tuple[int | None, int | None], ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for line in sorted(set(old_lines)):
        inner = min(((b, n) for b, n in bodies if b.first <= line <= b.last), key=lambda bn: bn[0].last - bn[0].first,
                    default=None)
        key = (None, None) if inner is None else (inner[0].first, inner[0].last)
        lines_in.setdefault(key, []).append(line)
        if key not in found:
            found[key] = (Scope("<module>", None, None, line) if inner is None
                          else Scope(inner[0].name, inner[0].first, inner[0].last, line))
            if inner is not None:
                nodes[key] = inner[1]
    for key, node in nodes.items():
        found[key] = replace(found[key], statements=statements_of(node, lines_in[key]))
    return tuple(sorted(found.values(), key=lambda s: (s.first or 0, s.line)))


def _string_lines(source: str | bytes) -> frozenset[int] | None:
    """The lines a multi-line string literal spans (a '#' there is text, not a comment); None
    when the source does not tokenize."""
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    spans: set[int] = set()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                spans.update(range(token.start[0], token.end[0] + 1))
            elif token.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                spans.update(range(token.start[0], token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None
    return frozenset(spans)


def diff_scopes(touched: Mapping[str, frozenset[int] | None], read_old: Callable[[str], str | bytes | None],
                comment_lines: Mapping[str, frozenset[int]] | None = None,
                hunks: Mapping[str, Sequence[tuple[Hunk, ...] | None]] | None = None) -> dict[str, tuple[Scope, ...] | None]:
    """The scopes of each changed Python file of a diff (`ci.selection.diff_hunks.touched_old_lines`);
    ``read_old(path)`` gives the file's old text, None when it had none. A file that is not
    Python, new, unreadable or not parseable maps to None: it is judged by file. Lines only
    comment-only hunks touched (``comment_lines``: `ci.selection.diff_hunks.comment_only_lines`)
    are left out unless they lie in a multi-line string of the old text; a file whose every
    touched line is left out maps to ``()``: nothing that runs changed. With the file's ``hunks``
    (`ci.selection.diff_hunks.file_diffs`, their new lines included; one set per diff from the
    old text, e.g. to the work tree and to a merge base) a module-level scope carries the names
    the changes redefine (`Scope.names`) when that is all each of them does, and each function
    whose default values alone changed (`ci.selection.module_definitions`) adds its body as a
    scope whose every line is the unit (``Statements.whole``)."""
    out: dict[str, tuple[Scope, ...] | None] = {}
    for path, lines in touched.items():
        old = read_old(path) if path.endswith(".py") and lines is not None else None
        if old is None:
            out[path] = None
            continue
        comments = (comment_lines or {}).get(path, frozenset())
        if comments:
            in_strings = _string_lines(old)
            dropped = comments - (in_strings if in_strings is not None else comments)
            lines = frozenset(lines or ()) - dropped
        out[path] = scopes_of(old, lines or ())
        file_hunks = (hunks or {}).get(path)
        if out[path] and file_hunks and any(scope.is_module for scope in out[path]):
            out[path] = _with_names(out[path], old, file_hunks)
    return out


def _with_names(scopes: tuple[Scope, ...], old: str | bytes, diffs: Sequence[tuple[Hunk, ...] | None]) -> tuple[Scope, ...]:
    text = old.decode("utf-8", "surrogateescape") if isinstance(old, bytes) else old
    names: set[str] = set()
    functions: set[str] = set()  # whose default values alone changed: each a changed body, whole
    for hunks in diffs:
        new = apply_hunks(text, hunks) if hunks is not None else None
        found = changed_definitions(text, new, functions) if new is not None else None
        if found is None:
            return scopes
        names |= found
    module = next(scope for scope in scopes if scope.is_module)
    found_bodies = [body for body in function_bodies(ast.parse(text)) if body.name in functions] if functions else []
    bodies = {body.name: body for body in found_bodies}
    if bodies.keys() != functions or len(bodies) < len(found_bodies):  # a name defined twice: which one?
        return scopes
    headers = tuple(Scope(bodies[name].name, bodies[name].first, bodies[name].last, module.line, Statements(whole=True))
                    for name in sorted(functions))
    return tuple(replace(scope, names=frozenset(names)) if scope.is_module else scope for scope in scopes) + headers
