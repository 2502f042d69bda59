"""What each registered test depends on, and which tests a change affects, from the import graph.

A registered test's *roots* are the test file and every ``conftest.py`` from the repository root
down to its folder (pytest loads each); its *closure* is every file the roots import,
transitively (`ci.imports.graph`). `TestDependencies.impact` turns a list of changed paths into
an `Impact`: for each test the graph selects, the reason
(``imports fp4kv/quant/e2m1.py via fp4kv.quant.mx_block16``), and the changed paths that no
registered test covers at all (neither closure, conftest, own path, ``depends_on`` nor
``run_all_paths``). A deleted module selects the files that still import its name, and through
them their tests. `ci.selection.plan` combines this with ``depends_on``, own paths and ``run_all_paths``.

One index and one graph per command; the graph's per-file records are cached on disk
(`ci.imports.cache`) unless ``cache=None``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from ci.imports.cache import RecordCache, default_cache_path
from ci.imports.graph import ImportGraph
from ci.imports.index import ModuleIndex
from ci.registry import Registry, gc_paused, normalize_path, path_is_under, registered_file_problem, run_all_rule

_DEFAULT = object()


@dataclass(frozen=True)
class Impact:
    """What a change set does to the registered tests.

    ``reasons``: test path -> why the import graph or a conftest selects it (own-path and
    ``depends_on`` matches are `ci.selection.plan`'s). ``uncovered``: changed paths that select no registered
    test by any rule. ``not_files``: registered paths that are not regular files -> what they are.
    """

    changed: tuple[str, ...] | None
    reasons: dict[str, str] = field(default_factory=dict)
    uncovered: tuple[str, ...] = ()
    not_files: dict[str, str] = field(default_factory=dict)


class TestDependencies:
    """The import graph of a repository, seen from its registered tests."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, root: str | os.PathLike[str], registry: Registry, *, cache: object = _DEFAULT,
                 index: ModuleIndex | None = None):
        """``cache``: a `RecordCache`, a path for one, None for no cache, or (default) the
        repository's ``.ci-cache/import-records.json``. ``index``: share one built for lint."""
        self.root = Path(root)
        self.registry = registry
        if cache is _DEFAULT:
            cache = default_cache_path(root)
        if cache is not None and not isinstance(cache, RecordCache):
            cache = RecordCache(cache)  # type: ignore[arg-type]
        self.cache: RecordCache | None = cache  # type: ignore[assignment]
        with gc_paused():  # ~100,000 small objects and no cycles: collections only cost time
            self.index = index if index is not None else ModuleIndex(root, registry.project)
            self.graph = ImportGraph.build(self.index, self.cache)
        self._conftests: dict[str, tuple[str, ...]] = {}
        self._scripts: dict[str, tuple[str, ...]] = {}
        self._imports: dict[str, frozenset[str]] = {}
        self.not_files = registered_non_files(self.root, registry)
        self._used_files: set[str] | None = None
        self._prefixes = {_root_as_empty(p) for e in registry.tests.values() for p in e.depends_on}
        self._test_folders = _ancestors_of(t.rpartition("/")[0] for t in registry.tests) | {""}
        for path in registry.tests:
            if path not in self.not_files:
                for rel in self.roots(path):
                    self.graph.ensure(rel)
        if self.cache is not None:
            self.cache.prune({m.rel for m in self.index.files()})
            self.cache.save()

    # -- per test -------------------------------------------------------------------------------------
    def conftests(self, test: str) -> tuple[str, ...]:
        """The conftest.py files pytest loads for ``test`` (normalized): repository root first."""
        folder = test.rpartition("/")[0]
        known = self._conftests.get(folder)
        if known is None:
            parent = self.conftests(folder) if folder else ()
            own = f"{folder}/conftest.py" if folder else "conftest.py"
            known = parent + ((own,) if (self.root / own).is_file() else ())
            self._conftests[folder] = known
        return known

    def scripts(self, test: str) -> tuple[str, ...]:
        """The Python files in ``test``'s ``depends_on`` that the test does not import: scripts it
        runs by path (a subprocess, runpy), which no import of the test shows. What they import
        counts as the test's."""
        known = self._scripts.get(test)
        if known is None:
            entry = self.registry.tests.get(test)
            candidates = [p for p in (entry.depends_on if entry else ())
                          if p.endswith(".py") and (self.root / p).is_file()]
            known = ()
            if candidates:
                roots = self.roots(test, scripts=False)
                for rel in roots:
                    self.graph.ensure(rel)
                imported = self.graph.closure(roots)
                known = tuple(p for p in candidates if p not in imported)
            self._scripts[test] = known
        return known

    def roots(self, test: str, *, scripts: bool = True) -> list[str]:
        """The test file (normalized; when it is a .py file), its conftests and (``scripts``) the
        scripts it runs by path."""
        roots = ([test] if test.endswith(".py") else []) + [c for c in self.conftests(test) if c != test]
        return roots + [s for s in self.scripts(test) if s not in roots] if scripts else roots

    def closure(self, test: str, *, scripts: bool = True) -> dict[str, tuple[str | None, int, str]]:
        """Every file ``test`` runs: `ImportGraph.closure` of its roots (``scripts``: with the
        scripts it runs by path; lint's L005 leaves them out, since they are what ``depends_on``
        names)."""
        roots = self.roots(normalize_path(test), scripts=scripts)
        for rel in roots:
            self.graph.ensure(rel)
        return self.graph.closure(roots)

    def imports_of(self, path: str) -> frozenset[str]:
        """Every file ``path`` imports, directly or not, itself included (memoised); empty for a
        file that is not a regular .py file."""
        known = self._imports.get(path)
        if known is None:
            known = frozenset(self.graph.closure([path])) if self.graph.ensure(path) is not None else frozenset()
            self._imports[path] = known
        return known

    # -- per change -----------------------------------------------------------------------------------
    def impact(self, changed: Sequence[str] | None) -> Impact:
        """See `Impact`; ``changed=None`` (no change filter) only reports ``not_files``."""
        if changed is None:
            return Impact(None, not_files=dict(self.not_files))
        changed = tuple(sorted({normalize_path(p) for p in changed}))
        hit = self.graph.reach_back(self._seeds(changed))
        reasons = {}
        for path in self.registry.tests:
            if path in self.not_files:
                continue
            why = self._why(path, changed, hit)
            if why is not None:
                reasons[path] = why
        uncovered = tuple(p for p in changed if not self._covered(p))
        return Impact(changed, reasons, uncovered, dict(self.not_files))

    def _seeds(self, changed: Iterable[str]) -> dict[str, tuple[str, str | None]]:
        seeds: dict[str, tuple[str, str | None]] = {}
        deleted = []
        for path in changed:
            if path in self.graph.edges:
                seeds.setdefault(path, (path, None))
            elif not (self.root / path).exists():
                deleted.append(path)
        for path in deleted:
            for importer in self._importers_of_deleted(path):
                seeds.setdefault(importer, (f"{path} (deleted)", importer))
        return seeds

    def _importers_of_deleted(self, path: str) -> list[str]:
        found: set[str] = set()
        for dotted in self.graph.candidates(path):
            found.update(self.graph.unresolved.get(dotted, ()))
        return sorted(found)

    def _why(self, test: str, changed: tuple[str, ...], hit: dict[str, tuple[str, str | None]]) -> str | None:
        if test in hit:
            source, via = hit[test]
            if via is not None:
                return f"imports {source}" if via == test else f"imports {source} via {self.graph.label(via)}"
        for conftest in self.conftests(test):
            if conftest in hit:
                source, via = hit[conftest]
                if via is None:
                    return f"conftest {conftest} changed"
                return f"conftest {conftest} imports {source}" + (
                    "" if via == conftest else f" via {self.graph.label(via)}")
        for script in self.scripts(test):
            if script in hit and hit[script][1] is not None:  # the script itself: plan's depends_on rule
                source, via = hit[script]
                return f"runs {script}, which imports {source}" + (
                    "" if via == script else f" via {self.graph.label(via)}")
        folder = test.rpartition("/")[0]
        for path in changed:  # a deleted conftest above the test changed what pytest loads
            directory, _, name = path.rpartition("/")
            if name == "conftest.py" and path_is_under(folder, directory) and not (self.root / path).exists():
                return f"conftest {path} deleted"
        return None

    def _covered(self, path: str) -> bool:
        registry = self.registry
        if run_all_rule(registry.run_all_paths, path) is not None or path in registry.tests:
            return True
        if not self._prefixes.isdisjoint(_ancestors_of([path])):  # under some test's depends_on
            return True
        folder, _, name = path.rpartition("/")
        if name == "conftest.py" and folder in self._test_folders:
            return True
        used = self._used()
        if path in used:
            return True
        return not (self.root / path).exists() and any(i in used for i in self._importers_of_deleted(path))

    def _used(self) -> set[str]:
        """Every file some registered test runs (one breadth-first pass from all their roots)."""
        if self._used_files is None:
            roots = [r for path in self.registry.tests if path not in self.not_files for r in self.roots(path)]
            self._used_files = set(self.graph.closure(roots))
        return self._used_files


def registered_non_files(root: str | os.PathLike[str], registry: Registry) -> dict[str, str]:
    """Registered paths that are not regular files -> what they are; `ci.selection.plan` never selects them
    (a directory would run every test in it). One ``stat`` per entry."""
    found = {}
    for path in registry.tests:
        problem = registered_file_problem(root, path)  # the rule ci run and the rerun bot use too
        if problem is not None:
            found[path] = problem
    return found


def _root_as_empty(path: str) -> str:
    path = normalize_path(path)
    return "" if path == "." else path


def _ancestors_of(paths: Iterable[str]) -> set[str]:
    """Each path and every folder above it, the root as ``""``: ``path_is_under(p, x)`` is
    ``_root_as_empty(x) in _ancestors_of([p])``."""
    found = {""}
    for path in paths:
        path = normalize_path(path)
        while path and path not in found:
            found.add(path)
            path = path.rpartition("/")[0]
    return found


__all__ = ["Impact", "TestDependencies", "registered_non_files"]
