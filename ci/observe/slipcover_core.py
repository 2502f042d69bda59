"""Executed lines per context through slipcover's bytecode probes instead of a trace function.

On Python 3.11 any ``sys.settrace`` tracer (coverage.py's C tracer included) puts every frame of
the thread on the interpreter's slow tracing path, measured file or not. Slipcover
(https://github.com/plasma-umass/slipcover) instead inserts a probe call into the code it
instruments, and only into that code: here at the first line start of each basic block, which
stands for the block's other lines (`ci.observe.blocks`). This module drives slipcover's engine as a
library (`ci.observe.slipcover_engine`: without the rest of its package):

- every code object of a repository file (`RepoFiles.relative` not None) gets probes: modules
  imported later through the recorder's import hook (`ci.observe.probe_imports`) and
  pytest's assertion rewriting (slipcover's ``wrap_pytest``), and every
  live function of such a file when `start` runs (found through `gc`; its ``__code__`` is
  replaced; module-level code that already ran stays unmeasured, as it is under coverage.py);
- probes are created with ``d_miss_threshold = -2``, which tells slipcover's C probe to record its
  line on every execution and never to remove itself: so each context sees every line it runs,
  not only lines no earlier context ran;
- `switch_context` moves the lines seen so far (slipcover's ``newly_seen``) to the context that
  ran them; `save` writes them as JSON lines, one per context (test file), the ``clines`` part
  `ci.observe.merge` reads, beside the parts of subprocesses.

- slipcover writes an edited code object's 3.11 line table with lines only; `ci.observe.positions`
  puts the original instructions' column positions back (tracebacks mark the failing expression).
- `exec` is wrapped while recording, so a repository file's code compiled outside the import
  system (``runpy``, Triton's interpreter re-compiling a kernel from its source) gets probes too.

Known differences from coverage.py's tracer: a code object that was not a live function's at
`start` (kept without its function), or that runs without `exec` (``eval``, ``types.FunctionType``
over a compiled code object), has no probes. `available` says whether this core can run here:
slipcover imports and the interpreter is CPython 3.11, the one whose bytecode probes this module
is tested with (3.12+ has ``sys.monitoring``, where coverage.py's own ``sysmon`` core is the
cheap choice). `SlipcoverLines.erase` drops what was seen; probes already placed stay (code
objects cannot be un-instrumented) and record into nothing once `stop` ran.
"""

from __future__ import annotations

import builtins
import dis
import gc
import os
import sys
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from types import CodeType, FunctionType

from ci.observe import blocks, dynamo_probes, slipcover_engine
from ci.observe.files import RepoFiles, write_lines
from ci.observe.positions import keep_positions
from ci.observe.probe_cache import PROBE_FORMAT, ProbeCache, is_marked
from ci.observe.probe_store import ProbeStore
from ci.observe.probe_imports import ProbeImports
from ci.observe.retire import ProbeSites

_EXEC = builtins.exec
_NEVER_REMOVE = -2
_RESUME = dis.opmap.get("RESUME", -1)  # 3.11+; `available` is False before
_OPENING = frozenset({_RESUME, dis.opmap.get("RETURN_GENERATOR", -1)})  # slipcover's probe.cxx: "_d_miss_threshold == -2 means don't de-instrument either"


def unavailable_reason() -> str | None:
    """Why this core cannot run here (see the module docstring), or None when it can."""
    if sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11):
        return f"the slipcover core is tested on CPython 3.11 only, this is {sys.implementation.name} " \
               f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        __version__ = slipcover_engine.version()
        slipcover_engine.engine()
    except ImportError as exc:
        return f"slipcover is not installed: {exc}"
    if not __version__.startswith("1.1."):  # this module replaces some of its internals
        return f"slipcover {__version__} is installed, and this core is tested with 1.1 only"
    return None


def available() -> bool:
    """True when this core can run here (`unavailable_reason` is None)."""
    return unavailable_reason() is None


