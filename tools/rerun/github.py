"""The GitHub endpoints the bot uses: typed results over `tools.rerun.rest`.

`GitHubAPI` is the protocol every command module talks to (Prow's shape: commands never build
URLs); `GitHubClient` implements it over REST. Responses are turned into frozen dataclasses here,
and a response of the wrong shape is a `GitHubError`, never a ``KeyError`` further down.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from tools.rerun.rest import GitHubError, RestClient, RetryPolicy

TRUSTED_PERMISSIONS = frozenset({"admin", "maintain", "write"})
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
MAX_DISPATCH_INPUTS = 25  # GitHub's cap on a workflow_dispatch's inputs (10 until 2025-12-04)
DEFAULT_BOT_LOGIN = "github-actions[bot]"
"""The login GITHUB_TOKEN's comments are posted as; a self-hosted app passes its own (``--bot-login``)."""


@dataclass(frozen=True)
class Permission:
    """``permission`` is GitHub's legacy level (admin/write/read/none); ``role_name`` the role
    (admin/maintain/write/triage/read or a custom role name)."""

    user: str
    permission: str
    role_name: str

    @property
    def is_writer(self) -> bool:
        """write, maintain or admin."""
        return self.permission in TRUSTED_PERMISSIONS or self.role_name in TRUSTED_PERMISSIONS



@dataclass(frozen=True)
class PullRequest:
    """``head_repo`` is the head repository's ``owner/name``; None when GitHub no longer knows it
    (a deleted fork), which the policy treats as a fork. ``created_at``: ISO 8601 UTC ("" unknown)."""

    number: int
    state: str
    head_sha: str
    head_ref: str
    base_ref: str
    author: str
    head_repo: str | None
    base_repo: str
    created_at: str = ""

    @property
    def is_fork(self) -> bool:
        return self.head_repo is None or self.head_repo.lower() != self.base_repo.lower()


@dataclass(frozen=True)
class CommitPull:
    """A pull request GitHub associates with a commit (merged with it, or holding it)."""

    number: int
    title: str
    html_url: str
    state: str


@dataclass(frozen=True)
class Repository:
    full_name: str
    default_branch: str
    html_url: str


@dataclass(frozen=True)
class IssueComment:
    id: int
    user: str
    body: str


@dataclass(frozen=True)
class WorkflowRun:
    """One Actions run. ``display_title`` is the run-name; ``conclusion`` is None until completed.
    ``head_sha`` is the commit GitHub ran the workflow from: the PR head only for ``pull_request``
    runs; ``pull_request_target``, ``issue_comment`` and ``workflow_dispatch`` runs carry the base
    or dispatched branch's commit (`tools.rerun.pr_runs` finds a PR's runs by their run-name)."""

    id: int
    name: str
    display_title: str
    status: str
    conclusion: str | None
    html_url: str
    head_sha: str
    event: str = ""


@dataclass(frozen=True)
class Dispatched:
    """A workflow dispatch that took effect. ``sent``: this call sent it (False: ``confirm`` found
    that an earlier attempt had). ``run_id`` / ``html_url``: the run GitHub started, when it said
    (``return_run_details``; None when the server answered 204 without them, or when ``confirm``
    ended the call)."""

    sent: bool
    run_id: int | None = None
    html_url: str | None = None


@dataclass(frozen=True)
class RunListing:
    """Runs of one listing, newest first. ``complete`` is False when GitHub had more than was read
    (``max_pages``, or GitHub's own cap of 1,000 results for a filtered listing)."""

    runs: list[WorkflowRun]
    complete: bool


@dataclass(frozen=True)
class Artifact:
    """One artifact of a workflow run (GitHub's "list workflow run artifacts")."""

    id: int
    name: str
    size: int
    expired: bool


