"""The reply to a ``/culprit`` comment, from the claim to the answer.

The bot claims the comment (`claim`, state ``claimed``), dispatches culprit.yml, then edits its
reply into `searching` (state ``done``: a redelivery starts nothing; ``incomplete`` when the dispatch
failed, so a replay looks the run up before it resends). The search, an hour later in culprit.yml,
edits the same reply (found by its marker, `report.Reporter.find_reply`) into `answer` or
`stopped` through `write_answer`; those keep the reply's marker and @mention. Text that is not the
bot's (the test, a commit subject, a PR title, an error) renders as text: `commands.quote`,
`commands.entities` or a code block (`replies.error_block`); links are GitHub's own.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Sequence

from tools.rerun.commands import entities, quote
from tools.rerun.github import CommitPull, GitHubAPI
from tools.rerun.replies import CLAIMED, DONE, INCOMPLETE, cap, error_block, marker

if TYPE_CHECKING:
    from ci.commands.culprit import Answer
    from tools.rerun.cmd_culprit import CulpritRequest

_MENTION = re.compile(r"@[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])? ")
_GITHUB_URL = re.compile(r"https://[A-Za-z0-9.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/(?:pull|actions/runs)/\d+")
SHORT = 12


def _link(text: str, url: str | None) -> str:
    return f"[{text}]({url})" if url and _GITHUB_URL.fullmatch(url) else text


def claim(comment_id: int, user: str) -> str:
    """Posted before culprit.yml is dispatched."""
    return f"{marker(comment_id, CLAIMED)}\n{user} starting a culprit search…"


def searching(comment_id: int, user: str, request: "CulpritRequest", run_url: str | None,
              error: str | None = None) -> str:
    """The reply once culprit.yml is dispatched (or its dispatch failed: ``error``)."""
    what = f"{quote(request.test)} on `{request.tier}`"
    if error is not None:
        return (f"{marker(comment_id, INCOMPLETE)}\n{user} could not start the culprit search of {what}: "
                f"dispatching `culprit.yml` failed.\n\n{error_block(error)}\nIt is retried when the delivery is "
                "replayed, or post the command again.")
    return (f"{marker(comment_id, DONE)}\n{user} searching: {request.candidates} candidate commit(s) between "
            f"`{request.good[:SHORT]}` and `{request.bad[:SHORT]}` for {what}, budget {request.budget} runs, "
            f"{_link('run', run_url) if run_url else 'run not listed yet'}. This reply gets the answer.")


def _head(previous: str) -> str:
    """The reply's marker line and @mention, kept by the answer."""
    first, _, rest = previous.partition("\n")
    mention = _MENTION.match(rest)
    return f"{first}\n{mention[0] if mention else ''}"


def _pulls(pulls: Sequence[CommitPull] | str) -> str:
    if isinstance(pulls, str):
        return f"its pull request unknown ({entities(pulls[:200])})"
    if not pulls:
        return "no pull request associated with it"
    return "; ".join(f"{_link(f'PR #{p.number}', p.html_url)} ({entities(p.title)})" for p in pulls[:3])


def answer(previous: str, result: "Answer", pulls: Sequence[CommitPull] | str, test: str, tier: str,
           run_url: str | None) -> str:
    """``previous`` (the reply) rewritten into the search's answer: the culprit with its subject,
    probability and pull request, or "stopped: ..., most likely X (p)", then every run with its link."""
    culprit = f"`{result.sha[:SHORT]}` {entities(result.subject)} — {_pulls(pulls)}"
    if result.found:
        head = f"culprit of {quote(test)} on `{tier}`: {culprit}, probability {result.probability:.3f}."
    else:
        why = "budget spent" if result.stop == "budget" else result.stop
        head = (f"stopped: {why}, most likely {culprit} (p {result.probability:.3f}), "
                f"for {quote(test)} on `{tier}`.")
    rows = [f"| `{r.sha[:SHORT]}` | {'failed' if r.failed else 'passed'} | {_link('run', r.link) if r.link else '—'} |"
            for r in result.runs]
    runs = (f"{len(result.runs)} run(s), {result.window_runs} in the window; search "
            f"{_link('run', run_url) if run_url else 'run'}:")
    return cap(f"{_head(previous)}{head}\n\n{runs}\n\n| commit | result | run |\n|---|---|---|\n" + "\n".join(rows) + "\n")


def stopped(previous: str, problem: str, run_url: str | None, *, resumable: bool) -> str:
    """``previous`` rewritten to say the search stopped before an answer, and why; ``resumable``
    (a runner failure, not bad input): re-running the job resumes it."""
    then = ("Re-running the search job resumes it where it stopped." if resumable
            else "Nothing more was run; post a corrected `/culprit`.")
    return cap(f"{_head(previous)}the culprit search stopped without an answer "
               f"({_link('search run', run_url) if run_url else 'search run'}):\n\n{error_block(problem)}\n{then}\n")


def write_answer(client: GitHubAPI, repo: str, bot_login: str, pr: int, comment_id: int,
                 render: Callable[[str], str]) -> None:
    """Edit the bot's reply to ``comment_id`` on ``pr`` into ``render(reply body)``. Raises
    `GitHubError`, or `report.ReportError` when there is no such reply."""
    from tools.rerun.report import Reporter

    reply = Reporter(client, repo, bot_login).find_reply(pr, comment_id)
    client.edit_comment(repo, reply.id, render(reply.body))


__all__ = ["answer", "claim", "searching", "stopped", "write_answer"]
