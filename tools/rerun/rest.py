"""HTTP transport for the GitHub client: client timeouts, bounded retries, typed errors, redaction.

Retried: connection errors, timeouts and bodies cut short, 5xx, 429, and 403s that are rate limits (secondary rate
limit message, ``Retry-After``, or ``x-ratelimit-remaining: 0``). The wait follows GitHub's rules
for rate limits: ``Retry-After`` seconds when given; else, when ``x-ratelimit-remaining`` is 0,
until ``x-ratelimit-reset`` (epoch seconds); else (a secondary rate limit that says nothing more)
at least ``secondary_wait`` (60 s), doubling for each further one in the same call. Connection
errors, timeouts and 5xx wait ``backoff_base * 2**attempt`` capped at ``backoff_cap``. When a wait
would be longer than ``max_wait`` or the waits would exceed ``total_wait_cap`` the client gives up
with `GitHubError` instead of waiting less than GitHub asks. ``sleep`` and ``clock`` are injectable.
``pace`` (`tools.rerun.budget.WritePacer.take`), when given, is called before every attempt of every
write (every method but GET): GitHub counts each one against its per-minute write limit; and of a
GET that asks for it (``paced``: a culprit search's artifact reads, counted in its budget).

Writes that must not happen twice (a workflow dispatch, a claim comment) pass ``confirm``: after a
failure that may have taken effect anyway (a timeout or dropped connection after the request was
sent, or a 5xx) and before any resend, ``confirm()`` is asked whether the effect is already there;
True ends the call as a success (`request` returns None) instead of resending. Failures that
certainly did not take effect (connection refused, 429 and rate-limit 403s) are resent directly.

Every error message and log line goes through `secrets_file.redact`: a server that echoes the
token, or a ``requests`` error that quotes a header, never prints it.

The token goes to the API's own origin only. A path is relative to the API base URL; a whole URL
(a ``Link`` header's ``next``, ``last`` or ``prev``, which every paginating caller passes back as
the path) is requested only when its scheme, host and port are the base URL's. Any other is
`ForeignURL`, raised before anything is sent, so a response naming another host never receives
``Authorization: Bearer ...``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlsplit

import requests

from tools.rerun.secrets_file import redact, remember

log = logging.getLogger(__name__)


class GitHubError(RuntimeError):
    """A GitHub API call failed for good. ``status`` is the last HTTP status (None: no response).
    ``transient``: the last failure was one the client retries (a connection error, a timeout, a
    body cut short, a 5xx, a rate limit) and the retries ran out; a later call may succeed. False
    for GitHub's definitive answers (a 404, a 410, a refusal)."""

    def __init__(self, method: str, path: str, status: int | None, message: str, attempts: int = 1,
                 transient: bool = False):
        self.method, self.path, self.status, self.attempts = method, path, status, attempts
        self.transient = transient
        self.reason = redact(message)
        where = f"{method} {path} failed" + (f" after {attempts} attempt(s)" if attempts else "")
        super().__init__(redact(f"{where}: "
                                f"{'HTTP ' + str(status) + ': ' if status is not None else ''}{message}"))


class ForeignURL(GitHubError):
    """A whole URL not on the API's origin (scheme, host and port): refused, nothing sent."""

    def __init__(self, method: str, url: str, origin: str):
        super().__init__(method, url[:300], None, f"refused: not on the API's origin {origin}, the only "
                                                  "one the token is sent to", attempts=0)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL, the port filled in from the scheme; None for
    anything else (a relative path, another scheme, no host, a port that is not a number)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        return None
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname, port or _DEFAULT_PORTS[scheme]