class GitHubAPI(Protocol):
    """What the command modules may ask of GitHub."""

    def get_repo(self, repo: str) -> Repository: ...
    def get_permission(self, repo: str, user: str) -> Permission: ...
    def get_pull(self, repo: str, number: int) -> PullRequest: ...
    def list_issue_comments(self, repo: str, number: int) -> list[IssueComment]: ...
    def pulls_for_commit(self, repo: str, sha: str) -> list[CommitPull]: ...
    def get_comment(self, repo: str, comment_id: int) -> IssueComment: ...
    def create_comment(self, repo: str, number: int, body: str,
                       confirm: Callable[[], int | None] | None = None) -> int: ...
    def edit_comment(self, repo: str, comment_id: int, body: str) -> None: ...
    def add_reaction(self, repo: str, comment_id: int, content: str) -> None: ...
    def dispatch_workflow(self, repo: str, workflow_file: str, ref: str, inputs: dict[str, str],
                          confirm: Callable[[], bool] | None = None) -> Dispatched: ...
    def list_runs_for_sha(self, repo: str, head_sha: str) -> list[WorkflowRun]: ...
    def workflow_runs_page(self, repo: str, workflow_file: str, page: int, *, event: str | None = None,
                           created_since: str | None = None) -> tuple[list[WorkflowRun], bool]: ...
    def list_workflow_runs(self, repo: str, workflow_file: str, *, event: str | None = None,
                           created_since: str | None = None, max_pages: int = 10) -> RunListing: ...
    def get_run(self, repo: str, run_id: int) -> WorkflowRun: ...
    def rerun_failed_jobs(self, repo: str, run_id: int, confirm: Callable[[], bool] | None = None) -> bool: ...
    def run_artifacts(self, repo: str, run_id: int) -> list[Artifact]: ...
    def download_artifact(self, repo: str, artifact_id: int) -> bytes: ...


