"""What the bot says of a failing test: its verdict, as a runs-table cell and back.

Contract:
- `FailureVerdict` is one failing test's verdict: ``kind`` one of `KINDS` (``broken_on_main``,
  ``flaky``, ``infra``, ``new``) and a one-line ``detail`` (``broken on main since abc1234``,
  ``flaky 9 % ±4 over 120 runs on gpu_h200``, ``infra on runner gpu-7``, ``new``).
- `read_verdicts(location, tier, cases, nodes, sha=..., wait=...)` judges the failing ``nodes``
  of a run's JUnit ``cases`` against the test history (`ci.history.verdict.judge`: its error
  line, signature and infra cause as ingest would store them) within ``wait`` seconds
  (`tools.rerun.flake_notes.read_within`: never longer, `StoreError` otherwise).
- `verdict_cell(verdicts)` is the verdict cell of a row: the detail of a single failure, a tally
  (``2 broken on main, 1 flaky``) of several, `runs_table.NO_VERDICT` of none. Every character
  that could start Markdown or HTML is written as an entity (`commands.entities`), so a runner
  name or a URL from the history renders as text, never as a link, a tag or a cell break; control
  and bidi characters (ESC, U+202E) show as their escapes.
- `cell_kinds(cell)` reads a verdict cell back into {kind: count} (the headline's tally reads the
  cells of every row, not only its own); `tally_text(counts)` writes such a tally.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from tools.rerun.commands import entities
from tools.rerun.runs_table import NO_VERDICT

if TYPE_CHECKING:
    from ci.results.junit import CaseResult

BROKEN_ON_MAIN, FLAKY, INFRA, NEW = "broken_on_main", "flaky", "infra", "new"
MAX_DETAIL = 120  # characters of a detail shown; a longer one is cut with `…`
NOTES_WAIT_S = 20.0  # `flake_notes.NOTES_WAIT_S`; the history modules are imported only to read one
KINDS = (BROKEN_ON_MAIN, FLAKY, INFRA, NEW)
LABELS = {BROKEN_ON_MAIN: "broken on main", FLAKY: "flaky", INFRA: "infra", NEW: "new"}
# `short_cell`'s words, most pressing first: what a contributor should look at before the rest.
SHORT = {BROKEN_ON_MAIN: "broken", INFRA: "infra", FLAKY: "flaky", NEW: "new"}
SHORT_WORST = max(len(word) for word in SHORT.values()) + 1  # the longest `short_cell`: a word and `+`
_BY_LABEL = {label: kind for kind, label in LABELS.items()}
_LABEL_RE = "|".join(re.escape(label) for label in LABELS.values())
_TALLY = re.compile(rf"\d+ (?:{_LABEL_RE})(?:, \d+ (?:{_LABEL_RE}))*")
_ITEM = re.compile(rf"(\d+) ({_LABEL_RE})")
_SINGLE = re.compile(rf"({_LABEL_RE})(?:$|[ ,]|&#58;)")  # `:` as `entities` writes it
_SHORT = re.compile("(" + "|".join(SHORT.values()) + r")\+?")


@dataclass(frozen=True)
class FailureVerdict:
    """One failing test's verdict: ``kind`` in `KINDS`, ``detail`` one line."""

    kind: str
    detail: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"verdict kind must be one of {', '.join(KINDS)}, got {self.kind!r}")

    @property
    def text(self) -> str:
        """The detail as cell text: one line of at most `MAX_DETAIL` characters starting with the
        kind's label, Markdown and HTML escaped."""
        detail = " ".join(self.detail.split())
        if len(detail) > MAX_DETAIL:
            detail = detail[:MAX_DETAIL - 1] + "…"
        label = LABELS[self.kind]
        labelled = detail == label or detail.startswith((label + " ", label + ":"))
        shown = detail if labelled else f"{label}, {detail}".rstrip(", ")
        return entities(shown)


def read_verdicts(location: str, tier: str, cases: Sequence["CaseResult"], nodes: Sequence[str], *,
                  sha: str = "", repo: str = "", runner: str = "",
                  wait: float = NOTES_WAIT_S) -> dict[str, FailureVerdict]:
    """{node: verdict} for each of ``nodes`` (failing test ids of the run whose JUnit ``cases``
    these are, on ``tier`` at commit ``sha``), judged against the history at ``location`` within
    ``wait`` seconds; `ci.history.store.StoreError` when it cannot be read in time."""
    if not nodes:
        return {}
    # The history modules are imported only here: `handle` and `serve` never need them.
    from ci.history.run_results import failures_in_report
    from ci.history.verdict import judge
    from tools.rerun.flake_notes import read_within

    wanted = set(nodes)
    failures = [f for f in failures_in_report(cases, tier, sha=sha.lower(), repo=repo, runner=runner)[0]
                if f.node in wanted]
    verdicts = read_within(location, wait, lambda store: judge(store, failures))
    return {v.node: FailureVerdict(v.verdict, v.detail) for v in verdicts}


def verdict_cell(verdicts: Sequence[FailureVerdict]) -> str:
    """The verdict cell for a row's failing tests' verdicts (see the module docstring)."""
    if not verdicts:
        return NO_VERDICT
    if len(verdicts) == 1:
        return verdicts[0].text
    return tally_text(Counter(v.kind for v in verdicts))


def tally_text(counts: Mapping[str, int]) -> str:
    """``2 broken on main, 1 flaky`` (kinds in `KINDS` order, zero counts left out)."""
    return ", ".join(f"{counts[k]} {LABELS[k]}" for k in KINDS if counts.get(k, 0) > 0)


def short_cell(cell: str) -> str:
    """A verdict cell cut to one word (`tools.rerun.fit`'s last step): the most pressing kind in
    it, then ``+`` when it holds other kinds too (``broken+``); `NO_VERDICT` for no verdict."""
    kinds = [k for k in SHORT if cell_kinds(cell)[k]]
    return SHORT[kinds[0]] + ("+" if len(kinds) > 1 else "") if kinds else cell if cell == NO_VERDICT else NO_VERDICT


def cell_kinds(cell: str) -> Counter[str]:
    """{kind: count} of a verdict cell written by `verdict_cell` ({kind: 1} for one cut by
    `short_cell`: the counts are gone by then); empty for anything else."""
    short = _SHORT.fullmatch(cell)
    if short:
        return Counter({next(k for k, w in SHORT.items() if w == short[1]): 1})
    if _TALLY.fullmatch(cell):
        counts: Counter[str] = Counter()
        for number, label in _ITEM.findall(cell):
            counts[_BY_LABEL[label]] += int(number)
        return counts
    single = _SINGLE.match(cell)
    return Counter({_BY_LABEL[single[1]]: 1}) if single else Counter()


__all__ = ["BROKEN_ON_MAIN", "FLAKY", "INFRA", "KINDS", "LABELS", "NEW", "NOTES_WAIT_S", "FailureVerdict", "cell_kinds",
           "read_verdicts", "SHORT_WORST", "short_cell", "tally_text", "verdict_cell"]
