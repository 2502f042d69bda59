"""Recall and selection size of each selector over the mutants run, for ``bench mutation``.

Contract:
- A failing pair is (mutant, universe test file that failed under it). A selector's recall is
  the share of failing pairs whose test file it selected for that mutant; with no failing pair
  at all recall is undefined (None), never 100 %.
- Selection size per mutant: the fraction of universe files selected, and of their summed
  baseline seconds (est-time); both are averaged over the mutants run, and each is also given
  as a ratio to the static graph's mean (the baseline of the comparison).
- Every miss is kept: mutant, the failing file the selector did not select.
- A run without a per-file verdict (the harness itself broke: pytest's internal error, a
  timeout) names no failing file, only a red run: it enters no failing pair. Each selector keeps
  such mutants in ``unjudged`` with the number of files it selected, so the table says how many
  there were and whether each selection was empty (an empty selection would have shipped them).
- A flake pair (`bench._mutation_flakes`: a failing pair a flake, not the mutant, broke) is
  counted apart: out of the failing pairs and recall, in ``flake_pairs``/``flake_selected``, and
  listed with its evidence by the bench; never dropped.
- `mean_judged_time` is the est-time mean over the mutants with a verdict alone: the one mean in
  which a selector that picks the failing files themselves is a lower bound for every selector
  that misses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import fmean
from typing import Callable, Collection, Mapping, Sequence

from bench._mutation_gen import Mutant, added_line
from bench._mutation_store import MutantResult
from bench.table import format_table, ratio

Selector = Callable[[Mutant], set[str]]
GOAL_RECALL = 0.995


@dataclass(frozen=True)
class Miss:
    mutant: MutantResult
    test: str


@dataclass
class SelectorScore:
    """One selector over the mutants run (see the module docstring)."""

    name: str
    selected_pairs: int = 0
    failing_pairs: int = 0
    file_fractions: list[float] = field(default_factory=list)
    time_fractions: list[float] = field(default_factory=list)
    misses: list[Miss] = field(default_factory=list)
    unjudged: list[tuple[MutantResult, int]] = field(default_factory=list)
    judged_time_fractions: list[float] = field(default_factory=list)
    flake_pairs: int = 0
    flake_selected: int = 0

    @property
    def recall(self) -> float | None:
        return self.selected_pairs / self.failing_pairs if self.failing_pairs else None

    @property
    def mean_files(self) -> float:
        return fmean(self.file_fractions) if self.file_fractions else 0.0

    @property
    def mean_time(self) -> float:
        return fmean(self.time_fractions) if self.time_fractions else 0.0

    @property
    def mean_judged_time(self) -> float:
        """Mean est-time fraction over the mutants with a per-file verdict only."""
        return fmean(self.judged_time_fractions) if self.judged_time_fractions else 0.0


def score(selectors: Mapping[str, Selector], mutants: Sequence[Mutant], results: Mapping[str, MutantResult],
          universe: frozenset[str], durations: Mapping[str, float],
          flakes: Collection[tuple[str, str]] = ()) -> list[SelectorScore]:
    """Each selector's `SelectorScore` over the mutants that have a result; ``flakes`` are the
    (mutant id, test file) pairs a flake broke, counted apart (module docstring)."""
    flaky = set(flakes)
    total_time = sum(durations.get(t, 0.0) for t in universe) or 1.0
    scores = [SelectorScore(name) for name in selectors]
    for mutant in mutants:
        result = results.get(mutant.id)
        if result is None:
            continue
        failing = set(result.failing) & universe
        flake = {t for t in failing if (mutant.id, t) in flaky}
        failing -= flake
        for entry, select in zip(scores, selectors.values()):
            chosen = select(mutant) & universe
            entry.file_fractions.append(len(chosen) / len(universe))
            entry.time_fractions.append(sum(durations.get(t, 0.0) for t in chosen) / total_time)
            if result.broken:
                entry.unjudged.append((result, len(chosen)))
                continue
            entry.judged_time_fractions.append(entry.time_fractions[-1])
            entry.flake_pairs += len(flake)
            entry.flake_selected += len(flake & chosen)
            entry.failing_pairs += len(failing)
            entry.selected_pairs += len(failing & chosen)
            entry.misses += [Miss(result, t) for t in sorted(failing - chosen)]
    return scores


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def selector_table(scores: Sequence[SelectorScore], baseline: str) -> str:
    """The per-selector table; ratios against the ``baseline`` selector's means."""
    base = next(s for s in scores if s.name == baseline)
    flakes = any(s.flake_pairs for s in scores)
    rows = []
    for s in scores:
        files_x = ratio(s.mean_files / base.mean_files) if base.mean_files else ""
        time_x = ratio(s.mean_time / base.mean_time) if base.mean_time else ""
        rows.append((s.name + (" (baseline)" if s.name == baseline else ""), _pct(s.recall),
                     f"{s.selected_pairs}/{s.failing_pairs}", _pct(s.mean_files), _pct(s.mean_time),
                     files_x, time_x, len(s.misses),
                     f"{len(s.unjudged)}: {sum(1 for _, n in s.unjudged if n == 0)}")
                    + ((f"{s.flake_selected}/{s.flake_pairs}",) if flakes else ()))
    return format_table(("selector", "recall", "failing pairs selected", "files selected (mean)",
                         "est-time selected (mean)", "x static graph (files)", "x static graph (est-time)",
                         "misses", "no verdict: empty selections")
                        + (("flake pairs selected (apart)",) if flakes else ()), rows,
                        title="selection per mutant, same mutants, same run")


def unjudged_lines(scores: Sequence[SelectorScore]) -> list[str]:
    """One line per run without a verdict: what broke and how many files each selector chose."""
    if not scores or not scores[0].unjudged:
        return []
    counts = [dict((r.id, n) for r, n in s.unjudged) for s in scores]
    return [f"no verdict: {r.id} {r.path}:{r.line} {r.operator} ({r.broken}); files selected: "
            + ", ".join(f"{s.name} {c[r.id]}" for s, c in zip(scores, counts)) for r, _ in scores[0].unjudged]


def miss_lines(scores: Sequence[SelectorScore]) -> list[str]:
    """One line per miss: selector, mutant id, file:line, operator, the diff's + line, the test."""
    out = []
    for s in scores:
        for miss in s.misses:
            m = miss.mutant
            added = added_line(m.diff).strip()
            broken = f" [run without a verdict: {m.broken}]" if m.broken else ""
            out.append(f"miss ({s.name}): {m.id} {m.path}:{m.line} {m.operator} `{added}` -> {miss.test} not selected{broken}")
    return out


__all__ = ["GOAL_RECALL", "Miss", "Selector", "SelectorScore", "miss_lines", "score", "selector_table", "unjudged_lines"]