class GitHubClient(RestClient):
    """`GitHubAPI` over REST (see `RestClient` for timeouts, retries and redaction)."""

    def get_repo(self, repo: str) -> Repository:
        data = self._json("GET", f"/repos/{repo}")
        return _shape(f"/repos/{repo}", lambda: Repository(str(data["full_name"]), str(data["default_branch"]),
                                                           str(data.get("html_url") or f"https://github.com/{repo}")))

    def get_permission(self, repo: str, user: str) -> Permission:
        """The user's permission; a non-collaborator (404) has permission ``none``."""
        try:
            data = self._json("GET", f"/repos/{repo}/collaborators/{user}/permission")
        except GitHubError as exc:
            if exc.status == 404:
                return Permission(user, "none", "none")
            raise
        return Permission(user, str(data.get("permission") or "none"), str(data.get("role_name") or "none"))

    def get_pull(self, repo: str, number: int) -> PullRequest:
        data = self._json("GET", f"/repos/{repo}/pulls/{number}")

        def build() -> PullRequest:
            head_repo = (data["head"].get("repo") or {}).get("full_name")
            base_repo = (data["base"].get("repo") or {}).get("full_name") or repo
            return PullRequest(int(data["number"]), str(data["state"]), str(data["head"]["sha"]),
                               str(data["head"]["ref"]), str(data["base"]["ref"]),
                               str((data.get("user") or {}).get("login", "")),
                               str(head_repo) if head_repo else None, str(base_repo), str(data.get("created_at") or ""))
        return _shape(f"/repos/{repo}/pulls/{number}", build)

    def pulls_for_commit(self, repo: str, sha: str) -> list[CommitPull]:
        """GitHub's "list pull requests associated with a commit" (the first page of 100)."""
        path = f"/repos/{repo}/commits/{sha}/pulls"
        data = self._json("GET", path, params={"per_page": 100})
        return _shape(path, lambda: [CommitPull(int(p["number"]), str(p["title"]), str(p["html_url"]), str(p["state"]))
                                     for p in data])

    def list_issue_comments(self, repo: str, number: int, *, max_pages: int = 50) -> list[IssueComment]:
        """Every comment on the issue/PR, following ``Link: rel="next"`` up to ``max_pages`` pages
        of 100 (more raises: the bot then cannot prove it has not answered already)."""
        out: list[IssueComment] = []
        first = f"/repos/{repo}/issues/{number}/comments"
        path: str | None = first
        params: dict[str, Any] | None = {"per_page": 100}
        for _ in range(max_pages):
            response = self._call("GET", path or first, params=params)
            out += _shape(first, lambda: [_comment(item) for item in response.json()])
            path, params = response.links.get("next", {}).get("url"), None
            if not path:
                return out
        raise GitHubError("GET", first, None, f"more than {max_pages} pages of comments")

    def get_comment(self, repo: str, comment_id: int) -> IssueComment:
        data = self._json("GET", f"/repos/{repo}/issues/comments/{comment_id}")
        return _shape(f"/repos/{repo}/issues/comments/{comment_id}", lambda: _comment(data))

    def create_comment(self, repo: str, number: int, body: str,
                       confirm: Callable[[], int | None] | None = None) -> int:
        """Post a comment; returns its id. ``confirm`` (see `RestClient.request`) returns the id of
        the comment if an attempt that failed ambiguously did post it, else None."""
        found: list[int] = []

        def check() -> bool:
            comment_id = confirm() if confirm is not None else None
            if comment_id is not None:
                found.append(comment_id)
            return comment_id is not None
        path = f"/repos/{repo}/issues/{number}/comments"
        response = self.request("POST", path, json={"body": body}, confirm=check if confirm else None)
        if response is None:
            return found[-1]
        return _shape(path, lambda: int(response.json()["id"]))

    def edit_comment(self, repo: str, comment_id: int, body: str) -> None:
        """Replace a comment's body (PATCH is idempotent, so retries need no confirmation)."""
        self._call("PATCH", f"/repos/{repo}/issues/comments/{comment_id}", json={"body": body})

    def add_reaction(self, repo: str, comment_id: int, content: str) -> None:
        if content not in REACTIONS:
            raise ValueError(f"unknown reaction {content!r}; GitHub accepts {', '.join(sorted(REACTIONS))}")
        self._call("POST", f"/repos/{repo}/issues/comments/{comment_id}/reactions", json={"content": content})

    def dispatch_workflow(self, repo: str, workflow_file: str, ref: str, inputs: dict[str, str],
                          confirm: Callable[[], bool] | None = None) -> Dispatched:
        """``workflow_dispatch`` event: at most `MAX_DISPATCH_INPUTS` inputs, all strings (GitHub's
        limits; 25 since 2025-12-04, 10 before). Asks for
        ``return_run_details``: GitHub then answers 200 naming the run it started (a server that
        answers 204 without them gives a `Dispatched` with no run). ``confirm``: see `request`."""
        if len(inputs) > MAX_DISPATCH_INPUTS:
            raise ValueError(f"workflow_dispatch takes at most {MAX_DISPATCH_INPUTS} inputs, got {len(inputs)}")
        bad = [k for k, v in inputs.items() if not isinstance(v, str)]
        if bad:
            raise ValueError(f"workflow_dispatch inputs must be strings: {', '.join(bad)}")
        path = f"/repos/{repo}/actions/workflows/{workflow_file}/dispatches"
        response = self.request("POST", path, json={"ref": ref, "inputs": inputs, "return_run_details": True},
                                confirm=confirm)
        if response is None:
            return Dispatched(False)
        if response.status_code == 204 or not response.content:
            return Dispatched(True)
        return _shape(path, lambda: Dispatched(True, int(response.json()["workflow_run_id"]),
                                               str(response.json()["html_url"])))

    def list_runs_for_sha(self, repo: str, head_sha: str, *, max_pages: int = 10) -> list[WorkflowRun]:
        """Every workflow run of ``head_sha`` (all workflows), up to ``max_pages`` pages of 100."""
        path = f"/repos/{repo}/actions/runs"
        out: list[WorkflowRun] = []
        for page in range(1, max_pages + 1):
            data = self._json("GET", path, params={"head_sha": head_sha, "per_page": 100, "page": page})
            runs = _shape(path, lambda: [_run(item) for item in data["workflow_runs"]])
            out += runs
            if len(runs) < 100:
                return out
        raise GitHubError("GET", path, None, f"more than {max_pages} pages of runs for {head_sha[:12]}")

    def workflow_runs_page(self, repo: str, workflow_file: str, page: int, *, event: str | None = None,
                           created_since: str | None = None) -> tuple[list[WorkflowRun], bool]:
        """One page (1-based, 100 runs) of one workflow file's runs, newest first, and whether
        GitHub has more after it. ``event`` and ``created_since`` (ISO 8601, GitHub's
        ``created=>=``) filter on GitHub's side."""
        path = f"/repos/{repo}/actions/workflows/{workflow_file}/runs"
        params: dict[str, Any] = {"per_page": 100, "page": page}
        if event:
            params["event"] = event
        if created_since:
            params["created"] = f">={created_since}"
        data = self._json("GET", path, params=params)
        runs, total = _shape(path, lambda: ([_run(item) for item in data["workflow_runs"]],
                                            int(data.get("total_count", 0))))
        return runs, len(runs) == 100 and page * 100 < total

    def list_workflow_runs(self, repo: str, workflow_file: str, *, event: str | None = None,
                           created_since: str | None = None, max_pages: int = 10) -> RunListing:
        """Every page of `workflow_runs_page`, ``max_pages`` at most: GitHub lists at most 1,000
        runs of a filtered listing, so more pages would add nothing."""
        out: list[WorkflowRun] = []
        for page in range(1, max_pages + 1):
            runs, more = self.workflow_runs_page(repo, workflow_file, page, event=event, created_since=created_since)
            out += runs
            if not more:
                return RunListing(out, True)
        return RunListing(out, False)

    def get_run(self, repo: str, run_id: int) -> WorkflowRun:
        path = f"/repos/{repo}/actions/runs/{run_id}"
        data = self._json("GET", path)
        return _shape(path, lambda: _run(data))

    def rerun_failed_jobs(self, repo: str, run_id: int, confirm: Callable[[], bool] | None = None) -> bool:
        """Re-run the failed jobs of a completed run. True when this call sent it, False when
        ``confirm`` found that an earlier, ambiguous attempt did."""
        return self.request("POST", f"/repos/{repo}/actions/runs/{run_id}/rerun-failed-jobs",
                            confirm=confirm) is not None

    def run_artifacts(self, repo: str, run_id: int) -> list[Artifact]:
        """The artifacts of run ``run_id`` (the first 100: a run uploads a handful)."""
        path = f"/repos/{repo}/actions/runs/{run_id}/artifacts"
        data = self._json("GET", path, params={"per_page": 100}, paced=True)
        return _shape(path, lambda: [Artifact(int(a["id"]), str(a["name"]), int(a["size_in_bytes"]), bool(a["expired"]))
                                     for a in data["artifacts"]])

    def download_artifact(self, repo: str, artifact_id: int) -> bytes:
        """The zip archive of an artifact. GitHub answers 302 to a signed storage URL, which is
        followed (requests drops the token when that URL is on another host); 410 once expired.
        Both artifact calls take the pacer's turn (``paced``), as writes do."""
        return self._call("GET", f"/repos/{repo}/actions/artifacts/{artifact_id}/zip", paced=True).content

    # -- helpers ---------------------------------------------------------------------------------
    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        if response is None:  # only requests with `confirm` can end without a response
            raise AssertionError("unreachable")  # pragma: no cover
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._call(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise GitHubError(method, path, response.status_code, "response is not JSON") from None


def _comment(item: dict[str, Any]) -> IssueComment:
    return IssueComment(int(item["id"]), str((item.get("user") or {}).get("login", "")), str(item.get("body") or ""))


def _run(item: dict[str, Any]) -> WorkflowRun:
    return WorkflowRun(int(item["id"]), str(item.get("name") or ""), str(item.get("display_title") or ""),
                       str(item.get("status") or ""), item.get("conclusion"), str(item.get("html_url") or ""),
                       str(item.get("head_sha") or ""), str(item.get("event") or ""))


def _shape(path: str, build: Callable[[], Any]) -> Any:
    try:
        return build()
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GitHubError("GET", path, 200, f"unexpected response shape: {exc!r}") from None


__all__ = ["Artifact", "DEFAULT_BOT_LOGIN", "Dispatched", "MAX_DISPATCH_INPUTS", "GitHubAPI", "GitHubClient", "GitHubError", "IssueComment", "Permission",
           "PullRequest", "Repository", "RetryPolicy", "RunListing", "WorkflowRun"]
