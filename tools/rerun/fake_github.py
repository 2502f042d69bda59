"""A stateful stand-in for the GitHub REST endpoints the bot uses, served over real HTTP.

Used by tests/rerun and bench/rerun_bot.py (standard library only). It records every request,
keeps comments, reactions and dispatches, and can be told to answer the next matching requests
with scripted failures (`FakeGitHub.fail`).

Endpoints (``{repo}`` is ``owner/name``):
``GET /repos/{repo}/collaborators/{user}/permission`` (404 for unknown users),
``GET /repos/{repo}/pulls/{n}``, ``GET|POST /repos/{repo}/issues/{n}/comments`` (paginated with
``per_page``/``page`` and a ``Link`` header), ``POST /repos/{repo}/issues/comments/{id}/reactions``,
``POST /repos/{repo}/actions/workflows/{file}/dispatches``.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator
from urllib.parse import parse_qs, urlsplit

from tools.rerun.github import DEFAULT_BOT_LOGIN as BOT_LOGIN  # who the fake posts the bot's replies as


@dataclass(frozen=True)
class Recorded:
    """One request as received. ``at`` is `time.monotonic()` when it arrived."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    at: float


@dataclass(frozen=True)
class Scripted:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


@dataclass
class FakeComment:
    id: int
    user: str
    body: str
    at: float


class FakeGitHub:
    """State and routing; `serve` puts it behind an HTTP server."""

    def __init__(self, token: str | None = "test-token"):
        self.token = token
        self.lock = threading.Lock()
        self.requests: list[Recorded] = []
        self.permissions: dict[str, tuple[str, str]] = {}
        self.pulls: dict[int, dict[str, Any]] = {}
        self.comments: dict[int, list[FakeComment]] = {}
        self.reactions: list[tuple[int, str]] = []
        self.dispatches: list[dict[str, Any]] = []
        self._scripts: list[tuple[str, re.Pattern[str], list[Scripted]]] = []
        self._ids = itertools.count(10_000_000)

    # -- setup -----------------------------------------------------------------------------------
    def add_user(self, user: str, permission: str, role: str | None = None) -> None:
        self.permissions[user] = (permission, role or permission)

    def add_pull(self, number: int, head_sha: str, head_ref: str = "feature", state: str = "open") -> None:
        self.pulls[number] = {"number": number, "state": state, "head": {"sha": head_sha, "ref": head_ref},
                              "base": {"ref": "main"}}

    def add_comment(self, number: int, user: str, body: str) -> int:
        with self.lock:
            comment = FakeComment(next(self._ids), user, body, time.monotonic())
            self.comments.setdefault(number, []).append(comment)
            return comment.id

    def fail(self, method: str, path_pattern: str, *responses: Scripted) -> None:
        """Answer the next ``len(responses)`` requests matching ``method`` and the regex (searched
        in the path) with these responses, in order."""
        with self.lock:
            self._scripts.append((method, re.compile(path_pattern), list(responses)))

    # -- queries for tests -----------------------------------------------------------------------
    def bot_replies(self, number: int | None = None) -> list[FakeComment]:
        with self.lock:
            numbers = [number] if number is not None else list(self.comments)
            return [c for n in numbers for c in self.comments.get(n, []) if c.user == BOT_LOGIN]

    def writes(self) -> list[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.method != "GET"]

    # -- routing ---------------------------------------------------------------------------------
    def respond(self, method: str, target: str, headers: dict[str, str], raw: bytes) -> tuple[int, dict[str, str], Any]:
        parts = urlsplit(target)
        path, query = parts.path, parse_qs(parts.query)
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            return 400, {}, {"message": "Problems parsing JSON"}
        with self.lock:
            self.requests.append(Recorded(method, path, query, headers, body, time.monotonic()))
            for i, (m, pattern, queue) in enumerate(self._scripts):
                if m == method and pattern.search(path) and queue:
                    scripted = queue.pop(0)
                    return scripted.status, scripted.headers, scripted.body
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            return 401, {}, {"message": "Bad credentials"}
        return self._route(method, path, query, body)

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: Any) -> tuple[int, dict[str, str], Any]:
        repo = r"/repos/[^/]+/[^/]+"
        if m := re.fullmatch(repo + r"/collaborators/([^/]+)/permission", path):
            if method == "GET" and m[1] in self.permissions:
                permission, role = self.permissions[m[1]]
                return 200, {}, {"permission": permission, "role_name": role, "user": {"login": m[1]}}
            return 404, {}, {"message": f"{m[1]} is not a user"}
        if (m := re.fullmatch(repo + r"/pulls/(\d+)", path)) and method == "GET":
            pull = self.pulls.get(int(m[1]))
            return (200, {}, pull) if pull else (404, {}, {"message": "Not Found"})
        if m := re.fullmatch(repo + r"/issues/(\d+)/comments", path):
            number = int(m[1])
            if method == "POST":
                if not isinstance(body, dict) or not isinstance(body.get("body"), str):
                    return 422, {}, {"message": "body is required"}
                return 201, {}, {"id": self.add_comment(number, BOT_LOGIN, body["body"])}
            if method == "GET":
                per_page = int(query.get("per_page", ["30"])[0])
                page = int(query.get("page", ["1"])[0])
                with self.lock:
                    items = list(self.comments.get(number, []))
                chunk = items[(page - 1) * per_page: page * per_page]
                headers = {}
                if page * per_page < len(items):
                    headers["Link"] = f'<{path}?per_page={per_page}&page={page + 1}>; rel="next"'
                return 200, headers, [{"id": c.id, "user": {"login": c.user}, "body": c.body} for c in chunk]
        if (m := re.fullmatch(repo + r"/issues/comments/(\d+)/reactions", path)) and method == "POST":
            with self.lock:
                self.reactions.append((int(m[1]), str((body or {}).get("content"))))
            return 201, {}, {"content": (body or {}).get("content")}
        if (m := re.fullmatch(repo + r"/actions/workflows/([^/]+)/dispatches", path)) and method == "POST":
            if not isinstance(body, dict) or "ref" not in body:
                return 422, {}, {"message": "ref is required"}
            inputs = body.get("inputs") or {}
            if len(inputs) > 10 or not all(isinstance(v, str) for v in inputs.values()):
                return 422, {}, {"message": "inputs must be at most 10 strings"}
            with self.lock:
                self.dispatches.append({"workflow": m[1], **body, "at": time.monotonic()})
            return 204, {}, None
        return 404, {}, {"message": "Not Found"}


class _Handler(BaseHTTPRequestHandler):
    server: "_FakeServer"
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        status, extra, body = self.server.fake.respond(self.command, self.path, headers, raw)
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        for key, value in extra.items():
            self.send_header(key, value)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _serve


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def __init__(self, fake: FakeGitHub):
        self.fake = fake
        super().__init__(("127.0.0.1", 0), _Handler)


@contextmanager
def serve(fake: FakeGitHub) -> Iterator[str]:
    """Serve ``fake`` on 127.0.0.1 (a free port) in a thread; yields the base URL."""
    server = _FakeServer(fake)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-github", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
