"""The lint baseline file: the problems a repository already had, which ``lint --baseline`` does
not fail on.

One `ci.lint_gate.ProblemKey` per line, sorted, a copy per occurrence, under a fixed first line::

    # fp4kv-ci lint baseline 1
    I001<TAB>python/pkg/mod.py<TAB>'pkg.other' has no name 'Old'

Tabs, newlines and backslashes inside a field are written ``\\t``, ``\\n``, ``\\\\``. Other lines
starting with ``#`` and blank lines are comments. The first line is required, so that a wrong file
passed as the baseline (the registry, an empty file from a failed download) is an error, never a
baseline that silently lets everything through.
"""

from __future__ import annotations

import os
import re
from typing import Iterable

from ci.atomic_write import atomic_write_text
from ci.gc_pause import gc_paused
from ci.lint_gate import ProblemKey
from ci.regular_file import MAX_REPORT_BYTES, read_regular

HEADER = "# fp4kv-ci lint baseline 1"
_CODE = re.compile(r"[A-Z][0-9]{3}")
_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}
_UNESCAPES = {v: k for k, v in _ESCAPES.items()}
_ESCAPE_SEQUENCE = re.compile(r"\\.?")


class BaselineError(ValueError):
    """The baseline cannot be used; the message names the file and, where one is at fault, the line."""


def _escape(field: str) -> str:
    return "".join(_ESCAPES.get(ch, ch) for ch in field)


def _unescaped(match: re.Match[str]) -> str:
    return _UNESCAPES[match.group(0)]  # KeyError: an unknown escape, named by `_unescape`


def _unescape(field: str, where: str) -> str:
    if "\\" not in field:
        return field
    try:
        return _ESCAPE_SEQUENCE.sub(_unescaped, field)
    except KeyError as exc:
        raise BaselineError(f"{where}: unknown escape {exc.args[0]!r} (only \\t \\n \\r \\\\)") from None


def format_baseline(keys: Iterable[ProblemKey]) -> str:
    """The file's text for ``keys``: header, then one sorted line per key (copies repeated)."""
    lines = [HEADER, "# Problems `lint --baseline` does not fail on; delete a line once it is fixed.",
             "# code<TAB>file<TAB>problem (`python -m ci lint --write-baseline FILE` rewrites it)"]
    lines += ["\t".join(_escape(f) for f in (k.code, k.path, k.subject)) for k in sorted(keys)]
    return "\n".join(lines) + "\n"


def parse_baseline(text: str, name: str) -> list[ProblemKey]:
    """The keys in ``text`` (the file ``name``, for messages); raises `BaselineError` at the
    first line that is not a key. Linear in the size of ``text``: a fixed number of steps per line."""
    lines = text.split("\n")
    if lines[0].rstrip("\r") != HEADER:
        shown = lines[0][:60]
        raise BaselineError(f"{name}:1: not a lint baseline: the first line is {shown!r}, expected {HEADER!r} "
                            f"(write one with `python -m ci lint --write-baseline {name}`)")
    keys = []
    # The cyclic GC would otherwise run a full pass over every key built so far, again and again as
    # the list grows (9 passes at 1.5 M keys, a quarter of the parse): keys hold no cycles.
    with gc_paused():
        for number, raw in enumerate(lines[1:], start=2):
            line = raw.rstrip("\r")
            if not line.strip() or line.startswith("#"):
                continue
            where = f"{name}:{number}"
            fields = line.split("\t")
            if len(fields) != 3:
                raise BaselineError(f"{where}: expected 3 tab-separated fields (code, file, problem), found "
                                    f"{len(fields)}: {line[:80]!r}")
            code, path, subject = [_unescape(f, where) for f in fields]
            if not _CODE.fullmatch(code):
                raise BaselineError(f"{where}: {code!r} is not a lint code (a letter and three digits, like I001)")
            if not path or not subject:
                raise BaselineError(f"{where}: empty {'file' if not path else 'problem'} field")
            keys.append(ProblemKey(code, path, subject))
    return keys


def read_baseline(path: str | os.PathLike[str]) -> list[ProblemKey]:
    """`parse_baseline` of the file at ``path``; a missing, unreadable or non-UTF-8 file is a
    `BaselineError` naming it."""
    try:
        data = read_regular(path, MAX_REPORT_BYTES)
    except OSError as exc:
        raise BaselineError(f"baseline {os.fspath(path)}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise BaselineError(f"{os.fspath(path)}:{line}: not UTF-8 (byte offset {exc.start})") from None
    return parse_baseline(text, os.fspath(path))


def write_baseline(path: str | os.PathLike[str], keys: Iterable[ProblemKey]) -> None:
    """Rewrite ``path`` with ``keys`` atomically (`ci.atomic_write`); OSError when it cannot."""
    atomic_write_text(path, format_baseline(keys))


__all__ = ["BaselineError", "HEADER", "format_baseline", "parse_baseline", "read_baseline", "write_baseline"]
