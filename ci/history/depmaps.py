"""Runtime dependency maps in the history store: ingest a map file, read the latest map per test.

Contract:
- `prepare_depmap` reads one map file with `ci.selection.depmap_format.parse_depmap` (the one
  reader) and checks the run identity (`RunIdentity.check`) and that the map's tier, when it names
  one, is the identity's; any problem raises `DepmapError` / `ValueError` before the store is
  touched. An unscored identity (code nobody reviewed yet: a pull request's) is refused: `ci plan`
  trusts every stored map of its tier, so such a map could make any test look unaffected.
- `ingest_depmap` writes the map and its test rows in one transaction; a map already stored
  (same bytes, same identity: the key) writes nothing and returns False. A version-2 map's line
  data is kept (``lines`` per test, the map's ``shared`` lines and commit); a map recorded at
  another commit than the run identity's ``--sha`` is refused, and so is one whose ``recorded_at``
  is in the future (`depmap_format.in_future`). A version-3 map's facts per test file
  (``duration_s``, ``outcome``, ``skip_reasons``) are kept and read back by `latest_maps`, and so
  is a version-4 entry's ``by_test`` (lines per node id).
- `latest_maps` gives, for each test file of ``tier`` (of ``repo`` when given), the entry of the
  most recently recorded map that holds it complete (`TestMap.usable`; when no map holds it so,
  the newest entry, which then says why it cannot decide), with where it came from
  (`StoredTestMap`): file A may come from last night's map and file B from yesterday's. A stored
  entry that does not read back (a hand-edited row) is left out and named in ``problems``; its test
  then has no map, so selection falls back to the static graph for it. With ``now``, a map
  recorded in the future is left out and named too: it would otherwise be every test's newest
  map forever.
- `gather_maps` puts the store's and map files' entries together for `ci plan`; it never raises.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Sequence

from ci.history.model import RunIdentity
from ci.history.store import Store, StoreMissing, failure_text, now, open_store
from ci.regular_file import MAX_REPORT_BYTES, UnreadableFile, read_regular
from ci.selection.depmap_format import (OUTCOMES, DepMap, DepmapError, StoredTestMap, TestMap, by_test_from_json,
                                        by_test_json, in_future, is_relative_path, maps_of_file, parse_depmap,
                                        utc_time)
from ci.selection.line_ranges import format_lines, parse_lines


@dataclass(frozen=True)
class PreparedDepmap:
    source: str
    identity: RunIdentity
    key: str
    depmap: DepMap


def prepare_depmap(path: str | Path, identity: RunIdentity) -> PreparedDepmap:
    """Read and check one map file; see the module docstring."""
    identity.check()
    if not identity.scored:
        raise DepmapError(f"{path}: a dependency map is not stored from an unscored run (--unscored: code not yet "
                          "reviewed); record maps on the default branch")
    identity = replace(identity, sha=identity.sha.lower())
    try:
        data = read_regular(path, MAX_REPORT_BYTES)
    except (OSError, UnreadableFile) as exc:
        raise DepmapError(f"{path}: cannot read the map: {getattr(exc, 'strerror', None) or exc}") from exc
    depmap = parse_depmap(data, str(path))
    if depmap.tier is not None and depmap.tier != identity.tier:
        raise DepmapError(f"{path}: the map was recorded on tier {depmap.tier!r}, not --tier {identity.tier!r}")
    if depmap.sha is not None and depmap.sha != identity.sha:
        raise DepmapError(f"{path}: the map was recorded at commit {depmap.sha}, not --sha {identity.sha}")
    if in_future(depmap.recorded_at, datetime.now(timezone.utc)):
        raise DepmapError(f"{path}: recorded_at {depmap.recorded_at} is in the future (a skewed clock or a crafted "
                          "map): its age is unknown; record it again")
    payload = json.dumps([hashlib.sha256(data).hexdigest(), asdict(identity)], sort_keys=True)
    return PreparedDepmap(str(path), identity, hashlib.sha256(payload.encode()).hexdigest(), depmap)


_INSERT = """INSERT INTO depmaps (map_key, source, repo, sha, event, tier, shard, run_id, run_url, recorded_at,
    ingested_at, map_version, map_sha, shared) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
    ON CONFLICT (map_key) DO NOTHING RETURNING id"""


def _lines_json(lines: Mapping[str, frozenset[int]] | None) -> str:
    if lines is None:
        return ""
    return json.dumps({p: format_lines(v) for p, v in sorted(lines.items())}, sort_keys=True)


def _read_lines(text: str, where: str) -> dict[str, frozenset[int]] | None:
    """A stored ``lines`` / ``shared`` column; None for '' (a version-1 map); ValueError when it
    does not read back."""
    if text == "":
        return None
    try:
        data = json.loads(text)
    except RecursionError:  # a hand-edited row nested deeper than the stack: one bad entry, not a crash
        raise ValueError(f"{where} is nested too deep") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where} is not an object")
    out = {}
    for path, ranges in data.items():
        if not isinstance(path, str) or not is_relative_path(path) or not isinstance(ranges, str):
            raise ValueError(f"{where} holds {path!r}")
        out[path] = parse_lines(ranges)
    return out


def _read_facts(duration: object, outcome: str, reasons_text: str) -> tuple[float | None, str | None, tuple[str, ...]]:
    """A stored entry's version-3 facts; ValueError when one does not read back."""
    if duration is not None and (not isinstance(duration, (int, float)) or not 0 <= float(duration) < float("inf")):
        raise ValueError("duration_s")
    if outcome not in ("", *OUTCOMES):
        raise ValueError("outcome")
    reasons: object = json.loads(reasons_text) if reasons_text else []
    if not isinstance(reasons, list) or not all(isinstance(r, str) for r in reasons):
        raise ValueError("skip_reasons")
    return (None if duration is None else float(duration)), (outcome or None), tuple(reasons)


