"""Redeliver the webhook deliveries ``serve`` did not take: GitHub never retries them by itself.

GitHub makes one attempt per event. When ``serve`` answers 500 (its journal cannot be written) or
503 (its queue is full), or is down or too slow to answer (GitHub records ``status_code`` 0), the
command in that comment is lost unless someone redelivers it. `sweep` does what GitHub documents
for this ("Automatically redelivering failed deliveries"):

1. list the hook's delivery attempts, newest first, back to ``since``
   (``GET /repos/{repo}/hooks/{id}/deliveries``, or ``GET /app/hook/deliveries`` with the App's
   JWT as the token), following the ``Link: rel="next"`` cursor, at most ``max_pages`` pages of 100;
2. group them by ``guid`` (one event, whatever the number of attempts); an event is done when one
   attempt succeeded (200-399, GitHub's own classification);
3. redeliver once (``POST .../deliveries/{id}/attempts`` on its newest attempt) each event whose
   attempts all failed with a status a retry can fix: 0 (no answer), 408, 429 or 5xx; unless it
   already had ``max_attempts`` attempts (reported as given up). Any other 4xx is final (a bad
   signature or a body over the limit would be refused again: the same bytes are resent).

A redelivery carries the original ``X-GitHub-Delivery``, so ``serve`` answers one it has journalled
``duplicate``: a sweep never makes a command run twice, even when an older successful attempt lies
outside the window. GitHub redelivers only deliveries of the past 3 days (`MAX_WINDOW`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from tools.rerun.rest import GitHubError, RestClient

MAX_WINDOW = timedelta(days=3)


@dataclass(frozen=True)
class HookRef:
    """A repository webhook (``repo``, ``hook_id``), or the GitHub App's own (``app=True``)."""

    repo: str | None = None
    hook_id: int | None = None
    app: bool = False

    def __post_init__(self) -> None:
        if self.app == (self.repo is not None and self.hook_id is not None):
            raise ValueError("give a repository and a hook id, or app=True (not both)")

    @property
    def base(self) -> str:
        return "/app/hook" if self.app else f"/repos/{self.repo}/hooks/{self.hook_id}"


@dataclass(frozen=True)
class Attempt:
    """One delivery attempt as the deliveries API lists it."""

    id: int
    guid: str
    delivered_at: datetime
    redelivery: bool
    status: str
    status_code: int
    event: str
    action: str | None

    @property
    def succeeded(self) -> bool:
        return 200 <= self.status_code < 400

    @property
    def retryable(self) -> bool:
        return self.status_code in (0, 408, 429) or self.status_code >= 500


@dataclass
class SweepReport:
    """``redelivered``: the attempt asked again, one per event; ``failed``: (attempt, why) when
    asking failed; ``given_up``: events at ``max_attempts``; ``final``: events refused with a 4xx.
    ``complete`` is False when ``max_pages`` ended the listing before ``since``."""

    scanned: int = 0
    redelivered: list[Attempt] = field(default_factory=list)
    failed: list[tuple[Attempt, str]] = field(default_factory=list)
    given_up: list[Attempt] = field(default_factory=list)
    final: list[Attempt] = field(default_factory=list)
    complete: bool = True


class HookDeliveries:
    """The deliveries endpoints of one hook over a `RestClient` (retries, timeouts, redaction)."""

    def __init__(self, client: RestClient, hook: HookRef):
        self.client, self.hook = client, hook

    def list_since(self, since: datetime, max_pages: int = 50) -> tuple[list[Attempt], bool]:
        """Attempts delivered at or after ``since``, newest first, and whether the listing reached
        ``since`` (or its end) within ``max_pages``."""
        path: str = f"{self.hook.base}/deliveries"
        params: dict[str, Any] | None = {"per_page": 100}
        out: list[Attempt] = []
        for _ in range(max_pages):
            response = self.client.request("GET", path, params=params)
            assert response is not None  # only requests with `confirm` end without a response
            try:
                page = [_attempt(item) for item in response.json()]
            except (ValueError, KeyError, TypeError) as exc:
                raise GitHubError("GET", path, response.status_code, f"unexpected response shape: {exc!r}") from None
            out += [a for a in page if a.delivered_at >= since]
            following = response.links.get("next", {}).get("url")
            if not following or not page or page[-1].delivered_at < since:
                return out, True
            path, params = following, None
        return out, False

    def redeliver(self, delivery_id: int) -> None:
        """Ask GitHub to deliver this attempt's event again (202: queued)."""
        self.client.request("POST", f"{self.hook.base}/deliveries/{delivery_id}/attempts", ok=(202,))


def sweep(deliveries: HookDeliveries, since: datetime, *, max_attempts: int = 3, dry_run: bool = False,
          max_pages: int = 50) -> SweepReport:
    """Redeliver every failed event since ``since`` (see the module docstring). Raises `GitHubError`
    when the deliveries cannot be listed; a redelivery that fails is in ``failed``."""
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    attempts, complete = deliveries.list_since(since, max_pages)
    report = SweepReport(scanned=len(attempts), complete=complete)
    events: dict[str, list[Attempt]] = {}
    for attempt in attempts:  # newest first, so each event's list starts with its newest attempt
        events.setdefault(attempt.guid, []).append(attempt)
    for tries in events.values():
        newest = tries[0]
        if any(a.succeeded for a in tries):
            continue
        if not all(a.retryable for a in tries):
            report.final.append(newest)
        elif len(tries) >= max_attempts:
            report.given_up.append(newest)
        elif dry_run:
            report.redelivered.append(newest)
        else:
            try:
                deliveries.redeliver(newest.id)
            except GitHubError as exc:
                report.failed.append((newest, str(exc)))
            else:
                report.redelivered.append(newest)
    return report


def window_start(hours: float, now: datetime | None = None) -> datetime:
    """``hours`` before ``now`` (UTC); ValueError outside (0, 72]: GitHub redelivers 3 days back."""
    if not 0 < hours <= MAX_WINDOW.total_seconds() / 3600:
        raise ValueError(f"the window must be more than 0 and at most 72 hours (GitHub's limit), got {hours:g}")
    return (now or datetime.now(timezone.utc)) - timedelta(hours=hours)


def _attempt(item: dict[str, Any]) -> Attempt:
    when = datetime.fromisoformat(str(item["delivered_at"]).replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return Attempt(int(item["id"]), str(item["guid"]), when, bool(item.get("redelivery")),
                   str(item.get("status") or ""), int(item.get("status_code") or 0), str(item.get("event") or ""),
                   item.get("action"))


__all__ = ["Attempt", "HookDeliveries", "HookRef", "MAX_WINDOW", "SweepReport", "sweep", "window_start"]
