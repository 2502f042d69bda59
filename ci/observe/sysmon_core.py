"""The ``sysmon`` line core: the recorder's own ``sys.monitoring`` line recorder (CPython 3.12+,
PEP 669), with a context per test file.

Each code object of a repository file gets the ``LINE`` event when it first starts (one global
``PY_START`` callback per code object, answered with ``DISABLE``); each line calls back once,
is added to the current context's lines of its code object and answers ``DISABLE``. A context
switch re-arms only the code objects whose lines were stopped since the last re-arm (their
``LINE`` event set off and on again, which enables every line of that code object anew), so
every line fires once more in each test file's context. A code object whose lines lie far from
its first one gets ``INSTRUCTION`` instead of ``LINE`` where that costs less (`_far_lines`).

coverage.py's sysmon core, used here before, re-armed with ``sys.monitoring.restart_events()``:
that enables every disabled event of the whole process, so every function the process ran
(pytest's, the standard library's) called its ``PY_START`` callback again in each context, every
code object was instrumented again, and each switch wrote the lines so far into SQLite. On
rich's suite (3.12) that was 56,000 of 62,000 ``PY_START`` callbacks and 0.38 s of switching.

Lines are the raw ``LINE`` event numbers, as coverage.py's sysmon core records them, of files
`ci.observe.files.RepoFiles` keeps (names such as ``<string>`` are not files: never measured).
`save` writes one JSON line per context (``clines.sysmon-<pid>.jsonl``, the format of
`ci.observe.merge`'s subprocess parts) under a temporary name, renamed when whole.

Contract: `unavailable_reason` is None where this core runs (CPython 3.12+, with a coverage.py
that has the sysmon core for the subprocesses, `ci.observe.child_config`), else one line saying
why; `measure` returns a `SysmonLines` (not started) with the recorder's line-core methods:
``start``, ``stop``, ``save``, ``erase``, ``switch_context`` (``rearm=False`` keeps stopped
lines stopped: the caller knows the new context has them, `ci.observe.files.Rearm`) and, for
a forked copy, ``forget_collected``. Once started, every line of each repository code object
that TorchDynamo reads (`ci.observe.dynamo_probes.record_reads`) goes to the current context too:
``sys.monitoring`` sees no line of a frame dynamo compiled.
"""

from __future__ import annotations

import opcode
import os
import re
import sys
from pathlib import Path
from types import CodeType

from ci.observe import dynamo_probes
from ci.observe.files import RepoFiles, write_lines

CORE = "sysmon"
# coverage.py's warnings that its sysmon core gives in a subprocess: contexts under sysmon, and
# its fallback to ctrace in a child whose interpreter has no sys.monitoring
SILENCED = ("no-sysmon-context", "no-sysmon")
_VERSION = re.compile(r"^version_info\s*=\s*\(\s*(\d+)\s*,\s*(\d+)", re.MULTILINE)
_TOOL_IDS = (1, 2, 3, 4)  # COVERAGE_ID first; 0 is the debugger's, 5 the optimizer's
_FAR = 127  # CPython keeps a line as a delta from co_firstlineno in (-127, 127]; beyond, it scans
# a Python callback costs about as much as this many steps of that scan (3.12, rich's modules)
_SCANS_PER_CALLBACK = 16
_NO_LINE_EVENT = frozenset(opcode.opmap[name] for name in ("RESUME", "END_FOR", "END_SEND", "END_ASYNC_FOR")
                           if name in opcode.opmap)  # 3.11 has no END_FOR: this core never runs there
# a code object's (co_filename, co_firstlineno, co_name): its file's lines, and which code
# objects to re-arm (two that share a key, two lambdas on one line, are re-armed together)
_Key = tuple[str, int, str]


def unavailable_reason() -> str | None:
    """Why this core cannot run here, or None when it can."""
    if sys.implementation.name != "cpython" or sys.version_info < (3, 12):
        return (f"the sysmon core needs CPython 3.12 or later (sys.monitoring), this is "
                f"{sys.implementation.name} {sys.version_info[0]}.{sys.version_info[1]}")
    version = _coverage_version()
    if version is None:
        return "coverage.py is not installed (the subprocesses are measured by its sysmon core)"
    if version < (7, 10):
        return "the installed coverage.py has no [run] core setting (7.10 or later has)"
    return None


def _coverage_version() -> tuple[int, int] | None:
    """coverage.py's (major, minor), read from its ``version.py`` without importing it (importing
    coverage costs a process about 0.15 s of CPU on 3.12; the observing process and the pytest
    process need none of it); None when it is not installed."""
    from importlib.util import find_spec

    spec = find_spec("coverage")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = Path(spec.submodule_search_locations[0], "version.py").read_text(encoding="utf-8")
    except OSError:
        text = ""
    found = _VERSION.search(text)
    if found is None:  # a layout this does not know: ask the package itself
        import coverage

        return tuple(coverage.version_info[:2])  # type: ignore[return-value]
    return int(found.group(1)), int(found.group(2))


