"""The ``workflow_run`` ``completed`` hook: a dispatched run that ended without sending results.

Contract: `RunEnded.from_payload(payload, workflow_file)` reads a ``workflow_run`` delivery as
GitHub sends it (`@octokit/webhooks-examples`' shape) into the run's place in a bot reply: PR,
comment, tier, part from its ``display_title`` (the dispatch workflow's ``run-name``, ``rerun-test
PR #N <tier> <part> (<sha>) comment <id>``), its ``conclusion`` and ``html_url``; or a sentence
saying why the delivery is not one the bot acts on (another action, another workflow, a run that
succeeded: its ``report`` job wrote the row, a title the bot did not write, a culprit search's probe:
PR #0 `dispatch.SEARCH_PR`, whose search reads the conclusion itself and has no reply row).

`mark_ended(reporter, ended)` writes `headline.silent_cell(conclusion)` with the run's link into
that row, only while it still waits (``Reporter.report(only_if_waiting=True)``), without the
report slot wait (the hook runs in the bot, not on the run's runner). A redelivery or a replay
finds the row holding a result and writes nothing: one read, no edit. The server journals a
delivery before it is handled (`tools.rerun.server`), so a crash between the two replays it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tools.rerun.dispatch import SEARCH_PR, parse_run_name
from tools.rerun.headline import silent_cell
from tools.rerun.report import Reporter

EVENT = "workflow_run"
_RUN_URL = re.compile(r"https://[A-Za-z0-9.-]+(?::\d+)?/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/actions/runs/\d+")


def is_run_event(payload: Any) -> bool:
    """True for a ``workflow_run`` delivery (the payload holds no ``comment``)."""
    return isinstance(payload, dict) and isinstance(payload.get(EVENT), dict) and "comment" not in payload


@dataclass(frozen=True)
class RunEnded:
    """A dispatched run that completed: where its row is, how it ended, its link."""

    repo: str
    pr: int
    comment_id: int
    tier: str
    part: str
    conclusion: str
    run_url: str | None

    @classmethod
    def from_payload(cls, payload: dict[str, Any], workflow_file: str) -> "RunEnded | str":
        """The ended run, or a sentence saying why the bot leaves this delivery alone."""
        if payload.get("action") != "completed":
            return f"workflow_run action is {payload.get('action')!r}, not 'completed'"
        run, repo = payload.get(EVENT), payload.get("repository")
        if not isinstance(run, dict) or not isinstance(repo, dict) or not isinstance(repo.get("full_name"), str):
            return "not a workflow_run payload (workflow_run or repository missing)"
        path = run.get("path")
        if not isinstance(path, str) or path.rsplit("/", 1)[-1] != workflow_file:
            return f"the run is of {str(path)[:80]!r}, not of the dispatch workflow {workflow_file}"
        conclusion = run.get("conclusion")
        if conclusion == "success":
            return "the run succeeded: its report job wrote its row"
        title = parse_run_name(str(run.get("display_title") or ""))
        if title is None:
            return f"the run's title {str(run.get('display_title'))[:120]!r} is not one the bot dispatches"
        if int(title["pr"]) == SEARCH_PR:
            return "the run is a culprit search's probe (PR #0): it answers no comment; the search reads its conclusion"
        url = run.get("html_url")
        return cls(repo["full_name"], int(title["pr"]), int(title["comment_id"]), title["tier"], title["part"],
                   conclusion if isinstance(conclusion, str) else "unknown",
                   url if isinstance(url, str) and _RUN_URL.fullmatch(url) else None)


def mark_ended(reporter: Reporter, ended: RunEnded) -> bool:
    """Write the no-result cell into the run's row if it still waits (see the module docstring):
    True when written, False when the row held results already. Raises what `Reporter.report`
    raises."""
    done = reporter.report(ended.pr, ended.comment_id, ended.tier, ended.part, silent_cell(ended.conclusion),
                           ended.run_url, only_if_waiting=True, wait_slot=False)
    return done is not None


__all__ = ["EVENT", "RunEnded", "is_run_event", "mark_ended"]
