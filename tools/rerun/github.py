"""A small GitHub REST client for the bot: typed results, retries, timeouts, typed errors.

Retried: connection errors and timeouts, 5xx, 429, and 403s that are rate limits (secondary rate
limit message, ``Retry-After``, or ``x-ratelimit-remaining: 0``). The wait is ``Retry-After``
seconds when given, else ``x-ratelimit-reset`` minus now when the primary limit is exhausted, else
exponential backoff ``backoff_base * 2**attempt`` capped at ``backoff_cap``. When GitHub asks for a
longer wait than ``max_wait`` or the waits would exceed ``total_wait_cap`` the client gives up
with `GitHubError` instead of waiting less than asked. ``sleep`` and ``clock`` are injectable.

POSTs are retried too: a 5xx on ``dispatches`` may rarely mean the run started anyway; the bot
prefers a possible duplicate run over a silently lost one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

import requests

log = logging.getLogger(__name__)

TRUSTED_PERMISSIONS = frozenset({"admin", "maintain", "write"})
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})


class GitHubError(RuntimeError):
    """A GitHub API call failed for good. ``status`` is the last HTTP status (None: no response)."""

    def __init__(self, method: str, path: str, status: int | None, message: str, attempts: int = 1):
        self.method, self.path, self.status, self.attempts = method, path, status, attempts
        self.reason = message
        where = f"{method} {path}"
        super().__init__(f"{where} failed after {attempts} attempt(s): "
                         f"{'HTTP ' + str(status) + ': ' if status is not None else ''}{message}")


@dataclass(frozen=True)
class Permission:
    """``permission`` is GitHub's legacy level (admin/write/read/none); ``role_name`` the role
    (admin/maintain/write/triage/read or a custom role name)."""

    user: str
    permission: str
    role_name: str

    @property
    def can_trigger(self) -> bool:
        return self.permission in TRUSTED_PERMISSIONS or self.role_name in TRUSTED_PERMISSIONS


@dataclass(frozen=True)
class PullRequest:
    number: int
    state: str
    head_sha: str
    head_ref: str
    base_ref: str


DEFAULT_BOT_LOGIN = "github-actions[bot]"
"""The login GITHUB_TOKEN's comments are posted as; a self-hosted app passes its own (``--bot-login``)."""


@dataclass(frozen=True)
class IssueComment:
    id: int
    user: str
    body: str


