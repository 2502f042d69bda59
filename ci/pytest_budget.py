"""The registry's whole-file ``timeout: S`` (`ci.pytest_plugin`'s hooks for it, found there by name).

Each test's pytest-timeout is what remains of its file's budget in this process (or its own
``@pytest.mark.timeout`` when smaller); once the budget is spent, the file's remaining tests fail
at setup. A `Watchdog` kills the pytest process of a test that outlives its limit by `KILL_GRACE`
and records the timeout where the xdist controller reports it (``pytest_handlecrashitem``), and a
call that ran into its limit takes the processes it started down with it (`ci.running.proctree`).
"""

from __future__ import annotations

import math
import os
import time

import pytest

from ci.pytest_state import STATE, PluginState, relative_test_path
from ci.registry import TestEntry
from ci.running import proctree
from ci.running.watchdog import KILL_GRACE, read_record


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:  # pytest-xdist, on the controller: one per worker
    state = node.config.stash.get(STATE, None)
    if state is not None and state.records is not None:
        node.workerinput["ci_timeout_records"] = str(state.records)


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem: str, report: pytest.TestReport, sched) -> None:  # pytest-xdist
    """A worker killed by a `Watchdog` crashed on purpose: report the timeout it recorded."""
    config = getattr(sched, "config", None)
    state = config.stash.get(STATE, None) if config is not None else None
    if state is None:
        return
    rel = relative_test_path(state, config.rootpath / crashitem.split("::", 1)[0])
    record = read_record(state.records, rel) if rel is not None else None
    if record is not None and record[0] == crashitem:
        report.longrepr = record[1]
        report.when = "call"  # a timeout is the test's failure (JUnit <failure>), not a crash in setup


_EXHAUSTED = pytest.StashKey[str]()
_DEADLINE = pytest.StashKey[float]()  # time.monotonic() at which the test's pytest-timeout fires


def _entry_of(item: pytest.Item) -> tuple[_State, TestEntry] | None:
    state = item.config.stash.get(STATE, None)
    if state is None:
        return None
    rel = relative_test_path(state, item.path)
    entry = state.registry.entry(rel) if rel is not None else None
    return None if entry is None or entry.timeout is None else (state, entry)


# tryfirst wrapper: runs outside pytest-timeout's own wrapper, which reads the marker set here.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    found = _entry_of(item)
    if found is None:
        return (yield)
    state, entry = found
    spent = state.spent.get(item.path, 0.0)
    remaining = entry.timeout - spent
    killed = read_record(state.records, entry.path)
    armed = False
    if killed is not None:  # an earlier worker was killed at this file's budget
        item.stash[_EXHAUSTED] = (f"{entry.path}: the file's timeout of {entry.timeout:g} s (registry.yaml) is "
                                  f"used up ({killed[0]} was killed at it); not running this test")
    elif remaining < 0.001:  # each test's limit is whole ms below what is left, so this is "all spent"
        item.stash[_EXHAUSTED] = (f"{entry.path}: the file's timeout of {entry.timeout:g} s (registry.yaml) is "
                                  f"used up ({spent:.1f} s spent by its earlier tests here); not running this test")
    else:
        own = item.get_closest_marker("timeout")
        own_seconds = (own.args[0] if own.args else own.kwargs.get("timeout")) if own is not None else None
        left = max(0.001, math.floor(remaining * 1000) / 1000)  # whole ms, never more than is left
        seconds = left if not own_seconds or own_seconds <= 0 else min(float(own_seconds), left)
        kwargs = {k: v for k, v in (own.kwargs.items() if own is not None else ()) if k != "timeout"}
        item.add_marker(pytest.mark.timeout(seconds, **kwargs), append=False)
        armed = _arm(state, item, entry, left + KILL_GRACE)
        item.stash[_DEADLINE] = time.monotonic() + seconds
    start = time.monotonic()
    try:
        return (yield)
    finally:
        if armed:
            state.watchdog.disarm()
        state.spent[item.path] = spent + (time.monotonic() - start)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A call that ran into its limit takes down the processes it started and left running (the
    watchdog made this process their subreaper), never those here before it, such as a session
    fixture's server: else they outlive it, and under xdist hold the worker's pipes open."""
    deadline = item.stash.get(_DEADLINE, None)
    if deadline is None:
        return (yield)
    before = proctree.children(os.getpid())
    timed_out = False
    try:
        return (yield)
    except pytest.fail.Exception as exc:
        # pytest-timeout's own verdict: its timer may have started before _DEADLINE was taken
        timed_out = str(exc).startswith("Timeout")
        raise
    finally:
        if timed_out or time.monotonic() >= deadline:
            proctree.kill_tree(proctree.children(os.getpid()) - before, spare=before)


def _arm(state: PluginState, item: pytest.Item, entry: TestEntry, seconds: float) -> bool:
    """Arm the kill of this process ``seconds`` from now (`ci.running.watchdog`); False (and a
    warning) when its helper cannot start: pytest-timeout's signal still applies."""
    if not state.watchdog.started():
        capman = item.config.pluginmanager.getplugin("capturemanager")
        try:
            if capman is not None:  # the helper inherits stderr: the real one, not this test's capture
                with capman.global_and_fixture_disabled():
                    state.watchdog.start()
            else:
                state.watchdog.start()
        except OSError as exc:
            item.warn(pytest.PytestWarning(f"cannot start the timeout watchdog ({exc}): a test that ignores "
                                           f"pytest-timeout's signal will not be killed"))
            return False
    state.watchdog.arm(seconds, entry.path, item.nodeid,
                       f"Timeout: {item.nodeid} ran past its file's timeout of {entry.timeout:g} s (registry.yaml) "
                       f"and did not stop at pytest-timeout's signal (it caught it, or is stuck in C code): "
                       f"killed with its pytest process", state.records)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    message = item.stash.get(_EXHAUSTED, None)
    if message is not None:
        pytest.fail(message, pytrace=False)
