"""The approval bound to what was reviewed: a writer's ``/ok-to-test-gpu <sha-prefix>`` comment.

A label names no commit, so a push that lands just before it is approved unseen (`tools.approval.gate`
refuses a label applied within `gate.PUSH_WINDOW` seconds of the head commit appearing, which
narrows that race but cannot close it). The comment names the commit: `decide_comment` approves
exactly the pull request's current head, and only when

- the ``issue_comment`` event is ``created`` (an edit could re-point an old approval), on an open
  pull request, by a user whose permission is write, maintain or admin (looked up, not taken from
  the payload's ``author_association``);
- the comment's first non-blank line is ``/ok-to-test-gpu <hex>`` with 7 to 40 hex digits;
- the pull request's head, read from GitHub after the comment, starts with that prefix. A push
  after the review changes the head, and the comment then approves nothing;
- the pull request targets the default branch: an ``issue_comment`` run knows no base branch, so
  pr-gpu.yml plans against the default branch (for another base, apply the label).

What runs is that head commit (`Decision.sha`), as with the label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tools.approval.gate import ApprovalGitHub, Decision, EventError

COMMAND = "/ok-to-test-gpu"
_LINE = re.compile(r"/ok-to-test-gpu(?:[ \t]+(?P<sha>\S+))?[ \t]*")
_PREFIX = re.compile(r"[0-9a-f]{7,40}")


@dataclass(frozen=True)
class ApprovalComment:
    """The parts of an ``issue_comment`` payload the comment approval reads. ``command`` is the
    first non-blank line when it is the approval command (else None); ``prefix`` its argument."""

    repo: str
    number: int
    action: str
    state: str
    is_pull_request: bool
    author: str
    command: str | None
    prefix: str | None
    default_branch: str | None = None


def _text(data: Any, *keys: str) -> str:
    node = data
    for key in keys:
        if not isinstance(node, dict) or key not in node:
            raise EventError(f"event payload has no {'.'.join(keys)}")
        node = node[key]
    if not isinstance(node, str):
        raise EventError(f"event payload: {'.'.join(keys)} must be a string, got {node!r:.80}")
    return node


def is_comment_event(data: Any) -> bool:
    """True for an ``issue_comment`` payload (it has ``comment`` and ``issue``)."""
    return isinstance(data, dict) and isinstance(data.get("comment"), dict) and isinstance(data.get("issue"), dict)


def approval_command(body: str) -> tuple[str | None, str | None]:
    """(the first non-blank line, its argument) when that line is the approval command, else
    (None, None). The argument is whatever follows; `names_commit` checks it."""
    first = next((line.strip() for line in body.replace("\r\n", "\n").split("\n") if line.strip()), "")
    match = _LINE.fullmatch(first)
    return (first, match["sha"]) if match else (None, None)


def names_commit(body: str, sha: str) -> bool:
    """True when ``body`` is an approval of ``sha`` as far as its text goes: its first non-blank
    line is ``/ok-to-test-gpu <prefix>`` with a well-formed prefix of ``sha`` (who wrote it, and
    whether ``sha`` was the head then, is `decide_comment`'s part)."""
    prefix = approval_command(body)[1]
    return prefix is not None and bool(_PREFIX.fullmatch(prefix)) and sha.startswith(prefix)


def parse_comment_event(data: Any) -> ApprovalComment:
    """An `ApprovalComment`; `EventError` names what is missing or malformed."""
    number = data.get("issue", {}).get("number") if isinstance(data, dict) else None
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise EventError(f"event payload: issue.number must be a positive integer, got {number!r:.40}")
    command, prefix = approval_command(_text(data, "comment", "body"))
    return ApprovalComment(
        repo=_text(data, "repository", "full_name"), number=number, action=_text(data, "action"),
        state=_text(data, "issue", "state"), is_pull_request=isinstance(data["issue"].get("pull_request"), dict),
        author=_text(data, "comment", "user", "login"), command=command, prefix=prefix,
        default_branch=_text(data, "repository", "default_branch") if "default_branch" in data["repository"] else None)


def decide_comment(event: ApprovalComment, github: ApprovalGitHub) -> Decision:
    """Apply the module's rules to one comment; reads the commenter's permission and the pull request."""
    def no(reason: str, sha: str = "") -> Decision:
        return Decision(False, sha, reason)

    if event.command is None:
        return no(f"the comment is not `{COMMAND} <sha-prefix>`")
    if not event.is_pull_request:
        return no(f"#{event.number} is an issue, not a pull request")
    if event.action != "created":
        return no(f"comment {event.action}: only a new comment approves")
    if event.state != "open":
        return no(f"pull request #{event.number} is {event.state}")
    if event.prefix is None or not _PREFIX.fullmatch(event.prefix):
        return no(f"`{COMMAND}` needs the reviewed commit: 7 to 40 lowercase hex digits of its SHA, e.g. "
                  f"`{COMMAND} 1a2b3c4d`")
    permission = github.get_permission(event.repo, event.author)
    if not permission.is_writer:
        return no(f"{event.author} has permission {permission.permission} (role {permission.role_name}); "
                  f"approving GPU runs needs write, maintain or admin")
    pull = github.get_pull(event.repo, event.number)
    if pull.state != "open":
        return no(f"pull request #{event.number} is {pull.state}", pull.head_sha)
    if event.default_branch is None or pull.base_ref != event.default_branch:
        return no(f"#{event.number} targets `{pull.base_ref}`, not the default branch "
                  f"`{event.default_branch}`: a comment approval plans against the default branch; apply the "
                  f"label instead", pull.head_sha)
    if not pull.head_sha.startswith(event.prefix):
        return no(f"the approval names {event.prefix} but the head of #{event.number} is now "
                  f"{pull.head_sha[:12]}: a push came after the review; review {pull.head_sha[:12]} and approve "
                  f"it with `{COMMAND} {pull.head_sha[:12]}`", pull.head_sha)
    return Decision(True, pull.head_sha, f"`{COMMAND} {event.prefix}` by {event.author} "
                    f"({permission.role_name}) approves the head commit {pull.head_sha[:12]}", approver=event.author)


__all__ = ["ApprovalComment", "COMMAND", "approval_command", "decide_comment", "is_comment_event", "names_commit",
           "parse_comment_event"]
