"""Record a runtime dependency map while pytest runs a tier (`RECORD_ENV` names the map file).

`ci.pytest_plugin` registers a `DepmapRecorder` when `RECORD_ENV` is set and this process is not
itself started by a recorded test (`ci.observe.files.TEST_ENV` unset: a pytest that a test
starts is measured as that test's subprocess instead). In each process that runs tests it:

- measures executed lines of files inside the repository with the core
  `ci.observe.options` picks (slipcover's bytecode probes, `ci.observe.slipcover_core`,
  the recorder's own sys.monitoring line recorder on 3.12+, `ci.observe.sysmon_core`, or coverage.py's C tracer), and switches the measurement's
  context to the test file whose test is running, so each executed line is the test file's that
  ran it. Work that
  serves more than one test file gets a shared context (`files.shared_context`) as well:
  collecting a test module (the import-time code of everything it imports first; the module is
  still the collecting file's), the setup of a session- or package-scoped fixture, and the
  session outside any test (context ""): the merge makes those lines the map's ``shared``;
- adds the "open" audit hook (`OpenedLog`) with the same test file as its context;
- exports ``COVERAGE_PROCESS_START`` (a config written to the parts directory) and the test file,
  so every Python subprocess a test starts is measured with that test file as its context: by
  slipcover where the core is slipcover and its start-up hook (`ci.observe.startup`) is
  installed in this interpreter, else by coverage.py;
- counts each test file's collected, finished and run tests (completeness: `depmap_format`);
  a test file whose subprocess ended without saving its lines is not complete
  (`ci.observe.live`, which also makes a test's SIGKILL of a recorded process wait for
  that process's last lines).

The process that owns the recording (the one pytest process, or the pytest-xdist controller)
makes the parts directory at configure and, after every worker has finished,
merges the parts (`ci.observe.merge`) at its session's end and writes the map through
`ci.atomic_write`; a map it cannot build or write is one line in pytest's output, never a crash.
It also snapshots the tree when the recording starts and compares at its end
(`ci.observe.worktree`): an entry that ran a file differing from the commit is not complete.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from ci.atomic_write import atomic_write_text
from ci.observe.facts import PytestFacts
from ci.observe.files import (CHILD_CORE_ENV, OBSERVE_ENV, OBSERVED_PYTEST_ENV, PARTS_ENV, RECORD_ENV, ROOT_ENV,
                              TEST_ENV, OpenedLog, Rearm, RepoFiles, collect_context, fixture_context)
from ci.observe import child, clock, worktree
from ci.observe.bytecode import cache_checked, loaded_sources
from ci.observe.child_config import write_child_config
from ci.observe.forked import ForkedCopy, watch_forks
from ci.observe.live import guard_kills
from ci.observe.options import KEEP_PARTS_ENV, RecordOptions, record_options
from ci.observe.probe_cache import probe_folder

_PACKAGE = __name__.split(".")[0]  # the recorder's own package (`ci`)
SETTLE_SECONDS = 0.1  # how soon a probe that fired stops firing in its test file (besides after each test)
SLIPCOVER_PART = "clines.slipcover"  # the slipcover core's lines: `SlipcoverLines.save` adds ".<pid>.<random>.jsonl"


def wanted() -> bool:
    """True when this pytest process should record (see the module docstring)."""
    return bool(os.environ.get(RECORD_ENV)) and not os.environ.get(TEST_ENV)


def _check_coverage() -> None:
    # found, not imported: on 3.12+ this process records without coverage.py (`ci.observe.sysmon_core`),
    # which only its subprocesses need; a coverage that measures this process is imported already
    if importlib.util.find_spec("coverage") is None:
        raise pytest.UsageError(f"${RECORD_ENV} asks for a dependency map, but coverage.py is not installed "
                                "(pip install 'coverage>=7.10')")
    coverage = sys.modules.get("coverage")
    if coverage is not None and coverage.Coverage.current() is not None:
        raise pytest.UsageError(f"${RECORD_ENV} asks for a dependency map, but coverage is already measuring "
                                "this pytest (pytest-cov, COVERAGE_PROCESS_START): one tracer at a time")


def _claim_parts(root: Path) -> bool:
    """Make the parts directory unless a parent process (the xdist controller) did: True when
    this process owns the recording."""
    if os.environ.get(PARTS_ENV):
        return False
    os.environ[PARTS_ENV] = tempfile.mkdtemp(prefix="ci-depmap-")
    os.environ[ROOT_ENV] = str(root)
    worktree.snapshot(Path(os.environ[PARTS_ENV]), root)  # what differs from HEAD as the recording starts
    return True


def _options() -> RecordOptions:
    try:
        return record_options()
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


class _Idle:
    """The line recorder of a run that measures no lines (``CI_DEPMAP_MEASURE`` without ``lines``)."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def save(self) -> None: ...
    def erase(self) -> None: ...
    def switch_context(self, context: str) -> None: ...


