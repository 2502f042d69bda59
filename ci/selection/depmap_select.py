"""Select tests by their runtime dependency maps; the static import graph stays the fallback.

`select_by_maps` decides, for each registered test of a tier, whether its latest recorded map may
decide and what it says; `ci.selection.plan` asks the result (`MapSelection`) for each test that
neither its own path, ``depends_on`` nor ``run_all_paths`` selected already.

Contract:
- A test's map decides when it is usable (complete, with tests that ran: `TestMap.usable`), no
  older than ``max_age_days`` at ``now`` and not from the future (`depmap_format.in_future`), and the test file itself is not among the changed
  files. It then selects the test when the change can reach it, and says how
  (``executed pkg/a.py:12 in f() in run 7 at 1a2b3c4d5e6f``):
  - a changed file the test opened selects it;
  - line level, when the map has lines (version 2) and the changed file's scopes relative to the
    map's commit are known (``scopes_for(sha)``: `ci.selection.git_lines`, None when git cannot
    tell, e.g. the commit is not in a shallow clone): a changed statement of a function body
    selects the test when it ran that statement (`ci.selection.statement_spans`; the whole body
    when a changed line is no statement a map sees, or with ``by_statement=False``), or when the
    statement lies in a branch that stores state; a body the test never ran selects it when its
    run could have led there under other state (`ci.selection.reach`: a cache an earlier test
    file filled). A module-level change selects a test that
    executed any line of the file or that the static import graph says imports it
    (``module_reach(path)``: test -> the graph's reason): a changed constant reaches every
    importer, whatever it executed; unless the change only redefines names (`Scope.names`: a
    constant's pure value, a kernel's body) and their uses are known
    (`ci.selection.definition_uses`): a use is then judged like a changed statement of its body.
    A changed statement that also ran outside any test's own work
    (the map's ``shared`` lines: import-time code, session fixtures, the session itself) counts
    as module level, since its effect reaches every importer; a body that ran there without
    reaching a changed statement does not (the whole body does where the statement is no unit:
    `_ran_outside`);
  - file level otherwise (a version-1 map, a list of paths without lines, a file that drifted):
    a test that executed the file or imports it (the graph) is selected; the map only adds what
    the graph cannot see (an executed file no import names, an opened data file).
- A decided map's lines are of its commit; the files outside the change that differ between that
  commit and the tree planned (``drift_for(sha)``) are judged against the map first by the same
  rules: a test they reach may run here what its map never saw, and falls back (``is stale``).
- Every other test falls back to the static graph's verdict, and the reason for the fallback is
  added to it: ``no map: static graph``, ``map of run 7 at ... is 20.0 days old (limit 14): static graph``.
  A map that cannot be trusted is never read as "this test needs nothing".
- Pure: no file system, no store, no clock but ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping, Sequence

from ci.selection.bytest_select import Narrowed, narrow
from ci.selection.definition_uses import DefinitionUses, Use
from ci.selection.depmap_format import StoredTestMap, in_future
from ci.selection.edit_scopes import Scope
from ci.selection.reach import Imports, ReferenceIndex

ScopesFor = Callable[[str | None], "Mapping[str, tuple[Scope, ...] | None] | None"]
ReferencesFor = Callable[[str | None, frozenset[str]], "ReferenceIndex | None"]

DEFAULT_MAX_AGE_DAYS = 14.0


@dataclass(frozen=True)
class MapVerdict:
    """A map's decision for one test: ``why`` it is selected, or None (not affected); ``touched``:
    the changed files the map holds (executed or opened), which it judged line by line."""

    why: str | None
    origin: str
    touched: tuple[str, ...] = ()
    narrowed: Narrowed | None = None  # a selected file's node ids (`ci.selection.bytest_select`); None: no per-id data


@dataclass(frozen=True)
class MapSelection:
    """Per test: a map's verdict (``decided``) or why the static graph decides (``fallback``);
    ``newest``: the origin and time of the newest map that decided a test (None: none did)."""

    decided: dict[str, MapVerdict] = field(default_factory=dict)
    fallback: dict[str, str] = field(default_factory=dict)
    newest: tuple[str, str] | None = None

    def why(self, test: str, static_why: str | None) -> str | None:
        """Why ``test`` is selected (None: it is not), given the static graph's reason."""
        verdict = self.decided.get(test)
        if verdict is not None:
            return verdict.why
        if static_why is None:
            return None
        return f"{static_why}; {self.fallback.get(test, 'no map')}: static graph"

    def not_run_reason(self, test: str) -> str:
        verdict = self.decided.get(test)
        if verdict is not None and verdict.touched:
            return (f"not affected by the change: in the map of {verdict.origin} it ran none of the changed statements "
                    f"of {', '.join(verdict.touched)}, no use of a name they redefine, and nothing that could lead there")
        if verdict is not None:
            return f"not affected by the change: the map of {verdict.origin} holds none of the changed files"
        return f"not affected by the change ({self.fallback.get(test, 'no map')}: static graph)"

    def narrowed(self, test: str) -> Narrowed | None:
        """The node ids of a selected ``test`` its map's per-id lines narrow it to, or why it runs whole;
        None where its map has no per-id lines."""
        verdict = self.decided.get(test)
        return verdict.narrowed if verdict is not None and verdict.why is not None else None


