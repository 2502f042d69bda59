"""The recording inside a Python subprocess of a recorded test, by slipcover's probes.

`ci.running.depmap_startup`'s hook calls `start` while ``site`` starts the interpreter, before
the program's own code. When the environment names a recording (`PARTS_ENV`, `ROOT_ENV`, and
`TEST_ENV`: the test file that started this process) and slipcover can run here, `start`:

- puts probes into the repository files this process imports or ``exec``s
  (`ci.running.depmap_slipcover.SlipcoverLines`, context: the test file), and wraps pytest's
  assertion rewriting only if this process imports it;
- adds the "open" audit hook (`ci.running.depmap_files.OpenedLog`) unless ``CI_DEPMAP_MEASURE``
  leaves it out;
- takes ``COVERAGE_PROCESS_START`` out of this process's environment, so coverage.py's hook,
  which runs after this one, does not measure the same process (and this process's own children
  are measured by this hook again);
- saves the lines as ``clines.<pid>.<n>.json`` in the parts directory at exit, and on SIGTERM
  when the program has not put a handler of its own there (then exits by SIGTERM as before).
  A process ended by SIGKILL or ``os._exit`` saves nothing, as under coverage.py.

When it cannot run (slipcover missing, a variable absent) it does nothing and coverage.py's hook
measures the process as before. Every error is the hook's to swallow: a program never fails to
start because of this module.
"""

from __future__ import annotations

import atexit
import itertools
import os
import signal
from pathlib import Path

from ci.running.depmap_files import PARTS_ENV, ROOT_ENV, TEST_ENV, OpenedLog, RepoFiles
from ci.running.depmap_options import record_options

_saves = itertools.count()
_started: list[bool] = []


def start() -> None:
    """See the module docstring. Only the first call does anything: ``site`` reads one
    site-packages twice where a venv's ``lib64`` links to its ``lib``."""
    if _started:
        return
    _started.append(True)
    parts, root, test = os.environ.get(PARTS_ENV), os.environ.get(ROOT_ENV), os.environ.get(TEST_ENV, "")
    if not parts or not root or not test or not os.path.isdir(parts):
        return
    from ci.running import depmap_slipcover  # deferred: the checks above cost nothing

    if not depmap_slipcover.available():
        return
    options = record_options(resolve_core=False)
    files = RepoFiles(root)
    lines = depmap_slipcover.SlipcoverLines(files, Path(parts) / "cov")
    lines.switch_context(test)
    lines.start()
    if options.opened:
        log = OpenedLog(files, parts)
        log.context = test
        log.start()
    saved = []

    def save() -> None:
        if saved:
            return
        saved.append(True)
        lines.stop()
        lines.save_json(Path(parts) / f"clines.{os.getpid()}.{next(_saves)}.json")

    atexit.register(save)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        def on_sigterm(signum, frame) -> None:
            save()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)
    os.environ.pop("COVERAGE_PROCESS_START", None)
