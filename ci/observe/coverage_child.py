"""The recording inside a Python subprocess that a recorded test started.

The recording pytest process sets ``COVERAGE_PROCESS_START`` to a config that names this module
as a coverage.py plugin; coverage's own start-up hook (the ``.pth`` file coverage.py installs)
starts coverage in every Python subprocess that sees the variable, with ``context`` set to the
test file from `ci.observe.files.TEST_ENV`, and loads this module, whose `coverage_init`
adds the "open" audit hook, the record of every line TorchDynamo reads
(`ci.observe.dynamo_probes.record_reads`: a frame it compiled runs none of them) and the live
mark (`ci.observe.live`: coverage.py saves only at exit, so a subprocess killed before that
leaves its mark and its test file's entry is not complete; at SIGTERM coverage's own handler saves, puts back the handler it found, and signals
again: `coverage_init` installs that one, which takes the mark away and dies of the signal, so a
server stopped by SIGTERM leaves a complete entry).

A SIGKILL cannot be caught, and SGLang's tests stop their servers with one (``kill_process_tree``).
So the mark says the process flushes on request, and a daemon thread (`_answer_flush_requests`)
polls for the request a recorded process makes before it SIGKILLs or SIGSTOPs this one
(`ci.observe.live.guard_kills`): it saves what coverage.py has measured so far
(``Coverage.save``, whose snapshot of the measured sets is safe against the threads still
running) and acknowledges, which stops this process until the signal arrives. A save that fails
is not acknowledged: the asker gives up after its wait and the entry stays not complete.
Nothing here runs when the variables are absent.
"""

from __future__ import annotations

import atexit
import os
import signal
import threading
import time
from typing import Any

from ci.observe.dynamo_probes import after_import, line_recorder, record_reads
from ci.observe.files import PARTS_ENV, ROOT_ENV, TEST_ENV, OpenedLog, RepoFiles
from ci.observe.live import acknowledge, flush_requested, guard_kills, mark_live, mark_saved
from ci.observe.options import record_options


def _saved_then_die(parts: str) -> None:
    """SIGTERM's second round: coverage's handler saved the data and signalled again."""
    mark_saved(parts)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


POLL_SECONDS = 0.05  # how often the flusher looks for a request; the asker waits up to `live.FLUSH_WAIT`


def _answer_flush_requests(parts: str) -> None:
    """Forever: on a flush request, save coverage.py's data so far, then acknowledge (see the
    module docstring). Runs in a daemon thread; never raises."""
    import coverage  # loaded already: coverage.py's hook is what called `coverage_init`

    while True:
        time.sleep(POLL_SECONDS)
        request = flush_requested(parts)
        cov = coverage.Coverage.current() if request is not None else None
        if request is None or cov is None:
            continue  # no request, or coverage not started yet: nothing to answer with
        try:
            cov.save()
        except Exception:  # noqa: BLE001 - a full disk, the parts gone: not saved, so not acknowledged
            continue
        acknowledge(request)


def coverage_init(reg: Any, options: dict[str, str]) -> None:
    """coverage.py's plugin entry point: registers no file tracer; marks this process live until
    coverage has saved its data at exit (coverage's own exit handler, registered after this one,
    runs first), guards its SIGKILLs, and starts the open log."""
    parts, root, test = os.environ.get(PARTS_ENV), os.environ.get(ROOT_ENV), os.environ.get(TEST_ENV, "")
    if not parts or not root or not test or not os.path.isdir(parts):
        return
    mark_live(parts, test, flushes=True)
    atexit.register(mark_saved, parts)
    threading.Thread(target=_answer_flush_requests, args=(parts,), name="ci-depmap-flush", daemon=True).start()
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: _saved_then_die(parts))  # before coverage's own
    guard_kills(lambda: os.environ.get(PARTS_ENV))
    files = RepoFiles(root)  # a frame dynamo compiled runs no line of its code: record all it reads
    on_read = line_recorder(os.path.join(parts, f"clines.{os.getpid()}.dynamo.jsonl"),
                            lambda path: files.relative(path) is not None, lambda: test)
    record_reads(on_read, after_import)
    try:
        if not record_options(resolve_core=False).opened:
            return
    except ValueError:
        pass  # the pytest process refused such options already; measure as by default
    log = OpenedLog(files, parts)
    log.context = test
    log.start()
