"""pytest plugin: registry.yaml drives markers, skips, timeouts and reruns.

Loaded where a registry is by the ``pytest11`` entry point ``ci-registry`` (`ci.pytest_entry`)
once the package is installed, by this repository's root ``conftest.py`` (``pytest_plugins = ["ci.pytest_plugin"]``),
or with ``-p ci.pytest_plugin``; under one name, so it is registered once whichever way comes first.

The registry is ``--registry PATH``, else ``registry.yaml`` in the nearest directory at or above
pytest's rootdir that holds one (the same rule as ``python -m ci``); with neither, the plugin does
nothing. Test files are those under the registry's ``project.test_roots`` whose names match
``project.test_patterns``. For each collected test file:

* unregistered -> a collection error naming the file and printing the YAML entry to add;
* a symlink (or under a symlinked directory) that leads outside the repository -> a collection
  error: its code is not the repository's, so it is never run;
* every registered tier becomes a marker (``pytest -m gpu_b200``; markers are declared, so
  ``--strict-markers`` accepts them);
* the item runs if at least one of its tiers' hardware is present (see `ci.running.hardware`), otherwise
  it is skipped with the missing hardware as the reason; with ``--tier T`` only T's items are
  selected and they run only where T's hardware is present;
* ``manual`` / ``quarantined`` files are skipped with the registry's reason and issue, unless the
  file was named on the command line (without ``--tier``) or ``--include-inactive`` is given;
  with ``--run-quarantined`` (or ``CI_RUN_QUARANTINED=1``: the nightly job) a quarantined
  file's tests run non-blocking;
* a test named in its entry's ``quarantined_nodes`` runs non-blocking: ``xfail(strict=False)``
  with the registry's reason, so its failure never fails the job and its pass is a pass; the
  failure's first line is kept in the xfail reason (`ci.history.classify.quarantined_reason`),
  so the history still counts it;
* ``timeout: S`` is the whole file's budget: its tests together (setup, call and teardown, reruns
  included) may take S seconds in one pytest process. Each test's pytest-timeout is what remains
  of it (or the test's own ``@pytest.mark.timeout`` when that is smaller); once it is spent, the
  file's remaining tests fail at setup without running. Under xdist each worker holds the budget
  for the tests of the file it runs. A test that outlives its limit by `KILL_GRACE` (it swallowed
  pytest-timeout's signal, or is stuck in C code) is killed with its pytest process and reported
  as a timeout (`ci.running.watchdog`; under xdist the file's remaining tests then fail at setup).
  Either way the processes a timed-out test started die with it (`ci.running.proctree`).
  A registry timeout without pytest-timeout loaded is a usage error, never silently unenforced;
* ``reruns: N`` becomes ``pytest.mark.flaky(reruns=N, rerun_except=...)`` (pytest-rerunfailures)
  unless the test sets its own: a failure that is breakage (`ci.history.classify.RERUN_EXCEPT`:
  ImportError, ModuleNotFoundError, SyntaxError, a missing GPU) is never retried, so a rename
  that breaks an import fails once instead of being rerun into looking flaky; every failed
  attempt's error and text go into the JUnit report (`ci.pytest_attempts`).

Files outside the test roots are left alone.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from ci.observe import record
from ci.pytest_attempts import AttemptRecorder
# The whole-file timeout's hooks: pytest finds a plugin's hooks by name, these among them.
from ci.pytest_budget import (  # noqa: F401
    pytest_configure_node, pytest_handlecrashitem, pytest_runtest_call, pytest_runtest_protocol, pytest_runtest_setup,
)
from ci.pytest_state import STATE, PluginState, relative_test_path
from ci.registry import (
    REGISTRY_FILENAME, RegistryError, RepoRootNotFound, Status, TestEntry, find_repo_root, link_problem, load_registry,
)


# `--run-quarantined` for a pytest that `python -m ci run` starts (the nightly job sets it).
RUN_QUARANTINED_ENV = "CI_RUN_QUARANTINED"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ci", "registry.yaml (ci.pytest_plugin)")
    group.addoption("--registry", metavar="PATH", default=None,
                    help=f"registry file (default: {REGISTRY_FILENAME} at or above the rootdir)")
    group.addoption("--tier", metavar="TIER", default=None,
                    help="select only the tests registered for TIER; skip them unless TIER's hardware is here")
    group.addoption("--include-inactive", action="store_true", default=False,
                    help="also run tests whose registry status is manual or quarantined")
    group.addoption("--run-quarantined", action="store_true", default=False,
                    help="run quarantined files' tests non-blocking (xfail, not strict) instead of skipping them")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    try:  # a recording starts before the conftests run their import-time code (docs/selection.md)
        record.start_early(find_repo_root(early_config.invocation_params.dir))
    except RepoRootNotFound:
        pass


def pytest_configure(config: pytest.Config) -> None:
    option = config.getoption("registry")
    try:
        root: Path | None = find_repo_root(config.rootpath)
    except RepoRootNotFound:
        root = None
    if option:
        path = Path(config.invocation_params.dir, option)
        root = root or path.resolve().parent
    elif root is None:
        return  # not a registry-driven tree (e.g. a pytester sandbox without one)
    else:
        path = root / REGISTRY_FILENAME
    try:
        registry = load_registry(path)
    except RegistryError as exc:
        raise pytest.UsageError(
            f"{path}: registry has problems:\n" + "\n".join(f"  {p}" for p in exc.problems)) from None
    tier = config.getoption("tier")
    if tier is not None and tier not in registry.tiers:
        raise pytest.UsageError(f"--tier {tier!r}: unknown tier; known tiers: {', '.join(registry.tiers)}")
    for t in registry.tiers.values():
        config.addinivalue_line("markers", f"{t.name}: registry tier - {t.description}")
    collected = config.getini("python_files")
    for pattern in registry.project.test_patterns:  # pytest must collect what the registry covers
        if pattern not in collected:
            config.addinivalue_line("python_files", pattern)
    patterns = "|".join(fnmatch.translate(p) for p in registry.project.test_patterns)
    config.stash[STATE] = PluginState(
        registry=registry,
        root=root,
        tier=tier,
        include_inactive=config.getoption("include_inactive"),
        # CI (`--tier`, e.g. from `python -m ci run`) passes shard file lists: naming a file there
        # is not a developer asking for it, so only --include-inactive runs inactive files.
        named_files=_named_files(config) if tier is None else set(),
        run_quarantined=config.getoption("run_quarantined") or os.environ.get(RUN_QUARANTINED_ENV) == "1",
        is_test_name=re.compile(patterns).match,
    )
    state = config.stash[STATE]
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:  # an xdist worker: the controller made the directory
        state.records = Path(workerinput["ci_timeout_records"]) if workerinput.get("ci_timeout_records") else None
    else:  # serial, or the xdist controller: where the JUnit is written
        config.pluginmanager.register(AttemptRecorder(), "ci-attempts")
        if any(e.timeout is not None for e in registry.tests.values()):
            state.records, state.owns_records = Path(tempfile.mkdtemp(prefix="ci-timeouts-")), True
    if record.wanted():  # $CI_DEPMAP: record what each test file executes (docs/selection.md)
        recorder = record.DepmapRecorder(config, root, tier, lambda p: relative_test_path(state, p))
        config.pluginmanager.register(recorder, "ci-depmap")


def pytest_unconfigure(config: pytest.Config) -> None:
    record.drop_early()
    state = config.stash.get(STATE, None)
    if state is None:
        return
    state.watchdog.close()
    if state.owns_records and state.records is not None:
        shutil.rmtree(state.records, ignore_errors=True)


def _named_files(config: pytest.Config) -> set[Path]:
    """Files named on the command line (``tests/a/test_x.py`` or ``tests/a/test_x.py::test_y``)."""
    base = config.invocation_params.dir
    out: set[Path] = set()
    for arg in config.args:
        candidate = (base / arg.split("::", 1)[0]).resolve()
        if candidate.is_file():
            out.add(candidate)
    return out


class RefusedTestFile(pytest.File):
    """Stands in for a test module that must not run; collecting it is an error with ``reason``."""

    reason = ""

    def collect(self):  # type: ignore[override]
        raise self.CollectError(self.reason)


def _unregistered(state: PluginState, rel: str) -> str:
    from ci.registry.writer import suggested_entry  # deferred: only the error path needs it

    roots = ", ".join(f"{r}/" for r in state.registry.project.test_roots)
    return (f"{rel} is not registered in {state.registry.path}; every test file under {roots} needs an "
            f"entry. Add this under 'tests:' (measure est_time, in seconds):\n\n" + suggested_entry(rel, state.registry))


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    state = parent.config.stash.get(STATE, None)
    if state is None:
        return None
    rel = relative_test_path(state, module_path)
    if rel is None:
        return None
    reason = None
    if os.path.realpath(module_path) != os.path.abspath(module_path):
        problem = link_problem(state.root, rel)
        if problem is not None:
            reason = f"{rel} {problem}; refusing to collect it (test code must live in the repository)"
    if reason is None and state.registry.entry(rel) is None:
        reason = _unregistered(state, rel)
    if reason is None:
        return None
    refused = RefusedTestFile.from_parent(parent, path=module_path)
    refused.reason = reason
    return refused


# tryfirst: tier markers must be on the items before pytest's own -m/-k deselection runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash.get(STATE, None)
    if state is None:
        return
    entries: dict[Path, TestEntry | None] = {}
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        if item.path not in entries:
            rel = relative_test_path(state, item.path)
            entries[item.path] = state.registry.entry(rel) if rel is not None else None
        entry = entries[item.path]
        if entry is None:
            kept.append(item)
            continue
        if state.tier is not None and state.tier not in entry.tiers:
            deselected.append(item)
            continue
        _apply(state, item, entry)
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
    budgeted = sorted({e.path for e in entries.values() if e is not None and e.timeout is not None})
    if budgeted and not any(getattr(p, "__name__", "") == "pytest_timeout" for p in config.pluginmanager.get_plugins()):
        raise pytest.UsageError(
            f"the registry gives {', '.join(budgeted[:3])}{' ...' if len(budgeted) > 3 else ''} a timeout, but "
            f"pytest-timeout is not loaded: install it (pip install pytest-timeout) or load it (-p pytest_timeout)")


def _apply(state: PluginState, item: pytest.Item, entry: TestEntry) -> None:
    for tier in entry.tiers:
        item.add_marker(tier)
    if entry.reruns and item.get_closest_marker("flaky") is None:
        # deferred here and below: ci.history.classify compiles some 40 regular expressions at
        # import (about 0.3 G instructions), which a run without reruns or quarantines never uses
        from ci.history.classify import RERUN_EXCEPT
        item.add_marker(pytest.mark.flaky(reruns=entry.reruns, rerun_except=list(RERUN_EXCEPT)))

    quarantine = _quarantine_reason(state, item, entry)
    if quarantine is not None:
        from ci.history.classify import quarantined_reason  # deferred: see above

        item.add_marker(pytest.mark.xfail(strict=False, reason=quarantined_reason(quarantine)))
        item.stash[_QUARANTINED] = quarantine
    elif (entry.status is not Status.ACTIVE and not state.include_inactive
            and item.path.resolve() not in state.named_files):
        issue = f" ({entry.issue})" if entry.issue else ""
        item.add_marker(pytest.mark.skip(
            reason=f"{entry.path} is {entry.status.value} in the registry: {entry.reason}{issue}; "
                   f"run it by naming the file or with --include-inactive"))
        return

    considered = [state.tier] if state.tier is not None else list(entry.tiers)
    reasons: list[str] = []
    for name in considered:
        gap = state.hardware.missing(state.registry.tiers[name])
        if gap is None:
            return
        reasons.append(gap)
    item.add_marker(pytest.mark.skip(reason="; ".join(reasons)))


_QUARANTINED = pytest.StashKey[str]()


def _quarantine_reason(state: PluginState, item: pytest.Item, entry: TestEntry) -> str | None:
    """The registry's reason ``item`` runs non-blocking, or None: a node quarantined on its own,
    or any test of a quarantined file under ``--run-quarantined``."""
    node = entry.quarantined_node(f"{entry.path}::{item.nodeid.split('::', 1)[1]}") if "::" in item.nodeid else None
    if node is not None:
        return node.reason
    if entry.status is Status.QUARANTINED and state.run_quarantined:
        return entry.reason or "quarantined"
    return None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Outermost, after pytest's xfail handling: a quarantined test's xfail reason gets the
    failure's first line, so its JUnit ``<skipped>`` still says what failed."""
    report = yield
    reason = item.stash.get(_QUARANTINED, None)
    if reason is not None and getattr(report, "wasxfail", None) is not None and call.excinfo is not None:
        from ci.history.classify import quarantined_reason  # deferred: see `_apply`

        report.wasxfail = quarantined_reason(reason, f"{call.excinfo.typename}: {call.excinfo.value}")
    return report
