"""Whether a test could reach a changed function its recorded run never entered: state cached
by an earlier test file, a branch another state would take.

A map records what one test file ran in one process. A result cached by an earlier test file
in the same process (a ``functools.lru_cache``, a table built on first use) is read by a later
file without running the body that computed it, so that body is not in the later file's map;
in a fresh process the later file would run it. Line-level selection therefore also asks, for a
changed function body ``G`` a test ``T`` never ran: could ``T``'s own run have led to ``G``
under other state? It walks the static references back from ``G``:

- the references to a function are the places its name appears (``g(...)``, ``obj.g``, ``g``
  passed as a value), by name; ``__init__``, ``__new__`` and ``__post_init__`` are
  referenced by their class's name. A method is not referenced by ``B.g`` when every class named
  ``B`` among the sources defines its own ``g`` and none is the method's class, and no file binds
  ``B`` otherwise (``import ... as B``, ``B = ...``): ``Color.parse`` is no call of ``Style.parse``;
  a subclass that inherits ``g`` (``Fancy.g``) still is;
- a reference inside a function ``F`` that ``T`` ran a line of (``F`` entered) decides: ``T``
  is selected when the referencing line is one ``T`` did not run (a branch not taken: ``if
  cached is None: cached = build()``), or when ``T`` ran it but never entered any function of
  that name (the call was answered without running a body: a cache hit, a short-circuit on the
  same line). A reference in a function ``T`` never entered is followed the same way, back to
  that function's own references, through at most `MAX_HOPS` such functions; a name in more
  than `MAX_FILES_PER_NAME` files is not followed (by name alone it could mean anything);
- a reference inside a function that keeps results across calls (``lru_cache``, a store into a
  module-level memo: `FileSites.cached`) decides as soon as ``T`` ran that function's body or a
  call of it, whatever lines ``T`` ran: a call answered from the cache another test file filled
  ran none of the body, for these arguments or others (``T`` ran ``Style.normalize`` for names
  that raise and had every definition's answer cached, so it never ran ``str(...)``);
- a reference at module level or in a class body ran at import, alike for every test: it leads
  nowhere (module-level changes have their own rule).

- a special method (``__str__``, ``__add__``, ``__getitem__``: `ci.selection.implicit_calls`) is
  also referenced by the syntax that calls it unnamed (``str(x)``, ``f"{x}"``, ``a + b``, ``x[k]``)
  in any file that imports its file, however common the syntax, when the special method is the
  changed function itself (not one the walk passes through: every subscript would then lead to
  every ``__getitem__``'s callees); such a site decides by a branch that stores state or a
  function that keeps results (next), not by a lazy part of its line; ``g = obj.f`` (a bound
  method kept under a local name) references ``f``;

What it cannot see: a call through a table or attribute that never names the function
(``HANDLERS[kind](x)``), special methods called by syntax the table does not know (truthiness,
dict and set lookups, ``__getattr__``, ``__call__``), and ``getattr`` by string.

Contract: `ReferenceIndex(sources)` indexes the Python sources given (path -> text; a file that
does not parse is left out). `ReferenceIndex.reason(path, scope, ran)` walks back from the
function body ``scope`` of ``path`` for a test whose executed lines of a file are ``ran(file)``
and returns why the test could reach it, or None. Pure, never raises for bad Python.
"""

from __future__ import annotations

import ast
import re
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Container, Mapping

from ci.selection.edit_scopes import Body, Scope
from ci.selection.implicit_calls import IMPLICIT
from ci.selection.reference_sites import FileSites, Site

# How many functions the test never entered a walk goes through (``top`` entered -> ``middle`` ->
# ``leaf`` changed is one): cache fills sit next to what they fill; an unbounded walk over names
# climbs the whole call graph of a large tree (SGLang: thousands of files parsed per change).
MAX_HOPS = 2
# A name in more files than this (``forward``, ``get``, ``run`` in a large tree) says nothing by
# itself about which function a reference means; the walk does not follow it.
MAX_FILES_PER_NAME = 100

_WORD = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
_CLASS_NAMED = frozenset({"__init__", "__new__", "__post_init__"})

RanLines = Callable[[str], "frozenset[int]"]
Imports = Callable[[str], Container[str]]


