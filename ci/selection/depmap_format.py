"""The runtime dependency map: what each test file really executed and opened, and its one file format.

A map comes from one recorded run of a tier (`ci.observe.record`). Per test file it holds
the repository files the file's tests executed (coverage.py, the subprocesses they started
included) and the repository files they opened (``sys.addaudithook`` "open" events: data,
configs, kernel sources compiled at run time). Version 2 adds what line-level selection
(`ci.selection.depmap_select`) needs: the executed lines of each file, the lines run outside any test's own work (``shared``: the
session's start and end, the import of test modules at collection, session- and package-scoped
fixtures), and the commit the map was recorded at (line numbers are that commit's). Version 3
adds optional facts per test file (`ci observe`): ``duration_s``, ``outcome`` (one of `OUTCOMES`)
``skip_reasons``, ``devices`` (a sorted list from `DEVICES`) and ``device_evidence`` (strings);
a map is written as version 3 only when an entry has one of them. Version 4 adds an optional
``by_test`` per entry (`ByTest`, `ci observe --by-test`): the repository lines each pytest node id's
setup, call and teardown ran, each distinct line set once (``sets``, ``ids`` -> index), the lines
the file ran in no single id's own work (``file``: fixtures of a wider scope, the last teardown of
a module or class), whether every collected id finished (``complete``) and, optionally, each id's
seconds (``seconds``, id -> setup + call + teardown); a map is written as
version 4 only when an entry has one. A reader of v1-v3 refuses it ("unknown version 4").

The file is JSON, version 2 (version 1 has ``executed`` as a list of paths and no
``shared`` or ``sha``; it is still read, and selects by file)::

    {"format": "ci-depmap", "version": 2, "tier": "cpu" | null, "recorded_at": "2026-12-04T13:00:00+00:00",
     "sha": "<40 hex>" | null, "shared": {"pkg/a.py": "1-20,31"}, "dirty": ["pkg/b.py"] (optional),
     "tests": {"tests/a/test_x.py": {"complete": true, "items": 3, "ran": 3,
                                      "executed": {"pkg/a.py": "3-9,14"},
                                      "opened": ["data/t.json", ...]}}}

Contract:
- `parse_depmap` is the one reader: anything else than the shapes above (bad JSON, JSON nested
  too deep to read, a missing or mistyped field, an unknown version, a path that is absolute,
  holds ``..`` or NUL, a line range that `ci.selection.line_ranges` refuses) raises `DepmapError`
  naming the file and the offending value. A reader never guesses at a partial map.
- ``dirty`` (version 2, optional): tracked files that differed from ``sha`` while the map was
  recorded; an entry that executed or opened one is written not complete.
- ``complete`` is true when every collected test of the file finished in the recorded run; ``ran``
  counts the tests whose body ran (not skipped). Only a complete entry with ``ran > 0`` is
  `TestMap.usable`: a file cut short, or one whose tests were all skipped (a GPU tier recorded
  where its hardware is absent), teaches nothing about what the file needs.
- ``recorded_at`` carries its UTC offset (a time without one is refused): the store compares
  these times, and a local time would shift a map's age by hours. A time more than `CLOCK_SKEW`
  after now (`in_future`: a skewed clock, or a crafted map) is an unknown age: never used, or
  it would stay young forever and shadow every newer map.
- `dump_depmap` writes what `parse_depmap` reads back equal (sorted, stable); a map without line
  data (``TestMap.lines`` None) is written as version 1.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Mapping

from ci.selection.line_ranges import format_lines, parse_lines

FORMAT = "ci-depmap"
VERSION = 4
VERSIONS = (1, 2, 3, 4)
OUTCOMES = ("passed", "failed", "skipped", "error")
DEVICES = ("cuda", "nccl", "triton")  # version 3 `devices` names (`ci.observe.devices`)
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
CLOCK_SKEW = timedelta(minutes=5)  # how far ahead a recorder's clock may run and its map still count


class DepmapError(ValueError):
    """A map file (or stored map) that is not a well-formed map; the message names it."""


Lines = Mapping[str, frozenset[int]]


@dataclass(frozen=True)
class ByTest:
    """A test file's per node id lines (version 4): ``ids`` node id -> repo file -> lines run in
    its setup, call and teardown; ``file``: lines of the file's run no single id owns;
    ``complete``: every collected id of the file finished in the recorded run; ``seconds``: node
    id -> its setup, call and teardown seconds as pytest reported them (optional, per id)."""

    ids: Mapping[str, Lines]
    file: Lines = field(default_factory=dict)
    complete: bool = True
    seconds: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, eq=True)
class TestMap:
    """What one test file executed and opened in one recorded run. ``lines`` (version 2):
    repo-relative file -> executed line numbers; None for a version-1 entry (files only)."""

    __test__ = False  # not a pytest test class, despite the name

    executed: frozenset[str]
    opened: frozenset[str] = frozenset()
    complete: bool = True
    items: int = 0
    ran: int = 0
    lines: Lines | None = field(default=None, hash=False)
    duration_s: float | None = None  # version 3: wall time of the file's process or pytest items
    outcome: str | None = None  # version 3: one of `OUTCOMES`
    skip_reasons: tuple[str, ...] = ()  # version 3: why pytest skipped its tests
    devices: tuple[str, ...] = ()  # version 3: devices touched or wanted, sorted (`DEVICES`)
    device_evidence: tuple[str, ...] = ()  # version 3: what showed them ("torch.cuda.init", ...)
    by_test: ByTest | None = field(default=None, hash=False)  # version 4: lines per node id

    @property
    def files(self) -> frozenset[str]:
        return self.executed | self.opened

    @property
    def usable(self) -> bool:
        """True when the entry may decide selection (see the module docstring)."""
        return self.complete and self.ran > 0


@dataclass(frozen=True)
class DepMap:
    """One recorded run's map: ``tests`` is repo-relative test path -> `TestMap`; ``shared`` the
    lines run outside any test's own work; ``sha`` the commit recorded (None: unknown); ``dirty``
    the tracked files that differed from it during the recording."""

    tier: str | None
    recorded_at: str
    tests: Mapping[str, TestMap] = field(default_factory=dict)
    shared: Lines = field(default_factory=dict)
    sha: str | None = None
    dirty: frozenset[str] = frozenset()


def _bad(source: str, what: str) -> DepmapError:
    return DepmapError(f"{source}: not a {FORMAT} v1-v4 map: {what}")


def _paths(source: str, where: str, value: Any) -> frozenset[str]:
    if not isinstance(value, list):
        raise _bad(source, f"{where} must be a list of paths, got {type(value).__name__}")
    for p in value:
        if not isinstance(p, str) or not is_relative_path(p):
            raise _bad(source, f"{where} holds {p!r}, not a repo-relative path")
    return frozenset(value)


def _line_map(source: str, where: str, value: Any) -> dict[str, frozenset[int]]:
    if not isinstance(value, dict):
        raise _bad(source, f"{where} must be an object of path -> line ranges, got {type(value).__name__}")
    out: dict[str, frozenset[int]] = {}
    for path, ranges in value.items():
        if not is_relative_path(path):
            raise _bad(source, f"{where} holds {path!r}, not a repo-relative path")
        if not isinstance(ranges, str):
            raise _bad(source, f"{where}[{path!r}] must be line ranges like \"1-5,9\", got {ranges!r}")
        try:
            out[path] = parse_lines(ranges)
        except ValueError as exc:
            raise _bad(source, f"{where}[{path!r}]: {exc}") from None
    return out


def is_relative_path(path: str) -> bool:
    """True for a non-empty repo-relative POSIX path without ``..``, ``.`` parts or NUL."""
    return (bool(path) and not path.startswith("/") and "\x00" not in path and "\\" not in path
            and all(part not in ("", ".", "..") for part in path.split("/")))


def _count(source: str, test: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad(source, f"tests[{test!r}].{key} must be a whole number >= 0, got {value!r}")
    return value


def _entry(source: str, test: str, entry: Any, version: int) -> TestMap:
    if not is_relative_path(test):
        raise _bad(source, f"test path {test!r} is not repo-relative")
    if not isinstance(entry, dict):
        raise _bad(source, f"tests[{test!r}] must be an object")
    missing = {"complete", "items", "ran", "executed", "opened"} - entry.keys()
    if missing:
        raise _bad(source, f"tests[{test!r}] lacks {', '.join(sorted(missing))}")
    if not isinstance(entry["complete"], bool):
        raise _bad(source, f"tests[{test!r}].complete must be true or false, got {entry['complete']!r}")
    counts = (_count(source, test, "items", entry["items"]), _count(source, test, "ran", entry["ran"]))
    opened = _paths(source, f"tests[{test!r}].opened", entry["opened"])
    if version == 1:
        executed = _paths(source, f"tests[{test!r}].executed", entry["executed"])
        return TestMap(executed, opened, entry["complete"], *counts)
    lines = _line_map(source, f"tests[{test!r}].executed", entry["executed"])
    facts = _facts(source, test, entry) if version >= 3 else (None, None, ())
    devices = _devices(source, test, entry) if version >= 3 else ((), ())
    by_test = by_test_from_json(source, test, entry["by_test"]) if version == 4 and "by_test" in entry else None
    return TestMap(frozenset(lines), opened, entry["complete"], *counts, lines=lines, duration_s=facts[0],
                   outcome=facts[1], skip_reasons=facts[2], devices=devices[0], device_evidence=devices[1],
                   by_test=by_test)


def by_test_from_json(source: str, test: str, value: Any) -> ByTest:
    """A version-4 entry's ``by_test``: {"complete": bool, "file": lines, "sets": [lines], "ids": {id: index},
    optionally "seconds": {id: seconds}}."""
    where = f"tests[{test!r}].by_test"
    if not isinstance(value, dict) or not isinstance(value.get("complete"), bool):
        raise _bad(source, f"{where} must be an object with \"complete\": true or false")
    sets, ids = value.get("sets"), value.get("ids")
    if not isinstance(sets, list) or not isinstance(ids, dict):
        raise _bad(source, f"{where} must hold \"sets\" (a list) and \"ids\" (node id -> index into sets)")
    lines = [_line_map(source, f"{where}.sets[{i}]", one) for i, one in enumerate(sets)]
    out: dict[str, Lines] = {}
    for node, index in ids.items():
        if not node or "\x00" in node or isinstance(index, bool) or not isinstance(index, int) \
                or not 0 <= index < len(lines):
            raise _bad(source, f"{where}.ids[{node!r}] must name a set 0..{len(lines) - 1}, got {index!r}")
        out[node] = lines[index]
    seconds = value.get("seconds", {})
    if not isinstance(seconds, dict):
        raise _bad(source, f"{where}.seconds must be an object (node id -> seconds), got {seconds!r}")
    for node, spent in seconds.items():
        if node not in out or isinstance(spent, bool) or not isinstance(spent, (int, float)) \
                or not 0 <= spent < float("inf"):
            raise _bad(source, f"{where}.seconds[{node!r}] must be seconds >= 0 of an id in \"ids\", got {spent!r}")
    return ByTest(out, _line_map(source, f"{where}.file", value.get("file", {})), value["complete"],
                  {n: float(s) for n, s in seconds.items()})


def by_test_json(by_test: ByTest) -> dict[str, Any]:
    """``by_test`` as written in a version-4 entry (each distinct line set once)."""
    sets: dict[str, int] = {}
    ids: dict[str, int] = {}
    for node, lines in sorted(by_test.ids.items()):
        key = json.dumps({p: format_lines(v) for p, v in sorted(lines.items()) if v}, sort_keys=True)
        ids[node] = sets.setdefault(key, len(sets))
    out = {"complete": by_test.complete, "file": {p: format_lines(v) for p, v in sorted(by_test.file.items()) if v},
           "sets": [json.loads(key) for key in sets], "ids": ids}
    return {**out, "seconds": dict(sorted(by_test.seconds.items()))} if by_test.seconds else out


def _devices(source: str, test: str, entry: dict) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A version-3 entry's optional ``devices`` (sorted, known names, once each) and ``device_evidence``."""
    devices, evidence = entry.get("devices", []), entry.get("device_evidence", [])
    if (not isinstance(devices, list) or any(d not in DEVICES for d in devices)
            or devices != sorted(set(devices))):
        raise _bad(source, f"tests[{test!r}].devices must be a sorted list from {', '.join(DEVICES)}, got {devices!r}")
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        raise _bad(source, f"tests[{test!r}].device_evidence must be a list of strings, got {evidence!r}")
    return tuple(devices), tuple(evidence)


