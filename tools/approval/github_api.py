"""The GitHub reads of the approval gate, over the bot's REST client (retries, timeouts, typed errors).

`IssueEventsGitHub.latest_label_event` finds the newest event of one label **newest page first**:
GitHub lists issue events oldest first, 100 a page, with ``Link: rel="last"`` and ``rel="prev"``;
the gate reads the first page, jumps to the last and walks back until a page holds an event of the
label (the label that triggered the gate was applied moments ago, so that is the last page or the
one before). However many other events a pull request has (its author can add thousands), the gate
reads a few pages. Without a ``last`` link (a single page, or a server that does not send one) it
walks forward through every page. At most ``max_pages`` pages are read either way; more raises.

`IssueEventsGitHub.head_first_seen` is when GitHub first ran a workflow for a commit (the earliest
``created_at`` of the Actions runs of that head SHA: the ``pull_request``/``pull_request_target``
runs a push starts), a server-side time the pull request's author cannot set, unlike commit dates.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tools.rerun.github import GitHubClient, GitHubError, Permission, PullRequest


@dataclass(frozen=True)
class LabelEvent:
    """One ``labeled``/``unlabeled`` issue event; ``actor`` is "" for a deleted account."""

    id: int
    action: str
    label: str
    actor: str
    created_at: str


def parse_time(text: str, what: str) -> datetime:
    """An ISO 8601 time as GitHub writes it (``2026-12-01T10:00:02Z``); `GitHubError` if it is not one."""
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise GitHubError("GET", what, 200, f"unexpected time {text!r:.60}") from None
    if moment.tzinfo is None:
        raise GitHubError("GET", what, 200, f"time without a zone {text!r:.60}")
    return moment


class IssueEventsGitHub:
    """`tools.approval.gate.ApprovalGitHub` over `GitHubClient` (see the module docstring)."""

    def __init__(self, client: GitHubClient, max_pages: int = 50):
        if max_pages < 1:
            raise ValueError(f"max_pages must be >= 1, got {max_pages}")
        self.client = client
        self.max_pages = max_pages

    def _page(self, path: str, params: dict[str, Any] | None, first: str) -> tuple[list[LabelEvent], dict[str, Any]]:
        response = self.client.request("GET", path, params=params)
        if response is None:  # pragma: no cover - only requests with `confirm` end without a response
            raise GitHubError("GET", first, None, "no response")
        try:
            page = response.json()
        except ValueError:
            raise GitHubError("GET", first, response.status_code, "response is not JSON") from None
        if not isinstance(page, list):
            raise GitHubError("GET", first, response.status_code, f"expected a list of events, got {page!r:.80}")
        events = [_label_event(item) for item in page
                  if isinstance(item, dict) and item.get("event") in ("labeled", "unlabeled")]
        return events, response.links

    def _forward(self, first: str, events: list[LabelEvent], links: dict[str, Any]) -> list[LabelEvent]:
        """``events`` (the first page) and those of every following page, oldest first."""
        out, path, pages = list(events), links.get("next", {}).get("url"), 1
        while path:
            if pages >= self.max_pages:
                raise GitHubError("GET", first, None, f"more than {self.max_pages} pages of issue events")
            page, links = self._page(path, None, first)
            out += page
            path, pages = links.get("next", {}).get("url"), pages + 1
        return out

    def label_events(self, repo: str, number: int) -> list[LabelEvent]:
        """Every labeled/unlabeled event of the issue, oldest first (every page, forward)."""
        first = f"/repos/{repo}/issues/{number}/events"
        return self._forward(first, *self._page(first, {"per_page": 100}, first))

    def latest_label_event(self, repo: str, number: int, label: str) -> LabelEvent | None:
        """The newest event of ``label`` (by id), reading the newest pages first; None if none."""
        first = f"/repos/{repo}/issues/{number}/events"
        events, links = self._page(first, {"per_page": 100}, first)
        last = links.get("last", {}).get("url")
        if not last:
            return _latest([e for e in self._forward(first, events, links) if e.label == label])
        path: str | None = last
        for _ in range(self.max_pages - 1):
            page, page_links = self._page(path or first, None, first)
            found = _latest([e for e in page if e.label == label])
            if found is not None:
                return found
            path = page_links.get("prev", {}).get("url")
            if not path or path == first or "page=1" in path.split("?", 1)[-1].split("&"):
                return _latest([e for e in events if e.label == label])  # back at the first page
        raise GitHubError("GET", first, None, f"no `{label}` event in the newest {self.max_pages - 1} pages "
                                              f"of issue events")

    def head_first_seen(self, repo: str, sha: str) -> datetime | None:
        """The earliest ``created_at`` of the workflow runs of ``sha`` (first 100), or None."""
        path = f"/repos/{repo}/actions/runs"
        response = self.client.request("GET", path, params={"head_sha": sha, "per_page": 100})
        if response is None:  # pragma: no cover
            raise GitHubError("GET", path, None, "no response")
        try:
            runs = response.json()["workflow_runs"]
            times = [parse_time(str(run["created_at"]), path) for run in runs if run.get("head_sha") == sha]
        except (ValueError, KeyError, TypeError) as exc:
            raise GitHubError("GET", path, response.status_code, f"unexpected response shape: {exc!r}") from None
        return min(times) if times else None

    def get_permission(self, repo: str, user: str) -> Permission:
        return self.client.get_permission(repo, user)

    def get_pull(self, repo: str, number: int) -> PullRequest:
        return self.client.get_pull(repo, number)


def _latest(events: list[LabelEvent]) -> LabelEvent | None:
    return max(events, key=lambda e: e.id) if events else None


def _label_event(item: dict[str, Any]) -> LabelEvent:
    try:
        actor = item.get("actor") or {}
        return LabelEvent(int(item["id"]), str(item["event"]), str(item["label"]["name"]),
                          str(actor.get("login") or ""), str(item.get("created_at") or ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise GitHubError("GET", "issue events", 200, f"unexpected event shape: {exc!r}") from None


__all__ = ["IssueEventsGitHub", "LabelEvent", "parse_time"]
