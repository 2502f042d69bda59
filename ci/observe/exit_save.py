"""Saving a recorded process's last lines however it leaves.

`save_on_exit(save)` calls ``save`` once before this process ends:
- at exit (``atexit``: a normal end, ``sys.exit``, an uncaught exception);
- in ``os._exit``, which skips atexit: a fork-started ``multiprocessing`` worker and argcomplete's
  completion leave by it, and a test's own ``os.fork`` child often does;
- at SIGTERM, when the program has no handler of its own there (then it still dies of SIGTERM),
  and only in this process: a forked child gets SIGTERM's default action back at once.
A SIGKILL saves nothing: the recorder's live marks (`ci.observe.live`) make that entry
partial instead.

Why no SIGTERM handler in a fork: ``multiprocessing.Pool`` ends its fork workers by SIGTERM, and
a worker with any Python-level SIGTERM handler, even one that only re-raises the signal, can
miss it while it waits on the pool's queue lock, so ``Pool.__exit__`` waits for it forever.
Reproduced without this package (CPython 3.11, three loops of 300 ``with Pool(2)`` blocks run at
once: a handler set in the parent or at fork hung within 60 s; none, or the default restored at
fork, finished). A forked child killed by SIGTERM is then unsaved, and its entry partial.

The ways race, and the SIGTERM handler runs between two bytecodes of whatever the main thread
was doing. So the handler takes no lock that the code it interrupts may hold: one save is
claimed by a non-blocking acquire, and waiting is a poll of plain attributes. A SIGTERM that
interrupts a save lets that save finish and then ends the process by SIGTERM; one that comes
while another thread saves waits for it (at most `WAIT_SECONDS`). Seen before: a handler
waiting on an ``Event`` that the interrupted ``Event.set`` held never woke. The state is per
process: a fork saves afresh (by atexit and ``os._exit``). ``save`` must not raise.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
from typing import Callable

WAIT_SECONDS = 30.0  # how long a second caller waits for the first one's save
_POLL = 0.01


class _Once:
    def __init__(self, save: Callable[[], None]):
        self.save = save
        self._reset()

    def _reset(self) -> None:
        self.pid = os.getpid()
        self.claim = threading.Lock()  # taken once, never released: whoever takes it saves
        self.saver: int | None = None
        self.saved = False
        self.sigterm = False

    def _own_state(self) -> None:
        if self.pid != os.getpid():
            self._reset()  # a fork of a process that had saved, or was saving

    def _wait_for_the_save(self) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while not self.saved and time.monotonic() < deadline:
            time.sleep(_POLL)

    def _save_claimed(self) -> None:
        self.saver = threading.get_ident()
        try:
            self.save()
        finally:
            self.saved = True
        if self.sigterm:
            _die_of_sigterm()

    def run(self) -> None:
        """Save, or wait for the save under way in another thread."""
        self._own_state()
        if self.claim.acquire(blocking=False):
            self._save_claimed()
        elif self.saver not in (None, threading.get_ident()):
            self._wait_for_the_save()

    def on_sigterm(self, signum, frame) -> None:
        self._own_state()
        if self.claim.acquire(blocking=False):
            self._save_claimed()
            _die_of_sigterm()
        if self.saved:
            _die_of_sigterm()
        self.sigterm = True  # the save under way ends the process when it is done
        if self.saver in (None, threading.get_ident()):
            return  # this thread's own save, interrupted (or about to name itself): it goes on
        self._wait_for_the_save()
        _die_of_sigterm()


def _die_of_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def save_on_exit(save: Callable[[], None], on_sigterm: bool = True) -> None:
    """See the module docstring; ``on_sigterm`` False: a SIGTERM kills the process unsaved, as
    it would unrecorded (a forked copy of a recording process: `ci.observe.forked`)."""
    once = _Once(save)
    atexit.register(once.run)
    leave = os._exit

    def exit_after_save(status: int) -> None:
        try:
            once.run()
        finally:
            leave(status)

    os._exit = exit_after_save
    if not on_sigterm:
        return
    try:
        if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, once.on_sigterm)
    except ValueError:
        return  # not the main thread (a fork from another thread): atexit and os._exit still save

    def default_in_child() -> None:
        try:
            if signal.getsignal(signal.SIGTERM) == once.on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:
            pass  # forked from another thread: signal handlers are set from the main one only

    os.register_at_fork(after_in_child=default_in_child)


__all__ = ["WAIT_SECONDS", "save_on_exit"]
