"""The recording inside a Python subprocess that a recorded test started.

The recording pytest process sets ``COVERAGE_PROCESS_START`` to a config that names this module
as a coverage.py plugin; coverage's own start-up hook (the ``.pth`` file coverage.py installs)
starts coverage in every Python subprocess that sees the variable, with ``context`` set to the
test file from `ci.running.depmap_files.TEST_ENV`, and loads this module, whose `coverage_init`
adds the "open" audit hook. Nothing here runs when the variables are absent.
"""

from __future__ import annotations

import os
from typing import Any

from ci.running.depmap_files import PARTS_ENV, ROOT_ENV, TEST_ENV, OpenedLog, RepoFiles
from ci.running.depmap_options import record_options


def coverage_init(reg: Any, options: dict[str, str]) -> None:
    """coverage.py's plugin entry point: registers no file tracer, only starts the open log."""
    parts, root, test = os.environ.get(PARTS_ENV), os.environ.get(ROOT_ENV), os.environ.get(TEST_ENV, "")
    if not parts or not root or not test or not os.path.isdir(parts):
        return
    try:
        if not record_options(resolve_core=False).opened:
            return
    except ValueError:
        pass  # the pytest process refused such options already; measure as by default
    log = OpenedLog(RepoFiles(root), parts)
    log.context = test
    log.start()
