"""The import graph over a `ModuleIndex`: which indexed files each file imports, and what reaches what.

Edges come from every import statement anywhere in a file (module level, function bodies,
nested functions, ``try``/``except``/``else``/``finally``, ``if TYPE_CHECKING``), absolute and
relative, resolved as Python would (`ModuleIndex.lookup`):

* ``import a.b.c`` imports ``a``, ``a.b`` and ``a.b.c`` (each package's ``__init__`` runs);
* ``from P import n`` imports P and, when ``P.n`` is a submodule, ``P.n``; ``from P import *``
  also imports the submodules P's literal ``__all__`` names;
* every module imports its parent packages (running ``a/b/c.py`` as ``a.b.c`` ran ``a/__init__``);
* imports by string: ``importlib.import_module("a.b")``, ``__import__``,
  ``pytest.importorskip``, ``pytest_plugins = [...]``, and ``[..., "-m", "a.b", ...]`` argument
  lists (``python -m``; a package's ``__main__`` too); an f-string such as
  ``import_module(f"ci.commands.{name}")`` imports every indexed module whose name starts with
  its literal prefix;
* imports by a computed name (``importlib.import_module(name)``) that the project's
  ``dynamic_imports`` describes: an edge from the importer to every indexed module its globs match
  (``how`` is ``dynamic``). One it does not describe is kept in ``computed`` (file -> lines), so
  lint can ask for an entry.

A first-party import that resolves to nothing is kept in ``unresolved`` (dotted name -> importers)
so that deleting a module selects its importers. Per-file import *records* (the raw statements,
before resolution) can come from `ci.imports.cache.RecordCache`, keyed by the file's content hash,
so an unchanged tree is not parsed again.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections import deque
from typing import TYPE_CHECKING, Iterable, Mapping, NamedTuple

from ci.imports.index import Module, ModuleIndex
from ci.imports.names import statements
from ci.imports.scan import parse_python, read_bytes
from ci.project import DynamicImport

if TYPE_CHECKING:
    from ci.imports.cache import RecordCache

Record = list  # JSON-ready: ["i", line, dotted] | ["f", line, level, module, [names]] | ["a"|"p", line, [names]]
#                            | ["d", line, dotted, is_prefix] | ["m", line, dotted] | ["c", line]

_DYNAMIC_CALL = re.compile(rb"import_module|__import__|importorskip|[\"']-m[\"']")
_DYNAMIC_FUNCS = {"import_module", "__import__", "importorskip"}


class Edge(NamedTuple):  # a tuple: 30,000 of them in a large tree
    """``source`` imports ``target`` (repo-relative paths) at ``line``; ``how`` says by what."""

    target: str
    line: int
    how: str  # import, from, star, string, plugin, -m, package, dynamic


def content_hash(source: bytes) -> str:
    """The cache key of a file's content (BLAKE2b, 128 bits, hex)."""
    return hashlib.blake2b(source, digest_size=16).hexdigest()


def extract_records(tree: ast.Module, source: bytes) -> list[Record]:
    """The import records of one parsed file (see `Record`), in source order."""
    records: list[Record] = []
    for stmt in statements(tree.body):
        if isinstance(stmt, ast.Import):
            records.extend(["i", stmt.lineno, alias.name] for alias in stmt.names)
        elif isinstance(stmt, ast.ImportFrom):
            records.append(["f", stmt.lineno, stmt.level, stmt.module or "", [a.name for a in stmt.names]])
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and stmt.targets[0].id in ("__all__", "pytest_plugins"):
            values = _strings(stmt.value)
            if values is not None:
                records.append(["a" if stmt.targets[0].id == "__all__" else "p", stmt.lineno, values])
    if _DYNAMIC_CALL.search(source):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.args and called_name(node.func) in _DYNAMIC_FUNCS:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    records.append(["d", node.lineno, arg.value, False])
                elif (isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant)
                      and isinstance(arg.values[0].value, str)):
                    records.append(["d", node.lineno, arg.values[0].value, True])
                else:
                    records.append(["c", node.lineno])
            elif isinstance(node, (ast.List, ast.Tuple)):
                elts = node.elts
                for flag, value in zip(elts, elts[1:]):
                    if (isinstance(flag, ast.Constant) and flag.value == "-m" and isinstance(value, ast.Constant)
                            and isinstance(value.value, str)):
                        records.append(["m", value.lineno, value.value])
    return records


