"""A stateful stand-in for the GitHub REST endpoints the bot uses (state and routing only).

Used by tests/rerun and bench/rerun_bot.py through `tools.rerun.fake_server`, which puts it behind a
real HTTP server on 127.0.0.1 (standard library only). It records every request, keeps comments,
reactions, dispatches and workflow runs, and can answer matching requests with scripted failures,
delays or hangs (`FakeGitHub.fail`), or hold comment PATCHes to force a lost update
(`FakeGitHub.hold_patches`).

Endpoints (``{repo}`` is ``owner/name``): ``GET /repos/{repo}``,
``GET /repos/{repo}/collaborators/{user}/permission`` (404 for unknown users),
``GET /repos/{repo}/pulls/{n}``, ``GET|POST /repos/{repo}/issues/{n}/comments`` (paginated),
``GET|PATCH /repos/{repo}/issues/comments/{id}``, ``POST .../issues/comments/{id}/reactions``,
the Actions endpoints of `tools.rerun.fake_actions` (runs with the ``head_sha``,
``head_branch`` and ``display_title`` GitHub gives them, dispatches, re-runs, run artifacts and
their download), and webhooks with
their delivery log and redelivery (`tools.rerun.fake_hooks`). Bodies over GitHub's
65,536-character limit get 422, as on GitHub.

Every exchange is held to GitHub's published API description (`tools.rerun.fake_openapi`, on the
committed extract in ``github_contract/``): the fake models what the bot reads and GitHub's example
answer fills in the rest; a request or answer that breaks the description is answered 500 naming
the problem and kept in ``contract_problems`` (also in ``GET /_fake/state``).
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, urlsplit

from tools.rerun.fake_actions import BLOB_PATH, FakeActions, FakeRun, now_iso
from tools.rerun.fake_expressions import render
from tools.rerun.fake_hooks import APP_HOOK, FakeHooks
from tools.rerun.fake_openapi import OMIT, Contract, complete, published
from tools.rerun.github import DEFAULT_BOT_LOGIN as BOT_LOGIN  # who the fake posts the bot's replies as

MAX_COMMENT_CHARS = 65536
CUT_HEADER = "X-Fake-Cut"  # `Scripted.cut`, for `tools.rerun.fake_server` (never sent)
Response = tuple[int, dict[str, str], Any]
__all__ = ["BOT_LOGIN", "CUT_HEADER", "FakeComment", "FakeGitHub", "FakeRun", "MAX_COMMENT_CHARS", "Recorded", "Scripted",
           "render_run_name"]


@dataclass(frozen=True)
class Recorded:
    """One request as received. ``at`` is `FakeGitHub.clock` (`time.monotonic()`) when it arrived."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    at: float


