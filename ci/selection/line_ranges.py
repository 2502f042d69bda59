"""Sets of line numbers written as compact ranges: ``"1-5,9,12-20"``.

Contract: `format_lines` writes a set of positive line numbers sorted, runs of consecutive lines
as ``a-b``; `parse_lines` reads that back equal and raises `ValueError` naming the offending
piece for anything else (an empty piece, a number < 1, ``b < a``, non-digits). Overlapping or
unsorted ranges are accepted (a hand-merged map stays readable); the result is the union.
"""

from __future__ import annotations

from typing import Iterable


def format_lines(lines: Iterable[int]) -> str:
    """The compact text of ``lines`` (see the module docstring)."""
    out: list[str] = []
    start = prev = None
    for n in sorted(set(lines)):
        if prev is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(out)


def _number(piece: str, text: str) -> int:
    if not piece.isascii() or not piece.isdigit() or int(piece) < 1:
        raise ValueError(f"{text!r} holds {piece!r}, not a line number >= 1")
    return int(piece)


def parse_lines(text: str) -> frozenset[int]:
    """The set of line numbers ``text`` names (see the module docstring)."""
    if text == "":
        return frozenset()
    out: set[int] = set()
    for piece in text.split(","):
        first, sep, last = piece.partition("-")
        a = _number(first, text)
        b = _number(last, text) if sep else a
        if b < a:
            raise ValueError(f"{text!r} holds the range {piece!r}, which ends before it starts")
        if b - a > 10_000_000:
            raise ValueError(f"{text!r} holds the range {piece!r}, longer than any source file")
        out.update(range(a, b + 1))
    return frozenset(out)