def _newer_wins(old: StoredTestMap | None, new: StoredTestMap) -> bool:
    """Whether ``new`` (recorded no earlier) replaces ``old``: a complete observation is never
    shadowed by a newer one that cannot decide (partial, or all skipped)."""
    return old is None or new.entry.usable or not old.entry.usable


def ingest_depmap(store: Store, prepared: PreparedDepmap) -> bool:
    """Store ``prepared`` in one transaction; False when it was already stored."""
    ident, depmap = prepared.identity, prepared.depmap
    with store.transaction():
        version = 2 if depmap.sha is not None or depmap.shared or any(
            t.lines is not None for t in depmap.tests.values()) else 1
        if any(t.duration_s is not None or t.outcome or t.skip_reasons for t in depmap.tests.values()):
            version = 3
        if any(t.by_test is not None for t in depmap.tests.values()):
            version = 4
        cur = store.execute(_INSERT, (prepared.key, Path(prepared.source).name, ident.repo, ident.sha, ident.event,
                                      ident.tier, ident.shard, ident.run_id, ident.run_url, stored_time(depmap.recorded_at),
                                      now(), version, depmap.sha or "",
                                      _lines_json(depmap.shared) if version >= 2 else ""))
        inserted = cur.fetchall()
        cur.close()
        if not inserted:
            return False
        map_id = int(inserted[0][0])
        store.executemany(
            "INSERT INTO depmap_tests (map_id, test_file, complete, items, ran, executed, opened, lines, duration_s, "
            "outcome, skip_reasons, by_test) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(map_id, test, int(t.complete), t.items, t.ran, "\n".join(sorted(t.executed)), "\n".join(sorted(t.opened)),
              _lines_json(t.lines), t.duration_s, t.outcome or "", json.dumps(list(t.skip_reasons)) if t.skip_reasons
              else "", json.dumps(by_test_json(t.by_test), sort_keys=True) if t.by_test is not None else "")
             for test, t in sorted(depmap.tests.items())])
    return True


@dataclass(frozen=True)
class LatestMaps:
    tests: dict[str, StoredTestMap]
    problems: tuple[str, ...] = ()


def stored_time(recorded_at: str) -> str:
    """A map's time as stored: UTC, to the second, so that the store's string order is time order."""
    when = utc_time(recorded_at)
    if when is None:
        raise DepmapError(f"recorded_at {recorded_at!r} is not an ISO 8601 time with its UTC offset")
    return when.isoformat(timespec="seconds")


