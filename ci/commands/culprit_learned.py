"""``ci culprit``'s touch weights learned from the history's found culprits (`ci.culprit.learned`).

Each of the tier's newest `PAST_LIMIT` found culprits (`ci.history.culprits.found_culprits`, read
with the noise rates in the search's one read of the store) is read again from git: its window's candidates (`culprit_local.window`), and each candidate's touch
level by the same rule as the search's own prior (the caller's ``levels``: the observed map of the
past search's test, else its static closure). A window this clone lacks, a culprit not in its
window, or a test with nothing to judge it by is skipped and said; no found culprit (no store, or
one that cannot be read): today's weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from ci.commands.culprit_local import WindowError, window
from ci.culprit.learned import LearnedWeights, PastCulprit, learn_weights
from ci.culprit.prior import Touch, TouchWeights

if TYPE_CHECKING:
    from ci.history.culprits import FoundCulprit

PAST_LIMIT = 40  # the newest found culprits read: each costs a git diff per candidate of its window

# (past test, good, its candidates) -> each candidate's level, or None: nothing to judge that test by
Levels = Callable[[str, str, list[str]], "Sequence[Touch] | None"]


@dataclass(frozen=True)
class HistoryWeights:
    """The learned weights and the past searches that could not be read (one line each)."""

    learned: LearnedWeights
    skipped: tuple[str, ...] = ()


def history_weights(root: Path, found: Sequence[FoundCulprit], levels: Levels, default: TouchWeights) -> HistoryWeights:
    """The weights the tier's ``found`` culprits support (``default`` with none); see the module
    docstring."""
    past, skipped = [], []
    for f in found:
        where = f"the found culprit {f.culprit[:12]} of {f.test}"
        try:
            good, _, candidates = window(root, f.good, f.bad)
        except WindowError:
            skipped.append(f"{where}: its window {f.good[:12]}..{f.bad[:12]} is not in this clone")
            continue
        at = [i for i, sha in enumerate(candidates) if sha.startswith(f.culprit)]
        window_levels = levels(f.test, good, candidates) if len(at) == 1 else None
        if window_levels is None:
            skipped.append(f"{where}: {'not one commit of its window' if len(at) != 1 else 'no map or closure of it'}")
            continue
        past.append(PastCulprit(window_levels[at[0]], tuple(window_levels)))
    return HistoryWeights(learn_weights(past, default), tuple(skipped))
