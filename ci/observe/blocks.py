"""One probe per basic block: where the slipcover core puts its line probes, and what each stands for.

A probe is a call into slipcover's C probe each time its line runs, and it is never taken out
(each test file must see every line it runs, `ci.observe.slipcover_core`): in pure-Python code
a probe on every line start cost a recording about 60 % more CPU (2026-12-05, ``ci lint`` and
``ci plan`` in-process on this repository). Inside a basic block (straight-line bytecode entered
only at its first instruction) every instruction runs once the first one has, unless an
exception leaves the block early; so the first line start of each block is enough to know that
the block's other line starts ran. The same workload with one probe per block: about half the
added CPU.

Contract:

- `plan(code, starts)` takes the line starts slipcover would probe (``(offset, line)``, any
  order) and returns a `BlockPlan`: ``points``, the starts that are the first of their block (in
  offset order), and ``implied``, for each probed line the other lines that start in its block.
  A block begins at a jump target, at an exception handler and at either end of the range it
  guards, after a jump, return or raise, and at every ``RESUME`` (a generator resumes there,
  maybe in another test file's time).
- `note(filename, implied)` records a plan's ``implied`` for a file (process-wide, as slipcover's
  probes are); `noted(filename)` is what was recorded; `expand(filename, lines)` returns
  ``lines`` with every line they imply.
- A line counts as run when a line probed before it in its block ran: a superset of the lines
  whose start ran. The extra lines are those after one that raised, in its block (so inside one
  ``try`` body or ``with`` block); selection may run a test more for them, never less.
"""

from __future__ import annotations

import bisect
import dis
from types import CodeType
from typing import NamedTuple

_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)
_BACKWARD = frozenset(op for name, op in dis.opmap.items() if "BACKWARD" in name)
_ENDS = _JUMPS | {dis.opmap[name] for name in ("RETURN_VALUE", "RAISE_VARARGS", "RERAISE")}
_RESUME = dis.opmap["RESUME"]

_IMPLIED: dict[str, dict[int, set[int]]] = {}


class BlockPlan(NamedTuple):
    points: list[tuple[int, int]]
    implied: dict[int, frozenset[int]]


def leaders(code: CodeType) -> list[int]:
    """The offsets where the basic blocks of ``code`` begin, sorted (see the module docstring)."""
    found: set[int] = set()  # a start before the first leader is in the block the code opens with
    for entry in dis._parse_exception_table(code):
        # a handler begins a block; so do both ends of a protected range: what follows a ``try``
        # body (its ``else``, a ``with`` exit) must not stand on a probe an exception skips past
        found.update((entry.target, entry.start, entry.end))
    ended = False
    for offset, op, arg in dis._unpack_opargs(code.co_code):
        if ended or op == _RESUME:
            found.add(offset)
        ended = op in _ENDS
        if op in _JUMPS and arg is not None:
            found.add(offset + 2 - arg * 2 if op in _BACKWARD else offset + 2 + arg * 2)
    return sorted(found)


def plan(code: CodeType, starts) -> BlockPlan:
    """See the module docstring."""
    blocks = leaders(code)
    points: list[tuple[int, int]] = []
    implied: dict[int, set[int]] = {}
    block = -1
    for offset, line in sorted(starts):
        here = bisect.bisect_right(blocks, offset) - 1  # the block this start is in
        if here != block or not points:
            block = here
            points.append((offset, line))
            implied.setdefault(line, set())
        elif line != points[-1][1]:
            implied[points[-1][1]].add(line)
    return BlockPlan(points, {line: frozenset(others) for line, others in implied.items() if others})


def note(filename: str, implied: dict[int, frozenset[int]]) -> None:
    """See the module docstring."""
    if implied:
        mine = _IMPLIED.setdefault(filename, {})
        for line, others in implied.items():
            mine.setdefault(line, set()).update(others)


def noted(filename: str) -> dict[int, frozenset[int]]:
    """See the module docstring."""
    return {line: frozenset(others) for line, others in _IMPLIED.get(filename, {}).items()}


def expand(filename: str, lines: set[int]) -> set[int]:
    """See the module docstring."""
    mine = _IMPLIED.get(filename)
    if not mine:
        return lines
    more = [mine[line] for line in lines if line in mine]
    return lines.union(*more) if more else lines