def _far_lines(code: CodeType) -> dict[int, int] | None:
    """``code``'s instruction offset -> line, for the instructions whose line starts a ``LINE``
    event, when a line lies outside CPython's one-byte delta from ``co_firstlineno``; else None.

    CPython 3.12 and 3.13 keep each instruction's line as that delta and, for a line beyond it,
    find the line by scanning the code object's line table from its start at every ``LINE``
    event, twice (the line and the previous instruction's): quadratic in a long module body.
    rich's ``_emoji_codes`` (3,600 lines of one dict) took 0.44 s to import under ``LINE``
    against 0.04 s plain, about 40 % of what recording added to rich's suite. ``INSTRUCTION``
    events carry the offset instead (0.04 s there), one per instruction where ``LINE`` has one
    per line: mapped only where the scans would cost more than the extra callbacks.
    RESUME, END_FOR, END_SEND and END_ASYNC_FOR never start a ``LINE`` event: left out.
    """
    first, code_bytes = code.co_firstlineno, code.co_code
    spans = [(start, end, line) for start, end, line in code.co_lines() if line is not None]
    scanned, previous = 0, None  # line-table entries scanned for, were every line to run once
    for index, (_, _, line) in enumerate(spans):
        if line != previous and not -_FAR < line - first <= _FAR:
            scanned += 2 * index
        previous = line
    if scanned <= _SCANS_PER_CALLBACK * len(code_bytes) // 2:
        return None
    return {offset: line for start, end, line in spans for offset in range(start, end, 2)
            if code_bytes[offset] not in _NO_LINE_EVENT}


def _numbers(mask: int) -> list[int]:
    """The line numbers of a bit mask (bit n: line n), by ``str.find`` over its binary digits:
    one Python step per line, not per digit (a mask's top bit is its code object's last line)."""
    digits, found = bin(mask)[:1:-1], []  # lowest bit first
    at = digits.find("1")
    while at >= 0:
        found.append(at)
        at = digits.find("1", at + 1)
    return found


def available() -> bool:
    """True when this core can run here (`unavailable_reason` is None)."""
    return unavailable_reason() is None