def _prepare_children(parts: Path, files: RepoFiles, options: RecordOptions) -> None:
    """The owner's part, once per recording, before any worker or test starts (they inherit it):
    the subprocesses' coverage config, and the recorder's own start-up hook with the variable that
    arms it. A worker rewriting the config could tear it under a child of another worker reading it."""
    from ci.observe import startup  # deferred: an observed pytest is no owner, and sysconfig costs it 2-3 ms

    write_child_config(parts, files, options.core)
    if options.core in ("slipcover", "sysmon") and options.subprocesses and startup.install() is not None:
        os.environ[CHILD_CORE_ENV] = options.core  # subprocesses by the recorder's core too, where the hook runs
    else:
        os.environ.pop(CHILD_CORE_ENV, None)


def _start_lines(parts: Path, files: RepoFiles, options: RecordOptions, owner: bool):
    """Start this process's line recorder (the owner prepares the children first): an object with
    start, stop, switch_context, save and erase (`coverage.Coverage`'s names), started. A
    measurement the start-up hook began in this process (`ci.observe.child.take_session`)
    is taken over, so the lines before the recorder's first hook are the session's too; one of
    another folder is dropped, and coverage.py's tracer measures instead of a second slipcover."""
    if owner:
        _prepare_children(parts, files, options)
    guard_kills(lambda: os.environ.get(PARTS_ENV))  # a test's SIGKILL of a server waits for its last lines
    session, probed = child.take_session(files if options.lines else None)
    if not options.lines:
        return _Idle()
    probes = probe_folder(parts)
    if session is not None:  # measuring since this process started (`child.take_session`)
        session.adopt(parts / SLIPCOVER_PART, probes, keep=True)
        return session
    if options.core == "slipcover" and not probed:
        from ci.observe.slipcover_core import SlipcoverLines  # deferred: only this core needs it

        lines = SlipcoverLines(files, parts / SLIPCOVER_PART, probes, keep=True)
    else:
        include, omit = [os.path.join(r, "*") for r in files.roots], [p + "*" for p in files.excluded]
        if options.core == "sysmon":
            from ci.observe.sysmon_core import measure  # deferred: only this core needs it

            lines = measure(files, parts)
        else:
            import coverage  # deferred: only this core needs it in this process

            lines = coverage.Coverage(data_file=str(parts / "cov"), data_suffix=True, config_file=False,
                                      include=include, omit=omit)
            lines.set_option("run:core", "ctrace")
    lines.start()
    return lines


@dataclass
class _Early:
    root: Path
    owner: bool
    cov: object | None  # None: handed over without a measurement (`_take_early`)
    options: RecordOptions


_EARLY: _Early | None = None


def start_early(root: Path | None) -> None:
    """Start measuring before pytest loads the initial conftests (their import-time code, and the
    first-party code it calls, is then in the map's ``shared``); the recorder made at configure
    takes this measurement over when its repository root is ``root``. Does nothing when recording
    is not wanted, the root is unknown, or coverage cannot start (configure then says why)."""
    global _EARLY
    if _EARLY is not None or root is None or not wanted():
        return
    try:
        _check_coverage()
        options = _options()
    except pytest.UsageError:
        return
    owner = _claim_parts(root)
    _EARLY = _Early(root, owner, _start_lines(Path(os.environ[PARTS_ENV]), RepoFiles(root), options, owner), options)


