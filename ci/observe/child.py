"""The recording inside a Python subprocess of a recorded test, by slipcover's probes, or on
CPython 3.12+ by the recorder's own ``sys.monitoring`` core (`ci.observe.sysmon_child`,
`CHILD_CORE_ENV` ``sysmon``: a script is then measured by line, not whole).

`ci.observe.startup`'s hook calls `start` while ``site`` starts the interpreter, before
the program's own code. When the environment names a recording (`PARTS_ENV`, `ROOT_ENV`, and
`TEST_ENV`: the test file that started this process) and slipcover can run here, `start`:

- puts probes into the repository files this process imports or ``exec``s
  (`ci.observe.slipcover_core.SlipcoverLines`, context: the test file), and wraps pytest's
  assertion rewriting only if this process imports it;
- adds the "open" audit hook (`ci.observe.files.OpenedLog`) unless ``CI_DEPMAP_MEASURE``
  leaves it out;
- takes ``COVERAGE_PROCESS_START`` out of this process's environment, so coverage.py's hook,
  which runs after this one, does not measure the same process (and this process's own children
  are measured by this hook again);
- records a repository script run as ``python path/script.py`` whole (`_main_script`);
- the first child of a recording caches the recorder's own modules as checked-hash bytecode
  (`ci.observe.bytecode`), before any probe or audit hook, so later children load them
  instead of compiling them where nothing writes bytecode;
- appends the lines it runs for the first time to ``clines.<pid>.jsonl`` in the parts
  directory, one JSON object ``{context: {absolute path: [line, ...]}}`` per write, one
  ``os.write`` each: every `FLUSH_SECONDS` from a daemon thread when there is anything new, at
  exit, and on SIGTERM when the program has not put a handler of its own there (then it still
  dies of SIGTERM), and before ``os._exit``. So a process ended by SIGKILL, as SGLang's
  ``kill_process_tree`` ends a server and its workers, keeps all but its last `FLUSH_SECONDS` of
  new lines; coverage.py would keep nothing. A child forked from it (``multiprocessing``'s fork workers) starts its own
  flusher and log;
- marks itself live until its last write, flushes when a recorded process asks before killing
  it, and makes its own SIGKILLs ask first (`ci.observe.live`).
- watches which devices the process's tests touch (`ci.observe.devices`), in any process the
  hook starts in, measured or not;
- last, sets the recorder's own modules aside (`ci.observe.aside`): the program's
  ``import ci`` finds the package its own path leads to, as it would unrecorded.

In the pytest process of a recording itself (`RECORD_ENV` set, no test, no parts directory yet:
``python -m pytest`` or a ``pytest`` script) it starts measuring at once instead, in the
session's context (`_start_session`), and the recorder takes that measurement over
(`take_session`); in an observed command's, it also loads `ci.observe.pytest_guard` (through
``PYTEST_PLUGINS``), which ends the run at configure when no recorder is there.

When it cannot run (slipcover missing, a variable absent) it does nothing and coverage.py's hook
measures the process as before. Every error is the hook's to swallow: a program never fails to
start because of this module.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from ci.observe.aside import step_aside
from ci.observe.bytecode import cache_once
from ci.observe.devices import install as install_device_hooks
from ci.observe.exit_save import save_on_exit
from ci.observe.files import (CHILD_CORE_ENV, OBSERVE_ENV, OBSERVED_PYTEST_ENV, PARTS_ENV, RECORD_ENV, ROOT_ENV, TEST_ENV, OpenedLog,
                              RepoFiles)
from ci.observe.live import acknowledge, flush_requested, guard_kills, mark_live, mark_saved
from ci.observe.options import record_options
from ci.observe.probe_cache import probe_folder

FLUSH_SECONDS = 0.1
_PYTEST_NAMES = frozenset({"pytest", "py.test"})
_GUARD = "ci.observe.pytest_guard"
_started: list[bool] = []
_session: list = []  # a recording pytest process's measurement from its start (`_start_session`)
_active: list[_ChildLog] = []  # the recording of this process, once started (tests read it)


class _ChildLog:
    """The lines of one process, appended to its ``clines.<pid>.jsonl`` (see the module docstring)."""

    def __init__(self, lines, files: RepoFiles, parts: str, test: str, script: str | None):
        self.lines, self.files, self.parts, self.test, self.script = lines, files, parts, test, script
        self.lock = threading.Lock()
        self.closed = self.lost = False

    def flush(self, final: bool = False) -> None:
        with self.lock:
            if self.closed:
                return
            fresh = self.lines.take_fresh(retire=not final)
            if final:
                self.closed = True
                self.lines.stop()  # after taking: stop moves what it finds into the lines already taken
                fresh.update(_main_script(self.files, self.lines, self.script))
            if fresh:
                record = json.dumps({self.test: {path: sorted(numbers) for path, numbers in fresh.items()}}) + "\n"
                try:
                    fd = os.open(os.path.join(self.parts, f"clines.{os.getpid()}.jsonl"),
                                 os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                    try:
                        os.write(fd, record.encode("utf-8"))
                    finally:
                        os.close(fd)
                except OSError:
                    # a full disk, or the recording is over and its parts are gone: these lines
                    # are lost, so the live mark stays and the entry will not be complete
                    self.lost = True
            if final and not self.lost:
                mark_saved(self.parts)

    def run_flusher(self) -> None:
        thread = threading.Thread(target=self._flush_forever, name="ci-depmap-flush", daemon=True)
        thread.start()

    def _flush_forever(self) -> None:
        event = threading.Event()
        while not self.closed:
            event.wait(FLUSH_SECONDS)
            request = flush_requested(self.parts)  # a recorded process is about to SIGKILL or SIGSTOP this one
            self.flush()
            if request is not None and not self.lost:
                acknowledge(request)  # which may stop this process: see its docstring

    def after_fork(self) -> None:
        """In a forked child: fresh locks (a thread of the parent may have held this one or
        slipcover's at the fork, and no thread of the parent runs here to release them), its own
        live mark and a flusher of its own."""
        self.lock = threading.Lock()
        self.lines.after_fork()
        if not self.closed:
            mark_live(self.parts, self.test, flushes=True)
            self.run_flusher()


def start() -> None:
    """See the module docstring. Only the first call starts anything: ``site`` reads one
    site-packages twice where a venv's ``lib64`` links to its ``lib``. Every call but in a
    recording's own pytest process ends with the recorder's modules set aside
    (`ci.observe.aside`), so the program's own imports find what its path says. In an observed
    command, a process that is a test file first becomes that file's (`ci.observe.script_test`),
    before coverage.py's hook reads `TEST_ENV` as its context. Every call watches device use
    (`ci.observe.devices`)."""
    install_device_hooks()
    if os.environ.get(OBSERVE_ENV) and not os.environ.get(TEST_ENV) and not _started:
        from ci.observe.script_test import begin

        begin()
    if _recording_pytest():
        # its ``-p ci.pytest_plugin`` is the recorder's own package in any case, and it takes the
        # measurement over from this very module (`take_session`), which pytest's assertion
        # rewriting would otherwise import afresh
        if os.environ.get(OBSERVE_ENV):  # the observed command's coverage config: the recorder measures pytest
            os.environ.pop("COVERAGE_PROCESS_START", None)
        if not _started:
            _started.append(True)
            if os.environ.get(OBSERVE_ENV):  # unrecorded, its whole run would be lost: refused at configure
                plugins = os.environ.get("PYTEST_PLUGINS", "").strip()
                os.environ["PYTEST_PLUGINS"] = f"{plugins},{_GUARD}" if plugins else _GUARD
            _start_session()
        return
    try:
        if not _started:
            _started.append(True)
            _start()
    finally:
        step_aside(__name__.split(".")[0])


def _recording_pytest() -> bool:
    """Whether this is a recording's own pytest process (see the module docstring)."""
    return (not os.environ.get(TEST_ENV) and (not os.environ.get(PARTS_ENV) or bool(os.environ.get(OBSERVE_ENV)))
            and bool(os.environ.get(RECORD_ENV)) and runs_pytest(getattr(sys, "orig_argv", [])))


def _start() -> None:
    parts, root, test = os.environ.get(PARTS_ENV), os.environ.get(ROOT_ENV), os.environ.get(TEST_ENV, "")
    core = os.environ.get(CHILD_CORE_ENV)
    if core not in ("slipcover", "sysmon"):  # the hook also wakes wherever a recording is asked for
        return
    if not parts or not root or not (test or os.environ.get(OBSERVE_ENV)) or not os.path.isdir(parts):
        return  # an observed command's process outside any test file records the map's shared lines
    if not test and os.environ.get(OBSERVED_PYTEST_ENV):
        return  # an xdist worker of an observed pytest: its own recorder measures it
    files = RepoFiles(root)
    script = _script_path()
    if core == "sysmon":  # deferred: the checks above cost nothing
        from ci.observe import sysmon_child

        if not sysmon_child.runs_here():
            return  # another interpreter than the recording's: coverage.py measures it
        lines = sysmon_child.ChildLines(files, parts)
        script = None  # measured by line, as coverage.py's sysmon core measured it
    else:
        from ci.observe import slipcover_core

        if not slipcover_core.available():
            return
        _leave_unrewritten("slipcover")
        lines = slipcover_core.SlipcoverLines(files, None, probe_folder(parts), keep=True)
    options = record_options(resolve_core=False)
    lines.switch_context(test)
    # before any probe or audit hook: compiling reads the recorder's sources, which no test uses
    cache_once(parts, __name__.split(".")[0])
    lines.start(live_functions=False)  # site runs this hook before any repository module is imported
    if options.opened:
        log = OpenedLog(files, parts)
        log.context = test
        log.start()
    child = _ChildLog(lines, files, parts, test, script)
    _active.append(child)
    os.register_at_fork(after_in_child=child.after_fork)
    mark_live(parts, test, flushes=True)
    guard_kills(lambda: os.environ.get(PARTS_ENV))
    save_on_exit(lambda: child.flush(True))
    child.run_flusher()
    os.environ.pop("COVERAGE_PROCESS_START", None)


def runs_pytest(argv: list[str]) -> bool:
    """Whether an interpreter's command line (``sys.orig_argv``) runs pytest: ``python -m pytest``
    or a ``pytest`` console script."""
    args = iter(argv[1:])
    for arg in args:
        if arg in ("-X", "-W", "--check-hash-based-pycs"):
            next(args, None)  # the option's value
        elif arg.startswith("-m"):
            return (arg[2:] or next(args, "")) in _PYTEST_NAMES
        elif arg.startswith("-c") or arg == "-":
            return False
        elif not arg.startswith("-"):
            return os.path.basename(arg) in _PYTEST_NAMES
    return False


def _start_session() -> None:
    """Measure a recording pytest process from its first line (`ci.observe.record` adopts
    the measurement when the recording starts, `take_session`): a plugin that a ``-p`` option
    loads before the recorder's registers, and runs its ``pytest_addoption``, before any hook
    of the recorder can start measuring. The repository is the working directory, where a
    recording runs; the context is the session's (""). The core is resolved first: on 3.12+
    it is the sysmon core, and slipcover's (a dozen modules) is never imported."""
    try:
        options = record_options()  # on 3.12+ resolved to sysmon before slipcover's core is asked
    except ValueError:
        return  # the recorder refuses it with the reason
    if not options.lines or options.core != "slipcover":
        return
    from ci.observe import slipcover_core

    lines = slipcover_core.SlipcoverLines(RepoFiles(os.environ.get(ROOT_ENV) or os.getcwd()), None)
    lines.start(live_functions=False)
    _session.append(lines)
    _leave_unrewritten("slipcover")


def _leave_unrewritten(name: str) -> None:
    """pytest marks every installed plugin's package for assertion rewriting and warns (an error
    under ``filterwarnings = error``) about one imported already, as slipcover is by a start here;
    it is no test code, and the docstring marker tells pytest to leave it as it is."""
    module = sys.modules.get(name)
    if module is not None and "PYTEST_DONT_REWRITE" not in (module.__doc__ or ""):
        module.__doc__ = (module.__doc__ or "") + "\n\nPYTEST_DONT_REWRITE"


def take_session(files: RepoFiles | None):
    """The measurement `_start_session` began in this process, for a recording of ``files``'
    repository, or None. A measurement of another folder (or any, with ``files`` None) is
    stopped and dropped: its probes stay in the process, so ``(None, True)`` tells the caller
    not to start a second slipcover measurement. Returns (lines or None, probes are in)."""
    if not _session:
        return None, False
    lines = _session.pop()
    if files is not None and set(lines.files.roots) == set(files.roots):
        return lines, True
    lines.stop()
    lines.erase()
    return None, True


def _main_script(files: RepoFiles, lines, script: str | None) -> dict[str, set[int]]:
    """``python path/script.py`` runs the script's code from C, not through ``exec``: no probe
    is in it. ``script`` is that path as ``sys.argv[0]`` named it when `start` ran (the
    interpreter takes ``__file__`` off ``__main__`` before exit). A repository script that ran
    so is recorded whole, every line of it, so that any change to it selects the test
    (``python -m`` goes through ``exec`` and is measured by line). Returns {path: lines} or {}."""
    if script is None or files.relative(script) is None or any(lines.lines[c].get(script) for c in list(lines.lines)):
        return {}
    try:
        with open(script, "rb") as fh:
            count = sum(1 for _ in fh)
    except OSError:
        return {}
    return {script: set(range(1, count + 1))}


def _script_path() -> str | None:
    """The main script's absolute path while ``site`` runs (``sys.argv[0]``), None for ``-c``,
    ``-m``, standard input or a folder or zip run through runpy."""
    first = sys.argv[0] if sys.argv else ""
    if first in ("", "-", "-c", "-m"):
        return None
    full = os.path.abspath(first)
    return full if os.path.isfile(full) and not full.endswith((".zip", ".pyz")) else None
