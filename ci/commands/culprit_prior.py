"""``ci culprit``'s prior: from the test file's observed runtime map when there is one (``--depmap``
files and the history store's maps, read as ``ci plan`` reads them), else from its static import
closure; `choose_prior` says which, and why a map was not used.

With a map, each candidate's `ci.culprit.prior.Touch` level is read from git: the map's executed
lines (its own and the shared lines of the files it executed, the import-time code; the shared
lines of the other files count for ``FILE``) are carried
from the map's commit to --good through ``git diff``, then through each candidate's own diff in
turn, so every candidate is judged against line numbers of its parent. Renames are read as a
deletion and an addition (``--no-renames``): a renamed file's lines are not followed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Sequence

from ci.commands.culprit_learned import history_weights
from ci.commands.culprit_local import WindowError, diff_parts, git, touches_executed
from ci.culprit.posterior import prior_weights
from ci.culprit.prior import Touch, TouchWeights, carry, touch_level
from ci.registry import Registry
from ci.regular_file import MAX_REPORT_BYTES, read_regular
from ci.selection.depmap_format import DepmapError, StoredTestMap, parse_depmap
from ci.selection.diff_hunks import FileDiff, file_diffs

if TYPE_CHECKING:
    from ci.history.culprits import FoundCulprit


@dataclass(frozen=True)
class Prior:
    """The prior weights of a window's candidates and the line that says where they came from."""

    weights: tuple[float, ...]
    said: str
    problems: tuple[str, ...] = ()


_DIFF_OPTIONS = ("-U0", "--no-renames", "--no-color", "--no-ext-diff")


def _diff(root: Path, old: str, new: str, paths: Sequence[str]) -> list[FileDiff]:
    return file_diffs(git(root, "-c", "core.quotepath=off", "diff", *_DIFF_OPTIONS, old, new, "--", *paths))


def window_diffs(root: Path, good: str, candidates: Sequence[str], paths: Sequence[str]) -> list[list[FileDiff]]:
    """Each candidate's diff against its predecessor in ``good, *candidates`` (its first parent on
    a first-parent line), limited to ``paths``: what `_diff` gives per candidate, read in one git
    process (`diff_parts`). Raises `WindowError` when git cannot read them."""
    return [file_diffs(part) for part in diff_parts(root, good, candidates, ("-p", *_DIFF_OPTIONS), paths)]


def check_map_files(paths: Sequence[str]) -> None:
    """ValueError, one line naming the file, for a ``--depmap`` that does not read as a map (bad
    input: said before any run, where a store's bad map is only a warning)."""
    for path in paths:
        try:
            parse_depmap(read_regular(path, MAX_REPORT_BYTES), path)
        except OSError as exc:
            raise ValueError(f"--depmap {path}: cannot read it: {exc.strerror or exc}") from None
        except DepmapError as exc:
            raise ValueError(f"--depmap {exc}: give a map `ci observe` or a recording run wrote") from None


def observed_touches(root: Path, stored: StoredTestMap, good: str, candidates: Sequence[str],
                     tests: Collection[str] = ()) -> list[Touch]:
    """Each candidate's touch level against ``stored`` (an entry with lines and a commit); ``tests``:
    the map's other test files, whose shared lines are their own collection, not an import of this
    one. Raises `WindowError` when git cannot diff the map's commit (not in this clone)."""
    entry = stored.entry
    lines = entry.lines or {}
    executed = {f: lines.get(f, frozenset()) | stored.shared.get(f, frozenset()) for f in entry.executed}
    imported = {f: shared for f, shared in stored.shared.items() if f not in executed and f not in tests}
    paths = sorted(set(executed) | entry.opened | set(imported))
    first = _diff(root, str(stored.sha), good, paths)
    executed, imported = carry(executed, first), carry(imported, first)
    levels = []
    for diff in window_diffs(root, good, candidates, paths):
        levels.append(touch_level(diff, executed, entry.opened, entry.executed, imported))
        executed, imported = carry(executed, diff), carry(imported, diff)
    return levels


def choose_prior(root: Path, registry: Registry, test: str, tier: str, good: str, candidates: list[str], *,
                 map_files: Sequence[str], store: str | None, w_low: float,
                 found: Sequence[FoundCulprit] = ()) -> Prior:
    """The prior for ``candidates`` (after ``good``): the newest usable map of ``test`` on ``tier``
    with lines and a commit this clone has, else the static closure (``w_low`` for a commit
    outside it). The weights are learned from the tier's ``found`` culprits, their windows judged by
    the same rule (`ci.commands.culprit_learned`). ``problems``: map sources and past windows that
    could not be read (warnings, never a stop)."""
    from ci.history.depmaps import gather_maps  # deferred: a search without maps needs no store

    gathered = gather_maps(tier, map_files, use_store=True, store_location=store, now=datetime.now(timezone.utc),
                           missing_ok=not map_files)
    stored = gathered.tests.get(test)
    why = _unusable(stored)
    if why is None and stored is not None:
        try:
            levels = observed_touches(root, stored, good, candidates, gathered.tests.keys())
        except WindowError:
            why = f"the map's commit {str(stored.sha)[:12]} is not in this clone"
        else:
            def mapped(past: str, past_good: str, past_candidates: list[str]) -> list[Touch] | None:
                entry = gathered.tests.get(past.split("::", 1)[0])  # a past search of one test: its file's map
                if entry is None or _unusable(entry) is not None:
                    return None
                try:
                    return observed_touches(root, entry, past_good, past_candidates, gathered.tests.keys())
                except WindowError:
                    return None

            learned = history_weights(root, found, mapped, TouchWeights())
            weights = learned.learned.weights
            counts = [levels.count(t) for t in (Touch.LINES, Touch.FILE, Touch.NONE)]
            return Prior(tuple(weights.weights(levels)),
                         f"prior from the observed map ({stored.origin}): {counts[0]} candidate(s) change lines the "
                         f"test executed (weight {weights.lines:.3g}), {counts[1]} only files it executed "
                         f"({weights.file:.3g}), {counts[2]} nothing it executed ({weights.none:.3g}); "
                         f"{learned.learned.said()}", (*gathered.problems, *learned.skipped))

    def closure(past: str, _good: str, past_candidates: list[str]) -> list[Touch] | None:
        if past.split("::", 1)[0] not in registry.tests:
            return None
        return [Touch.LINES if t else Touch.NONE
                for t in touches_executed(root, registry, past.split("::", 1)[0], past_candidates)]

    touches = touches_executed(root, registry, test, candidates)
    prior_weights(len(candidates), touches, w_low)  # ValueError for a bad --w-low, before the history is read
    learned = history_weights(root, found, closure, TouchWeights(1.0, w_low, w_low))
    high, low = learned.learned.weights.lines, learned.learned.weights.none
    return Prior(tuple(high if t else low for t in touches),
                 f"prior from the static import closure ({why}): {sum(touches)} candidate(s) change it "
                 f"(weight {high:.3g}), {len(touches) - sum(touches)} not ({low:.3g}); {learned.learned.said()}",
                 (*gathered.problems, *learned.skipped))


def _unusable(stored: StoredTestMap | None) -> str | None:
    """Why a map entry cannot give the prior; None when it can."""
    if stored is None:
        return "no map of the test"
    if not stored.entry.usable:
        return f"the map of {stored.origin} is partial or ran no test"
    if stored.entry.lines is None or stored.sha is None:
        return f"the map of {stored.origin} has no lines or no commit"
    return None