def reference_name(body: Body) -> str:
    """The name a body's function is referenced by (see the module docstring)."""
    parts = body.name.split(".")
    if body.in_class and parts[-1] in _CLASS_NAMED and len(parts) > 1:
        return parts[-2]
    return parts[-1]


@dataclass
class _Run:
    """One test's run, as the walk asks about it; answers are memoised."""

    ran: RanLines
    index: "ReferenceIndex"
    _sorted: dict[str, list[int]] = field(default_factory=dict)
    _entered_names: dict[str, bool] = field(default_factory=dict)

    def lines(self, path: str) -> list[int]:
        if path not in self._sorted:
            self._sorted[path] = sorted(self.ran(path))
        return self._sorted[path]

    def entered(self, path: str, body: Body) -> bool:
        lines = self.lines(path)
        i = bisect_left(lines, body.first)
        return i < len(lines) and lines[i] <= body.last

    def entered_name(self, name: str) -> bool:
        """Whether the run entered any function referenced by ``name``."""
        if name not in self._entered_names:
            self._entered_names[name] = any(self.entered(path, b) for path, b in self.index.bodies_named(name))
        return self._entered_names[name]


@dataclass(frozen=True)
class CachedCalls:
    """A changed function that keeps results across calls (``how``: `FileSites.cached`) and the
    lines that call it (``calls``: file -> lines). A test that ran one of them may have been
    answered from a cache an earlier test filled, so its run says nothing of the changed line.
    ``lazy``: the (file, line) of calls that are only a lazy part of their line (``x if c else
    f(x)``): the line can run without calling."""

    name: str
    how: str
    calls: Mapping[str, frozenset[int]]
    lazy: frozenset[tuple[str, int]] = frozenset()


def _means(site: Site, name: str, where: str, method: bool, read: bool, imports: Imports | None) -> bool:
    """Whether ``site`` may reference the function ``name`` of file ``where`` (a method when
    ``method``; read as an attribute when ``read``): see the module docstring."""
    if site.kind == "attribute" and not read:
        return False  # ``obj.name`` read, not called: data, unless a property
    if site.kind == "alias" and (site.base is None or site.on(name) != "other"):
        return False  # ``x = self.width``, ``get = self._colors.__getitem__``: an alias only of a module's or class's
    on = site.on(name)
    if (on == "local" and site.bare) or on == ("scope" if method else "local"):
        return False  # a local variable of that name; a method named bare; a module's function named as an
        # attribute of a local (``path.resolve()``)
    # another function of the same name where the referencing file cannot see this one
    return site.path == where or imports is None or where in imports(site.path)


