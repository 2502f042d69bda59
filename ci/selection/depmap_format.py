"""The runtime dependency map: what each test file really executed and opened, and its one file format.

A map comes from one recorded run of a tier (`ci.running.depmap_record`). Per test file it holds
the repository files the file's tests executed (coverage.py, file granularity, the subprocesses
they started included) and the repository files they opened (``sys.addaudithook`` "open"
events: data, configs, kernel sources compiled at run time).

The file is JSON, version 1::

    {"format": "ci-depmap", "version": 1, "tier": "cpu" | null, "recorded_at": "2026-12-04T13:00:00+00:00",
     "tests": {"tests/a/test_x.py": {"complete": true, "items": 3, "ran": 3,
                                      "executed": ["pkg/a.py", ...], "opened": ["data/t.json", ...]}}}

Contract:
- `parse_depmap` is the one reader: anything else than the shape above (bad JSON, a missing or
  mistyped field, an unknown version, a path that is absolute, holds ``..`` or NUL) raises
  `DepmapError` naming the file and the offending value. A reader never guesses at a partial map.
- ``complete`` is true when every collected test of the file finished in the recorded run; ``ran``
  counts the tests whose body ran (not skipped). Only a complete entry with ``ran > 0`` is
  `TestMap.usable`: a file cut short, or one whose tests were all skipped (a GPU tier recorded
  where its hardware is absent), teaches nothing about what the file needs.
- ``recorded_at`` carries its UTC offset (a time without one is refused): the store compares
  these times, and a local time would shift a map's age by hours.
- `dump_depmap` writes what `parse_depmap` reads back equal (sorted, stable).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

FORMAT = "ci-depmap"
VERSION = 1


class DepmapError(ValueError):
    """A map file (or stored map) that is not a well-formed version-1 map; the message names it."""


@dataclass(frozen=True)
class TestMap:
    """What one test file executed and opened in one recorded run."""

    __test__ = False  # not a pytest test class, despite the name

    executed: frozenset[str]
    opened: frozenset[str] = frozenset()
    complete: bool = True
    items: int = 0
    ran: int = 0

    @property
    def files(self) -> frozenset[str]:
        return self.executed | self.opened

    @property
    def usable(self) -> bool:
        """True when the entry may decide selection (see the module docstring)."""
        return self.complete and self.ran > 0


@dataclass(frozen=True)
class DepMap:
    """One recorded run's map: ``tests`` is repo-relative test path -> `TestMap`."""

    tier: str | None
    recorded_at: str
    tests: Mapping[str, TestMap] = field(default_factory=dict)


def _bad(source: str, what: str) -> DepmapError:
    return DepmapError(f"{source}: not a {FORMAT} v{VERSION} map: {what}")


def _paths(source: str, test: str, key: str, value: Any) -> frozenset[str]:
    if not isinstance(value, list):
        raise _bad(source, f"tests[{test!r}].{key} must be a list of paths, got {type(value).__name__}")
    for p in value:
        if not isinstance(p, str) or not is_relative_path(p):
            raise _bad(source, f"tests[{test!r}].{key} holds {p!r}, not a repo-relative path")
    return frozenset(value)


def is_relative_path(path: str) -> bool:
    """True for a non-empty repo-relative POSIX path without ``..``, ``.`` parts or NUL."""
    return (bool(path) and not path.startswith("/") and "\x00" not in path and "\\" not in path
            and all(part not in ("", ".", "..") for part in path.split("/")))


def _count(source: str, test: str, key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise _bad(source, f"tests[{test!r}].{key} must be a whole number >= 0, got {value!r}")
    return value


def parse_depmap(text: str | bytes, source: str) -> DepMap:
    """Read a version-1 map from ``text``; `DepmapError` naming ``source`` on any problem."""
    try:
        data = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        raise _bad(source, f"unreadable JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _bad(source, f'"format" must be "{FORMAT}"')
    if data.get("version") != VERSION:
        raise _bad(source, f"unknown version {data.get('version')!r}")
    tier, recorded_at, tests = data.get("tier"), data.get("recorded_at"), data.get("tests")
    if tier is not None and (not isinstance(tier, str) or not tier):
        raise _bad(source, f'"tier" must be a tier name or null, got {tier!r}')
    if not isinstance(recorded_at, str) or utc_time(recorded_at) is None:
        raise _bad(source, f'"recorded_at" must be an ISO 8601 time with its UTC offset, got {recorded_at!r}')
    if not isinstance(tests, dict):
        raise _bad(source, '"tests" must be an object of test path -> entry')
    out: dict[str, TestMap] = {}
    for test, entry in tests.items():
        if not is_relative_path(test):
            raise _bad(source, f"test path {test!r} is not repo-relative")
        if not isinstance(entry, dict):
            raise _bad(source, f"tests[{test!r}] must be an object")
        missing = {"complete", "items", "ran", "executed", "opened"} - entry.keys()
        if missing:
            raise _bad(source, f"tests[{test!r}] lacks {', '.join(sorted(missing))}")
        if not isinstance(entry["complete"], bool):
            raise _bad(source, f"tests[{test!r}].complete must be true or false, got {entry['complete']!r}")
        out[test] = TestMap(_paths(source, test, "executed", entry["executed"]),
                            _paths(source, test, "opened", entry["opened"]), entry["complete"],
                            _count(source, test, "items", entry["items"]), _count(source, test, "ran", entry["ran"]))
    return DepMap(tier, recorded_at, out)


def utc_time(text: str) -> datetime | None:
    """``text`` (ISO 8601 with a UTC offset) as an aware UTC datetime; None when it is not one."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when.astimezone(timezone.utc) if when.tzinfo is not None else None


def dump_depmap(depmap: DepMap) -> str:
    """The JSON text of ``depmap`` (keys and paths sorted)."""
    tests = {path: {"complete": t.complete, "items": t.items, "ran": t.ran,
                    "executed": sorted(t.executed), "opened": sorted(t.opened)}
             for path, t in sorted(depmap.tests.items())}
    return json.dumps({"format": FORMAT, "version": VERSION, "tier": depmap.tier,
                       "recorded_at": depmap.recorded_at, "tests": tests}, indent=1, sort_keys=True) + "\n"


@dataclass(frozen=True)
class StoredTestMap:
    """A test file's entry with where it came from: ``origin`` reads ``run 123 at 1a2b3c4d5e6f``
    (or the map file's name), ``recorded_at`` is the map's ISO 8601 time."""

    entry: TestMap
    origin: str
    recorded_at: str


def maps_of_file(depmap: DepMap, source: str) -> dict[str, StoredTestMap]:
    """Every entry of a map read from a file, with the file as its origin."""
    return {test: StoredTestMap(entry, f"map {source}", depmap.recorded_at) for test, entry in depmap.tests.items()}
