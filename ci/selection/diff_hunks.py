"""The old-side lines a unified diff touches, per file: the one reader of ``git diff -U0`` output.

Contract: `touched_old_lines` maps each file the diff changes (its old path; a file the diff adds
maps to None: it has no old lines) to the set of old line numbers the change touches: every
removed or replaced line, and for a pure insertion after old line ``s`` both neighbours ``s`` and
``s + 1`` (the inserted code may belong to either's block; line 1 for an insertion at the top).
A binary file, or a diff it cannot follow, maps to None (the whole file is the unit). Paths are
repo-relative as git prints them with ``--relative`` / ``--no-prefix`` absent (``a/`` and ``b/``
prefixes are removed); quoted paths are refused with `ValueError` (run git with
``core.quotepath=off``).
"""

from __future__ import annotations

import re

_BINARY = re.compile(r"Binary files (.+) and (.+) differ$")
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _path(text: str, prefix: str) -> str | None:
    text = text.rstrip("\n").split("\t", 1)[0]
    if text == "/dev/null":
        return None
    if text.startswith('"'):
        raise ValueError(f"quoted path {text!r} in the diff: run git with -c core.quotepath=off")
    return text[len(prefix):] if text.startswith(prefix) else text


def touched_old_lines(diff: str) -> dict[str, frozenset[int] | None]:
    """See the module docstring."""
    out: dict[str, set[int] | None] = {}
    current: str | None = None
    old_path: str | None = None
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            current = old_path = None
        elif line.startswith("--- "):
            old_path = _path(line[4:], "a/")
        elif line.startswith("+++ "):
            new_path = _path(line[4:], "b/")
            current = old_path if old_path is not None else new_path
            if current is not None:
                out.setdefault(current, None if old_path is None else set())
        elif (binary := _BINARY.match(line)) is not None:
            old, new = _path(binary.group(1), "a/"), _path(binary.group(2), "b/")
            out[old if old is not None else new] = None
        elif line.startswith("@@") and current is not None:
            match = _HUNK.match(line)
            lines = out.get(current)
            if match is None:
                out[current] = None
                continue
            if lines is None:
                continue
            start, count = int(match.group(1)), int(match.group(2) or "1")
            if count == 0:
                lines.update(n for n in (start, start + 1) if n >= 1)
                if start == 0:
                    lines.add(1)
            else:
                lines.update(range(start, start + count))
    return {path: None if lines is None else frozenset(lines) for path, lines in out.items()}