def _age_days(recorded_at: str, now: datetime) -> float | None:
    try:
        when = datetime.fromisoformat(recorded_at)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return (now - when).total_seconds() / 86400


def _no_scopes(sha: str | None) -> None:
    return None  # nothing known of lines: judge by file


def _no_drift(sha: str | None) -> Mapping[str, tuple[Scope, ...] | None]:
    return {}  # the caller knows of no file that changed since the map's commit


def _no_reach(path: str) -> Mapping[str, str]:
    return {}


def _no_references(sha: str | None, paths: frozenset[str]) -> None:
    return None


@dataclass
class _Change:
    """What the selection knows about the changes, shared by every test's decision."""

    changed: list[str]
    module_reach: Callable[[str], Mapping[str, str]]
    imports_of: Imports | None = None
    by_statement: bool = True
    walk: bool = True
    reach_memo: dict[str, Mapping[str, str]] = field(default_factory=dict)
    scopes: Mapping[str, tuple[Scope, ...] | None] | None = None  # of ``changed``, for drift since a map

    def reach(self, path: str, test: str) -> str | None:
        if path not in self.reach_memo:
            self.reach_memo[path] = self.module_reach(path)
        return self.reach_memo[path].get(test)


def _module_hit(test: str, stored: StoredTestMap, path: str, change: _Change, what: str) -> str | None:
    if path in stored.entry.executed:
        return f"executed {path}, {what}"
    reason = change.reach(path, test)
    return f"{reason}, {what}" if reason is not None else None


def _statement_hit(test: str, stored: StoredTestMap, path: str, scope: Scope, change: _Change) -> str | None:
    """For a test that ran ``scope``'s body: whether it ran a changed statement, or could have."""
    statements = scope.statements
    assert statements is not None
    ran_lines = (stored.entry.lines or {}).get(path, frozenset())
    spans = [range(first, last + 1) for first, last in statements.spans]
    hit = next((line for span in spans for line in span if line in ran_lines), None)
    if hit is not None:
        return f"executed {path}:{hit} in {scope.name}()"
    if statements.guarded:
        return (f"ran {scope.name}() in {path}, not its changed line {scope.line}, which lies in a branch that stores "
                f"state (a cache another test file may have filled)")
    shared = stored.shared.get(path, frozenset())
    if any(not shared.isdisjoint(span) for span in spans):
        return _module_hit(test, stored, path, change, f"whose changed line {scope.line} in {scope.name}() ran outside "
                                                       "a test (at import or in the session)")
    return None


def _cached_hit(test: str, stored: StoredTestMap, path: str, scope: Scope, change: _Change,
                references: ReferenceIndex | None) -> str | None:
    """For a test that ran no changed statement of ``scope``: when its function keeps results
    across calls (`ReferenceIndex.cached_calls`), whether the test ran its body or a call of it.
    Either may have been answered from what an earlier test cached, in a fresh process not."""
    calls = references.cached_calls(path, scope, change.imports_of) if references is not None else None
    if calls is None:
        return None
    assert scope.first is not None and scope.last is not None
    lines = stored.entry.lines or {}
    kept = f"whose results are kept across calls ({calls.how}), so a call may skip its changed line {scope.line}"
    if not lines.get(path, frozenset()).isdisjoint(range(scope.first, scope.last + 1)):
        return f"ran {calls.name}() in {path}, {kept}"
    for site_path, at in sorted(calls.calls.items()):
        if hit := sorted(at & lines.get(site_path, frozenset())):
            return f"ran {site_path}:{hit[0]}, a call of {calls.name}() in {path}, {kept}"
        if not at.isdisjoint(stored.shared.get(site_path, frozenset())):
            return _module_hit(test, stored, path, change, f"whose {site_path}:{min(at)} calls {calls.name}() "
                                                           f"outside a test, {kept}")
    return None


