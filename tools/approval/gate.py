"""Whether a pull request's GPU tiers may run on the self-hosted runners: the gate of pr-gpu.yml.

`decide` takes one ``pull_request_target`` event and answers with a `Decision`:

- ``labeled`` with any other label: nothing runs (labels are not code changes).
- a branch of this repository (head repository == base repository): runs on ``opened``,
  ``synchronize``, ``reopened`` and on the approval label. Only users with write access can push
  a branch here, so its code is as trusted as the default branch's.
- a fork (or a deleted fork): runs only on the ``labeled`` event of the approval label, and only
  when GitHub's issue events show that the label's latest event is ``labeled`` (it was not removed
  since) by a user whose permission is write, maintain or admin. A triager can apply labels but
  cannot approve. What runs is the head commit the event carries, the one the pull request had
  when the label was applied; a later push (``synchronize``) never runs, so every new commit needs
  a new approval (pr-gpu.yml removes the label on such a push so that re-applying it is one click).
  A label names no commit, so a push that lands just before it would be approved unseen: the label
  is refused when GitHub first saw the head commit less than ``push_window`` seconds
  (`PUSH_WINDOW`) before the label was applied. Re-applying it later, or the comment approval of
  `tools.approval.comment` (``/ok-to-test-gpu <sha-prefix>``, bound to the commit reviewed), approves.

Nothing approves by default: a closed pull request, a malformed payload or an unknown action does
not run; a GitHub API failure raises `GitHubError` (the gate job then fails instead of guessing).
The GitHub side is a small protocol (`ApprovalGitHub`); `tools.approval.github_api.IssueEventsGitHub`
implements it over the bot's REST client (retries, timeouts, typed errors).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from tools.approval.github_api import IssueEventsGitHub, LabelEvent, parse_time
from tools.rerun.github import Permission, PullRequest

DEFAULT_LABEL = "ok-to-test-gpu"
PUSH_ACTIONS = frozenset({"opened", "synchronize", "reopened"})
PUSH_WINDOW = 120.0  # seconds: a label applied sooner after the head commit appeared is refused
_SHA = re.compile(r"[0-9a-f]{40}")


class EventError(ValueError):
    """The event payload is not a usable ``pull_request_target`` event; the message names the key."""


@dataclass(frozen=True)
class PullRequestEvent:
    """The parts of a ``pull_request_target`` payload the gate reads.

    ``repo`` is the base repository (``owner/name``); ``head_repo`` the repository the head branch
    lives in, None when that fork was deleted; ``label`` the label of a ``labeled`` event.
    """

    repo: str
    number: int
    action: str
    state: str
    head_sha: str
    head_repo: str | None
    label: str | None

    @property
    def from_fork(self) -> bool:
        return self.head_repo is None or self.head_repo.lower() != self.repo.lower()


@dataclass(frozen=True)
class Decision:
    """``run``: start the GPU tiers on ``sha``. ``reason`` says why, for the job summary."""

    run: bool
    sha: str
    reason: str
    approver: str | None = None


class ApprovalGitHub(Protocol):
    def latest_label_event(self, repo: str, number: int, label: str) -> LabelEvent | None:
        """The newest labeled/unlabeled event of ``label`` on the issue or pull request."""

    def head_first_seen(self, repo: str, sha: str) -> datetime | None:
        """When GitHub first ran a workflow for commit ``sha`` (None: never)."""

    def get_permission(self, repo: str, user: str) -> Permission:
        """The user's permission on ``repo`` (``none`` for a non-collaborator)."""

    def get_pull(self, repo: str, number: int) -> PullRequest:
        """The pull request as GitHub has it now."""


def _get(data: Any, path: str) -> Any:
    node = data
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            raise EventError(f"event payload has no {path}")
        node = node[key]
    return node


def _text(data: Any, path: str) -> str:
    value = _get(data, path)
    if not isinstance(value, str) or not value:
        raise EventError(f"event payload: {path} must be a non-empty string, got {value!r}")
    return value


