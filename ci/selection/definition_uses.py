"""Where the names a module-level change redefines are read: the code a test must have run.

A module-level change that only redefines names (`ci.selection.module_definitions`: a constant's
value, a kernel's body) can affect a test only through code that reads one of them. The uses of
a name are found by name (`ci.selection.reach.ReferenceIndex`), in the changed file and in every
file that imports it (the static import graph, ``imports``):

- a reference inside a function body is a use: a test is affected when it ran that statement,
  or could have (`ci.selection.depmap_select` asks the same as for a changed statement there);
- a reference inside a kernel's body makes the kernel a redefined name too (it is compiled with
  the value), and so does an alias (``from m import X as Y``) and a module-level assignment of a
  pure value that reads the name (``ROWS = CHUNK_BLOCKS * 2``): their own uses are followed;
- any other reference at module level or in a class body (a default value, a decorator's
  argument, a call, ``if X:``) runs at import with the new value, for every importer: no
  narrowing (None);
- the name in a string (``getattr(mod, "X")``, ``monkeypatch.setattr(m, "X", 1)``) inside a
  function body is a use there: whatever reads the name through it runs that line first;
- no narrowing (None) for the name in a string at module level or in a class body (other than
  a string statement, such as a docstring, or ``__all__``): it may be read anywhere; nor for a
  file that does not parse, a name in more than `ci.selection.reach.MAX_FILES_PER_NAME` files,
  or more than `MAX_NAMES` names followed.

A bare name that is a local variable of its function is not a use. Contract:
`DefinitionUses(index, imports).of(path, names)` returns the uses (possibly none) of ``names``
defined in ``path``, or None when the change must count as module level. Memoised; pure.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field

from ci.selection.edit_scopes import Body, bodies_and_nodes
from ci.selection.kernels import is_kernel
from ci.selection.module_definitions import pure_assignment
from ci.selection.reach import Imports, ReferenceIndex
from ci.selection.statement_spans import Statements, first_line, statements_of

MAX_NAMES = 64

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Use:
    """A read of ``name`` at ``path``:``line`` in ``body``; ``statements``: its statement."""

    path: str
    body: Body
    line: int
    name: str
    statements: Statements


@dataclass
class _Facts:
    """What one file says about names beyond its sites (see the module docstring)."""

    tops: list[ast.stmt]
    starts: list[int]
    bodies: list[tuple[Body, ast.FunctionDef | ast.AsyncFunctionDef]]
    in_strings: dict[str, set[int]] = field(default_factory=dict)
    aliases: dict[str, set[str]] = field(default_factory=dict)
    kernel_readers: dict[str, set[str]] = field(default_factory=dict)
    kernel_headers: set[str] = field(default_factory=set)

    def top_level(self, line: int) -> ast.stmt | None:
        i = bisect_right(self.starts, line) - 1
        if i < 0:
            return None
        node = self.tops[i]
        return node if line <= (node.end_lineno or node.lineno) else None

    def body_at(self, line: int) -> tuple[Body, ast.FunctionDef | ast.AsyncFunctionDef] | None:
        """The innermost function body holding ``line``, with its node."""
        return min(((b, n) for b, n in self.bodies if b.first <= line <= b.last),
                   key=lambda bn: bn[0].last - bn[0].first, default=None)

    def statements(self, body: Body, line: int) -> Statements:
        node = next((n for b, n in self.bodies if b.first == body.first and b.last == body.last), None)
        return statements_of(node, [line]) if node is not None else Statements(whole=True)


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the strings that are statements of their own (docstrings, a string after an
    assignment documenting it) and of ``__all__``'s strings: text no code reads a name from."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            out.add(id(node.value))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                out.update(id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant))
    return out


def _words(nodes: list[ast.AST]) -> set[str]:
    out: set[str] = set()
    for node in nodes:
        for inner in ast.walk(node):
            if isinstance(inner, ast.Name):
                out.add(inner.id)
            elif isinstance(inner, ast.Attribute):
                out.add(inner.attr)
    return out


def _facts(tree: ast.Module) -> _Facts:
    tops = list(tree.body)
    facts = _Facts(tops, [first_line(s) for s in tops], bodies_and_nodes(tree))
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)) and id(node) not in skip:
            text = node.value.decode("latin-1") if isinstance(node.value, bytes) else node.value
            for word in _WORD.findall(text):
                facts.in_strings.setdefault(word, set()).add(node.lineno)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.asname and alias.asname != alias.name:
                    facts.aliases.setdefault(alias.name, set()).add(alias.asname)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_kernel(node):
            args = node.args
            facts.kernel_headers |= _words([*node.decorator_list, *args.defaults,
                                            *(d for d in args.kw_defaults if d is not None),
                                            *([node.returns] if node.returns else [])])
            for word in _words(list(node.body)) - {node.name}:
                facts.kernel_readers.setdefault(word, set()).add(node.name)
    return facts


class DefinitionUses:
    """See the module docstring."""

    def __init__(self, index: ReferenceIndex, imports: Imports | None = None):
        self._index, self._imports = index, imports
        self._facts: dict[str, _Facts | None] = {}
        self._memo: dict[tuple[str, frozenset[str]], tuple[Use, ...] | None] = {}

    def _file(self, path: str) -> _Facts | None:
        if path not in self._facts:
            text = self._index.source(path)
            found = None
            if text is not None:
                try:
                    found = _facts(ast.parse(text))
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    found = None
            self._facts[path] = found
        return self._facts[path]

    def of(self, path: str, names: frozenset[str]) -> tuple[Use, ...] | None:
        """See the module docstring."""
        key = (path, names)
        if key not in self._memo:
            self._memo[key] = self._find(path, names)
        return self._memo[key]

    def _find(self, path: str, names: frozenset[str]) -> tuple[Use, ...] | None:
        queue = deque((name, path) for name in sorted(names))
        seen = set(queue)
        uses: list[Use] = []

        def follow(name: str, home: str) -> None:
            if (name, home) not in seen:
                seen.add((name, home))
                queue.append((name, home))

        while queue:
            name, home = queue.popleft()
            if len(seen) > MAX_NAMES or self._index.common(name):
                return None
            for where in self._index.paths_with(name):
                if where != home and self._imports is not None and home not in self._imports(where):
                    continue  # cannot see this definition
                facts, sites = self._file(where), self._index.file_sites(where)
                if facts is None or sites is None or name in facts.kernel_headers:
                    return None
                for line in sorted(facts.in_strings.get(name, ())):
                    holder = facts.body_at(line)
                    if holder is None:
                        return None  # a string at module level may name it for code anywhere
                    uses.append(Use(where, holder[0], line, name, facts.statements(holder[0], line)))
                for alias in sorted(facts.aliases.get(name, ())):
                    follow(alias, where)
                for kernel in sorted(facts.kernel_readers.get(name, ())):
                    follow(kernel, where)
                for site in sites.sites.get(name, ()):
                    if site.body is None:
                        top = facts.top_level(site.line)
                        assigned = pure_assignment(top) if top is not None else None
                        if assigned is None:
                            return None  # runs at import, for every importer
                        for target in sorted(assigned[0]):
                            follow(target, where)
                        continue
                    if site.bare and site.on(name) == "local":
                        continue
                    uses.append(Use(where, site.body, site.line, name, facts.statements(site.body, site.line)))
        return tuple(uses)


__all__ = ["DefinitionUses", "MAX_NAMES", "Use"]
