"""Column positions kept through slipcover's bytecode edit (CPython 3.11).

slipcover 1.1's ``Editor`` writes the 3.11 location table of an instrumented code object from
line numbers alone, so every instruction of a probed code object reports ``(line, line, None,
None)`` from ``co_positions()``: a fine-grained traceback loses its ``^^^`` marks, and a program
that reads columns (rich's traceback renderer) behaves differently while recorded. The edit only
inserts code units: each probe's call sequence, and ``EXTENDED_ARG`` prefixes where a branch's
new argument needs them; every original instruction and its inline caches are still there, in
order.

Contract: `keep_positions(original, edited)` returns ``edited`` with a location table that gives
each original code unit its position in ``original`` (line and columns; no location where the
compiler gave none, as for an exception handler's ``PUSH_EXC_INFO``, which slipcover's table
gives the line before it), an added ``EXTENDED_ARG`` the position of the instruction it
prefixes, and a probe's units what slipcover gave them (their line). Where the two do not line
up unit for unit (other opcodes, another shape of insert), or the written table does not read
back as meant, ``edited`` is returned unchanged (slipcover's lines, no columns). Cost: about
0.15 ms of CPU per code object, a third of slipcover's own edit (rich's 1,353 code objects 0.2 s,
this repository's ``ci/`` 2,835 code objects 0.35 s), once per recording with the probe cache
(`ci.observe.probe_cache` stores the result). Without an ``EXTENDED_ARG`` in either code the
alignment is by slices between the probes; with one, unit by unit.
"""

from __future__ import annotations

import dis
import re
from types import CodeType

_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_NOP = dis.opmap["NOP"]
_PUSH_NULL = dis.opmap.get("PUSH_NULL", -1)
_POP_TOP = dis.opmap["POP_TOP"]
_OPENING = re.compile(b"(?=%c.%c)" % (_NOP, max(_PUSH_NULL, 0)), re.DOTALL)
Position = tuple  # (line, end line, column, end column), any of them None


def keep_positions(original: CodeType, edited: CodeType) -> CodeType:
    """See the module docstring."""
    if original.co_code == edited.co_code:
        return edited
    old, new = original.co_code[::2], edited.co_code[::2]  # each code unit's opcode (0: an inline cache)
    probes = _probe_ranges(edited.co_code)
    before = list(original.co_positions())
    if _EXTENDED_ARG in old or _EXTENDED_ARG in new:
        wanted = _aligned_by_unit(old, new, probes, before, list(edited.co_positions()))
    else:  # no prefix anywhere: the original is the edited code with the probes cut out
        wanted = _aligned_by_range(old, new, probes, before, list(edited.co_positions()))
    if wanted is None:
        return edited
    try:
        fixed = edited.replace(co_linetable=_encode(edited.co_firstlineno, wanted))
    except (ValueError, TypeError):
        return edited
    return fixed if list(fixed.co_positions()) == wanted else edited


def _aligned_by_range(old: bytes, new: bytes, probes: list[tuple[int, int]], before: list[Position],
                      now: list[Position]) -> list[Position] | None:
    wanted: list[Position] = []
    at = done = 0  # where the next unit is in the edited code, in the original
    for start, end in probes + [(len(new), len(new))]:
        if new[at:start] != old[done:done + start - at]:
            return None
        wanted += before[done:done + start - at]
        wanted += now[start:end]
        done += start - at
        at = end
    return wanted if done == len(old) else None


def _aligned_by_unit(old: bytes, new: bytes, probes: list[tuple[int, int]], before: list[Position],
                     now: list[Position]) -> list[Position] | None:
    probe = {unit for start, end in probes for unit in range(start, end)}
    kept = [i for i, op in enumerate(old) if op != _EXTENDED_ARG]
    placed = [i for i, op in enumerate(new) if op != _EXTENDED_ARG and i not in probe]
    if len(kept) != len(placed) or bytes(old[i] for i in kept) != bytes(new[i] for i in placed):
        return None
    wanted = list(now)
    for a, b in zip(kept, placed):
        wanted[b] = before[a]
    for i in range(len(new) - 2, -1, -1):  # an added prefix: where its instruction is
        if new[i] == _EXTENDED_ARG and i not in probe:
            wanted[i] = wanted[i + 1]
    return wanted


def _probe_ranges(code: bytes) -> list[tuple[int, int]]:
    """The code units of slipcover's inserted calls, in order: a ``NOP`` whose argument is the
    length of the call that follows (``PUSH_NULL`` ... ``POP_TOP``), as `ci.observe.retire`
    finds them."""
    found: list[tuple[int, int]] = []
    for match in _OPENING.finditer(code):
        off = match.start()
        if off % 2 or (found and off // 2 < found[-1][1]):
            continue
        end = off + 2 + code[off + 1] * 2  # NOP's argument: the jump over the call, in code units
        if end <= len(code) and code[end - 2] == _POP_TOP:
            found.append((off // 2, end // 2))
    return found


def _varint(out: bytearray, value: int) -> None:
    while value >= 64:
        out.append(0x40 | (value & 63))
        value >>= 6
    out.append(value)


def _svarint(out: bytearray, value: int) -> None:
    _varint(out, ((-value) << 1) | 1 if value < 0 else value << 1)


def _encode(firstlineno: int, positions: list[Position]) -> bytes:
    """A 3.11 location table (CPython's Objects/locations.md) with the long, the no-column and
    the no-location forms only, one entry per run of at most 8 equal positions."""
    out = bytearray()
    line, i, total = firstlineno, 0, len(positions)
    while i < total:
        here = positions[i]
        run = 1
        while run < 8 and i + run < total and positions[i + run] == here:
            run += 1
        start, end, col, end_col = here
        if start is None:
            out.append(0xF8 | (run - 1))  # 0x80 | 15 << 3: no location
        elif col is None or end_col is None or end is None:
            if end is not None and end != start:
                raise ValueError("a multi-line position without columns")
            out.append(0xE8 | (run - 1))  # 0x80 | 13 << 3: a line, no columns
            _svarint(out, start - line)
            line = start
        else:
            out.append(0xF0 | (run - 1))  # 0x80 | 14 << 3: the long form
            _svarint(out, start - line)
            for value in (end - start, col + 1, end_col + 1):
                if value < 64:
                    out.append(value)
                else:
                    _varint(out, value)
            line = start
        i += run
    return bytes(out)