def _ran_outside(scope: Scope, shared: frozenset[int], by_statement: bool) -> bool:
    """Whether the run outside any test (``shared``) ran the change of a body, for a test that ran
    none of it. By statement: a changed statement; a shared run that ran the body without reaching
    one ran the same before, and left every importer as it was. The whole body counts when a
    changed line is no statement the map sees, by function body, and when a changed statement
    lies in a branch that stores state (collecting another test module may have filled it)."""
    statements = scope.statements
    assert scope.first is not None and scope.last is not None
    if not by_statement or statements is None or statements.whole or statements.guarded:
        return not shared.isdisjoint(range(scope.first, scope.last + 1))
    return any(not shared.isdisjoint(range(first, last + 1)) for first, last in statements.spans)


def _use_hit(test: str, stored: StoredTestMap, path: str, scope: Scope, uses: tuple[Use, ...], change: _Change,
             references: ReferenceIndex | None) -> str | None:
    """For a module-level change that only redefines names: whether the test ran a use of one."""
    for use in uses:
        at = Scope(use.body.name, use.body.first, use.body.last, use.line, use.statements)
        why = scope_hit(test, stored, use.path, at, change, references, None)
        if why is not None:
            return f"{why}, which reads {use.name}, redefined by the change at {path}:{scope.line}"
    return None


def scope_hit(test: str, stored: StoredTestMap, path: str, scope: Scope, change: _Change,
              references: ReferenceIndex | None, definitions: DefinitionUses | None) -> str | None:
    """Why one changed ``scope`` of ``path`` reaches ``test`` by its map (None: it does not)."""
    if scope.is_module:
        uses = definitions.of(path, scope.names) if definitions is not None and scope.names is not None else None
        if uses is not None:
            return _use_hit(test, stored, path, scope, uses, change, references)
        return _module_hit(test, stored, path, change, f"changed at module level (line {scope.line})")
    body = range(scope.first, scope.last + 1)
    ran = sorted(set(body).intersection((stored.entry.lines or {}).get(path, ())))
    if ran and change.by_statement and scope.statements is not None and not scope.statements.whole:
        return _statement_hit(test, stored, path, scope, change) or _cached_hit(test, stored, path, scope, change,
                                                                                references)
    if ran:
        return f"executed {path}:{ran[0]} in {scope.name}()"
    if _ran_outside(scope, stored.shared.get(path, frozenset()), change.by_statement):
        return _module_hit(test, stored, path, change, f"whose {scope.name}() ran outside a test (at import or in "
                                                       "the session)")
    if (cached := _cached_hit(test, stored, path, scope, change, references)) is not None:
        return cached
    if references is not None and change.walk:
        lines = stored.entry.lines or {}
        return references.reason(path, scope, lambda p: lines.get(p, frozenset()), change.imports_of)
    return None


def _hits(test: str, stored: StoredTestMap, change: _Change, scopes: Mapping[str, tuple[Scope, ...] | None] | None,
          references: ReferenceIndex | None, definitions: DefinitionUses | None) -> list[tuple[str, str]]:
    """(changed file, why) for each changed file that reaches ``test``."""
    entry = stored.entry
    hits: list[tuple[str, str]] = []
    for path in change.changed:
        if path in entry.opened:  # read as data (a config, a kernel source, a lint over the tree): by file
            hits.append((path, f"opened {path}"))
            continue
        file_scopes = scopes.get(path) if scopes is not None else None
        if entry.lines is None or file_scopes is None:
            if path in entry.executed:
                hits.append((path, f"executed {path}"))
            elif (reason := change.reach(path, test)) is not None:
                hits.append((path, reason))
            continue
        whys = (scope_hit(test, stored, path, scope, change, references, definitions) for scope in file_scopes)
        first = next((why for why in whys if why is not None), None)  # one reason a file is enough
        if first is not None:
            hits.append((path, first))
    return hits


