"""Break opportunities in long ids, so that a runs table fits GitHub's comment width.

A test id (``test/registered/npu/.../test_npu_eplb_min_rebalancing.py::TestEplbMinRebalancing``)
is one word to a browser: a table cell is never narrower than it, and a table wider than the
828 px of a GitHub comment scrolls sideways. `breakable_code` quotes a text the way
`commands.quote` does and puts a ``<wbr>`` (an optional line break, which GitHub's HTML sanitizer
keeps and which is not copied with the text) after each ``/``, ``_`` and ``.``, before each
``::`` and ``[``, and wherever `MAX_RUN` characters have gone by without a break opportunity
(a long class name, a hash, a run of one character), never inside an escape or an entity.
"""

from __future__ import annotations

import re

from tools.rerun.commands import quote

MAX_RUN = 20  # characters without a break opportunity: about 140 px of 12 px monospace
WBR = "<wbr>"
_OPEN, _CLOSE = "<code>", "</code>"
# One shown character of `quote`'s output: the split `@`, an entity, a backslash escape, or itself.
# (`quote` writes the backslash of an escape such as `\u200b` as `&#92;`.)
_UNIT = re.compile(r"<!-- -->&#64;|&#92;(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|&#92;)|&#\d+;|.", re.S)
_AFTER = frozenset({"/", "&#95;", "&#46;", " "})
_BEFORE = frozenset({"&#58;", "&#91;"})


def _shown_length(unit: str) -> int:
    """How many characters ``unit`` shows: an escape such as ``\\u200b`` shows six, an entity one."""
    return 1 + len(unit) - len("&#92;") if unit.startswith("&#92;") and len(unit) > len("&#92;") else 1


def breakable(escaped: str) -> str:
    """``escaped`` (text as `commands.quote` escapes it) with a ``<wbr>`` at each break opportunity."""
    units = _UNIT.findall(escaped)
    out: list[str] = []
    run = 0
    for i, unit in enumerate(units):
        before = unit in _BEFORE and (unit == "&#91;" or (i + 1 < len(units) and units[i + 1] == "&#58;")) \
            and not (i > 0 and units[i - 1] == "&#58;")
        if (before or run >= MAX_RUN) and unit != " " and out and out[-1] not in (WBR, " "):
            out.append(WBR)
            run = 0
        out.append(unit)
        run += _shown_length(unit)
        if unit in _AFTER and i + 1 < len(units):
            if unit != " ":
                out.append(WBR)
            run = 0
    return "".join(out)


def breakable_code(text: str, limit: int = 80) -> str:
    """`commands.quote` (``text`` as inline code that renders as exactly that text) with break
    opportunities inside the code (see the module docstring)."""
    quoted = quote(text, limit=limit)
    end = quoted.rindex(_CLOSE)
    return _OPEN + breakable(quoted[len(_OPEN):end]) + quoted[end:]


__all__ = ["MAX_RUN", "breakable", "breakable_code"]
