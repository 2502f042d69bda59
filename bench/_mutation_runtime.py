"""The runtime-map selector of ``bench mutation``: what ``ci plan`` decides with the recorded map.

`runtime_selection(depmap_path, tree, mutant)`: the universe files that the map at
``depmap_path`` selects for the mutant, through the same API ``ci plan`` uses
(`ci.selection.depmap_select.select_by_maps`): the mutant's diff gives the touched lines
(`ci.selection.diff_hunks`), the base file's text their scopes (`ci.selection.edit_scopes`), and
those scopes count only for a map recorded at the base commit (the map's ``sha``); a module-level
change reaches the static graph's importers (``module_reach``). ``now`` is the map's own time,
so its age never decides. Every test the map decides with a reason is selected, plus each test
the map cannot decide (no map, partial, all skipped) that the static graph selects: the plan's
fallback.
"""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from bench._mutation_gen import Mutant
from bench._mutation_select import SelectionTree, static_selection
from ci.selection.depmap_format import DepMap, StoredTestMap, maps_of_file, parse_depmap, utc_time
from ci.selection.depmap_select import MapSelection, select_by_maps
from ci.selection.diff_hunks import file_diffs, touched_old_lines
from ci.selection.edit_scopes import diff_scopes
from ci.selection.git_lines import read_at
from ci.selection.reach import ReferenceIndex


@lru_cache(maxsize=4)
def _maps(path: str, mtime_ns: int) -> tuple[DepMap, dict[str, StoredTestMap], datetime]:
    depmap = parse_depmap(Path(path).read_bytes(), path)
    return depmap, maps_of_file(depmap, path), utc_time(depmap.recorded_at) or datetime.now(timezone.utc)


@lru_cache(maxsize=256)
def _base_text(root: str, path: str) -> bytes | None:
    proc = subprocess.run(["git", "show", f"HEAD:./{path}"], cwd=root, capture_output=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


@lru_cache(maxsize=1)  # one map's files: the same index for every mutant
def _references(root: str, paths: frozenset[str]) -> ReferenceIndex:
    return ReferenceIndex(read_at(root, "HEAD", [p for p in paths if p.endswith(".py")]))


def runtime_selection(depmap_path: Path, tree: SelectionTree, mutant: Mutant, walk: bool = True,
                      by_statement: bool = True, uses: bool = True) -> set[str]:
    """See the module docstring; ``walk=False``: without `ci.selection.reach`; ``by_statement=False``:
    by function body; ``uses=False``: a module-level change always counts for every importer
    (`ci.selection.definition_uses` off); all three for comparison."""
    chosen = runtime_maps(depmap_path, tree, mutant, walk, by_statement, uses)
    selected = {t for t, verdict in chosen.decided.items() if verdict.why}
    if chosen.fallback:
        selected |= set(chosen.fallback) & static_selection(tree, mutant.path)
    return selected & tree.universe


def runtime_maps(depmap_path: Path, tree: SelectionTree, mutant: Mutant, walk: bool = True,
                 by_statement: bool = True, uses: bool = True) -> MapSelection:
    """The map verdicts `runtime_selection` reads (each selected file's node ids with a version-4 map)."""
    depmap, maps, now = _maps(str(depmap_path), depmap_path.stat().st_mtime_ns)
    parts = file_diffs(mutant.diff)
    touched = touched_old_lines(parts)
    hunks = {part.path: [part.hunks] for part in parts}
    scopes = diff_scopes(touched, lambda path: _base_text(str(tree.root), path), hunks=hunks)
    chosen = select_by_maps(maps, sorted(tree.universe), [mutant.path], now=now,
                            scopes_for=lambda sha: scopes if sha is not None and sha == depmap.sha else None,
                            module_reach=lambda path: tree.deps.impact([path]).reasons,
                            references_for=lambda sha, paths: _references(str(tree.root), paths),
                            imports_of=tree.deps.imports_of, by_statement=by_statement, walk=walk, uses=uses)
    return chosen


__all__ = ["runtime_maps", "runtime_selection"]
