"""Probes that stop firing once their line is recorded in the current context, until it changes.

The recorder's slipcover probes never remove themselves (``d_miss_threshold`` -2,
`ci.observe.slipcover_core`): every test file must see every line it runs, so each execution
of a probed block is a call into slipcover's C probe, however often the block already ran in that
test file. Most of recording's cost in the pytest process is those calls.

slipcover opens every probe it inserts with a ``NOP`` whose argument is the length of the probe's
call sequence, and removes a probe for good by writing ``JUMP_FORWARD`` over that ``NOP``
(``probe.cxx``, ``set_immediate``); the jump skips the call. On Python 3.11 the instructions the
interpreter runs are the code object's own ``co_code_adaptive`` array (``co_code`` is a copy), so
`ProbeSites` writes that same byte there: `retire` once the probe's line is in the current
context's lines, `rearm` writes the ``NOP`` back, for the next context, over every probe it
retired. A retired probe costs one jump per execution.

Contract and safety:

- `ProbeSites.note_probe` is told each probe slipcover creates (its file and line);
  `ProbeSites.add` finds the probes of an instrumented code object and of the code objects nested
  in it: a ``NOP`` whose jump ends right after the call's ``POP_TOP``, then ``PUSH_NULL``,
  ``LOAD_CONST`` of the signal and ``LOAD_CONST`` of a probe it was told of. Anything else is not
  a site and keeps firing. Sites hold their code objects, so a written address is always live.
- a byte is written only where the live array holds what it must at that moment (``NOP``, its
  argument and ``PUSH_NULL`` before `retire`; ``JUMP_FORWARD`` before `rearm`); a code object
  where it does not is left alone from then on (its probes keep firing: slower, never wrong).
- `enabled` is False, and `retire` a no-op, unless this interpreter is CPython 3.11 (`add` finds
  no site elsewhere) and a fresh code object's ``co_code`` is found at ``CodeType.__basicsize__``
  (the offset of ``co_code_adaptive``), checked once per process, at the first retirement.
- the caller retires only lines already moved into the current context, and rearms before the
  context changes: a retired probe hides only a line its context has.

What this does not see: a copy of a code object made while some of its probes are retired
(``code.replace``) keeps them retired for good.
"""

from __future__ import annotations

import dis
import re
import sys
import threading
from collections import defaultdict
from types import CodeType

from ci.observe.probe_cache import is_marked

_NOP = dis.opmap["NOP"]
_PUSH_NULL = dis.opmap.get("PUSH_NULL", -1)
_LOAD_CONST = dis.opmap["LOAD_CONST"]
_EXTENDED_ARG = dis.opmap["EXTENDED_ARG"]
_POP_TOP = dis.opmap["POP_TOP"]
_JUMP_FORWARD = dis.opmap["JUMP_FORWARD"]
_OPENING = re.compile(b"(?=%c.%c\\x00)" % (_NOP, max(_PUSH_NULL, 0)), re.DOTALL)



class Live:
    """One instrumented code object, shared by its sites, and from its first write a ctypes view
    of its running instructions. Reading and writing through the view raises no audit event, where
    each ``id()`` and each ``from_address`` does, and every audit hook of the process (the
    recorder's own open log among them) is a Python call per event: 320,000 on rich's suite when
    each write took its address anew."""

    __slots__ = ("code", "raw", "view", "broken")

    def __init__(self, code: CodeType):
        self.code, self.raw, self.view, self.broken = code, code.co_code, None, False


Site = tuple[Live, int]  # a code object and the offset of a probe's opening NOP


_SUPPORTED = sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11)


def _layout_holds() -> bool:
    """True when a code object's running instructions sit at ``CodeType.__basicsize__`` and
    start as its ``co_code`` (CPython 3.11's ``co_code_adaptive``)."""
    if not _SUPPORTED:
        return False
    import ctypes  # deferred to the first retirement: about 3 ms of every recorded subprocess's start

    code = compile("x = 1\ny = x\n", "<retire>", "exec")
    raw = code.co_code
    return ctypes.string_at(id(code) + CodeType.__basicsize__, len(raw)) == raw


