"""Narrow a test file its runtime map selected to the node ids that ran the change (map version 4).

`ci.selection.depmap_select` asks `narrow` for each test file a map selected whose entry has
`ByTest` lines. The file's per-file verdict stays what decides recall; `narrow` only says which of
its ids that verdict needs, and runs the whole file whenever anything beyond one id's own work
could explain the selection.

Contract: `narrow` returns `Narrowed` with ``ids`` (sorted node ids, never empty) when every
changed file that reached the test did so through function bodies whose changed lines (the
changed statements, or the whole body where a changed line is no statement the map sees) the file
ran inside single ids, and ``ids`` None with the reason otherwise:
- the per-id data is partial (an id of the file did not finish, or the entry is partial);
- a changed file the test opened (data), or one without line scopes for the map's commit;
- a module-level change (import time: every id of an importing file shares it);
- a changed statement in a branch that stores state (an earlier id may have filled a cache that
  a later one reads);
- a change in a function that keeps results across calls (``cached``: `ReferenceIndex.cached_calls`)
  that the file ran or called outside a single id. Inside single ids, it narrows to every id that
  ran its body or a line that calls it: an id answered from an earlier id's cache ran none of the
  body, but its call. A line run at import or collection (``shared``) whose call is only a lazy
  part of it (``x if c else f(x)``) does not count when no line of the body ran there: before any
  test, a call either runs the body or hits a cache that such a call filled, so none was made;
- a body the test reached without running a changed line of it (the walk of `ci.selection.reach`,
  a use of a redefined name, code run outside any test);
- a changed line the file ran outside a single id (the map's ``shared`` lines, or ``ByTest.file``:
  a fixture of a wider scope, a module's or class's last teardown);
- no id ran a changed line (the per-file recorder saw one the per-id one did not).
Pure: no file system, no git.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from ci.selection.depmap_format import StoredTestMap
from ci.selection.edit_scopes import Scope
from ci.selection.reach import CachedCalls

Judge = Callable[[str, Scope], "str | None"]  # (changed file, scope) -> why it reaches the test, or None
Cached = Callable[[str, Scope], "CachedCalls | None"]  # (changed file, scope) -> its function's cache and calls


@dataclass(frozen=True)
class Narrowed:
    """The ids to run (None: the whole file) and why; ``seconds``: their recorded seconds summed
    (None unless every one of them has some)."""

    ids: tuple[str, ...] | None
    why: str
    seconds: float | None = None


def _whole(why: str) -> Narrowed:
    return Narrowed(None, f"whole file: {why}")


def _changed_lines(scope: Scope) -> range | frozenset[int]:
    statements = scope.statements
    if statements is not None and not statements.whole:
        return frozenset(n for first, last in statements.spans for n in range(first, last + 1))
    assert scope.first is not None and scope.last is not None
    return range(scope.first, scope.last + 1)


def _cached_units(stored: StoredTestMap, path: str, scope: Scope, calls: CachedCalls,
                  wanted: dict[str, set[int]]) -> str | None:
    """Adds the body of a function that keeps results across calls, and every line calling it, to
    ``wanted``; why the whole file runs instead (one of them ran outside a single id), or None."""
    assert scope.first is not None and scope.last is not None and stored.entry.by_test is not None
    body = range(scope.first, scope.last + 1)
    units = {path: set(body)}
    for site_path, lines in calls.calls.items():
        units.setdefault(site_path, set()).update(lines)
    # a lazy call at import counts through the body: it ran a line there, or no call was made
    skipped = {(p, n) for p, n in calls.lazy if p != path or n not in body}
    for unit_path, lines in units.items():
        at_import = {n for n in lines.intersection(stored.shared.get(unit_path, ())) if (unit_path, n) not in skipped}
        if at_import or not lines.isdisjoint(stored.entry.by_test.file.get(unit_path, ())):
            return (f"{path}:{scope.line} in {calls.name}(), which keeps results across calls ({calls.how}): the file "
                    "ran or called it outside a single id")
    for unit_path, lines in units.items():
        wanted.setdefault(unit_path, set()).update(lines)
    return None


def narrow(stored: StoredTestMap, hit_paths: Iterable[str],
           scopes: Mapping[str, tuple[Scope, ...] | None] | None, judge: Judge, cached: Cached | None = None) -> Narrowed:
    """See the module docstring. ``hit_paths``: the changed files by which the per-file verdict
    selected the test; ``judge``: the per-file rule for one scope (`depmap_select.scope_hit`);
    ``cached``: a changed body's function cache and its calls (None: no such rule)."""
    entry, by_test = stored.entry, stored.entry.by_test
    if by_test is None:
        return _whole("its map has no lines per test id (record with `ci observe --by-test`)")
    if not by_test.complete or not entry.complete:
        return _whole("the per-id lines are partial (not every id of the file finished when recorded)")
    ran_by_file = entry.lines or {}
    wanted: dict[str, set[int]] = {}
    for path in hit_paths:
        if path in entry.opened:
            return _whole(f"it opened {path} (data: no line of it says which id needs it)")
        file_scopes = scopes.get(path) if scopes is not None else None
        if file_scopes is None or entry.lines is None:
            return _whole(f"the changed lines of {path} are not known for the map's commit")
        for scope in file_scopes:
            if judge(path, scope) is None:
                continue  # this part of the change reaches the test in no way
            where = f"{path}:{scope.line}"
            if scope.is_module:
                return _whole(f"{where} changed at module level (import time is every id's)")
            if scope.statements is not None and scope.statements.guarded:
                return _whole(f"{where} lies in a branch that stores state (an earlier id may fill it for a later)")
            calls = cached(path, scope) if cached is not None else None
            if calls is not None:
                if (why := _cached_units(stored, path, scope, calls, wanted)) is not None:
                    return _whole(why)
                continue
            lines = _changed_lines(scope)
            ran = set(lines).intersection(ran_by_file.get(path, ()))
            if not ran:
                return _whole(f"it reaches {where} in {scope.name}() without running it")
            if not ran.isdisjoint(stored.shared.get(path, ())):
                return _whole(f"{where} in {scope.name}() ran outside a test (at import or in the session)")
            if not ran.isdisjoint(by_test.file.get(path, ())):
                return _whole(f"{where} in {scope.name}() ran outside a single id (a fixture of a wider scope, or "
                              "the last teardown of a module or class)")
            wanted.setdefault(path, set()).update(lines)
    ids = tuple(sorted(node for node, files in by_test.ids.items()
                       if any(not files.get(path, frozenset()).isdisjoint(lines) for path, lines in wanted.items())))
    if not ids:
        return _whole("no single id ran the changed lines")
    shown = ", ".join(f"{p}:{min(v)}" for p, v in sorted(wanted.items()))
    seconds = sum(by_test.seconds[n] for n in ids) if all(n in by_test.seconds for n in ids) else None
    return Narrowed(ids, f"{len(ids)} of {len(by_test.ids)} ids ran {shown}", seconds)