def _line_starts(co: CodeType) -> Iterator[tuple[int, int]]:
    """Where to put a line's probe: slipcover's choice (`dis.findlinestarts` without the RESUME
    or RETURN_GENERATOR that opens a code object), plus the first instruction after that opening
    when it is still on the opening line. A one-line ``lambda: x`` or ``def f(x): return x`` has
    no other line start, and coverage.py's tracer records that line each time it runs."""
    code, lines = co.co_code, {start: line for start, _, line in co.co_lines()}
    starts = list(dis.findlinestarts(co))
    offsets = {off for off, _ in starts}
    for off, line in starts:
        if not line:
            continue
        if code[off] not in _OPENING:
            yield off, line
            continue
        after = off
        while after < len(code) and code[after] != _RESUME:
            after += 2
        after += 2
        if after < len(code) and after not in offsets and lines.get(after) == line:
            yield after, line


# the plan each code object got while a module was edited for the probe cache, by id (the code
# object held, so the id stays its own): the cache's entry reads it back instead of planning the
# code again, which cost as much as the cache's own bookkeeping (rich's 144 modules: 0.17 s)
_PLANNED: dict[int, tuple[CodeType, blocks.BlockPlan]] = {}


def _probe_points(co: CodeType) -> list[tuple[int, int]]:
    """Where the probes of ``co`` go: the first line start of each basic block
    (`ci.observe.blocks`); the lines each stands for are noted for `SlipcoverLines`."""
    plan = blocks.plan(co, _line_starts(co))
    blocks.note(co.co_filename, plan.implied)
    _PLANNED[id(co)] = (co, plan)
    return plan.points


def _plan_lines(co: CodeType) -> tuple[list[int], dict[int, frozenset[int]]]:
    kept = _PLANNED.pop(id(co), None)
    plan = kept[1] if kept is not None and kept[0] is co else blocks.plan(co, _line_starts(co))
    return [line for _, line in plan.points], plan.implied


def _probes_class(base: type) -> type:
    """slipcover's `Slipcover`, plus coverage.py's record of an empty module: its line 0."""

    class Probes(base):  # type: ignore[misc, valid-type]
        cache: ProbeCache | None = None
        sites: ProbeSites | None = None

        def instrument(self, co, parent=None):
            # called right before a module's code runs; an empty module has no line to probe,
            # and coverage.py records its line 0 when it runs
            if isinstance(co, CodeType) and parent is None and co.co_name == "<module>" \
                    and not any(line for _, _, line in co.co_lines()):
                self.newly_seen[co.co_filename].add(0)
            if self.cache is not None and isinstance(co, CodeType) and parent is None:
                try:
                    new = self.cache.instrument(co, lambda code: keep_positions(code, super(Probes, self).instrument(code)))
                finally:
                    _PLANNED.clear()  # what the cache's entry did not read back (another thread's: planned again)
            else:
                new = super().instrument(co, parent)
                if parent is None:  # the plans of its nested code objects are no longer wanted
                    _PLANNED.clear()
                if isinstance(co, CodeType):  # columns too, not only lines: `ci.observe.positions`
                    new = keep_positions(co, new)
            if self.sites is not None and isinstance(co, CodeType) and parent is None:
                self.sites.add(new)
            return new

    return Probes


class _NotingProbe:
    """slipcover's C probe module, whose ``new`` also tells the creating instrumenter's
    `ProbeSites` (its ``sites``) which line the new probe records."""

    def __init__(self, probe):
        self.probe = probe
        self.signal = probe.signal

    def new(self, sci, filename, line, threshold):
        made = self.probe.new(sci, filename, line, threshold)
        sites = getattr(sci, "sites", None)
        if sites is not None:
            sites.note_probe(made, filename, line)
        return made

    def __getattr__(self, name: str):
        return getattr(self.probe, name)


_REWRITE = "_pytest.assertion.rewrite"


def _nothing(co: CodeType) -> Iterator[int]:
    return iter(())


class _Matcher:
    """slipcover's file-matcher protocol over `RepoFiles`: probes go into repository files only."""

    def __init__(self, files: RepoFiles):
        self.files = files

    def matches(self, filename: object) -> bool:
        return isinstance(filename, (str, Path)) and str(filename).endswith(".py") \
            and self.files.relative(str(filename)) is not None


