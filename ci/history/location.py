"""Where the history store is, and how to show that without its secrets.

Contract:
- `resolve_location`: ``--store`` (the ``location`` given) wins, else $CI_HISTORY_STORE, else
  `DEFAULT_SQLITE`; `is_postgres` tells PostgreSQL (a ``postgresql://`` URL, or libpq's
  keyword/value form: it starts with ``word=``, `is_keywords`) from a SQLite path.
- `keyword_error(location)`: why a keyword/value string is not one libpq can read (a word with no
  ``=``, a quote never closed), naming the place by position only, never by its text; None if fine.
- `describe(location)` is the only form in which a location is ever shown (messages, the success
  line, JSON): a PostgreSQL URL with the password of its user info and the values of its
  `SECRET_PARAMS` query parameters replaced by ``***``; a keyword/value string with the values of
  its `SECRET_PARAMS` (and anything after a place libpq cannot read) replaced by ``***``; anything
  else as it is.
- `redact(text, location)` is any other text that may hold those secrets (a driver's error):
  every secret value of ``location`` (as written, and percent-decoded) replaced by ``***``, and
  the text folded onto one line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
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


# A keyword/value string starts with a libpq parameter name and ``=``; a path never does unless
# its first component holds an ``=`` (write ``./a=b`` or ``sqlite:///abs/a=b`` for such a file).
_FIRST_KEYWORD = re.compile(r"[ \t\n\r\f\v]*[A-Za-z_][A-Za-z0-9_]*[ \t\n\r\f\v]*=")
_BLANKS = " \t\n\r\f\v"  # C's isspace, which libpq uses (not Unicode's)


def is_keywords(location: str) -> bool:
    """Whether ``location`` is in libpq's keyword/value form (``host=h dbname=d ...``)."""
    return _FIRST_KEYWORD.match(location) is not None


def is_postgres(location: str) -> bool:
    """Whether ``location`` is a PostgreSQL one (a URL, or keyword/value form); else SQLite."""
    return location.startswith(("postgresql://", "postgres://")) or is_keywords(location)


@dataclass(frozen=True)
class _Pair:
    """One ``key=value`` of a keyword/value string: the value as libpq takes it (quotes and
    backslashes undone), and where it is written (``text[start:end]``, quotes included)."""

    key: str
    value: str
    start: int
    end: int


@dataclass(frozen=True)
class _Keywords:
    """A keyword/value string as libpq's ``conninfo_parse`` reads it, and where it stopped
    reading (with why) when it cannot read all of it."""

    pairs: tuple[_Pair, ...]
    stop: int | None = None
    why: str = ""


def _keywords(text: str) -> _Keywords:
    pairs: list[_Pair] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _BLANKS:
            i += 1
        if i == n:
            return _Keywords(tuple(pairs))
        start = i
        while i < n and text[i] != "=" and text[i] not in _BLANKS:
            i += 1
        key = text[start:i]
        while i < n and text[i] in _BLANKS:
            i += 1
        if i == n or text[i] != "=":
            return _Keywords(tuple(pairs), start, f"word {len(pairs) + 1} (at character {start + 1}) has no '='")
        i += 1
        while i < n and text[i] in _BLANKS:  # libpq skips blanks after '=': "a= b" is a = "b"
            i += 1
        begin, value, quoted = i, [], text[i:i + 1] == "'"
        i += quoted
        while i < n and not (text[i] == "'" if quoted else text[i] in _BLANKS):
            if text[i] == "\\":  # the next character as it is (a lone one at the end: nothing)
                i += 1
            value.append(text[i:i + 1])
            i += 1
        if quoted and i >= n:
            return _Keywords(tuple(pairs), begin, f"the quote at character {begin + 1} is never closed")
        i = min(i + quoted, n)
        pairs.append(_Pair(key, "".join(value), begin, i))


def keyword_error(location: str) -> str | None:
    """Why libpq cannot read ``location``'s keyword/value form, or None (see the module docstring)."""
    if not is_keywords(location):
        return None
    return _keywords(location).why or None


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
    if is_keywords(location):
        return _describe_keywords(location)
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


def _describe_keywords(location: str) -> str:
    parsed, shown, last = _keywords(location), [], 0
    for pair in parsed.pairs:
        if _secret(pair.key) and pair.end > pair.start:
            shown += [location[last:pair.start], HIDDEN]
            last = pair.end
    if parsed.stop is not None:
        return "".join([*shown, location[last:parsed.stop], HIDDEN])
    return "".join([*shown, location[last:]])


def _keyword_secrets(location: str) -> list[str]:
    parsed = _keywords(location)
    values = [form for p in parsed.pairs if _secret(p.key) for form in (p.value, location[p.start:p.end])]
    return values + ([location[parsed.stop:].strip()] if parsed.stop is not None else [])


def secrets(location: str) -> list[str]:
    """The secret values in ``location``, as written and as read (percent-decoded in a URL,
    unquoted in keyword/value form), longest first."""
    if is_keywords(location):
        values = _keyword_secrets(location)
    elif not is_postgres(location):
        return []
    else:
        _, _, password, _, params = _split(location)
        values = [password or "", *(v for k, _, v in params if _secret(k))]
    found = {form for v in values for form in (v, unquote(v)) if form}
    return sorted(found, key=len, reverse=True)


def redact(text: str, location: str) -> str:
    """``text`` without ``location``'s secrets, on one line (see the module docstring)."""
    for value in secrets(location):
        text = text.replace(value, HIDDEN)
    return " ".join(text.split())


__all__ = ["DEFAULT_SQLITE", "ENV_VAR", "HIDDEN", "SECRET_PARAMS", "describe", "is_keywords", "is_postgres",
           "keyword_error", "redact", "resolve_location", "secrets"]
