"""Which lint problems a change adds: problems keyed by an identity that survives line shifts.

A gate that fails on every problem in the tree is red on day one in a repository with old
problems (SGLang's HEAD: 28 broken imports). `gate` compares the problems of the change with
those of a reference (the merge base's, or a committed baseline, `ci.lint_baseline`) by
`ProblemKey`: the rule code, the file, and the message without what moves when lines move or
history is read differently (line numbers inside the message, the I001 hint, the entry L002
suggests). Keys keep their multiplicity: a second copy of an old bad import in the same file is
one new problem.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Mapping

from ci.registry import Problem

_LINE_NUMBER = re.compile(r"\blines? \d+")
# I001: "'pkg.mod' has no name 'Old' (renamed to New in abc1234 (#12))": the hint comes from
# history, which the merge base's tree (no git there) and a shallow clone tell differently.
_MISSING_NAME = re.compile(r"^('[^']*' has no name '[^']*')")
_BASENAME = re.compile(r"^(basename '[^']*')")


@dataclass(frozen=True, order=True)
class ProblemKey:
    """What a problem is, not where its line is: ``code``, ``path`` and ``subject`` (the message's
    first line, minus line numbers and history hints)."""

    code: str
    path: str
    subject: str


def subject_of(problem: Problem) -> str:
    """The stable part of ``problem``'s message (see `ProblemKey`)."""
    first = problem.message.split("\n", 1)[0]
    match = _MISSING_NAME.match(first) if problem.code == "I001" else None
    if match:
        return match.group(1)
    match = _BASENAME.match(first) if problem.code == "L003" else None
    if match:  # L003 lists the other paths: a third copy must not make the first two new
        return f"{match.group(1)} is shared"
    return _LINE_NUMBER.sub(lambda m: m.group(0).split(" ")[0] + " N", first)


def problem_key(problem: Problem) -> ProblemKey:
    """`ProblemKey` of ``problem``."""
    return ProblemKey(problem.code, problem.path, subject_of(problem))


def _order(problem: Problem) -> tuple[str, int, int, str, str]:
    return problem.path, problem.line, problem.col, problem.code, problem.message


@dataclass(frozen=True)
class GateResult:
    """``new``: problems of the change beyond what the reference holds under the same key (the
    extra copies of a key are its last ones by line); ``known``: the change's problems the
    reference holds; ``fixed``: reference keys the change no longer has, one per copy."""

    new: list[Problem]
    known: list[Problem]
    fixed: list[ProblemKey]


def gate(problems: Iterable[Problem], reference: Iterable[ProblemKey],
         renamed: Mapping[str, str] | None = None) -> GateResult:
    """Split ``problems`` (the change's) against ``reference`` (keys of the problems the gate does
    not fail on). ``renamed`` maps a reference path to the path the change moved that file to,
    so a renamed file's old problems stay old."""
    moved = renamed or {}
    left = Counter(ProblemKey(k.code, moved.get(k.path, k.path), k.subject) for k in reference)
    by_key: dict[ProblemKey, list[Problem]] = {}
    for problem in sorted(problems, key=_order):
        by_key.setdefault(problem_key(problem), []).append(problem)
    new: list[Problem] = []
    known: list[Problem] = []
    for key, found in by_key.items():
        old = min(left[key], len(found))
        known += found[:old]
        new += found[old:]
        left[key] -= old
    fixed = sorted(key for key, count in left.items() for _ in range(count))
    return GateResult(sorted(new, key=_order), sorted(known, key=_order), fixed)


__all__ = ["GateResult", "ProblemKey", "gate", "problem_key", "subject_of"]
