"""The start-up hook that measures a recorded test's Python subprocesses: slipcover's probes, or
on CPython 3.12+ the recorder's own ``sys.monitoring`` core.

coverage.py measures subprocesses through the ``.pth`` file its wheel installs; that hook imports
coverage (about 0.1 s of CPU) in every Python process that sees ``COVERAGE_PROCESS_START``, and
traces it. The slipcover core brings its own hook instead: `install` writes `PTH_NAME` into the
interpreter's ``purelib`` (site-packages), once, atomically. Its one line does nothing unless
`CHILD_CORE_ENV` is ``slipcover`` or ``sysmon``, an observed command runs (`OBSERVE_ENV`: the process may be a
test file, `ci.observe.script_test`), or a recording is asked for (`RECORD_ENV`) and none runs yet
(no `PARTS_ENV`: the pytest process of a recording, measured from its start); then it imports
`ci.observe.child` and starts it (`ci.observe.child.start`, which then sets the
recorder's modules aside for the program's own imports, `ci.observe.aside`), and any
exception on the way is swallowed, so a process never fails to start because of the hook.

The file's name sorts before coverage's (``a1_coverage.pth``; ``site`` reads ``.pth`` files in
name order), so a started child can take ``COVERAGE_PROCESS_START`` out of its environment before
coverage's hook looks at it. A child in which this hook does not start (another interpreter
without it, a ``ci`` that cannot be imported there, slipcover missing) keeps that variable, and
coverage.py measures it as before: the two hooks never both measure one process.

Contract: `install` returns the hook's path, or None when it cannot be written (a read-only
site-packages, a full disk); it never raises for that. A hook already there with the same text
is left alone.
"""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

from ci.atomic_write import atomic_write_text
from ci.observe.files import CHILD_CORE_ENV, OBSERVE_ENV, PARTS_ENV, RECORD_ENV

PTH_NAME = "a0_ci_depmap.pth"
PTH_TEXT = (
    "import os; exec('try:\\n import ci.observe.child as _c\\n _c.start()\\nexcept Exception:\\n pass') "
    f"if os.environ.get({CHILD_CORE_ENV!r}) in ('slipcover', 'sysmon') or os.environ.get({OBSERVE_ENV!r}) "
    f"or (os.environ.get({RECORD_ENV!r}) and not os.environ.get({PARTS_ENV!r})) else None\n"
)


def install(site_packages: str | os.PathLike[str] | None = None) -> Path | None:
    """See the module docstring; ``site_packages`` defaults to this interpreter's ``purelib``."""
    folder = Path(site_packages if site_packages is not None else sysconfig.get_paths()["purelib"])
    target = folder / PTH_NAME
    try:
        if target.is_file() and target.read_text(encoding="utf-8") == PTH_TEXT:
            return target
        atomic_write_text(target, PTH_TEXT)
    except OSError:
        return None
    return target