def _facts(source: str, test: str, entry: dict) -> tuple[float | None, str | None, tuple[str, ...]]:
    """A version-3 entry's optional ``duration_s``, ``outcome`` and ``skip_reasons``."""
    duration, outcome, skips = entry.get("duration_s"), entry.get("outcome"), entry.get("skip_reasons", [])
    if duration is not None and (isinstance(duration, bool) or not isinstance(duration, (int, float))
                                 or not 0 <= duration < float("inf")):
        raise _bad(source, f"tests[{test!r}].duration_s must be seconds >= 0, got {duration!r}")
    if outcome is not None and outcome not in OUTCOMES:
        raise _bad(source, f"tests[{test!r}].outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}")
    if not isinstance(skips, list) or not all(isinstance(s, str) for s in skips):
        raise _bad(source, f"tests[{test!r}].skip_reasons must be a list of strings, got {skips!r}")
    return (None if duration is None else float(duration)), outcome, tuple(skips)


def parse_depmap(text: str | bytes, source: str) -> DepMap:
    """Read a version-1 to -4 map from ``text``; `DepmapError` naming ``source`` on any problem."""
    try:
        data = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        raise _bad(source, f"unreadable JSON ({exc})") from None
    except RecursionError:  # `[[[[...` deeper than the interpreter's stack: no map is nested like that
        raise _bad(source, "unreadable JSON (nested deeper than the interpreter can read)") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _bad(source, f'"format" must be "{FORMAT}"')
    version = data.get("version")
    if version not in VERSIONS or isinstance(version, bool):
        raise _bad(source, f"unknown version {version!r}")
    tier, recorded_at, tests = data.get("tier"), data.get("recorded_at"), data.get("tests")
    if tier is not None and (not isinstance(tier, str) or not tier):
        raise _bad(source, f'"tier" must be a tier name or null, got {tier!r}')
    if not isinstance(recorded_at, str) or utc_time(recorded_at) is None:
        raise _bad(source, f'"recorded_at" must be an ISO 8601 time with its UTC offset, got {recorded_at!r}')
    if not isinstance(tests, dict):
        raise _bad(source, '"tests" must be an object of test path -> entry')
    shared: dict[str, frozenset[int]] = {}
    sha, dirty = None, frozenset[str]()
    if version >= 2:
        for key in ("shared", "sha"):
            if key not in data:
                raise _bad(source, f'lacks "{key}"')
        shared = _line_map(source, '"shared"', data["shared"])
        sha = data["sha"]
        if sha is not None and (not isinstance(sha, str) or not _SHA.fullmatch(sha)):
            raise _bad(source, f'"sha" must be a full commit id (lowercase hex) or null, got {sha!r}')
        dirty = _paths(source, '"dirty"', data.get("dirty", []))
    out = {test: _entry(source, test, entry, version) for test, entry in tests.items()}
    return DepMap(tier, recorded_at, out, shared, sha, dirty)