class ReferenceIndex:
    """See the module docstring. Lazy: a file is parsed when a name the walk asks about occurs
    in its text, so a walk over a large tree parses the few files its names appear in."""

    def __init__(self, sources: Mapping[str, str | bytes]):
        self._sources = {path: text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text
                         for path, text in sources.items()}
        self._files: dict[str, FileSites | None] = {}
        self._holding: dict[str, list[str]] | None = None
        self._cached: dict[tuple[str, int | None, int | None], CachedCalls | None] = {}  # one plan asks per test
        self._own: dict[tuple[str, str], frozenset[str]] = {}

    def _file(self, path: str) -> FileSites | None:
        if path not in self._files:
            found = None
            text = self._sources.get(path)
            if text is not None:
                try:
                    found = FileSites.of(path, ast.parse(text))
                except (SyntaxError, ValueError, RecursionError, MemoryError):
                    found = None  # a very deep expression overflows the parser or the visit: left out
            self._files[path] = found
        return self._files[path]

    def _paths_with(self, name: str) -> list[str]:
        """The files whose text holds ``name`` as a word (one pass over every file, on first use)."""
        if self._holding is None:
            self._holding = {}
            for path, text in self._sources.items():
                for word in set(_WORD.findall(text)):
                    self._holding.setdefault(word.decode("ascii"), []).append(path)
        return self._holding.get(name, [])

    def paths_with(self, name: str) -> list[str]:
        """The files given whose text holds ``name`` as a word."""
        return list(self._paths_with(name))

    def source(self, path: str) -> bytes | None:
        """The text given for ``path``."""
        return self._sources.get(path)

    def file_sites(self, path: str) -> FileSites | None:
        """``path``'s sites, None when it was not given or does not parse."""
        return self._file(path)

    def _files_with(self, name: str) -> list[FileSites]:
        return [f for f in map(self._file, self._paths_with(name)) if f is not None]

    def common(self, name: str) -> bool:
        """Whether ``name`` occurs in more than `MAX_FILES_PER_NAME` files: too common to follow."""
        return len(self._paths_with(name)) > MAX_FILES_PER_NAME

    def sites(self, name: str) -> list[Site]:
        """Every place ``name`` is referenced, in every file given."""
        return [site for found in self._files_with(name) for site in found.sites.get(name, ())]

    def bodies_named(self, name: str) -> list[tuple[str, Body]]:
        """Every function body referenced by ``name`` (`reference_name`), with its file."""
        return [(f.path, b) for f in self._files_with(name) for b in f.bodies if reference_name(b) == name]

    def bodies(self, path: str) -> list[Body]:
        """The function bodies of one file (none when it does not parse or was not given)."""
        found = self._file(path)
        return found.bodies if found is not None else []

    def body_at(self, path: str, scope: Scope) -> Body | None:
        return next((b for b in self.bodies(path) if b.first == scope.first and b.last == scope.last), None)

    def _owners(self, base: str, name: str) -> frozenset[str]:
        """The class names ``base`` may mean (``base`` itself), when ``base.name`` is each class's
        own method: every ``class base`` among the sources defines ``name``, and no file binds
        ``base`` another way; else empty (``base`` may be anything, a subclass inheriting ``name``)."""
        key = (base, name)
        if key not in self._own:
            word = re.escape(base.encode("ascii"))
            classes = sum(len(re.findall(rb"^[ \t]*class[ \t]+" + word + rb"\b", self._sources[p], re.M))
                          for p in self._paths_with(base))
            rebound = any(re.search(rb"\bas[ \t]+" + word + rb"\b|^[ \t]*" + word + rb"[ \t]*(:[^=\n]*)?=[^=]",
                                    self._sources[p], re.M) for p in self._paths_with(base))
            owning = {(p, b.name.rpartition(".")[0]) for p, b in self.bodies_named(name)
                      if b.in_class and b.name.split(".")[-2:] == [base, name]}
            self._own[key] = frozenset({base}) if classes and len(owning) == classes and not rebound else frozenset()
        return self._own[key]

    def _other_class(self, site: Site, name: str, target: Body, method: bool) -> bool:
        """Whether ``site`` (``B.name``) calls class ``B``'s own method, not ``target`` (see `_owners`)."""
        if not method or site.bare or site.base is None or site.on(name) != "other":
            return False
        owner = target.name.split(".")[-2] if "." in target.name else ""
        return site.base != owner and site.base in self._owners(site.base, name)

    def _marked(self, path: str, body: Body) -> tuple[bool, bool]:
        """(a decorator may skip the body, it is read as an attribute) for a body of ``path``."""
        found = self._file(path)
        return (found is not None and body.first in found.skippable), (found is not None and body.first in found.properties)

    def reason(self, path: str, scope: Scope, ran: RanLines, imports: Imports | None = None) -> str | None:
        """See the module docstring. ``imports(path)``: the files ``path`` imports, directly or
        not (the static import graph); a reference counts only from a file that imports the
        referenced function's file (or is that file). None: every reference counts."""
        start = self.body_at(path, scope) if not scope.is_module else None
        if start is None:
            return None
        run = _Run(ran, self)
        later: str | None = None
        seen = {(path, start.first)}
        queue = deque([(path, start, 0)])
        while queue:
            where, target, hops = queue.popleft()
            name = reference_name(target)
            if self.common(name) and name not in IMPLICIT:
                continue
            skippable, read = self._marked(where, target)
            method = target.in_class and name == target.name.rpartition(".")[2]
            for site in self._sites_seeing(name, where, imports):
                holder = site.body
                if holder is None or not _means(site, name, where, method, read, imports) \
                        or self._other_class(site, name, target, method) or (site.kind == "implicit" and hops):
                    continue  # module level leads nowhere; syntax only for the changed function itself
                entered = run.entered(site.path, holder)
                why = self._decides(run, site, holder, name, start, skippable) if entered else None
                if why is None and (cached := self._through_cache(run, site, holder, name, start, imports)):
                    if entered:
                        return cached
                    later = later or cached  # a reason the walk's own may still give in its words
                if why is not None:
                    return why
                if not entered and hops < MAX_HOPS and (site.path, holder.first) not in seen:
                    seen.add((site.path, holder.first))
                    queue.append((site.path, holder, hops + 1))
        return later

    def _through_cache(self, run: _Run, site: Site, holder: Body, name: str, start: Body,
                       imports: Imports | None) -> str | None:
        """For a reference inside a function that keeps results across calls (`FileSites.cached`):
        why a test that ran its body or a call of it may have reached ``start`` (an answer from the
        cache skipped the body, for these arguments or others); None otherwise."""
        calls = self.cached_calls(site.path, Scope(holder.name, holder.first, holder.last, site.line), imports)
        if calls is None:
            return None
        kept = f"whose results are kept across calls ({calls.how}), and which reaches {start.name}() through {name}"
        if run.entered(site.path, holder):
            # A named call on a line the test ran went, with its own arguments, to another function of
            # that name (else it would have entered ``start``'s way): `_decides` judges that line. An
            # implicit one depends on its operands' types, and ran only if the line got that far.
            if site.kind == "implicit" or site.line not in run.ran(site.path):
                return f"ran {holder.name}() in {site.path}, {kept} at line {site.line}"
            return None
        for call_path, at in sorted(calls.calls.items()):
            if hit := sorted(at & run.ran(call_path)):
                return f"ran {call_path}:{hit[0]}, a call of {holder.name}() in {site.path}, {kept} at line {site.line}"
        return None

    def cached_calls(self, path: str, scope: Scope, imports: Imports | None = None) -> "CachedCalls | None":
        """For a changed body ``scope`` of ``path`` whose function keeps results across calls
        (`FileSites.cached`): the lines that reference it, by file (the same references as
        `reason` follows, module level included); None for any other body. One ``imports`` per
        index: the answer is kept."""
        key = (path, scope.first, scope.last)
        if key not in self._cached:
            self._cached[key] = self._cached_calls(path, scope, imports)
        return self._cached[key]

    def _cached_calls(self, path: str, scope: Scope, imports: Imports | None) -> "CachedCalls | None":
        start = self.body_at(path, scope) if not scope.is_module else None
        found = self._file(path)
        how = found.cached(start.first) if found is not None and start is not None else None
        if start is None or how is None:
            return None
        name = reference_name(start)
        _, read = self._marked(path, start)
        method = start.in_class and name == start.name.rpartition(".")[2]
        calls: dict[str, set[int]] = {}
        eager: set[tuple[str, int]] = set()  # a line with a call that is not a lazy part of it
        if not self.common(name):
            for site in self.sites(name):
                if _means(site, name, path, method, read, imports) and not self._other_class(site, name, start, method):
                    calls.setdefault(site.path, set()).add(site.line)
                    if not site.lazy:
                        eager.add((site.path, site.line))
        lazy = frozenset((p, n) for p, lines in calls.items() for n in lines if (p, n) not in eager)
        return CachedCalls(start.name, how, {p: frozenset(lines) for p, lines in calls.items()}, lazy)

    def _sites_seeing(self, name: str, where: str, imports: Imports | None) -> list[Site]:
        """The references to ``name``; for a special method (`IMPLICIT`) also the syntax that calls
        it unnamed, in every file that can see ``where`` (no word in the text to find it by)."""
        if name not in IMPLICIT:
            return self.sites(name)
        found = []
        for path in self._sources:
            if path == where or imports is None or where in imports(path):
                sites = self._file(path)
                found.extend(sites.sites.get(name, ()) if sites is not None else ())
        return found

    @staticmethod
    def _decides(run: _Run, site: Site, holder: Body, name: str, start: Body, skippable: bool) -> str | None:
        lines = run.lines(site.path)
        i = bisect_left(lines, site.line)
        if site.memo and (i == len(lines) or lines[i] != site.line):
            return (f"ran {holder.name}() in {site.path}, whose line {site.line} (not run) leads to "
                    f"{start.name}() through {name}")
        if (site.lazy or skippable) and site.kind != "implicit" and not run.entered_name(name):
            # a lazy ``a + b`` that entered no ``__add__`` most often added numbers: it says nothing of a cache
            how = "a part of the line that need not run" if site.lazy else "a decorated function it never entered"
            return (f"ran {site.path}:{site.line} in {holder.name}(), which names {name} ({how}) on the way "
                    f"to {start.name}()")
        return None


__all__ = ["CachedCalls", "ReferenceIndex", "Site", "reference_name"]
