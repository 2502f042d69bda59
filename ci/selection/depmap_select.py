"""Select tests by their runtime dependency maps; the static import graph stays the fallback.

`select_by_maps` decides, for each registered test of a tier, whether its latest recorded map may
decide and what it says; `ci.selection.plan` asks the result (`MapSelection`) for each test that
neither its own path, ``depends_on`` nor ``run_all_paths`` selected already.

Contract:
- A test's map decides when it is usable (complete, with tests that ran: `TestMap.usable`), no
  older than ``max_age_days`` at ``now``, and the test file itself is not among the changed
  files. It then selects the test exactly when a changed path is among the files the test
  executed or opened, and says so: ``executed pkg/a.py in run 7 at 1a2b3c4d5e6f``.
- Every other test falls back to the static graph's verdict, and the reason for the fallback is
  added to it: ``no map: static graph``, ``map of run 7 at ... is 20.0 days old (limit 14): static graph``.
  A map that cannot be trusted is never read as "this test needs nothing".
- Pure: no file system, no store, no clock but ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable, Mapping, Sequence

from ci.selection.depmap_format import StoredTestMap

DEFAULT_MAX_AGE_DAYS = 14.0


@dataclass(frozen=True)
class MapVerdict:
    """A map's decision for one test: ``why`` it is selected, or None (not affected)."""

    why: str | None
    origin: str


@dataclass(frozen=True)
class MapSelection:
    """Per test: a map's verdict (``decided``) or why the static graph decides (``fallback``)."""

    decided: dict[str, MapVerdict] = field(default_factory=dict)
    fallback: dict[str, str] = field(default_factory=dict)

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
        if verdict is not None:
            return f"not affected by the change: the map of {verdict.origin} holds none of the changed files"
        return f"not affected by the change ({self.fallback.get(test, 'no map')}: static graph)"


def _age_days(recorded_at: str, now: datetime) -> float | None:
    try:
        when = datetime.fromisoformat(recorded_at)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return (now - when).total_seconds() / 86400


def select_by_maps(maps: Mapping[str, StoredTestMap], tests: Iterable[str], changed: Sequence[str], *,
                   now: datetime, max_age_days: float = DEFAULT_MAX_AGE_DAYS) -> MapSelection:
    """See the module docstring. ``tests``: the tier's registered test paths."""
    changed_set = set(changed)
    out = MapSelection()
    for test in tests:
        stored = maps.get(test)
        if stored is None:
            out.fallback[test] = "no map"
            continue
        if test in changed_set:
            out.fallback[test] = "the test file changed since its map"
            continue
        if not stored.entry.complete:
            out.fallback[test] = f"the map of {stored.origin} is partial (its run did not finish the file)"
            continue
        if not stored.entry.usable:
            out.fallback[test] = f"the map of {stored.origin} ran none of its tests (all skipped)"
            continue
        age = _age_days(stored.recorded_at, now)
        if age is None or age > max_age_days:
            when = "has an unreadable time" if age is None else f"is {age:.1f} days old (limit {max_age_days:g})"
            out.fallback[test] = f"the map of {stored.origin} {when}"
            continue
        executed = sorted(changed_set & stored.entry.executed)
        opened = sorted(changed_set & stored.entry.opened - stored.entry.executed)
        hits = [f"executed {p}" for p in executed] + [f"opened {p}" for p in opened]
        why = None
        if hits:
            more = f" (and {len(hits) - 1} more)" if len(hits) > 1 else ""
            why = f"{hits[0]} in {stored.origin}{more}"
        out.decided[test] = MapVerdict(why, stored.origin)
    return out
