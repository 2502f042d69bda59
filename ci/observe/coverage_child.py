"""The recording inside a Python subprocess that a recorded test started.

The recording pytest process sets ``COVERAGE_PROCESS_START`` to a config that names this module
as a coverage.py plugin; coverage's own start-up hook (the ``.pth`` file coverage.py installs)
starts coverage in every Python subprocess that sees the variable, with ``context`` set to the
test file from `ci.observe.files.TEST_ENV`, and loads this module, whose `coverage_init`
adds the "open" audit hook and the live mark (`ci.observe.live`: coverage.py saves only at
exit, so a subprocess killed before that leaves its mark and its test file's entry is not
complete). Nothing here runs when the variables are absent.
"""

from __future__ import annotations

import atexit
import os
from typing import Any

from ci.observe.files import PARTS_ENV, ROOT_ENV, TEST_ENV, OpenedLog, RepoFiles
from ci.observe.live import guard_kills, mark_live, mark_saved
from ci.observe.options import record_options


def coverage_init(reg: Any, options: dict[str, str]) -> None:
    """coverage.py's plugin entry point: registers no file tracer; marks this process live until
    coverage has saved its data at exit (coverage's own exit handler, registered after this one,
    runs first), guards its SIGKILLs, and starts the open log."""
    parts, root, test = os.environ.get(PARTS_ENV), os.environ.get(ROOT_ENV), os.environ.get(TEST_ENV, "")
    if not parts or not root or not test or not os.path.isdir(parts):
        return
    mark_live(parts, test, flushes=False)
    atexit.register(mark_saved, parts)
    guard_kills(lambda: os.environ.get(PARTS_ENV))
    try:
        if not record_options(resolve_core=False).opened:
            return
    except ValueError:
        pass  # the pytest process refused such options already; measure as by default
    log = OpenedLog(RepoFiles(root), parts)
    log.context = test
    log.start()
