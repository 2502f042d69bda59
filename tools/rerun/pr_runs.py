"""The workflow runs of a pull request's head commit, found the way GitHub really records them.

GitHub gives a ``pull_request`` run the PR's head SHA, but a run of ``pull_request_target``,
``issue_comment`` or ``workflow_dispatch`` the SHA and name of the branch its workflow ran from
(the base or default branch). ``GET /actions/runs?head_sha=HEAD`` therefore finds pr.yml's runs
but never pr-gpu.yml's, nor the bot's own dispatched runs. Those carry the PR in their run-name
(``display_title`` in the API), which the project's workflows set:

* pr-gpu.yml: ``pr-gpu PR #N (<head sha>)`` for a ``pull_request_target`` event, ``pr-gpu PR #N
  comment <id>`` for an ``issue_comment`` (the comment's ``/ok-to-test-gpu <sha-prefix>`` names the
  commit the gate approved);
* rerun-test-dispatch.yml: ``rerun-test PR #N <tier> <part> (<head sha>) comment <id>``.

`find` lists the head SHA's runs, then each of ``workflows`` (pr-gpu.yml and the dispatch
workflow) created since the PR was opened (GitHub's ``created=>=``), newest first, and keeps a run
whose name names this PR and either the head SHA, or a comment whose first line approves a prefix
of the head (`tools.approval.comment.names_commit`; looked up only for runs that failed or are not
completed, once per comment). A listing GitHub cut short (over 1,000 runs) is reported, never
silently treated as complete. Limit: the comment is read as it is now; an author who edits an old
approval to name the new head makes that old run count as the head's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.approval.comment import names_commit
from tools.rerun.github import GitHubAPI, GitHubError, WorkflowRun

PR_WORKFLOWS = ("pr-gpu.yml",)
"""Workflows that run for a PR from the base branch and name the PR in their run-name."""
FAILED_CONCLUSIONS = frozenset({"failure", "timed_out"})

_PR = re.compile(r"\bPR #(\d+)(?=\s|$)")
_SHA = re.compile(r"\(([0-9a-f]{40})\)")
_COMMENT = re.compile(r"\bcomment (\d+)\b")


@dataclass(frozen=True)
class RunTitle:
    """What a run-name says: the PR, the head SHA it tested (if it names one) and the comment."""

    pr: int | None
    sha: str | None
    comment_id: int | None


def parse_title(title: str) -> RunTitle:
    """The PR number, SHA and comment id a run-name holds (each None when absent)."""
    pr, sha, comment = _PR.search(title), _SHA.search(title), _COMMENT.search(title)
    return RunTitle(int(pr[1]) if pr else None, sha[1] if sha else None, int(comment[1]) if comment else None)


@dataclass(frozen=True)
class PrRuns:
    """``runs``: the head's runs, each once, newest first per source. ``incomplete``: the workflow
    files whose listing GitHub cut short (older runs of the PR may be missing)."""

    runs: list[WorkflowRun]
    incomplete: list[str]


def _wanted(run: WorkflowRun) -> bool:
    return run.status != "completed" or run.conclusion in FAILED_CONCLUSIONS


def find(client: GitHubAPI, repo: str, number: int, head_sha: str, since: str,
         workflows: tuple[str, ...]) -> PrRuns:
    """The runs of PR ``number`` at ``head_sha`` (see the module docstring); ``since`` is when the
    PR was created (ISO 8601; "" lists without that bound). Raises `GitHubError` when a listing
    fails; a comment that cannot be read (deleted: 404) just does not tie its run to the head."""
    runs = {run.id: run for run in client.list_runs_for_sha(repo, head_sha)}
    incomplete: list[str] = []
    approvals: dict[int, bool] = {}
    for workflow in dict.fromkeys(workflows):
        listing = client.list_workflow_runs(repo, workflow, created_since=since or None)
        if not listing.complete:
            incomplete.append(workflow)
        for run in listing.runs:
            title = parse_title(run.display_title)
            if title.pr != number or run.id in runs:
                continue
            if title.sha is not None:
                if title.sha == head_sha:
                    runs[run.id] = run
                continue
            if title.comment_id is None or not _wanted(run):
                continue
            if title.comment_id not in approvals:
                approvals[title.comment_id] = _approves(client, repo, title.comment_id, head_sha)
            if approvals[title.comment_id]:
                runs[run.id] = run
    return PrRuns(list(runs.values()), incomplete)


def _approves(client: GitHubAPI, repo: str, comment_id: int, head_sha: str) -> bool:
    try:
        return names_commit(client.get_comment(repo, comment_id).body, head_sha)
    except GitHubError as exc:
        if exc.status == 404:
            return False
        raise


__all__ = ["FAILED_CONCLUSIONS", "PR_WORKFLOWS", "PrRuns", "RunTitle", "find", "parse_title"]
