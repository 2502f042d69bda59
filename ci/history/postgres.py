"""PostgreSQL connections that never wait without bound.

Contract:
- `Timeouts`: ``connect_s`` bounds opening a connection (libpq's ``connect_timeout``, which
  waits at least 2 s; it replaces one given in the URL), ``statement_s`` every round trip after
  that. `Timeouts.from_env` reads $CI_HISTORY_CONNECT_TIMEOUT and $CI_HISTORY_STATEMENT_TIMEOUT
  (whole seconds, 1 to `MAX_TIMEOUT_S`; unset or empty: the defaults); a bad value is
  `BadTimeout` naming the variable.
- `connect(location, timeouts)` opens an autocommit connection and its `Watchdog`;
  `ci.history.store` then sets the server's ``statement_timeout`` to ``statement_s``. The server cancels a statement
  that runs too long; a server that cannot answer at all (paused, frozen, its host gone without a
  reset) cannot cancel anything, so the client keeps its own deadline: a round trip that outlasts
  ``statement_s + MARGIN_S`` has its socket shut down, which ends the driver's wait with an error.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ci.limits import parse_whole

CONNECT_ENV = "CI_HISTORY_CONNECT_TIMEOUT"
STATEMENT_ENV = "CI_HISTORY_STATEMENT_TIMEOUT"
DEFAULT_CONNECT_S = 10
# One statement of a history command: a million-row report's COPY takes about 5 s, `ci flaky`
# over a million rows under 1 s; two ingesters of one report wait for each other's commit.
DEFAULT_STATEMENT_S = 300
MAX_TIMEOUT_S = 86_400
MARGIN_S = 5.0  # the server's own statement_timeout gets the first chance, with a clear error


class BadTimeout(ValueError):
    """A timeout setting in the environment is not a whole number of seconds in range."""


@dataclass(frozen=True)
class Timeouts:
    """Seconds; see the module docstring."""

    connect_s: int = DEFAULT_CONNECT_S
    statement_s: int = DEFAULT_STATEMENT_S

    @classmethod
    def from_env(cls) -> "Timeouts":
        values = {}
        for field, name in (("connect_s", CONNECT_ENV), ("statement_s", STATEMENT_ENV)):
            text = os.environ.get(name, "")
            if text:
                try:
                    values[field] = parse_whole(text, f"${name}", 1, MAX_TIMEOUT_S)
                except ValueError as exc:
                    raise BadTimeout(f"{exc} (seconds)") from None
        return cls(**values)


class Watchdog:
    """Shuts a connection's socket down when one `guard`ed block outlasts ``limit`` seconds.

    One thread per connection, asleep unless a block is guarded; `fired` stays true once it cut."""

    def __init__(self, fileno: Callable[[], int], limit: float):
        self.limit = limit
        self.fired = False
        self._fileno = fileno
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="ci-history-watchdog", daemon=True)
        self._thread.start()

    @contextmanager
    def guard(self) -> Iterator[None]:
        with self._cond:
            self._deadline = time.monotonic() + self.limit
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._deadline = None

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                left = None if self._deadline is None else self._deadline - time.monotonic()
                if left is None or left > 0:
                    self._cond.wait(left)
                    continue
                self._deadline = None
                self.fired = True
                _shut_down(self._fileno)


def _shut_down(fileno: Callable[[], int]) -> None:
    """End every wait on the socket (the driver reads end of file), leaving the descriptor itself
    to its owner; a connection already closed needs nothing."""
    try:
        sock = socket.socket(fileno=os.dup(fileno()))
    except Exception:  # closed meanwhile: the driver raises its own error type for that
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


def connect(location: str, timeouts: Timeouts) -> tuple[Any, Watchdog]:
    """An autocommit psycopg connection to ``location`` and its watchdog; the caller sets
    `STATEMENT_TIMEOUT_SQL` through the watchdog. ImportError without psycopg; the driver's own
    errors as they come (``psycopg.errors.ConnectionTimeout`` after ``connect_s``)."""
    import psycopg

    conn = psycopg.connect(location, autocommit=True, connect_timeout=timeouts.connect_s)
    return conn, Watchdog(lambda: conn.pgconn.socket, timeouts.statement_s + MARGIN_S)


# The server's own limit on every statement of the session (``?``: seconds, as text such as "300s").
STATEMENT_TIMEOUT_SQL = "SELECT set_config('statement_timeout', ?, false)"


__all__ = ["BadTimeout", "CONNECT_ENV", "DEFAULT_CONNECT_S", "DEFAULT_STATEMENT_S", "MARGIN_S", "MAX_TIMEOUT_S",
           "STATEMENT_ENV", "STATEMENT_TIMEOUT_SQL", "Timeouts", "Watchdog", "connect"]