def parse_event(data: Any) -> PullRequestEvent:
    """A `PullRequestEvent` from the decoded payload; `EventError` names what is missing or wrong."""
    number = _get(data, "pull_request.number")
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise EventError(f"event payload: pull_request.number must be a positive integer, got {number!r}")
    head_sha = _text(data, "pull_request.head.sha")
    if not _SHA.fullmatch(head_sha):
        raise EventError(f"event payload: pull_request.head.sha is not a 40-hex commit id: {head_sha!r}")
    head_repo = _get(data, "pull_request.head.repo")
    action = _text(data, "action")
    return PullRequestEvent(
        repo=_text(data, "repository.full_name"), number=number, action=action,
        state=_text(data, "pull_request.state"), head_sha=head_sha,
        head_repo=None if head_repo is None else _text(data, "pull_request.head.repo.full_name"),
        label=_text(data, "label.name") if action == "labeled" else None)


def how_to_approve(label: str) -> str:
    return (f"a user with write access reviews the head commit and comments `/ok-to-test-gpu <sha-prefix>` "
            f"naming it, or applies the `{label}` label (again after every push), or comments "
            f"`/rerun-test <file>`")


def decide(event: PullRequestEvent, label: str, github: ApprovalGitHub, *,
           push_window: float = PUSH_WINDOW) -> Decision:
    """Apply the module's rules to one event; calls GitHub only for a fork's approval label."""
    def no(reason: str) -> Decision:
        return Decision(False, event.head_sha, reason)

    if event.state != "open":
        return no(f"pull request #{event.number} is {event.state}")
    if event.action == "labeled" and event.label != label:
        return no(f"label `{event.label}` does not start GPU tiers (only `{label}` does)")
    if event.action != "labeled" and event.action not in PUSH_ACTIONS:
        return no(f"action `{event.action}` does not start GPU tiers")
    if not event.from_fork:
        return Decision(True, event.head_sha, f"branch of {event.repo}: its author can push to the repository")
    fork = event.head_repo or "a deleted fork"
    if event.action != "labeled":
        return no(f"pull request from {fork}: GPU tiers run after approval: {how_to_approve(label)}")
    latest = github.latest_label_event(event.repo, event.number, label)
    if latest is None:
        return no(f"GitHub lists no `{label}` label event on #{event.number}")
    if latest.action != "labeled":
        return no(f"`{label}` was removed again by {latest.actor or 'a deleted user'} at {latest.created_at}")
    if not latest.actor:
        return no(f"`{label}` was applied by a deleted account, which cannot approve")
    permission = github.get_permission(event.repo, latest.actor)
    if not permission.is_writer:
        return no(f"`{label}` was applied by {latest.actor}, whose permission is {permission.permission} "
                  f"(role {permission.role_name}); approving GPU runs needs write, maintain or admin")
    labelled = parse_time(latest.created_at, f"issue event {latest.id}")
    seen = github.head_first_seen(event.repo, event.head_sha)
    if seen is None or (labelled - seen).total_seconds() < push_window:
        when = "GitHub lists no run of it yet" if seen is None else (
            f"it appeared {max(0, round((labelled - seen).total_seconds()))} s before the label")
        return no(f"`{label}` was applied by {latest.actor} less than {push_window:.0f} s after the head commit "
                  f"{event.head_sha[:12]} appeared ({when}): the label may have been meant for the commit "
                  f"before it. Review {event.head_sha[:12]} and comment `/ok-to-test-gpu {event.head_sha[:12]}`, "
                  f"or apply the label again")
    return Decision(True, event.head_sha,
                    f"pull request from {fork}: `{label}` applied by {latest.actor} "
                    f"({permission.role_name}) at {latest.created_at}", approver=latest.actor)


__all__ = ["ApprovalGitHub", "DEFAULT_LABEL", "Decision", "EventError", "IssueEventsGitHub", "LabelEvent",
           "PUSH_WINDOW", "PullRequestEvent", "decide", "how_to_approve", "parse_event"]
