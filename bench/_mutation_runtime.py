"""The runtime-map selector of ``bench mutation``, in one function the selection API can be swapped in.

`runtime_selection(depmap_path, tree, mutant)`: the universe files that the recorded map at
``depmap_path`` selects for the mutant's change, with today's file-level API
(`ci.selection.depmap_select.select_by_maps`, changed = ``[mutant.path]``, ``now`` = the map's own
time, so its age never decides): every test the map decides and gives a reason (``why``), plus
each test the map cannot decide (no map, partial, all skipped) that the static graph selects:
that is the plan's fallback. A line-level API would take the mutant's diff (``mutant.diff``).
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from bench._mutation_gen import Mutant
from bench._mutation_select import SelectionTree, static_selection
from ci.selection.depmap_format import StoredTestMap, maps_of_file, parse_depmap, utc_time
from ci.selection.depmap_select import select_by_maps


@lru_cache(maxsize=4)
def _maps(path: str, mtime_ns: int) -> tuple[dict[str, StoredTestMap], datetime]:
    depmap = parse_depmap(Path(path).read_bytes(), path)
    return maps_of_file(depmap, path), utc_time(depmap.recorded_at) or datetime.now(timezone.utc)


def runtime_selection(depmap_path: Path, tree: SelectionTree, mutant: Mutant) -> set[str]:
    """See the module docstring."""
    maps, now = _maps(str(depmap_path), depmap_path.stat().st_mtime_ns)
    chosen = select_by_maps(maps, sorted(tree.universe), [mutant.path], now=now)
    selected = {t for t, verdict in chosen.decided.items() if verdict.why}
    if chosen.fallback:
        selected |= set(chosen.fallback) & static_selection(tree, mutant.path)
    return selected & tree.universe


__all__ = ["runtime_selection"]