def _arg_at(raw: bytes, at: int) -> tuple[int, int, int]:
    """The opcode, full argument (``EXTENDED_ARG`` prefixes folded) and end of the instruction at ``at``."""
    arg = 0
    while at + 1 < len(raw) and raw[at] == _EXTENDED_ARG:
        arg = (arg | raw[at + 1]) << 8
        at += 2
    if at + 1 >= len(raw):
        return -1, 0, at
    return raw[at], arg | raw[at + 1], at + 2


class ProbeSites:
    """See the module docstring. ``signal``: slipcover's probe signal function of this process."""

    def __init__(self, signal: object):
        self.signal = signal
        self.lines: dict[object, tuple[str, int]] = {}
        self.sites: dict[str, dict[int, list[Site]]] = defaultdict(lambda: defaultdict(list))
        self.retired: list[Site] = []
        self.broken: set[int] = set()  # ids of code objects whose bytes were not as expected
        self.lock = threading.Lock()
        self._enabled: bool | None = None

    @property
    def enabled(self) -> bool:
        if self._enabled is None:
            self._enabled = _layout_holds()
        return self._enabled

    def note_probe(self, probe: object, filename: str, line: int) -> None:
        """``probe`` (slipcover's probe object) records ``line`` of ``filename``."""
        self.lines[probe] = (filename, line)

    def add(self, code: CodeType) -> None:
        """Find the probes of ``code`` and of the instrumented code objects in its constants."""
        if not _SUPPORTED:
            return
        consts, raw = code.co_consts, code.co_code
        for const in consts:
            if type(const) is CodeType and is_marked(const.co_consts):
                self.add(const)
        live = Live(code)
        for match in _OPENING.finditer(raw):
            start = match.start()
            last = start + 2 * raw[start + 1]  # the jump's target is 2 bytes further on
            if start % 2 or last >= len(raw) or raw[last] != _POP_TOP:
                continue
            op, signal_at, end = _arg_at(raw, start + 4)
            if op != _LOAD_CONST or signal_at >= len(consts) or consts[signal_at] is not self.signal:
                continue
            op, probe_at, _ = _arg_at(raw, end)
            if op != _LOAD_CONST or probe_at >= len(consts):
                continue
            where = self.lines.get(consts[probe_at])
            if where is not None:
                self.sites[where[0]][where[1]].append((live, start))

    def _write(self, site: Site, expect: int, value: int) -> bool:
        """Write ``value`` over the site's opening byte where it holds ``expect``; True when written.
        A site holding ``value`` already is left as it is (another probe of its line fired)."""
        live, offset = site
        if live.broken:
            return False
        view = live.view
        if view is None:
            import ctypes  # deferred to the first retirement: about 3 ms of every recorded subprocess's start

            view = live.view = (ctypes.c_ubyte * len(live.raw)).from_address(id(live.code) + CodeType.__basicsize__)
        if view[offset] == value:
            return False
        if view[offset] != expect or view[offset + 1] != live.raw[offset + 1] or view[offset + 2] != _PUSH_NULL:
            live.broken = True
            self.broken.add(id(live.code))
            return False
        view[offset] = value
        return True

    def retire(self, filename: str, lines: set[int]) -> None:
        """Stop the probes of these lines of ``filename`` until `rearm` (the lines must be in the
        current context already)."""
        known = self.sites.get(filename)
        if not known or not self.enabled:
            return
        with self.lock:
            for line in lines:
                for site in known.get(line, ()):
                    if self._write(site, _NOP, _JUMP_FORWARD):
                        self.retired.append(site)

    def rearm(self) -> None:
        """Make every probe `retire` stopped fire again."""
        with self.lock:
            retired, self.retired = self.retired, []
            for site in retired:
                self._write(site, _JUMP_FORWARD, _NOP)


__all__ = ["ProbeSites"]
