"""``run_all_paths``: which changed paths select every test.

Each pattern is a repo-relative path prefix (`ci.registry.model.path_is_under`: ``csrc`` covers
``csrc/x.cu`` but not ``csrc_extra/x``); one written ``!prefix`` takes back what the patterns above
it matched. As in ``.gitignore``, the last pattern that matches a path decides:

    run_all_paths:
      - csrc/            # a change under csrc/ runs everything ...
      - "!csrc/cpu/"     # ... except under csrc/cpu/ ...
      - csrc/cpu/api.h   # ... where only this file does

Both registry parsers check the list with `run_all_problems` (a malformed ``!`` pattern, or one that
takes back nothing, is refused at its line); selection, lint and ``ci plan`` ask `run_all_rule`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ci.registry.model import normalize_path, path_is_under

NOT = "!"


def normalize_pattern(pattern: str) -> str:
    """``pattern`` in normal form: ``!./csrc/cpu/`` -> ``!csrc/cpu``, ``ci/`` -> ``ci``."""
    if pattern.startswith(NOT):
        return NOT + normalize_path(pattern[1:])
    return normalize_path(pattern)


def deciding_pattern(patterns: Sequence[str], path: str) -> str | None:
    """The last pattern that matches ``path`` and decides for it: a positive one (a change there
    selects every test), a ``!`` one that took back what an earlier one matched, or None."""
    decided = None
    for pattern in patterns:
        if pattern.startswith(NOT):
            if decided is not None and not decided.startswith(NOT) and path_is_under(path, pattern[1:]):
                decided = pattern
        elif path_is_under(path, pattern):
            decided = pattern
    return decided


def run_all_rule(patterns: Sequence[str], path: str) -> str | None:
    """The pattern that makes a change to ``path`` select every test (the last positive pattern
    matching it, unless a later ``!`` pattern matches it too); None when none does."""
    decided = deciding_pattern(patterns, path)
    return None if decided is None or decided.startswith(NOT) else decided


def _verdicts_under(patterns: Sequence[str], prefix: str) -> set[bool]:
    """Whether `run_all_rule` selects them, for every path under ``prefix`` (``prefix`` included).

    A path's verdict depends only on the patterns that are it or its ancestors. Under ``prefix``
    those are the ancestors of ``prefix``, and the patterns inside ``prefix`` that lie above the
    path; so the paths deepest under ``prefix`` itself and under each pattern inside it, below
    every other pattern, stand for them all.
    """
    prefix = normalize_path(prefix)
    inside = {normalize_path(p.removeprefix(NOT)) for p in patterns}
    inside = {p for p in inside if path_is_under(p, prefix)} | {prefix}
    deepest = "\0deeper"  # a path component no pattern has, so nothing below a point matches it
    return {run_all_rule(patterns, f"{point}/{deepest}" if point not in ("", ".") else deepest) is not None
            for point in inside}


def covers_everything_under(patterns: Sequence[str], prefix: str) -> bool:
    """True if a change to any path under ``prefix`` (``prefix`` itself too) selects every test."""
    return _verdicts_under(patterns, prefix) == {True}


def pattern_problem(pattern: str) -> str | None:
    """None if ``pattern`` is a usable ``run_all_paths`` item."""
    if not pattern.startswith(NOT):
        return None
    rest = pattern[1:]
    path = normalize_path(rest)
    if (not rest.strip() or rest != rest.strip() or rest.startswith((NOT, "/", "\\")) or "\\" in rest
            or ".." in path.split("/")):
        return (f"{pattern!r}: '!' must be followed by a repo-relative path such as '!csrc/cpu/' "
                f"(no space, second '!', leading '/', '..' or backslash)")
    return None


def run_all_problems(patterns: Sequence[str]) -> list[tuple[int, str]]:
    """``(index, message)`` for each item of a ``run_all_paths`` list that is malformed, or that is
    a ``!`` pattern taking back nothing the patterns above it select."""
    problems = []
    usable: list[str] = []  # the well-formed patterns so far: a malformed one says so once, nothing more
    for index, pattern in enumerate(patterns):
        message = pattern_problem(pattern)
        if message is None and pattern.startswith(NOT):
            target = normalize_pattern(pattern)[1:]
            if True not in _verdicts_under(usable, target):
                message = (f"{pattern!r} excludes nothing: no entry above it selects a path under {target!r} "
                           f"(an exclusion takes back what an earlier entry matched; the last match wins)")
        if message is not None:
            problems.append((index, message))
        else:
            usable.append(normalize_pattern(pattern))
    return problems


__all__ = ["NOT", "covers_everything_under", "deciding_pattern", "normalize_pattern", "pattern_problem", "run_all_problems",
           "run_all_rule"]
