"""Where the history store is, and how to show that without its secrets.

Contract:
- `resolve_location`: ``--store`` (the ``location`` given) wins, else $CI_HISTORY_STORE, else
  `DEFAULT_SQLITE`; `is_postgres` tells a PostgreSQL URL from a SQLite path.
- `describe(location)` is the only form in which a location is ever shown (messages, the success
  line, JSON): a PostgreSQL URL with the password of its user info and the values of its
  `SECRET_PARAMS` query parameters replaced by ``***``; anything else as it is.
- `redact(text, location)` is any other text that may hold those secrets (a driver's error):
  every secret value of ``location`` (as written, and percent-decoded) replaced by ``***``, and
  the text folded onto one line.
"""

from __future__ import annotations

import os
from urllib.parse import unquote

ENV_VAR = "CI_HISTORY_STORE"
DEFAULT_SQLITE = ".ci-history/history.sqlite"
HIDDEN = "***"
# libpq's connection parameters that are, or point at, a secret (its names are lower case; a
# differently spelt one is refused by libpq, and hidden here all the same).
SECRET_PARAMS = frozenset({"password", "sslpassword", "passfile", "sslkey"})


def resolve_location(location: str | None) -> str:
    """The store to use: ``location``, else $CI_HISTORY_STORE, else `DEFAULT_SQLITE`."""
    return location or os.environ.get(ENV_VAR) or DEFAULT_SQLITE


def is_postgres(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def _split(location: str) -> tuple[str, str | None, str | None, str, list[tuple[str, str, str]]]:
    """(scheme, user or None, password or None, the rest up to the query, [(key, "=", value)]) of a
    PostgreSQL URL. User info is what precedes the first ``@`` that comes before any ``/``, as
    libpq reads it (so a ``?`` or ``#`` there is part of the password, never a query)."""
    scheme, _, rest = location.partition("://")
    at, slash = rest.find("@"), rest.find("/")
    user = password = None
    if at >= 0 and (slash < 0 or at < slash):
        info, rest = rest[:at], rest[at + 1:]
        user, colon, password = info.partition(":")
        password = password if colon else None
    path, mark, query = rest.partition("?")
    params = [p.partition("=") for p in query.split("&")] if mark else []
    return scheme, user, password, path, params


def _secret(key: str) -> bool:
    return unquote(key).strip().lower() in SECRET_PARAMS


def describe(location: str) -> str:
    """``location`` fit to print (see the module docstring)."""
    if not is_postgres(location):
        return location
    scheme, user, password, path, params = _split(location)
    if user is None:
        info = ""
    elif password:
        info = f"{user}:{HIDDEN}@"
    else:  # no password, or an empty one: nothing to hide
        info = f"{user}@" if password is None else f"{user}:@"
    query = "&".join(f"{k}{eq}{HIDDEN}" if _secret(k) else f"{k}{eq}{v}" for k, eq, v in params)
    return f"{scheme}://{info}{path}" + (f"?{query}" if params else "")


def secrets(location: str) -> list[str]:
    """The secret values in ``location``, as written and percent-decoded (longest first)."""
    if not is_postgres(location):
        return []
    _, _, password, _, params = _split(location)
    values = [password or "", *(v for k, _, v in params if _secret(k))]
    found = {form for v in values for form in (v, unquote(v)) if form}
    return sorted(found, key=len, reverse=True)


def redact(text: str, location: str) -> str:
    """``text`` without ``location``'s secrets, on one line (see the module docstring)."""
    for value in secrets(location):
        text = text.replace(value, HIDDEN)
    return " ".join(text.split())


__all__ = ["DEFAULT_SQLITE", "ENV_VAR", "HIDDEN", "SECRET_PARAMS", "describe", "is_postgres", "redact",
           "resolve_location", "secrets"]