def utc_time(text: str) -> datetime | None:
    """``text`` (ISO 8601 with a UTC offset) as an aware UTC datetime; None when it is not one."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when.astimezone(timezone.utc) if when.tzinfo is not None else None


def in_future(recorded_at: str, now: datetime) -> bool:
    """True when ``recorded_at`` lies more than `CLOCK_SKEW` after ``now`` (an unreadable time is
    not in the future: its reader refuses it on its own)."""
    when = utc_time(recorded_at)
    return when is not None and when > now + CLOCK_SKEW


def _has_facts(t: TestMap) -> bool:
    return t.duration_s is not None or t.outcome is not None or bool(t.skip_reasons) or bool(t.devices)


def _v2_entry(t: TestMap, version: int) -> dict[str, Any]:
    lines = t.lines or {}
    out = {"complete": t.complete, "items": t.items, "ran": t.ran, "opened": sorted(t.opened),
           "executed": {p: format_lines(lines.get(p, ())) for p in sorted(t.executed)}}
    if version >= 3:
        facts = {"duration_s": t.duration_s, "outcome": t.outcome, "skip_reasons": list(t.skip_reasons),
                 "devices": list(t.devices), "device_evidence": list(t.device_evidence)}
        out.update((k, v) for k, v in facts.items() if v not in (None, []))
    if version == 4 and t.by_test is not None:
        out["by_test"] = by_test_json(t.by_test)
    return out


def dump_depmap(depmap: DepMap) -> str:
    """The JSON text of ``depmap`` (keys and paths sorted); version 1 when no entry has lines, 4
    when an entry has `ByTest` lines, 3 when an entry has facts (duration, outcome, skip reasons), else 2."""
    facts = any(_has_facts(t) for t in depmap.tests.values())
    by_test = any(t.by_test is not None for t in depmap.tests.values())
    if facts or by_test or any(t.lines is not None for t in depmap.tests.values()) or depmap.shared or depmap.sha \
            or depmap.dirty:
        version = 4 if by_test else 3 if facts else 2
        tests = {path: _v2_entry(t, version) for path, t in sorted(depmap.tests.items())}
        data = {"format": FORMAT, "version": version, "tier": depmap.tier, "recorded_at": depmap.recorded_at,
                "sha": depmap.sha, "shared": {p: format_lines(v) for p, v in sorted(depmap.shared.items())},
                "tests": tests}
        if depmap.dirty:
            data["dirty"] = sorted(depmap.dirty)
        return json.dumps(data, indent=1, sort_keys=True) + "\n"
    tests = {path: {"complete": t.complete, "items": t.items, "ran": t.ran,
                    "executed": sorted(t.executed), "opened": sorted(t.opened)}
             for path, t in sorted(depmap.tests.items())}
    return json.dumps({"format": FORMAT, "version": 1, "tier": depmap.tier,
                       "recorded_at": depmap.recorded_at, "tests": tests}, indent=1, sort_keys=True) + "\n"


@dataclass(frozen=True)
class StoredTestMap:
    """A test file's entry with where it came from: ``origin`` reads ``run 123 at 1a2b3c4d5e6f``
    (or the map file's name), ``recorded_at`` is the map's ISO 8601 time; ``shared``, ``sha`` and
    ``dirty`` are its map's (`DepMap`; the store keeps no ``dirty``: its entries' ``complete`` says it)."""

    entry: TestMap
    origin: str
    recorded_at: str
    shared: Lines = field(default_factory=dict)
    sha: str | None = None
    dirty: frozenset[str] = frozenset()


def maps_of_file(depmap: DepMap, source: str) -> dict[str, StoredTestMap]:
    """Every entry of a map read from a file, with the file as its origin."""
    return {test: StoredTestMap(entry, f"map {source}", depmap.recorded_at, depmap.shared, depmap.sha, depmap.dirty)
            for test, entry in depmap.tests.items()}