def latest_maps(store: Store, tier: str, repo: str | None = None, since: datetime | None = None,
                now: datetime | None = None) -> LatestMaps:
    """The newest stored entry per test file of ``tier``; see the module docstring. ``since``:
    only maps recorded then or later (older ones could not decide anyway; the store then reads
    the last days' maps, not every map ever stored); ``now``: maps recorded after it are left out."""
    query = ("SELECT t.test_file, t.complete, t.items, t.ran, t.executed, t.opened, t.lines, m.id, m.sha, m.run_id, "
             "m.recorded_at, m.map_sha, m.shared, t.duration_s, t.outcome, t.skip_reasons, t.by_test FROM"
             " depmap_tests t JOIN depmaps m ON m.id = t.map_id WHERE m.tier = ?")
    params: list[object] = [tier]
    if repo is not None:
        query += " AND m.repo = ?"
        params.append(repo)
    if since is not None:
        query += " AND m.recorded_at >= ?"
        params.append(stored_time(since.isoformat()))
    found: dict[str, StoredTestMap] = {}
    problems: list[str] = []
    shared_of: dict[int, dict[str, frozenset[int]] | None] = {}
    future: set[int] = set()
    for (test, complete, items, ran, executed, opened, lines_text, map_id, sha, run_id, recorded_at, map_sha,
         shared_text, duration, outcome, reasons_text, by_test_text) in store.fetchall(query + " ORDER BY m.recorded_at, m.id",
                                                                           params):
        if now is not None and in_future(recorded_at, now):
            if map_id not in future:
                future.add(map_id)
                problems.append(f"stored map {map_id} (run {run_id or '?'} at {sha[:12]}): recorded_at {recorded_at} "
                                "is in the future (a skewed clock or a crafted map); ignored")
            continue
        paths = [p for p in f"{executed}\n{opened}".split("\n") if p]
        try:
            if not is_relative_path(test) or not all(is_relative_path(p) for p in paths) or min(items, ran) < 0:
                raise ValueError(test)
            lines = _read_lines(lines_text, "lines")
            facts = _read_facts(duration, outcome, reasons_text)
            by_test = by_test_from_json("stored", test, json.loads(by_test_text)) if by_test_text else None
            if map_id not in shared_of:
                shared_of[map_id] = _read_lines(shared_text, "shared")
        except (ValueError, RecursionError):
            problems.append(f"stored map {map_id} (run {run_id or '?'} at {sha[:12]}): the entry of {test!r} "
                            "does not read back; ignored")
            found.pop(test, None)
            continue
        entry = TestMap(frozenset(p for p in executed.split("\n") if p), frozenset(p for p in opened.split("\n") if p),
                        bool(complete), int(items), int(ran), lines=lines, duration_s=facts[0], outcome=facts[1],
                        skip_reasons=facts[2], by_test=by_test)
        stored = StoredTestMap(entry, f"run {run_id or map_id} at {sha[:12]}", recorded_at, shared_of[map_id] or {},
                               map_sha or None)
        if _newer_wins(found.get(test), stored):
            found[test] = stored
    return LatestMaps(found, tuple(problems))


def gather_maps(tier: str, map_files: Sequence[str], *, use_store: bool = False, store_location: str | None = None,
                repo: str | None = None, since: datetime | None = None, now: datetime | None = None,
                missing_ok: bool = False) -> LatestMaps:
    """The newest usable source per test file of ``tier``: the store's latest maps (``use_store``)
    and the map files given (those recorded on another tier are skipped). Never raises for a bad
    source: a map file that does not read, or a store that cannot be read, is one line in
    ``problems`` and contributes nothing, so its tests fall back to the static graph; with
    ``now``, so is a map recorded in the future (`latest_maps`). ``missing_ok``: a store that was
    never created is no problem (``ci plan`` reads the store by default, and most checkouts have none)."""
    found: dict[str, StoredTestMap] = {}
    problems: list[str] = []
    if use_store:
        try:
            with open_store(store_location, create=False) as store:
                stored = latest_maps(store, tier, repo, since, now)
            found.update(stored.tests)
            problems += stored.problems
        except Exception as exc:  # StoreError, StoreMissing, a driver's own: no maps, never a crash
            if not (missing_ok and isinstance(exc, StoreMissing)):
                problems.append(f"maps of tier {tier} not read from the history store: "
                                f"{failure_text(exc, store_location)}")
    for path in map_files:
        try:
            depmap = parse_depmap(read_regular(path, MAX_REPORT_BYTES), path)
        except OSError as exc:
            problems.append(f"{path}: map ignored: cannot read it: {exc.strerror or exc}")
            continue
        except DepmapError as exc:
            problems.append(f"{exc}; map ignored")
            continue
        if depmap.tier not in (None, tier):
            continue
        if now is not None and in_future(depmap.recorded_at, now):
            problems.append(f"{path}: map ignored: recorded_at {depmap.recorded_at} is in the future (a skewed clock "
                            "or a crafted map): its age is unknown")
            continue
        for test, entry in maps_of_file(depmap, path).items():
            old = found.get(test)
            if old is None or (entry.recorded_at >= old.recorded_at and _newer_wins(old, entry)) or (
                    entry.entry.usable and not old.entry.usable):
                found[test] = entry
    return LatestMaps(found, tuple(problems))