@dataclass(frozen=True)
class RetryPolicy:
    """Seconds. ``max_attempts`` counts the first try. ``secondary_wait``: the least wait after a
    rate limit that gives neither ``Retry-After`` nor an exhausted ``x-ratelimit-remaining``
    (GitHub: "wait for at least one minute")."""

    max_attempts: int = 5
    backoff_base: float = 0.5
    backoff_cap: float = 8.0
    max_wait: float = 60.0
    total_wait_cap: float = 120.0
    secondary_wait: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        for name in ("backoff_base", "backoff_cap", "max_wait", "total_wait_cap", "secondary_wait"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")


class RestClient:
    """REST calls scoped to one API base URL and token. One instance per thread (it holds a
    `requests.Session`); the bot gives each worker thread its own."""

    def __init__(self, api_url: str, token: str | None, *, timeout: float = 10.0,
                 retry: RetryPolicy = RetryPolicy(), sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.time, session: requests.Session | None = None,
                 pace: Callable[[], None] | None = None):
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.api_url = api_url.rstrip("/")
        self.origin = origin(self.api_url)
        self.timeout = timeout
        self.retry = retry
        self.sleep = sleep
        self.clock = clock
        self.pace = pace
        self.session = session or _session(self.api_url)
        self.session.headers.update({
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "rerun-test-bot",
        })
        if token:
            self.session.headers["Authorization"] = f"Bearer {remember(token)}"

    def request(self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None,
                ok: tuple[int, ...] = (200, 201, 204), confirm: Callable[[], bool] | None = None,
                paced: bool = False) -> requests.Response | None:
        """One API call with retries; returns the response when its status is in ``ok``, or None
        when ``confirm`` said a possibly-applied earlier attempt did take effect. ``path`` is
        relative to the API base URL, or a whole URL on its origin (else `ForeignURL`)."""
        url = self.url_for(method, path)
        waited, limited = 0.0, 0
        for attempt in range(1, self.retry.max_attempts + 1):
            status: int | None = None
            if self.pace is not None and (paced or method != "GET"):
                self.pace()
            try:
                response = self.session.request(method, url, json=json, params=params, timeout=self.timeout)
            # a body cut short (connection reset mid-download) comes as ChunkedEncodingError: the
            # request reached the server, so it is retried like a dropped connection
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
                message = f"{type(exc).__name__}: {exc}"
                delay, maybe_applied = self._backoff(attempt), not _certainly_unsent(exc)
            except requests.RequestException as exc:  # e.g. InvalidHeader: final, and it may quote a header
                raise GitHubError(method, path, None, f"{type(exc).__name__}: {exc}", attempt) from None
            else:
                status = response.status_code
                if status in ok:
                    return response
                message = _error_message(response)
                delay, secondary = self._retry_delay(response, attempt, limited)
                if delay is None:
                    raise GitHubError(method, path, status, message, attempt)
                limited += secondary
                maybe_applied = status >= 500
            if attempt == self.retry.max_attempts:
                raise GitHubError(method, path, status, message, attempt, transient=True)
            if delay > self.retry.max_wait:
                raise GitHubError(method, path, status,
                                  f"{message} (GitHub asked to wait {delay:.0f}s, more than the "
                                  f"{self.retry.max_wait:.0f}s limit)", attempt, transient=True)
            if waited + delay > self.retry.total_wait_cap:
                raise GitHubError(method, path, status,
                                  f"{message} (retrying would exceed the {self.retry.total_wait_cap:.0f}s "
                                  f"total wait limit)", attempt, transient=True)
            log.warning("%s %s: %s; retry %d in %.2fs", method, path, redact(message), attempt, delay)
            self.sleep(delay)
            waited += delay
            if confirm is not None and maybe_applied and confirm():
                log.warning("%s %s: the failed attempt took effect after all; not resending", method, path)
                return None
        raise AssertionError("unreachable")  # pragma: no cover

    def url_for(self, method: str, path: str) -> str:
        """The URL ``path`` names: the base URL + ``path``, or ``path`` itself when it is a whole
        URL on the API's origin; `ForeignURL` for any other whole URL (or ``//host/...``)."""
        parts = urlsplit(path)
        relative = not parts.scheme and not parts.netloc
        url = f"{self.api_url}{path}" if relative else path
        # checked on the URL as sent: a "path" such as "@evil.example/x" or ".evil.example/x"
        # would move the host of the base URL it is appended to
        if self.origin is None or origin(url) != self.origin or (relative and not path.startswith("/")):
            scheme, host, port = self.origin or ("", self.api_url, 0)
            raise ForeignURL(method, path, f"{scheme}://{host}:{port}" if port else host)
        return url

    def _backoff(self, attempt: int) -> float:
        return min(self.retry.backoff_base * 2 ** (attempt - 1), self.retry.backoff_cap)

    def _retry_delay(self, response: requests.Response, attempt: int, limited: int) -> tuple[float | None, bool]:
        """(seconds to wait before retrying, or None if the error is final; whether this was a
        rate limit without a stated wait). ``limited``: how many of those this call had before."""
        status = response.status_code
        headers = response.headers
        rate_limited = status == 429 or (status == 403 and (
            "retry-after" in headers or headers.get("x-ratelimit-remaining") == "0"
            or "rate limit" in _error_message(response).lower()))
        if not (rate_limited or status >= 500):
            return None, False
        retry_after = headers.get("retry-after")
        if retry_after is not None:
            try:
                return max(0.0, float(retry_after)), False
            except ValueError:
                log.warning("ignoring unparsable Retry-After %r", retry_after[:40])
        if headers.get("x-ratelimit-remaining") == "0" and "x-ratelimit-reset" in headers:
            try:
                return max(0.0, float(headers["x-ratelimit-reset"]) - self.clock()), False
            except ValueError:
                log.warning("ignoring unparsable x-ratelimit-reset %r", headers["x-ratelimit-reset"][:40])
        if rate_limited:
            return self.retry.secondary_wait * 2 ** limited, True
        return self._backoff(attempt), False


def _session(api_url: str) -> requests.Session:
    """A session that reads the environment's proxy and CA-bundle settings once, here, instead of
    on every request: with ``trust_env`` requests scans ``os.environ`` and stats ``~/.netrc`` per
    call, which was a quarter of the bot's CPU time per delivery (profiled in bench/rerun_bot.py)."""
    session = requests.Session()
    session.proxies.update(requests.utils.get_environ_proxies(api_url))
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    session.trust_env = False
    return session


def _certainly_unsent(exc: Exception) -> bool:
    """True when the request cannot have reached the server: the connection was never made."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    text = repr(exc)
    return "NewConnectionError" in text or "Connection refused" in text


def _error_message(response: requests.Response) -> str:
    """The error text of a failed response, redacted *before* it is cut to 500/200 characters, so a
    secret straddling the cut cannot leave its first characters in the message."""
    try:
        data = response.json()
    except ValueError:
        return redact((response.text or response.reason or "").strip())[:200]
    if isinstance(data, dict) and data.get("message"):
        return redact(str(data["message"]))[:500]
    return redact(str(data))[:200]


__all__ = ["ForeignURL", "GitHubError", "RestClient", "RetryPolicy", "origin"]
