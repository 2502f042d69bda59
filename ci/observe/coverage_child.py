"""The recording inside a Python subprocess that a recorded test started.

The recording pytest process sets ``COVERAGE_PROCESS_START`` to a config that names this module
as a coverage.py plugin; coverage's own start-up hook (the ``.pth`` file coverage.py installs)
starts coverage in every Python subprocess that sees the variable, with ``context`` set to the
test file from `ci.observe.files.TEST_ENV`, and loads this module, whose `coverage_init`
adds the "open" audit hook and the live mark (`ci.observe.live`: coverage.py saves only at
exit, so a subprocess killed before that leaves its mark and its test file's entry is not
complete; at SIGTERM coverage's own handler saves, puts back the handler it found, and signals
again: `coverage_init` installs that one, which takes the mark away and dies of the signal, so a
server stopped by SIGTERM leaves a complete entry). Nothing here runs when the variables are absent.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
from typing import Any

from ci.observe.files import PARTS_ENV, ROOT_ENV, TEST_ENV, OpenedLog, RepoFiles
from ci.observe.live import guard_kills, mark_live, mark_saved
from ci.observe.options import record_options


def _saved_then_die(parts: str) -> None:
    """SIGTERM's second round: coverage's handler saved the data and signalled again."""
    mark_saved(parts)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def coverage_init(reg: Any, options: dict[str, str]) -> None:
    """coverage.py's plugin entry point: registers no file tracer; marks this process live until
    coverage has saved its data at exit (coverage's own exit handler, registered after this one,
    runs first), guards its SIGKILLs, and starts the open log."""
    parts, root, test = os.environ.get(PARTS_ENV), os.environ.get(ROOT_ENV), os.environ.get(TEST_ENV, "")
    if not parts or not root or not test or not os.path.isdir(parts):
        return
    mark_live(parts, test, flushes=False)
    atexit.register(mark_saved, parts)
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: _saved_then_die(parts))  # before coverage's own
    guard_kills(lambda: os.environ.get(PARTS_ENV))
    try:
        if not record_options(resolve_core=False).opened:
            return
    except ValueError:
        pass  # the pytest process refused such options already; measure as by default
    log = OpenedLog(RepoFiles(root), parts)
    log.context = test
    log.start()