def select_by_maps(maps: Mapping[str, StoredTestMap], tests: Iterable[str], changed: Sequence[str], *,
                   now: datetime, max_age_days: float = DEFAULT_MAX_AGE_DAYS,
                   scopes_for: ScopesFor = _no_scopes,
                   module_reach: Callable[[str], Mapping[str, str]] = _no_reach,
                   references_for: ReferencesFor = _no_references,
                   imports_of: Imports | None = None, by_statement: bool = True, walk: bool = True,
                   uses: bool = True, drift_for: ScopesFor = _no_drift) -> MapSelection:
    """See the module docstring. ``tests``: the tier's registered test paths; ``scopes_for(sha)``:
    the changed files' scopes relative to a map's commit (None, or a file absent or None: judged
    by file); ``module_reach(path)``:
    the tests the static import graph says import ``path``, with its reason; ``references_for(sha,
    paths)``: the references of those Python files at ``sha`` (`ci.selection.reach`; None: no
    such walk), asked once per commit with every file its maps executed and the changed files;
    ``imports_of(path)``: the files ``path`` imports (the static graph), which limits that walk
    to references that can see the function (None: by name alone); ``by_statement=False``: a
    test that ran a changed body is selected whatever statement of it changed; ``walk=False``:
    without `ci.selection.reach`'s walk; ``uses=False``: a module-level change counts for every
    importer even when it only redefines names (both for comparison); ``drift_for(sha)``: the
    scopes, relative to a map's commit, of the files outside the change that differ between it and
    the tree planned (None: git cannot tell, the map is judged by file)."""
    changed_set = set(changed)
    change = _Change(sorted(changed_set), module_reach, imports_of, by_statement, walk)
    per_commit: dict[str | None, Mapping[str, tuple[Scope, ...] | None] | None] = {}
    drifts: dict[str | None, _Change] = {}
    indexes: dict[str | None, ReferenceIndex | None] = {}
    definitions: dict[str | None, DefinitionUses | None] = {}
    files_at: dict[str | None, set[str]] = {}
    for stored in maps.values():
        files_at.setdefault(stored.sha, set(changed_set)).update(stored.entry.lines or ())
    out = MapSelection()
    newest: tuple[str, str] | None = None
    for test in tests:
        stored = maps.get(test)
        if stored is None:
            out.fallback[test] = "no map"
            continue
        if test in changed_set:
            out.fallback[test] = "the test file changed since its map"
            continue
        if not stored.entry.complete:
            dirty = sorted(stored.dirty & stored.entry.files)
            out.fallback[test] = (f"the map of {stored.origin} is partial (it ran {', '.join(dirty[:3])}, which "
                                  "differed from its commit while recorded)" if dirty else
                                  f"the map of {stored.origin} is partial (its run did not finish the file, or ran a "
                                  "file that differed from its commit)")
            continue
        if not stored.entry.usable:
            out.fallback[test] = f"the map of {stored.origin} ran none of its tests (all skipped)"
            continue
        if in_future(stored.recorded_at, now):  # an unknown age, never "forever young"
            out.fallback[test] = f"the map of {stored.origin} has a time in the future ({stored.recorded_at})"
            continue
        age = _age_days(stored.recorded_at, now)
        if age is None or age > max_age_days:
            when = "has an unreadable time" if age is None else f"is {age:.1f} days old (limit {max_age_days:g})"
            out.fallback[test] = f"the map of {stored.origin} {when}"
            continue
        if stored.sha not in per_commit:
            drift = drift_for(stored.sha) if stored.sha is not None else None
            # a map whose commit's distance to this tree git cannot tell is judged by file
            per_commit[stored.sha] = scopes_for(stored.sha) if drift is not None else None
            drifts[stored.sha] = _Change(sorted(drift or ()), module_reach, imports_of, by_statement, walk,
                                         scopes=drift)
        if stored.sha not in indexes:
            wanted = frozenset(files_at.get(stored.sha, changed_set)) | set(drifts[stored.sha].changed)
            index = references_for(stored.sha, wanted) if per_commit[stored.sha] else None
            indexes[stored.sha] = index
            definitions[stored.sha] = DefinitionUses(index, imports_of) if index is not None and uses else None
        scopes, index, uses_of = per_commit[stored.sha], indexes[stored.sha], definitions[stored.sha]
        drift = drifts[stored.sha]
        stale = _hits(test, stored, drift, drift.scopes, index, uses_of) if scopes and stored.entry.lines else []
        if stale:  # here it may run what its map never saw: the map's lines cannot decide
            out.fallback[test] = (f"the map of {stored.origin} is stale: since its commit the tree changed what "
                                  f"it ran ({stale[0][1]})")
            continue
        hits = _hits(test, stored, change, scopes, index, uses_of)
        why, narrowed = None, None
        if hits:
            more = f" (and {len(hits) - 1} more)" if len(hits) > 1 else ""
            why = f"{hits[0][1]} in {stored.origin}{more}"
            if stored.entry.by_test is not None:
                cached = partial(index.cached_calls, imports=imports_of) if index is not None else None
                narrowed = narrow(stored, [path for path, _ in hits], scopes, partial(
                    scope_hit, test, stored, change=change, references=index, definitions=uses_of), cached)
        touched = tuple(p for p in change.changed if p in stored.entry.executed or p in stored.entry.opened)
        out.decided[test] = MapVerdict(why, stored.origin, touched if why is None else (), narrowed)
        if newest is None or stored.recorded_at > newest[1]:
            newest = (stored.origin, stored.recorded_at)
    return replace(out, newest=newest)
