"""``/culprit <target> [--tier T] [--good SHA] [--bad SHA] [--budget N]``: check and plan one search.

A search spends an hour of GPU runs, so the bot never runs it in the webhook: it dispatches
`CULPRIT_WORKFLOW` once, with the inputs `CulpritRequest.inputs` names (the auto-culprit of the
nightly dispatches the same workflow with ``comment_id`` and ``pr`` empty). Everything is checked
before anything is written, so bad input costs a reply and dispatches nothing:

* the target resolves like ``/rerun-test``'s (`tools.rerun.resolve`); the tier is ``--tier`` or the
  file's one GPU tier (a file on several gets a reply naming them);
* ``--good`` / ``--bad`` default to the test history's breakage window (`breakage_window`: the open
  fail streak on the default branch, "broken on main since X, last passed at Y"), read as the
  report's verdicts read it (``--history`` / ``$CI_HISTORY_STORE``); without a history both are
  required;
* the commits must make a window of the default branch's checkout (`ci.commands.culprit_local.window`:
  good before bad on one first-parent line), and the budget must fit the bot's request budget
  (`culprit_dispatch`'s rule: ``(budget + 2) x attempts`` dispatches at most `budget.max_runs`, each
  with its failed run's artifact reads).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ci.commands.culprit_local import WindowError, window
from ci.registry import Registry
from tools.rerun import replies
from tools.rerun.budget import max_runs
from tools.rerun.commands import Command, quote
from tools.rerun.culprit_junit import SIGNATURE_REQUESTS
from tools.rerun.resolve import Kind, resolve_target

if TYPE_CHECKING:
    from ci.history.mainline import Streak
    from ci.history.store import Store

CULPRIT_WORKFLOW = "culprit.yml"
ATTEMPTS = 2  # `ci culprit --attempts`' default, which culprit.yml keeps
RUNNERS = 1  # probes at once: one GPU runner of the tier at a time
HISTORY_WAIT_S = 20.0  # as the report's verdicts: a history that does not answer costs the defaults


class CulpritProblem(ValueError):
    """Why a ``/culprit`` cannot start: one Markdown paragraph for the reply."""


@dataclass(frozen=True)
class CulpritRequest:
    """One checked search: ``test`` (FILE[::TEST]) on ``tier`` between the full SHAs ``good`` and
    ``bad`` (``candidates`` commits after good up to bad), at most ``budget`` runs."""

    tier: str
    test: str
    good: str
    bad: str
    budget: int
    candidates: int

    def inputs(self, pr: int | None, comment_id: int | None) -> dict[str, str]:
        """culprit.yml's workflow_dispatch inputs (all strings; ``pr``/``comment_id`` empty when the
        search answers no comment)."""
        return {"tier": self.tier, "test": self.test, "good": self.good, "bad": self.bad,
                "budget": str(self.budget), "runners": str(RUNNERS),
                "comment_id": "" if comment_id is None else str(comment_id), "pr": "" if pr is None else str(pr)}


def culprit_run_name(inputs: dict[str, str]) -> str:
    """The run-name culprit.yml gives a run of these inputs (how the bot finds the run it started)."""
    comment = f" comment {inputs['comment_id']}" if inputs.get("comment_id") else ""
    return f"culprit {inputs['test']} on {inputs['tier']} ({inputs['good']}..{inputs['bad']}){comment}"


def max_budget() -> int:
    """The largest ``--budget`` whose dispatches fit one comment's share of the request budget."""
    return max_runs(SIGNATURE_REQUESTS) // ATTEMPTS - 2


def plan(registry: Registry, root: Path, command: Command, *, history: str | None, repo: str) -> CulpritRequest:
    """The search ``command`` asks for, checked (see the module docstring); `CulpritProblem` says why not."""
    (target,) = command.targets
    r = resolve_target(registry, root, target, command.tier)
    if r.kind is not Kind.RESOLVED:
        raise CulpritProblem(replies.explain(r, registry))
    if len(r.tiers) != 1:
        raise CulpritProblem(f"**{quote(target)}** runs on the GPU tiers {', '.join(f'`{t}`' for t in r.tiers)}: "
                             f"name one with `--tier`, e.g. `/culprit {r.path} --tier {r.tiers[-1]}`.")
    tier, budget = r.tiers[0], command.budget
    if budget > max_budget():
        raise CulpritProblem(f"`--budget {budget}` is over the {max_budget()} runs one search may spend within "
                             "the bot's request budget (`tools/rerun/budget.py`): give a lower `--budget`.")
    good, bad = command.good, command.bad
    if good is None or bad is None:
        found = _window_from_history(history, repo, tier, r.test_id)
        good, bad = good or found[0], bad or found[1]
    try:
        good, bad, candidates = window(root, good, bad)
    except WindowError as exc:  # git's words name the checkout; the reply names the commits instead
        raise CulpritProblem(f"{str(exc).replace(str(root), 'the default branch')}.") from None
    return CulpritRequest(tier, r.test_id, good, bad, budget, len(candidates))


def _window_from_history(history: str | None, repo: str, tier: str, test: str) -> tuple[str, str]:
    where = f"{quote(test)} on `{tier}`"
    if not history:
        raise CulpritProblem(f"give `--good SHA --bad SHA` for {where}: no test history is configured here to "
                             "read its breakage window from.")
    from ci.history.store import failure_text

    try:
        found = breakage_window(history, repo, tier, test)
    except Exception as exc:  # an unreadable history costs the defaults, never a traceback
        raise CulpritProblem(f"give `--good SHA --bad SHA` for {where}: the test history could not be read "
                             f"({quote(failure_text(exc, history), limit=200)}).") from None
    if found is None:
        raise CulpritProblem(f"give `--good SHA --bad SHA` for {where}: the test history shows no open breakage "
                             "of it on the default branch after a pass.")
    return found


def breakage_window(history: str, repo: str, tier: str, test: str) -> tuple[str, str] | None:
    """(last pass, first fail) of the earliest open fail streak on the default branch of ``test``
    (a node id, or every node of a file) on ``tier``: the window of the verdict "broken on main since
    X, last passed at Y"; None when no node of it is broken after a pass. Raises what the store raises."""
    from ci.history.mainline import fail_streaks, main_order
    from ci.history.verdict_queries import main_runs
    from tools.rerun.flake_notes import read_within

    file = test.split("::", 1)[0]

    def read(store: "Store") -> "Streak | None":
        rows = store.fetchall("SELECT id, node FROM nodes WHERE node = ? OR node LIKE ?", (test, f"{file}::%"))
        ids = {str(n): int(i) for i, n in rows if str(n) == test or ("::" not in test and str(n).startswith(file + "::"))}
        streaks = []
        for runs in main_runs(store, repo, tier, ids, None).values():
            found = fail_streaks(runs, main_order(store, repo, tier, runs, None))
            if found and found[-1].open and found[-1].last_pass:
                streaks.append(found[-1])
        return min(streaks, key=lambda s: s.first_index, default=None)

    streak = read_within(history, HISTORY_WAIT_S, read)
    return None if streak is None else (streak.last_pass, streak.first_fail)


__all__ = ["ATTEMPTS", "CULPRIT_WORKFLOW", "CulpritProblem", "CulpritRequest", "RUNNERS", "breakage_window",
           "culprit_run_name", "max_budget", "plan"]