_SHAPES = {"i": (int, str), "f": (int, int, str, list), "a": (int, list), "p": (int, list), "d": (int, str, bool),
           "m": (int, str), "c": (int,)}


def _well_formed(record: object) -> bool:
    """A cached record has the shape `extract_records` writes (a damaged cache is re-parsed)."""
    if not (isinstance(record, list) and record and record[0] in _SHAPES):
        return False
    shape = _SHAPES[record[0]]
    return len(record) == len(shape) + 1 and all(isinstance(v, t) for v, t in zip(record[1:], shape)) \
        and all(isinstance(n, str) for n in (record[-1] if isinstance(record[-1], list) else ()))


def _strings(node: ast.expr) -> list[str] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


def called_name(func: ast.expr) -> str | None:
    """``f`` for a call of ``f(...)`` or ``x.f(...)``; None for any other callee."""
    if isinstance(func, ast.Name):
        return func.id
    return func.attr if isinstance(func, ast.Attribute) else None


class ImportGraph:
    """Edges between the files of ``index``; build with `ImportGraph.build`."""

    def __init__(self, index: ModuleIndex, cache: RecordCache | None = None):
        self.index = index
        self.cache = cache
        self.edges: dict[str, list[Edge]] = {}
        self.unresolved: dict[str, set[str]] = {}       # dotted first-party name -> importer rels
        self.computed: dict[str, list[int]] = {}         # rel -> lines importing by a name no glob describes
        self._all: dict[str, list[str]] = {}             # rel -> literal __all__ (star imports)
        self._stars: list[tuple[Module, Module, int]] = []
        self._reverse: dict[str, list[str]] | None = None
        self._resolved: dict[tuple[str | None, str], list[tuple[str, Module | None, bool]]] = {}

    @classmethod
    def build(cls, index: ModuleIndex, cache: RecordCache | None = None) -> ImportGraph:
        """The graph of every indexed file; records from ``cache`` where the content matches."""
        graph = cls(index, cache)
        for module in index.files():
            graph._add(module)
        graph._expand_stars()
        return graph

    def ensure(self, rel: str) -> Module | None:
        """Index and resolve one more file (a test or conftest outside the configured roots);
        None if ``rel`` is not a regular .py file."""
        if rel in self.edges:
            return self.index.by_rel[rel]
        module = self.index.add_file(rel)
        if module is not None and module.rel not in self.edges:
            self._add(module)
            self._expand_stars()
            self._reverse = None
        return module

    # -- records ------------------------------------------------------------------------------------
    def _records(self, module: Module) -> list[Record]:
        if module.parsed:  # the import check parsed it already: share that parse
            return [] if module.tree is None else extract_records(module.tree, module.source)
        source = self.index.scan(module)
        if source is None:
            return []
        digest = content_hash(source) if self.cache is not None else ""
        if self.cache is not None:
            cached = self.cache.get(module.rel, digest)
            if cached is not None and all(map(_well_formed, cached)):
                return cached
        tree, _ = parse_python(source, module.rel)  # a failure: the import check reports it (I003)
        records: list[Record] = [] if tree is None else extract_records(tree, source)
        if self.cache is not None:
            self.cache.put(module.rel, digest, records)
        return records

    # -- resolution ---------------------------------------------------------------------------------
    def _add(self, module: Module) -> None:
        out: dict[str, Edge] = {}
        computed: list[int] = []
        self._parents(module, out)
        for record in self._records(module):
            kind, line = record[0], record[1]
            if kind == "i":
                self._absolute(module, record[2], line, "import", out)
            elif kind == "f":
                self._from(module, record[2], record[3], record[4], line, out)
            elif kind == "a":
                self._all[module.rel] = record[2]
            elif kind == "p":
                for name in record[2]:
                    self._absolute(module, name, line, "plugin", out)
            elif kind == "m":
                target = self._absolute(module, record[2], line, "-m", out)
                if target is not None and target.is_package:
                    self._absolute(module, f"{record[2]}.__main__", line, "-m", out)
            elif kind == "d" and record[2] and not record[2].startswith("."):
                if record[3]:
                    self._prefix(module, record[2], line, out)
                else:
                    self._absolute(module, record[2], line, "string", out)
            elif kind == "c":
                computed.append(line)
        if module.space is None:  # first-party; a test file selects itself by its own path
            described = self._dynamic(module, computed[0] if computed else 0, out)
            if computed and not described:
                self.computed[module.rel] = computed
        out.pop(module.rel, None)
        self.edges[module.rel] = sorted(out.values(), key=lambda e: (e.line, e.target))

    @staticmethod
    def _edge(out: dict[str, Edge], target: Module | None, line: int, how: str) -> None:
        if target is not None and target.path is not None and target.rel not in out:
            out[target.rel] = Edge(target.rel, line, how)

    def _parents(self, module: Module, out: dict[str, Edge]) -> None:
        namespace = self.index.namespace(module)
        parts = module.name.split(".")
        for depth in range(len(parts) - 1, 0, -1):
            self._edge(out, namespace.get(".".join(parts[:depth])), 0, "package")

    def _absolute(self, module: Module, dotted: str, line: int, how: str, out: dict[str, Edge]) -> Module | None:
        # Resolve each name once, or once per folder when a test-tree name there may shadow it.
        folder = None
        if module.basedir is not None:
            top = dotted.partition(".")[0]
            if any(top in namespace for namespace in self.index.search_path(module)):
                folder = module.rel.rpartition("/")[0]
        key = (folder, dotted)
        steps = self._resolved.get(key)
        if steps is None:
            parts = dotted.split(".")
            prefixes = [".".join(parts[:depth]) for depth in range(1, len(parts) + 1)]
            steps = self._resolved[key] = [(p, *self.index.lookup(module, p)) for p in prefixes]
        found = None
        for prefix, found, ours in steps:
            if found is not None:
                self._edge(out, found, line, how)
            elif ours:
                self.unresolved.setdefault(prefix, set()).add(module.rel)
        return found

    def _from(self, module: Module, level: int, name: str, names: list[str], line: int,
              out: dict[str, Edge]) -> None:
        if level:
            dotted = self.index.relative(module, level, name or None)
            if dotted is None:
                return
            namespace = self.index.namespace(module)
            parts = dotted.split(".")
            for depth in range(1, len(parts) + 1):
                self._edge(out, namespace.get(".".join(parts[:depth])), line, "from")
            target = namespace.get(dotted)
            if target is None:
                self.unresolved.setdefault(dotted, set()).add(module.rel)
                return
        else:
            target = self._absolute(module, name, line, "from", out)
            if target is None:
                return
            namespace = self.index.namespace(target)
        for imported in names:
            if imported == "*":
                self._stars.append((module, target, line))
                continue
            child = namespace.get(f"{target.name}.{imported}")
            if child is not None:
                self._edge(out, child, line, "from")
            elif target.is_package:  # a name or a submodule we cannot see (yet, or any more)
                self.unresolved.setdefault(f"{target.name}.{imported}", set()).add(module.rel)

    def _dynamic(self, module: Module, line: int, out: dict[str, Edge]) -> bool:
        """Edges to what ``project: dynamic_imports`` says ``module`` loads by a computed name;
        False when it says nothing about ``module``."""
        targets = self.index.project.dynamic_targets(module.name)
        if not targets:
            return False
        loads = DynamicImport(module.name, targets).loads
        for dotted, target in sorted(self.index.modules.items()):
            if loads(dotted):
                self._edge(out, target, line, "dynamic")
        return True

    def _prefix(self, module: Module, prefix: str, line: int, out: dict[str, Edge]) -> None:
        for namespace in self.index.search_path(module):
            for dotted, target in namespace.items():
                if dotted.startswith(prefix):
                    self._edge(out, target, line, "string")
        if prefix.partition(".")[0] in self.index.top_names or "." not in prefix:
            for dotted in self.index.modules:
                if dotted.startswith(prefix):
                    self._absolute(module, dotted, line, "string", out)

    def _star_names(self, target: Module) -> list[str]:
        """``target``'s literal ``__all__``; parsed here when no record has it (a package
        ``__init__`` that imports nothing is never read for records)."""
        if target.rel not in self._all and target.path is not None and not target.parsed:
            try:
                tree, _ = parse_python(read_bytes(target.path), target.rel)
            except OSError:
                tree = None
            for record in extract_records(tree, b"") if tree is not None else ():
                if record[0] == "a":
                    self._all[target.rel] = record[2]
        return self._all.get(target.rel, [])

    def _expand_stars(self) -> None:
        for module, target, line in self._stars:
            namespace = self.index.namespace(target)
            edges = {e.target for e in self.edges[module.rel]}
            for name in self._star_names(target):
                child = namespace.get(f"{target.name}.{name}")
                if child is not None and child.path is not None and child.rel not in edges:
                    self.edges[module.rel].append(Edge(child.rel, line, "star"))
        self._stars.clear()

    # -- queries ------------------------------------------------------------------------------------
    def label(self, rel: str) -> str:
        """A file as the reasons name it: its dotted name if first-party, else its path."""
        module = self.index.by_rel.get(rel)
        return module.name if module is not None and module.space is None else rel

    def reverse(self) -> dict[str, list[str]]:
        """target -> the files that import it (sorted), built once."""
        if self._reverse is None:
            reverse: dict[str, list[str]] = {}
            for source in sorted(self.edges):
                for edge in self.edges[source]:
                    reverse.setdefault(edge.target, []).append(source)
            self._reverse = reverse
        return self._reverse

    def closure(self, roots: Iterable[str]) -> dict[str, tuple[str | None, int, str]]:
        """Every file reachable from ``roots`` (roots included), breadth first:
        ``rel -> (importer on a shortest path, line, how)``; a root maps to ``(None, 0, "root")``."""
        found: dict[str, tuple[str | None, int, str]] = {}
        queue: deque[str] = deque()
        for root in roots:
            if root not in found:
                found[root] = (None, 0, "root")
                queue.append(root)
        while queue:
            rel = queue.popleft()
            for edge in self.edges.get(rel, ()):
                if edge.target not in found:
                    found[edge.target] = (rel, edge.line, edge.how)
                    queue.append(edge.target)
        return found

    def reach_back(self, seeds: Mapping[str, tuple[str, str | None]]) -> dict[str, tuple[str, str | None]]:
        """Every file that reaches a seed, breadth first over reversed edges.

        ``seeds``: file -> (changed path, importer of it or None when the file is that path).
        Returns file -> (changed path, the file that imports it on a shortest path, or None).
        """
        hit = dict(seeds)
        queue = deque(seeds)
        reverse = self.reverse()
        while queue:
            rel = queue.popleft()
            changed, via = hit[rel]
            for importer in reverse.get(rel, ()):
                if importer not in hit:
                    hit[importer] = (changed, via or importer)
                    queue.append(importer)
        return hit

    def candidates(self, path: str) -> list[str]:
        """Dotted names a file at ``path`` had (or would have), whether or not it exists now."""
        if not path.endswith(".py"):
            return []
        stem = path[:-3]
        if stem.endswith("/__init__"):
            stem = stem[: -len("/__init__")]
        names = []
        for source_root in self.index.project.source_roots:
            base = source_root.strip("/").removeprefix("./")
            base = "" if base in ("", ".") else base + "/"
            if stem.startswith(base):
                names.append(stem[len(base):].replace("/", "."))
        folder = stem.rpartition("/")[0]
        _, prefix = self.index.package_context(folder)
        leaf = stem[len(folder) + 1:] if folder else stem
        names.append(f"{prefix}.{leaf}" if prefix else leaf)
        return [n for n in dict.fromkeys(names) if n and all(p.isidentifier() for p in n.split("."))]


__all__ = ["Edge", "ImportGraph", "Record", "content_hash", "extract_records"]