def drop_early() -> None:
    """Stop a measurement `start_early` began that no recorder took over (configure found no
    registry-driven tree): its data and, when this process made it, the parts directory go."""
    global _EARLY
    early, _EARLY = _EARLY, None
    if early is None:
        return
    early.cov.stop()
    early.cov.erase()
    child.take_session(None)
    os.environ.pop(CHILD_CORE_ENV, None)
    parts = os.environ.pop(PARTS_ENV, None) if early.owner else None
    if parts:
        shutil.rmtree(parts, ignore_errors=True)
        os.environ.pop(ROOT_ENV, None)


def _take_early(root: Path) -> _Early | None:
    """The early measurement, for the recorder of ``root``. One of another tree (configure found
    the registry elsewhere than the invocation directory's) is stopped and its data dropped; what
    it leaves is handed over with ``cov`` None: its ownership of the parts directory, and its
    options, with coverage.py's tracer for a core when slipcover's probes are already in this
    process (a second slipcover recorder cannot wrap pytest's assertion rewriting again)."""
    global _EARLY
    early, _EARLY = _EARLY, None
    if early is None or early.root == root:
        return early
    early.cov.stop()  # measured another tree: its data is not this recording's
    early.cov.erase()
    options = early.options
    if options.core == "slipcover" and options.lines:
        options = RecordOptions(options.lines, options.opened, options.subprocesses, "ctrace")
    return _Early(root, early.owner, None, options)