@dataclass(frozen=True)
class RetryPolicy:
    """Seconds. ``max_attempts`` counts the first try."""

    max_attempts: int = 5
    backoff_base: float = 0.5
    backoff_cap: float = 8.0
    max_wait: float = 60.0
    total_wait_cap: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("backoff_base", "backoff_cap", "max_wait", "total_wait_cap"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


class GitHubClient:
    """REST calls scoped to one API base URL and token. Thread-safe for concurrent use as long as
    the `requests.Session` is (the bot gives each worker thread its own client)."""

    def __init__(self, api_url: str, token: str | None, *, timeout: float = 10.0,
                 retry: RetryPolicy = RetryPolicy(), sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time, session: requests.Session | None = None):
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.api_url = api_url.rstrip("/")
        self.timeout = timeout
        self.retry = retry
        self.sleep = sleep
        self.clock = clock
        self.session = session or requests.Session()
        self.session.headers.update({
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "rerun-test-bot",
        })
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    # -- transport -------------------------------------------------------------------------------
    def request(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
                ok: tuple[int, ...] = (200, 201, 204)) -> requests.Response:
        """One API call with retries; returns the response when its status is in ``ok``."""
        url = path if path.startswith("http") else f"{self.api_url}{path}"
        waited = 0.0
        for attempt in range(1, self.retry.max_attempts + 1):
            status: int | None = None
            try:
                response = self.session.request(method, url, json=json, params=params, timeout=self.timeout)
            except (requests.ConnectionError, requests.Timeout) as exc:
                message = f"{type(exc).__name__}: {exc}"
                delay = self._backoff(attempt)
            else:
                status = response.status_code
                if status in ok:
                    return response
                message = _error_message(response)
                delay = self._retry_delay(response, attempt)
                if delay is None:
                    raise GitHubError(method, path, status, message, attempt)
            if attempt == self.retry.max_attempts:
                raise GitHubError(method, path, status, message, attempt)
            if delay > self.retry.max_wait:
                raise GitHubError(method, path, status,
                                  f"{message} (GitHub asked to wait {delay:.0f}s, more than the "
                                  f"{self.retry.max_wait:.0f}s limit)", attempt)
            if waited + delay > self.retry.total_wait_cap:
                raise GitHubError(method, path, status,
                                  f"{message} (retrying would exceed the {self.retry.total_wait_cap:.0f}s "
                                  f"total wait limit)", attempt)
            log.warning("%s %s: %s; retry %d in %.2fs", method, path, message, attempt, delay)
            self.sleep(delay)
            waited += delay
        raise AssertionError("unreachable")  # pragma: no cover

    def _backoff(self, attempt: int) -> float:
        return min(self.retry.backoff_base * 2 ** (attempt - 1), self.retry.backoff_cap)

    def _retry_delay(self, response: requests.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying, or None if the error is final."""
        status = response.status_code
        headers = response.headers
        rate_limited = status == 429 or (status == 403 and (
            "retry-after" in headers or headers.get("x-ratelimit-remaining") == "0"
            or "rate limit" in _error_message(response).lower()))
        if not (rate_limited or status >= 500):
            return None
        retry_after = headers.get("retry-after")
        if retry_after is not None:
            try:
                return max(0.0, float(retry_after))
            except ValueError:
                log.warning("ignoring unparsable Retry-After %r", retry_after)
        if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
            try:
                return max(0.0, float(headers["x-ratelimit-reset"]) - self.clock())
            except ValueError:
                log.warning("ignoring unparsable x-ratelimit-reset %r", headers["x-ratelimit-reset"])
        return self._backoff(attempt)

    # -- endpoints -------------------------------------------------------------------------------
    def get_permission(self, repo: str, user: str) -> Permission:
        """The user's permission; a non-collaborator (404) has permission ``none``."""
        try:
            data = self.request("GET", f"/repos/{repo}/collaborators/{user}/permission").json()
        except GitHubError as exc:
            if exc.status == 404:
                return Permission(user, "none", "none")
            raise
        return Permission(user, str(data.get("permission") or "none"), str(data.get("role_name") or "none"))

    def get_pull(self, repo: str, number: int) -> PullRequest:
        data = self.request("GET", f"/repos/{repo}/pulls/{number}").json()
        try:
            return PullRequest(int(data["number"]), str(data["state"]), str(data["head"]["sha"]),
                               str(data["head"]["ref"]), str(data["base"]["ref"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise GitHubError("GET", f"/repos/{repo}/pulls/{number}", 200, f"unexpected response shape: {exc!r}")

    def list_issue_comments(self, repo: str, number: int, *, max_pages: int = 50) -> list[IssueComment]:
        """Every comment on the issue/PR, following ``Link: rel="next"`` up to ``max_pages`` pages
        of 100 (more raises: the bot then cannot prove it has not answered already)."""
        out: list[IssueComment] = []
        path: str | None = f"/repos/{repo}/issues/{number}/comments"
        params: dict[str, Any] | None = {"per_page": 100}
        for _ in range(max_pages):
            response = self.request("GET", path, params=params)
            for item in response.json():
                out.append(IssueComment(int(item["id"]), str((item.get("user") or {}).get("login", "")),
                                        str(item.get("body") or "")))
            path, params = response.links.get("next", {}).get("url"), None
            if not path:
                return out
        raise GitHubError("GET", f"/repos/{repo}/issues/{number}/comments", None,
                          f"more than {max_pages} pages of comments")

    def add_reaction(self, repo: str, comment_id: int, content: str) -> None:
        if content not in REACTIONS:
            raise ValueError(f"unknown reaction {content!r}; GitHub accepts {', '.join(sorted(REACTIONS))}")
        self.request("POST", f"/repos/{repo}/issues/comments/{comment_id}/reactions", json={"content": content})

    def create_comment(self, repo: str, number: int, body: str) -> int:
        """Post a comment; returns its id."""
        data = self.request("POST", f"/repos/{repo}/issues/{number}/comments", json={"body": body}).json()
        return int(data.get("id", 0))

    def dispatch_workflow(self, repo: str, workflow_file: str, ref: str, inputs: dict[str, str]) -> None:
        """``workflow_dispatch`` event: at most 10 inputs, all strings (GitHub's limits)."""
        if len(inputs) > 10:
            raise ValueError(f"workflow_dispatch takes at most 10 inputs, got {len(inputs)}")
        bad = [k for k, v in inputs.items() if not isinstance(v, str)]
        if bad:
            raise ValueError(f"workflow_dispatch inputs must be strings: {', '.join(bad)}")
        self.request("POST", f"/repos/{repo}/actions/workflows/{workflow_file}/dispatches",
                     json={"ref": ref, "inputs": inputs})


def _error_message(response: requests.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return (response.text or response.reason or "").strip()[:200]
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return str(data)[:200]
