"""A recorded Python subprocess on CPython 3.12+, measured by the recorder's own ``sys.monitoring``
core (`ci.observe.sysmon_core`) instead of coverage.py's.

coverage.py's start-up hook made every such child import coverage.py: ``python -c pass`` took 699
million instructions observed against 95 on 3.11, where the slipcover hook measures children. The
start-up hook (`ci.observe.child`) now measures both kinds itself, with one flusher, live mark,
kill guard and exit save; this class gives `sysmon_core.SysmonLines` the interface the hook's log
uses (slipcover's: ``start``, ``switch_context``, ``take_fresh``, ``stop``, ``after_fork``).
The lines are what coverage.py's sysmon core records (the raw ``LINE`` events), and a
script run as ``python path.py`` is measured by line, as coverage.py measured it, never whole.

Contract: `runs_here` is True on CPython 3.12+; `ChildLines` is not started when made.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ci.observe.files import RepoFiles
from ci.observe.sysmon_core import SysmonLines


def runs_here() -> bool:
    """Whether this interpreter has ``sys.monitoring`` (CPython 3.12+); else coverage.py measures."""
    return sys.implementation.name == "cpython" and sys.version_info >= (3, 12)


class ChildLines:
    """One subprocess's lines, taken in batches by its flusher (see the module docstring)."""

    def __init__(self, files: RepoFiles, parts: str):
        self.files = files
        self._core = SysmonLines(files, Path(parts))

    def switch_context(self, context: str) -> None:
        self._core.switch_context(context, rearm=False)  # one context per process: nothing to re-arm

    def start(self, live_functions: bool = False) -> None:
        self._core.start()  # code that runs from now on, whenever it was loaded: live_functions is moot

    def take_fresh(self, retire: bool = True) -> dict[str, set[int]]:
        """The lines run since the last call (a line calls back once: ``retire`` is moot); False
        is the process's last call: measuring stops first, so no line of its end is left out."""
        if not retire:
            self._core.stop()
        return self._core.take_new(final=not retire)

    def stop(self) -> None:
        self._core.stop()

    def after_fork(self) -> None:
        self._core.forget_collected()  # the parent writes what it ran before the fork
