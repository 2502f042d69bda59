"""A forked copy of a recording pytest process is one of the running test's child processes.

A test's ``os.fork``, or a fork-started ``multiprocessing`` worker, copies the process that
records, recorder and all. The copy is not the recording: before this module, a copy whose test
code left by ``sys.exit`` (pytest catches the ``SystemExit``, and the copy runs on to the end of
the session) counted its items again, merged the parts, wrote the map and removed the parts
directory, so the real process's own save failed with coverage.py's ``DataError`` and the map
was the copy's.

`watch_forks(recorder)` makes every fork of the recorder's process call ``recorder.forked()``
in the child, which hands the process to a `ForkedCopy`: the lines it runs are saved under its
own pid in the parts directory, for the test file that was running at the fork, however it ends
(`ci.observe.exit_save`: at exit, in ``os._exit``, at SIGTERM); until then it is marked live
(`ci.observe.live`), so a copy killed first leaves that test file's entry not complete.
The lines its parent had already collected are dropped in the copy (the parent saves them).
A child that ``subprocess`` forks only to ``exec`` another program (``preexec_fn`` runs Python
after the fork, and with it the fork handlers) is not a copy: it is measured as a subprocess,
or not at all, like any other.
"""

from __future__ import annotations

import os
import sys
import weakref
from typing import Any, Protocol

from ci.observe.exit_save import save_on_exit
from ci.observe.live import mark_live, mark_saved


class _Forkable(Protocol):
    def forked(self) -> None: ...


def _about_to_exec() -> bool:
    """Whether this fork is ``subprocess``'s, which runs a ``preexec_fn`` and then execs."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "_execute_child" and frame.f_code.co_filename.endswith("subprocess.py"):
            return True
        frame = frame.f_back
    return False


def watch_forks(recorder: _Forkable) -> None:
    """Call ``recorder.forked()`` in every forked copy of this process while the recorder lives."""
    ref = weakref.ref(recorder)

    def after_in_child() -> None:
        live = ref()
        if live is not None and not _about_to_exec():
            live.forked()

    os.register_at_fork(after_in_child=after_in_child)


class ForkedCopy:
    """The recording of one forked copy (see the module docstring). ``cov``: the process's line
    recorder (``stop``, ``save``, and, for slipcover's probes, ``after_fork`` and
    ``forget_collected``); ``opened``: its open log."""

    def __init__(self, cov: Any, opened: Any, parts: str):
        self.cov, self.opened, self.parts, self.test = cov, opened, parts, ""
        self.saved = True
        save_on_exit(self.save, on_sigterm=False)

    def begin(self, test: str) -> None:
        """Start recording this process (in each new copy, a copy's own fork included); ``test``:
        the test file running at the fork ("" outside any: then nothing is marked live)."""
        self.test = test
        after_fork = getattr(self.cov, "after_fork", None)
        if after_fork is not None:
            after_fork()
        forget = getattr(self.cov, "forget_collected", None)
        if forget is not None:
            forget()
        self.saved = False
        if self.test:
            mark_live(self.parts, self.test, flushes=False)

    def save(self) -> None:
        """Save this copy's lines once; never raises (the recording may be over: then the lines
        are lost and the live mark, if its folder is still there, stays)."""
        if self.saved:
            return
        self.saved = True
        try:
            self.opened.stop()
            self.cov.stop()
            self.cov.save()
        except Exception:  # noqa: BLE001 - coverage's DataError, OSError: the parts are gone
            return
        if self.test:
            mark_saved(self.parts)


__all__ = ["ForkedCopy", "watch_forks"]