@dataclass(frozen=True)
class Scripted:
    """A scripted answer. ``delay`` seconds pass before answering (a hang, when longer than the
    client's timeout); with ``route=True`` the request is really handled (state changes) and its
    real answer is sent after the delay: a write that lands although the client saw a timeout.
    With ``cut=True`` the answer's headers promise its whole body, half of it is sent and the
    connection closed (a reset mid-download)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    delay: float = 0.0
    route: bool = False
    cut: bool = False


@dataclass
class FakeComment:
    """``at`` / ``updated``: `time.monotonic()` when posted / last changed (system-wide on Linux,
    so another process on the machine can compare it with its own clock)."""

    id: int
    user: str
    body: str
    at: float
    edits: int = 0
    updated: float = 0.0


def render_run_name(template: str, inputs: dict[str, str]) -> str:
    """A dispatched workflow's ``run-name`` with ``${{ inputs.X }}`` filled in as GitHub does (a
    missing input renders empty; `tools.rerun.fake_expressions` says what else it evaluates)."""
    return render(template, {"inputs": inputs})


class FakeGitHub(FakeActions, FakeHooks):
    """State and routing; `tools.rerun.fake_server.serve` puts it behind an HTTP server."""

    def __init__(self, token: str | None = "test-token", repo: str = "acme/llm-serving",
                 run_name_template: str | None = None, run_names: dict[str, str] | None = None):
        """``run_names``: workflow file -> its ``run-name``; ``run_name_template``: the run-name of
        a dispatched workflow without an entry there."""
        self.token = token
        self.repo = repo
        self.default_branch = "main"
        self.lock = threading.RLock()
        self.requests: list[Recorded] = []
        self.permissions: dict[str, tuple[str, str]] = {}
        self.pulls: dict[int, dict[str, Any]] = {}
        self.commit_pulls: dict[str, list[int]] = {}  # commit sha -> the PRs GitHub associates with it
        self.comments: dict[int, list[FakeComment]] = {}
        self.reactions: list[tuple[int, str]] = []
        self._scripts: list[tuple[str, re.Pattern[str], list[Scripted]]] = []
        self._ids = itertools.count(10_000_000)
        self._patch_hold: tuple[threading.Barrier, float] | None = None
        # GitHub's description (tools.rerun.fake_openapi): every exchange is checked against it, and
        # an answer that breaks it becomes a 500 naming the problem (also kept in contract_problems)
        self.contract: Contract | None = published()
        self.clock: Callable[[], float] = time.monotonic  # stamps `Recorded.at`; a test may use a virtual clock
        self.contract_problems: list[str] = []
        self._init_actions(run_names, run_name_template)
        self._init_hooks()

    # -- setup -----------------------------------------------------------------------------------
    def add_user(self, user: str, permission: str, role: str | None = None) -> None:
        self.permissions[user] = (permission, role or permission)

    def add_pull(self, number: int, head_sha: str, head_ref: str = "feature", state: str = "open",
                 author: str = "contributor", head_repo: str | None = "", created_at: str | None = None) -> None:
        """``head_repo`` "" means the same repository; None a deleted fork. ``created_at``: ISO
        8601 UTC, default now."""
        head = None if head_repo is None else {"full_name": head_repo or self.repo}
        self.pulls[number] = {"number": number, "state": state, "user": {"login": author},
                              "created_at": created_at or now_iso(), "requested_teams": [],
                              "html_url": f"https://github.com/{self.repo}/pull/{number}",
                              "url": f"https://api.github.com/repos/{self.repo}/pulls/{number}",
                              "head": {"sha": head_sha, "ref": head_ref, "repo": head},
                              "base": {"ref": self.default_branch, "repo": {"full_name": self.repo}}}

    def associate(self, sha: str, number: int, title: str) -> None:
        """Pull request ``number`` (added now if unknown, merged) is associated with commit ``sha``."""
        if number not in self.pulls:
            self.add_pull(number, sha, state="closed")
        self.pulls[number]["title"] = title
        self.commit_pulls.setdefault(sha, []).append(number)

    def add_comment(self, number: int, user: str, body: str) -> int:
        with self.lock:
            now = time.monotonic()
            comment = FakeComment(next(self._ids), user, body, now, updated=now)
            self.comments.setdefault(number, []).append(comment)
            return comment.id

    def fail(self, method: str, path_pattern: str, *responses: Scripted) -> None:
        """Answer the next ``len(responses)`` requests matching ``method`` and the regex (searched
        in the path) with these responses, in order; later ones get the real answer (N failures,
        then success: N responses)."""
        with self.lock:
            self._scripts.append((method, re.compile(path_pattern), list(responses)))

    def hold_patches(self, count: int, stagger: float) -> None:
        """Make the next ``count`` comment PATCHes wait for each other, then apply them in arrival
        order ``stagger`` seconds apart: every writer has read the same version, so each later
        PATCH erases the earlier ones' changes (a lost update), after their writers saw success."""
        self._patch_hold = (threading.Barrier(count), stagger)

    @contextmanager
    def off_contract(self) -> Iterator[None]:
        """Leave the requests made inside unchecked by the contract (a test that sends GitHub what
        it refuses, on purpose)."""
        saved, self.contract = self.contract, None
        try:
            yield
        finally:
            self.contract = saved

    # -- queries for tests -----------------------------------------------------------------------
    def bot_replies(self, number: int | None = None) -> list[FakeComment]:
        with self.lock:
            numbers = [number] if number is not None else list(self.comments)
            return [c for n in numbers for c in self.comments.get(n, []) if c.user == BOT_LOGIN]

    def writes(self) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method != "GET"]

    def state(self) -> dict[str, Any]:
        """Dispatches, bot replies and reruns as JSON (`fake_server`'s ``GET /_fake/state``)."""
        with self.lock:
            return {"dispatches": [{k: v for k, v in d.items() if k != "at"} for d in self.dispatches],
                    "contract_problems": list(self.contract_problems),
                    "replies": [{"id": c.id, "body": c.body, "at": c.updated} for c in self.bot_replies()],
                    "reruns": list(self.reruns), "requests": len(self.requests)}

    # -- routing ---------------------------------------------------------------------------------
    def respond(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> tuple[Response, float]:
        """(status, headers, JSON body) for one request, and the seconds to wait before sending it."""
        parts = urlsplit(target)
        path, query = parts.path, parse_qs(parts.query)
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return (400, {}, {"message": "Problems parsing JSON"}), 0.0
        scripted = None
        with self.lock:
            self.requests.append(Recorded(method, path, query, headers, body, self.clock()))
            for m, pattern, queue in self._scripts:
                if m == method and pattern.search(path) and queue:
                    scripted = queue.pop(0)
                    break
        if path.startswith(BLOB_PATH) and method == "GET" and (scripted is None or scripted.route):
            # an archive's storage URL: signed, so no token asked, and no API operation to check
            return _cut(self.artifact_blob(path), scripted), scripted.delay if scripted is not None else 0.0
        if scripted is not None and not scripted.route:
            answer, general = (scripted.status, scripted.headers, scripted.body), True
        elif self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            answer, general = (401, {}, {"message": "Bad credentials"}), True
        else:
            answer, general = self._route(method, path, query, body), False
            example = published().example(method, path, answer[0])
            if example is not None and answer[2] is not None:  # the fields the fake does not model
                answer = (answer[0], answer[1], complete(answer[2], example))
        if self.contract is not None:
            problems = self.contract.check(method, path, query, body, answer[0], answer[2], scripted=general)
            if problems:
                with self.lock:
                    self.contract_problems += problems
                answer = (500, {}, {"message": "the fake GitHub broke GitHub's API description: " + "; ".join(problems)})
        return _cut(answer, scripted), scripted.delay if scripted is not None else 0.0

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> Response:
        repo = r"/repos/[^/]+/[^/]+"
        if re.fullmatch(repo, path) and method == "GET":
            owner, name = self.repo.split("/")
            return 200, {}, {"full_name": self.repo, "name": name, "owner": {"login": owner},
                             "default_branch": self.default_branch, "html_url": f"https://github.com/{self.repo}",
                             "fork": False, "language": None, "source": OMIT, "parent": OMIT,
                             "template_repository": OMIT}
        if m := re.fullmatch(repo + r"/collaborators/([^/]+)/permission", path):
            if method == "GET" and m[1] in self.permissions:
                permission, role = self.permissions[m[1]]
                levels = ("read", "triage", "write", "maintain", "admin")
                rank = levels.index(role) if role in levels else 0
                return 200, {}, {"permission": permission, "role_name": role, "user": {
                    "login": m[1], "role_name": role,
                    "permissions": {name: rank >= i for i, name in zip(range(5), ("pull", "triage", "push", "maintain",
                                                                                  "admin"))}}}
            return 404, {}, {"message": f"{m[1]} is not a user"}
        if (m := re.fullmatch(repo + r"/pulls/(\d+)", path)) and method == "GET":
            pull = self.pulls.get(int(m[1]))
            return (200, {}, pull) if pull else (404, {}, {"message": "Not Found"})
        if (m := re.fullmatch(repo + r"/commits/([0-9a-f]{7,40})/pulls", path)) and method == "GET":
            return 200, {}, [self.pulls[n] for n in self.commit_pulls.get(m[1], [])]
        if m := re.fullmatch(repo + r"/issues/(\d+)/comments", path):
            return self._issue_comments(method, path, int(m[1]), query, body)
        if m := re.fullmatch(repo + r"/issues/comments/(\d+)", path):
            return self._one_comment(method, int(m[1]), body)
        if (m := re.fullmatch(repo + r"/issues/comments/(\d+)/reactions", path)) and method == "POST":
            with self.lock:
                self.reactions.append((int(m[1]), str((body or {}).get("content"))))
            return 201, {}, {"content": (body or {}).get("content")}
        if m := re.fullmatch(repo + r"/hooks/(\d+)(/deliveries.*)", path):
            return self._route_hooks(method, m[2], query, int(m[1]))
        if m := re.fullmatch(r"/app/hook(/deliveries.*)", path):
            return self._route_hooks(method, m[1], query, APP_HOOK)
        if (m := re.fullmatch(repo + r"(/actions/.*)", path)) and (answer := self._route_actions(
                method, m[1].removeprefix("/actions"), query, body)) is not None:
            return answer
        return 404, {}, {"message": "Not Found"}

    def _issue_comments(self, method: str, path: str, number: int, query: dict[str, list[str]],
                        body: Any) -> Response:
        if method == "POST":
            if not isinstance(body, dict) or not isinstance(body.get("body"), str):
                return 422, {}, {"message": "body is required"}
            if len(body["body"]) > MAX_COMMENT_CHARS:
                return 422, {}, {"message": "Validation Failed: body is too long (maximum is 65536 characters)"}
            return 201, {}, {"id": self.add_comment(number, BOT_LOGIN, body["body"])}
        if method != "GET":
            return 404, {}, {"message": "Not Found"}
        per_page = int(query.get("per_page", ["30"])[0])
        page = int(query.get("page", ["1"])[0])
        with self.lock:
            items = list(self.comments.get(number, []))
        chunk = items[(page - 1) * per_page: page * per_page]
        headers = {}
        if page * per_page < len(items):
            headers["Link"] = f'<{path}?per_page={per_page}&page={page + 1}>; rel="next"'
        return 200, headers, [{"id": c.id, "user": {"login": c.user}, "body": c.body} for c in chunk]

    def _one_comment(self, method: str, comment_id: int, body: Any) -> Response:
        with self.lock:
            found = next((c for cs in self.comments.values() for c in cs if c.id == comment_id), None)
        if found is None:
            return 404, {}, {"message": "Not Found"}
        if method == "GET":
            with self.lock:
                return 200, {}, {"id": found.id, "user": {"login": found.user}, "body": found.body}
        if method != "PATCH":
            return 404, {}, {"message": "Not Found"}
        if not isinstance(body, dict) or not isinstance(body.get("body"), str):
            return 422, {}, {"message": "body is required"}
        if len(body["body"]) > MAX_COMMENT_CHARS:
            return 422, {}, {"message": "Validation Failed: body is too long (maximum is 65536 characters)"}
        hold = self._patch_hold
        if hold is not None:
            barrier, stagger = hold
            try:
                index = barrier.wait(timeout=30)  # distinct 0..count-1 for the held PATCHes
            except threading.BrokenBarrierError:
                index = 0
            self._patch_hold = None
            time.sleep(stagger * index)
        with self.lock:
            found.body, found.edits, found.updated = body["body"], found.edits + 1, time.monotonic()
            return 200, {}, {"id": found.id, "user": {"login": found.user}, "body": found.body}


def _cut(answer: Response, scripted: Scripted | None) -> Response:
    """``answer`` marked for `fake_server` to cut short when ``scripted`` says so."""
    if scripted is None or not scripted.cut:
        return answer
    return answer[0], {**answer[1], CUT_HEADER: "1"}, answer[2]