class DepmapRecorder:
    """A pytest plugin object; one per process (see the module docstring)."""

    def __init__(self, config: pytest.Config, root: Path, tier: str | None, relative_test):
        early = _take_early(root)
        if early is None:
            _check_coverage()  # before anything is made: a refusal leaves nothing behind
        self.options = options = early.options if early is not None else _options()
        self.out = Path(config.invocation_params.dir, os.environ[RECORD_ENV])
        self.root, self.tier, self.relative_test = root, tier, relative_test
        self.owner = early.owner if early is not None else _claim_parts(root)
        self.parts = Path(os.environ[PARTS_ENV])
        if self.owner:  # an early measurement of another tree snapshotted that tree
            worktree.snapshot(self.parts, root)
        self.files = RepoFiles(root)
        self.items: dict[str, int] = defaultdict(int)
        self.done: dict[str, int] = defaultdict(int)
        self.ran: dict[str, int] = defaultdict(int)
        self.facts = PytestFacts()  # each test file's time, outcome and skip reasons (`ci.observe.facts`)
        self.context = ""
        self.rearm = Rearm()
        self.opened = OpenedLog(self.files, self.parts)
        started = early.cov if early is not None else None
        self.cov = started if started is not None else _start_lines(self.parts, self.files, options, self.owner)
        settle_every = getattr(self.cov, "settle_every", None)  # slipcover's probes: `ci.observe.retire`
        if settle_every is not None:
            settle_every(SETTLE_SECONDS)
        if options.opened:
            self.opened.start()
        self.copy: ForkedCopy | None = None  # this process is a fork of the recording's: `forked`
        self.finished = False
        self.own_sources = set(loaded_sources(_PACKAGE))  # the recorder's modules, before any test's
        watch_forks(self)
        if os.environ.get(OBSERVE_ENV):  # `ci observe`: this pytest's xdist workers record themselves
            os.environ[OBSERVED_PYTEST_ENV] = "1"

    def forked(self) -> None:
        """In a forked copy of this process: one of the running test's children, not the
        recording (`ci.observe.forked`)."""
        if self.finished:
            return
        if self.copy is None:
            self.copy = ForkedCopy(self.cov, self.opened, str(self.parts))
        self.copy.begin(self.opened.context)

    def _switch(self, context: str, test: str = "") -> None:
        """Make ``context`` coverage's context; ``test`` is the test file the work is for (the
        open log's and subprocesses' context; "" outside any test file)."""
        if context == self.context:
            return
        self.context = context
        self.opened.context = test
        if getattr(self.cov, "rearms", False):  # a core that stops recorded lines: re-arm only where needed
            self.cov.switch_context(context, rearm=self.rearm.needed(context))
        else:
            self.cov.switch_context(context)
        if test:
            os.environ[TEST_ENV] = test
            if self.options.subprocesses:
                os.environ["COVERAGE_PROCESS_START"] = str(self.parts / "coverage.ini")
        else:
            os.environ.pop(TEST_ENV, None)

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(self, collector: pytest.Collector):
        rel = self.relative_test(collector.path) if isinstance(collector, pytest.Module) else None
        if rel is None:
            return (yield)
        self._switch(collect_context(rel), rel)
        try:
            report = yield
            if report.failed:  # a collection error: its file's outcome, and a device guard's evidence
                self.facts.add(rel, "collect", "failed", report.longrepr)
            return report
        finally:
            self._switch("")

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):
        if fixturedef.scope not in ("session", "package") or not self.context:
            return (yield)
        before, test = self.context, self.opened.context
        self._switch(fixture_context(before), test)
        try:
            return (yield)
        finally:
            self._switch(before, test)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        for item in session.items:
            rel = self.relative_test(item.path)
            if rel is not None:
                self.items[rel] += 1

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        rel = self.relative_test(item.path)
        if rel is not None:
            self._switch(rel, rel)
        started = clock.now()  # not the reports' durations: a test may freeze the clock they read
        result = yield
        if rel is not None:
            self.done[rel] += 1
            self.facts.add_seconds(rel, clock.now() - started)
        settle = getattr(self.cov, "settle", None)  # slipcover's probes: see `ci.observe.retire`
        if settle is not None:
            settle()
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and self.context:
            self.ran[self.context] += 1
        if self.context and self.opened.context:  # in the process that ran it (an xdist controller hears it again)
            self.facts.add(self.opened.context, report.when, report.outcome, report.longrepr)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Save this process's parts; the owner (last to finish: an xdist controller's session
        ends after its workers') then merges every process's parts into the map. A forked copy
        that ran on to here saves its lines only."""
        if self.copy is not None:
            self.copy.save()
            return
        self.finished = True
        self._switch("")
        self.opened.stop()
        self.cov.stop()
        finishing = set(loaded_sources(_PACKAGE))
        self.cov.save()
        parts = {"items": self.items, "done": self.done, "ran": self.ran, "facts": self.facts.files}
        (self.parts / f"items.{os.getpid()}.json").write_text(json.dumps(parts), encoding="utf-8")
        if self.owner:
            self._write_map(session.config.pluginmanager.get_plugin("terminalreporter"))
        # after the map: where nothing writes bytecode (PYTHONDONTWRITEBYTECODE, a checkout on
        # PYTHONPATH), the next recording loads the recorder's modules instead of compiling them;
        # a test's own imports of the package are left alone (`ci.observe.bytecode`)
        cache_checked(sorted(self.own_sources | (set(loaded_sources(_PACKAGE)) - finishing)))

    def _write_map(self, reporter) -> None:
        from ci.observe.merge import build_map  # deferred: only the owner merges
        from ci.selection.depmap_format import dump_depmap

        try:
            depmap = build_map(self.parts, self.files, self.tier, *worktree.finish(self.parts, self.root))
            self.out.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.out, dump_depmap(depmap))
            line = f"depmap: wrote {self.out} ({len(depmap.tests)} test file(s))"
        except (OSError, ValueError) as exc:
            line = f"depmap: no map written to {self.out}: {exc}"
        finally:
            if os.environ.get(KEEP_PARTS_ENV):  # the raw per-context data, for tests and benches
                shutil.copytree(self.parts, os.environ[KEEP_PARTS_ENV], dirs_exist_ok=True)
            shutil.rmtree(self.parts, ignore_errors=True)
            for name in (PARTS_ENV, ROOT_ENV, TEST_ENV, CHILD_CORE_ENV, "COVERAGE_PROCESS_START"):
                os.environ.pop(name, None)
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_line(line)
