"""The webhook part of the fake GitHub: it delivers events over HTTP and keeps GitHub's delivery log.

`FakeHooks.add_hook` registers a webhook (a repository hook by id, or the App's hook); `deliver`
POSTs one event to it as GitHub does (``X-GitHub-Event``, ``X-GitHub-Delivery`` (the guid),
``X-GitHub-Hook-ID``, ``X-Hub-Signature-256`` over the body as sent, in the hook's content type)
and records the attempt: ``status_code`` the answer's, or 0 with ``status`` "failed to connect" /
"timed out" when there was none. GitHub never retries a failed delivery by itself; it redelivers
only when asked:

* ``GET /repos/{repo}/hooks/{id}/deliveries`` and ``GET /app/hook/deliveries``: the attempts,
  newest first, ``per_page`` (default 30, at most 100), ``status=success|failure`` (200-399 /
  400-599, as GitHub classifies them), paginated by an opaque ``cursor`` given in the ``Link``
  header (``rel="next"``);
* ``POST .../deliveries/{delivery_id}/attempts``: 202, then the same event is delivered again
  (same guid, ``redelivery: true``) and recorded as a new attempt; 404 for an unknown id.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from tools.rerun.fake_actions import now_iso

APP_HOOK = 0  # the hook id `add_hook` gives the App's own webhook
Response = tuple[int, dict[str, str], Any]


@dataclass(frozen=True)
class Hook:
    """``content_type``: ``json`` or ``form`` (GitHub's two settings)."""

    id: int
    url: str
    secret: bytes
    content_type: str = "json"


@dataclass(frozen=True)
class HookDelivery:
    """One delivery attempt, as GitHub's deliveries API lists it (plus what a redelivery resends)."""

    id: int
    hook_id: int
    guid: str
    delivered_at: str
    redelivery: bool
    duration: float
    status: str
    status_code: int
    event: str
    action: str | None
    payload: Any

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "guid": self.guid, "delivered_at": self.delivered_at, "redelivery": self.redelivery,
                "duration": self.duration, "status": self.status, "status_code": self.status_code,
                "event": self.event, "action": self.action, "installation_id": None, "repository_id": 1,
                "throttled_at": None}


class FakeHooks:
    """Mixin of `tools.rerun.fake_github.FakeGitHub` (needs its ``lock`` and ``repo``)."""

    lock: threading.RLock
    repo: str

    def _init_hooks(self) -> None:
        self.hooks: dict[int, Hook] = {}
        self.hook_deliveries: list[HookDelivery] = []
        self._delivery_ids = itertools.count(90_000_000)

    def add_hook(self, hook_id: int, url: str, secret: bytes, content_type: str = "json") -> Hook:
        """A webhook; ``hook_id`` `APP_HOOK` is the App's (``/app/hook/...``)."""
        if content_type not in ("json", "form"):
            raise ValueError(f"content_type is json or form, not {content_type!r}")
        hook = Hook(hook_id, url, secret, content_type)
        self.hooks[hook_id] = hook
        return hook

    def deliver(self, hook_id: int, event: str, payload: Any, *, guid: str | None = None,
                redelivery: bool = False, timeout: float = 10.0) -> HookDelivery:
        """POST ``event`` to the hook now and record the attempt (see the module docstring)."""
        hook = self.hooks[hook_id]
        guid = guid or str(uuid.uuid4())
        text = json.dumps(payload)
        body = (text if hook.content_type == "json" else urlencode({"payload": text})).encode()
        headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": guid, "X-GitHub-Hook-ID": str(hook_id),
                   "X-Hub-Signature-256": "sha256=" + hmac.new(hook.secret, body, hashlib.sha256).hexdigest(),
                   "Content-Type": "application/json" if hook.content_type == "json"
                   else "application/x-www-form-urlencoded", "User-Agent": "GitHub-Hookshot/fake"}
        start = time.monotonic()
        try:
            with urllib.request.urlopen(urllib.request.Request(hook.url, body, headers, method="POST"),
                                        timeout=timeout) as answer:
                code, status = answer.status, "OK"
        except urllib.error.HTTPError as exc:
            code, status = exc.code, f"Invalid HTTP Response: {exc.code}"
        except (TimeoutError, OSError) as exc:
            timed_out = isinstance(exc, TimeoutError) or "timed out" in str(exc)
            code, status = 0, "timed out" if timed_out else "failed to connect"
        action = payload.get("action") if isinstance(payload, dict) else None
        with self.lock:
            record = HookDelivery(next(self._delivery_ids), hook_id, guid, now_iso(), redelivery,
                                  round(time.monotonic() - start, 3), status, code, event, action, payload)
            self.hook_deliveries.append(record)
        return record

    # -- routing ---------------------------------------------------------------------------------
    def _route_hooks(self, method: str, path: str, query: dict[str, list[str]], hook_id: int) -> Response:
        """``path`` is what follows ``.../hooks/{id}`` or ``/app/hook``: ``/deliveries`` or
        ``/deliveries/{delivery_id}/attempts``."""
        if hook_id not in self.hooks:
            return 404, {}, {"message": "Not Found"}
        if method == "GET" and path == "/deliveries":
            return self._list_deliveries(hook_id, path, query)
        parts = path.strip("/").split("/")
        if method == "POST" and len(parts) == 3 and parts[1].isdigit() and parts[2] == "attempts":
            with self.lock:
                found = next((d for d in self.hook_deliveries if d.id == int(parts[1]) and d.hook_id == hook_id), None)
            if found is None:
                return 404, {}, {"message": "Not Found"}
            self.deliver(hook_id, found.event, found.payload, guid=found.guid, redelivery=True)
            return 202, {}, {}
        return 404, {}, {"message": "Not Found"}

    def _list_deliveries(self, hook_id: int, path: str, query: dict[str, list[str]]) -> Response:
        try:
            per_page = min(int(query.get("per_page", ["30"])[0]), 100)
        except ValueError:
            return 400, {}, {"message": "per_page must be an integer"}
        status = query.get("status", [None])[0]
        if status not in (None, "success", "failure"):
            return 422, {}, {"message": f"status must be success or failure, not {status!r}"}
        cursor = query.get("cursor", [None])[0]
        if cursor is not None and not cursor.isdigit():
            return 400, {}, {"message": f"invalid cursor {cursor[:40]!r}"}
        with self.lock:
            items = [d for d in reversed(self.hook_deliveries) if d.hook_id == hook_id
                     and (status is None or (200 <= d.status_code < 400) == (status == "success"))
                     and (status != "failure" or 400 <= d.status_code < 600)]
        if cursor is not None:  # the cursor is the id of the last delivery of the previous page
            items = [d for d in items if d.id < int(cursor)]
        page, headers = items[:per_page], {}
        if len(items) > per_page:
            params = {"per_page": per_page, "cursor": page[-1].id, **({"status": status} if status else {})}
            base = "/app/hook" if hook_id == APP_HOOK else f"/repos/{self.repo}/hooks/{hook_id}"
            headers["Link"] = f'<{base}{path}?{urlencode(params)}>; rel="next"'
        return 200, headers, [d.to_json() for d in page]


__all__ = ["APP_HOOK", "FakeHooks", "Hook", "HookDelivery"]