class SlipcoverLines:
    """The subset of `coverage.Coverage` the recorder uses: start, switch_context, stop, save."""

    def __init__(self, files: RepoFiles, data_file: Path | None, probe_cache: Path | None = None,
                 keep: bool = False):
        """``probe_cache``: a folder where the processes of one recording share their bytecode
        edits (`ci.observe.probe_cache`); None: every process edits its own. ``keep``: modules'
        edits are also kept for later recordings beside their bytecode (`ci.observe.probe_store`)."""
        slipcover = slipcover_engine.engine()
        slipcover.findlinestarts = _probe_points  # the one place slipcover's instrument reads line starts
        # the lines and branches a file has, for slipcover's report of missed lines: a map needs
        # only the lines that ran, and walking every code object's bytecode again for them was
        # about 40 % of the cost of instrumenting a module
        slipcover.Slipcover.lines_from_code = staticmethod(_nothing)
        slipcover.Slipcover.branches_from_code = staticmethod(_nothing)
        if not isinstance(slipcover.probe, _NotingProbe):
            slipcover.probe = _NotingProbe(slipcover.probe)
        self._sci = _probes_class(slipcover.Slipcover)(d_miss_threshold=_NEVER_REMOVE)
        self._sci.sites = self._sites = ProbeSites(slipcover.probe.signal)
        self._lock = threading.RLock()  # a context's lines are moved and its probes retired as one step
        self._settler: threading.Event | None = None
        if probe_cache is not None:
            self._use_cache(probe_cache, keep)
        self.files = files
        self._matcher = _Matcher(files)
        self._imports = ProbeImports(self._sci.instrument, self._matcher.matches, self._sci.register_module)
        self._data_file = data_file
        self._context = ""
        self.lines: dict[str, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))

    def _use_cache(self, probe_cache: Path, keep: bool) -> None:
        sci, probe = self._sci, slipcover_engine.engine().probe
        store = ProbeStore(b"%d %s" % (PROBE_FORMAT, slipcover_engine.version().encode())) if keep else None
        sci.cache = ProbeCache(probe_cache, _plan_lines, probe.signal,
                               lambda filename, line: probe.new(sci, filename, line, _NEVER_REMOVE), blocks.note,
                               store)

    def adopt(self, data_file: Path, probe_cache: Path | None, keep: bool = False) -> None:
        """Make a measurement started without a recording (`ci.observe.child`'s session
        start) this recording's: where `save` writes, and the shared bytecode edits."""
        self._data_file = data_file
        if probe_cache is not None:
            self._use_cache(probe_cache, keep)

    def start(self, live_functions: bool = True) -> None:
        """Put probes into what runs from now on; ``live_functions``: also into every live
        function of a repository file (a subprocess's start-up hook, which runs before any
        repository module is imported, passes False: the walk over every object can find none)."""
        self._imports.enter()
        if _REWRITE in sys.modules:
            self._wrap_pytest()
        else:  # a subprocess that may never run pytest: importing it to wrap it would cost every child
            dynamo_probes.after_import(_REWRITE, self._wrap_pytest)
        self._imports.wrap_spec_from_file_location()
        dynamo_probes.guard(self._sites.signal, dynamo_probes.after_import)
        if live_functions:
            self._instrument_loaded()
        builtins.exec = self._exec

    def _wrap_pytest(self) -> None:
        # slipcover's: pytest rewrites a test module's asserts and runs it by ``exec`` of its own;
        # its hook imports ``importlib.abc``, which pytest has imported by then
        from slipcover.importer import wrap_pytest

        wrap_pytest(self._sci, self._matcher)

    def _exec(self, source, globals=None, locals=None, /, **kwargs):
        """`exec` that puts probes into a repository file's code first: code compiled outside the
        import system (runpy, Triton's interpreter re-compiling a kernel's source) runs there."""
        if type(source) is CodeType and not is_marked(source.co_consts) and self._matcher.matches(source.co_filename):
            source = self._sci.instrument(source)
        if globals is None:  # exec's default is its caller's namespace, not this frame's
            caller = sys._getframe(1)
            globals, locals = caller.f_globals, caller.f_locals if locals is None else locals
        return _EXEC(source, globals, locals, **kwargs)

    def _instrument_loaded(self) -> None:
        # every live function, not only those a walk over modules finds: a fixture wrapped by
        # pytest, a closure, a callback held by a registry are all the test's code too
        for obj in gc.get_objects():
            if type(obj) is FunctionType and self._matcher.matches(obj.__code__.co_filename):
                self._sci.instrument(obj)

    def _collect(self, retire: bool = True) -> dict[str, set[int]]:
        """Move the lines seen since the last call to the current context and retire their probes
        until the context changes (`ci.observe.retire`); return those lines the context had
        not seen before (absolute path -> lines)."""
        with self._lock:
            seen = self._sci._get_newly_seen()  # swaps in an empty dict: the lines since the last call
            mine = self.lines[self._context]
            fresh: dict[str, set[int]] = {}
            for path, lines in seen.items():
                new = blocks.expand(path, lines) - mine[path]
                if new:
                    mine[path] |= new
                    fresh[path] = new
                if retire:
                    self._sites.retire(path, lines)
            return fresh

    def after_fork(self) -> None:
        """In a forked child: slipcover's lock and these anew (the parent's flusher may have held them)."""
        self._sci.lock = threading.RLock()
        self._lock = threading.RLock()
        self._sites.lock = threading.Lock()

    def forget_collected(self) -> None:
        """Drop the lines already moved to their contexts: a forked copy saves only what it runs
        itself (its parent saves the rest)."""
        with self._lock:
            self.lines.clear()

    def settle(self) -> None:
        """Move the lines seen so far to the current context and stop their probes firing until
        the context changes: a pytest process calls it after each test."""
        self._collect()

    def take_fresh(self, retire: bool = True) -> dict[str, set[int]]:
        """The lines the current context ran for the first time since the last call (see
        `_collect`); ``retire`` False: their probes keep firing (a process about to end)."""
        return self._collect(retire)

    def settle_every(self, seconds: float) -> None:
        """Also `settle` from a daemon thread every ``seconds`` until `stop`, so code that one long
        test runs over and over stops paying for its probes after its first pass."""
        if self._settler is not None:
            return
        stopped = self._settler = threading.Event()

        def settle_until_stopped() -> None:
            while not stopped.wait(seconds):
                self.settle()

        threading.Thread(target=settle_until_stopped, name="ci-depmap-settle", daemon=True).start()

    rearms = True  # retires recorded lines' probes: `switch_context` takes ``rearm``

    def switch_context(self, context: str, rearm: bool = True) -> None:
        """Lines run from now on are ``context``'s; ``rearm`` False keeps retired probes retired
        (the caller knows the new context has their lines: `ci.observe.files.Rearm`)."""
        with self._lock:
            self._collect()
            if rearm:
                self._sites.rearm()
            self._context = context

    def stop(self) -> None:
        if self._settler is not None:
            self._settler.set()
        if builtins.exec == self._exec:
            builtins.exec = _EXEC
        self._collect()
        self._imports.leave()

    def erase(self) -> None:
        """Forget every line seen so far (the probes stay; see the module docstring)."""
        with self._lock:
            self._sci._get_newly_seen()
            self._sites.rearm()
            self.lines.clear()

    def save(self) -> None:
        """The lines as JSON, one line per context (`ci.observe.files.write_lines`), to
        ``<data_file>.<pid>.<random>.jsonl``: with ``data_file`` ``<parts>/clines.slipcover`` the
        part `ci.observe.merge` reads without importing coverage.py (a coverage.py data file
        before: its import, SQLite write and line-by-line read cost a rich recording 0.29 s of
        CPU against 0.08). Nothing when no line ran."""
        with self._lock:
            contexts = {context: dict(files) for context, files in self.lines.items()}
        write_lines(Path(f"{self._data_file}.{os.getpid()}.{os.urandom(4).hex()}.jsonl"), contexts)
