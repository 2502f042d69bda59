"""The fields of an ``issue_comment`` payload the bot uses, or why it ignores the payload."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tools.rerun.replies import MARKER_PREFIX

_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")


@dataclass(frozen=True)
class CommentEvent:
    """``default_branch`` is None when the payload lacks it (some tools strip it; the handler then
    reads it from ``GET /repos/{o}/{r}``). ``html_url`` is the repository's web address;
    ``created_at`` when the comment was posted (ISO 8601, GitHub's clock), None when absent."""

    repo: str
    number: int
    comment_id: int
    user: str
    body: str
    default_branch: str | None
    html_url: str
    created_at: str | None = None

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "CommentEvent | str":
        """The event, or a string saying why the bot ignores it."""
        if not isinstance(payload, dict):
            return "payload is not a JSON object"
        if payload.get("action") != "created":
            return f"action is {payload.get('action')!r}, not 'created'"
        issue, comment, repo = payload.get("issue"), payload.get("comment"), payload.get("repository")
        if not (isinstance(issue, dict) and isinstance(comment, dict) and isinstance(repo, dict)):
            return "not an issue_comment payload (issue, comment or repository missing)"
        if not issue.get("pull_request"):
            return "comment is on an issue, not a pull request"
        body = comment.get("body") or ""
        if not isinstance(body, str):
            return "comment body is not a string"
        if MARKER_PREFIX in body:
            return "comment is a rerun-test reply"
        user = comment.get("user") or {}
        if not isinstance(user, dict) or user.get("type") == "Bot":
            return "comment author is a bot"
        try:
            full_name = str(repo["full_name"])
            branch = repo.get("default_branch")
            html_url = repo.get("html_url")
            created = comment.get("created_at")
            return cls(full_name, int(issue["number"]), int(comment["id"]), str(user.get("login", "")), body,
                       str(branch) if isinstance(branch, str) and branch else None,
                       html_url if isinstance(html_url, str) and html_url.startswith("https://")
                       else f"https://github.com/{full_name}",
                       created if isinstance(created, str) and _ISO_TIME.fullmatch(created) else None)
        except (KeyError, TypeError, ValueError) as exc:
            return f"payload lacks a field the bot needs: {exc!r}"


__all__ = ["CommentEvent"]