class SysmonLines:
    """The lines each context ran, by ``sys.monitoring`` (see the module docstring)."""

    rearms = True  # stops recorded lines: `switch_context` takes ``rearm``

    def __init__(self, files: RepoFiles, parts: Path):
        self.files, self.parts = files, parts
        self._paths: dict[str, str | None] = {}  # co_filename -> its real path, None: not measured
        # the measured code objects by `_Key`: not by id(), which is an audit event ("builtins.id")
        # that calls every audit hook, the recorder's own among them, once per line
        self._codes: dict[_Key, list[CodeType]] = {}
        # (context, {key: lines}) per visit of a context, the lines as a bit mask (bit n: line n):
        # an int, unlike a set, is no container, so the garbage collector stops walking a visit's
        # dict once its keys are untracked (a set per code object and visit cost rich's full
        # collections 28 %); a late line of another thread lands in its visit's dict, never lost
        self._visits: list[tuple[str, dict[_Key, int]]] = [("", {})]
        self._stopped: set[_Key] = set()  # keys of code objects with lines stopped since the last re-arm
        # code objects measured by INSTRUCTION, with their offset -> line (`_far_lines`)
        self._far: dict[_Key, list[tuple[CodeType, dict[int, int]]]] = {}
        self._tool: int | None = None
        self._sent: dict[_Key, int] = {}  # the lines `take_new` gave, by code object key
        self._taken = 0  # the visits `take_new` read, but for the last of them

    def start(self) -> None:
        """Measure from now on, in this process's every thread."""
        monitoring = sys.monitoring
        for tool in _TOOL_IDS:
            try:
                monitoring.use_tool_id(tool, "ci depmap")
            except ValueError:
                continue
            self._tool = tool
            break
        else:
            raise RuntimeError("no sys.monitoring tool id is free for the recorder")
        events, disable, set_local = monitoring.events, monitoring.DISABLE, monitoring.set_local_events
        path_of, codes, far = self._path_of, self._codes, self._far

        def started(code: CodeType, offset: int) -> object:
            name = code.co_filename
            if path_of(name) is not None:
                key = (name, code.co_firstlineno, code.co_name)
                same = codes.setdefault(key, [])
                if not any(known is code for known in same):
                    same.append(code)
                    line_at = _far_lines(code)
                    if line_at is not None:
                        far.setdefault(key, []).append((code, line_at))
                    set_local(tool, code, self._event(key, code))
            return disable

        visits = self._visits

        def line(code: CodeType, number: int) -> object:
            lines = visits[-1][1]
            key = (code.co_filename, code.co_firstlineno, code.co_name)  # `_Key`
            lines[key] = lines.get(key, 0) | 1 << number
            return disable

        def instruction(code: CodeType, offset: int) -> object:
            key = (code.co_filename, code.co_firstlineno, code.co_name)  # `_Key`
            for known, line_at in far[key]:
                if known is code:
                    number = line_at.get(offset)
                    if number is not None:
                        lines = visits[-1][1]
                        lines[key] = lines.get(key, 0) | 1 << number
                    break
            return disable

        tool = self._tool
        monitoring.register_callback(tool, events.PY_START, started)
        monitoring.register_callback(tool, events.LINE, line)
        monitoring.register_callback(tool, events.INSTRUCTION, instruction)
        monitoring.set_events(tool, events.PY_START)
        dynamo_probes.record_reads(self._read_by_dynamo, dynamo_probes.after_import)

    def _event(self, key: _Key, code: CodeType) -> int:
        """The local event that measures ``code``: INSTRUCTION where `_far_lines` maps it, else LINE."""
        events = sys.monitoring.events
        far = any(known is code for known, _ in self._far.get(key, ()))
        return events.INSTRUCTION if far else events.LINE

    def _read_by_dynamo(self, code: CodeType) -> None:
        """Every line of ``code`` (dynamo read it to compile it, so its frames run none of them as
        Python) to the current context, where its file is measured."""
        name = code.co_filename
        if self._path_of(name) is not None:
            lines, key = self._visits[-1][1], (name, code.co_firstlineno, code.co_name)
            for _, _, line in code.co_lines():
                if line:
                    lines[key] = lines.get(key, 0) | 1 << line

    def _path_of(self, name: str) -> str | None:
        """The real path of the file a code object's ``co_filename`` names when it is measured
        (coverage.py's canonical name: the cwd of the moment it is first asked, links resolved),
        else None; worked out once per name."""
        paths = self._paths
        if name in paths:
            return paths[name]
        path: str | None = None
        if not name.startswith("<"):  # <string>, <frozen ...>: not a file
            path = os.path.realpath(name)
            if self.files.relative(path) is None:
                path = None
        paths[name] = path
        return path

    def switch_context(self, context: str, rearm: bool = True) -> None:
        """Lines run from now on are ``context``'s; ``rearm`` False keeps stopped lines stopped."""
        stopped = self._stopped
        stopped.update(self._visits[-1][1])
        self._visits.append((context, {}))
        if rearm and self._tool is not None:
            set_local = sys.monitoring.set_local_events
            for key in stopped:
                for code in self._codes.get(key, ()):  # none: only dynamo read it (`_read_by_dynamo`)
                    set_local(self._tool, code, 0)  # off and on: every line of the code object fires again
                    set_local(self._tool, code, self._event(key, code))
            stopped.clear()

    def stop(self) -> None:
        """Stop measuring; the lines stay until `save`."""
        tool, self._tool = self._tool, None
        if tool is None:
            return
        monitoring = sys.monitoring
        monitoring.set_events(tool, 0)
        for same in self._codes.values():
            for code in same:
                monitoring.set_local_events(tool, code, 0)
        monitoring.register_callback(tool, monitoring.events.PY_START, None)
        monitoring.register_callback(tool, monitoring.events.LINE, None)
        monitoring.register_callback(tool, monitoring.events.INSTRUCTION, None)
        monitoring.free_tool_id(tool)

    def forget_collected(self) -> None:
        """In a forked copy: drop the lines recorded so far (its parent saves them)."""
        context = self._visits[-1][0]
        self._visits[:] = [(context, {})]
        self._taken = 0

    def take_new(self, final: bool = False) -> dict[str, set[int]]:
        """The lines recorded since the last call, whatever their context (a subprocess has one:
        `ci.observe.sysmon_child`): absolute path -> line numbers. Lines from now on go to a new
        visit; the visits before it are read, the last one read before again (a thread may have
        taken it before this call and write its line into it after), every one when ``final``."""
        visits, sent, fresh = self._visits, self._sent, {}
        if visits[-1][1]:  # an idle process's flushes add none: the list grows only with lines
            visits.append((visits[-1][0], {}))
        for _, lines in visits[0 if final else max(0, self._taken - 1):]:
            for key, mask in list(lines.items()):
                new = mask & ~sent.get(key, 0)
                if new:
                    sent[key] = sent.get(key, 0) | new
                    fresh.setdefault(self._paths[key[0]], set()).update(_numbers(new))
        self._taken = len(visits) - 1
        return fresh  # type: ignore[return-value]

    def erase(self) -> None:
        """Forget every line recorded so far."""
        self.forget_collected()

    def contexts(self) -> dict[str, dict[str, set[int]]]:
        """The lines recorded so far: context -> absolute path -> line numbers."""
        found: dict[str, dict[str, set[int]]] = {}
        paths = self._paths
        for context, lines in list(self._visits):
            mine = found.setdefault(context, {})
            for key, mask in list(lines.items()):
                mine.setdefault(paths[key[0]], set()).update(_numbers(mask))  # type: ignore[arg-type]
        return found

    def save(self) -> None:
        """Write the lines (see the module docstring); nothing when none ran."""
        write_lines(self.parts / f"clines.sysmon-{os.getpid()}.jsonl", self.contexts())


def measure(files: RepoFiles, parts: Path) -> SysmonLines:
    """A `SysmonLines` saving into the parts directory ``parts``, not started."""
    return SysmonLines(files, parts)
