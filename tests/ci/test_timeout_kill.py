"""`timeout:` kills (issue #22): a test that swallows pytest-timeout's signal, or sits in C code
that never returns to the interpreter, is killed at its file's budget and reported as a timeout.
Real pytest subprocesses: the kill ends a process, so nothing here can run in-process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]

REGISTRY = """\
version: 1
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
tests:
  tests/test_swallow.py: {tiers: [cpu], est_time: 1, timeout: 1, owner: me, status: active}
  tests/test_c_loop.py: {tiers: [cpu], est_time: 1, timeout: 1, owner: me, status: active}
  tests/test_quick.py: {tiers: [cpu], est_time: 1, timeout: 1, owner: me, status: active}
  tests/test_slow_unbudgeted.py: {tiers: [cpu], est_time: 4, owner: me, status: active}
  tests/test_crash.py: {tiers: [cpu], est_time: 4, timeout: 2, owner: me, status: active}
"""
SWALLOW = """\
import time

def test_swallows_the_timeout():
    end = time.monotonic() + 30  # without the kill: passes after 30 s
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except BaseException:  # pytest-timeout's Failed too
            pass

def test_after_the_kill():
    pass
"""
C_LOOP = """\
def test_c_loop():
    sum(range(6 * 10**8))  # ~15 s in C: the signal handler runs only when it returns
"""

QUICK = """\
def test_quick():
    pass
"""
SLOW_UNBUDGETED = """\
import time

def test_slower_than_the_quick_files_budget():
    time.sleep(3)  # past the 1 s (+1 s grace) the quick test armed the watchdog with
"""
# Four tests on two workers: xdist's load scheduling sends the first two named to one worker and
# the last two to the other. One worker runs test_killed (killed at its budget, which writes the
# file's record); the other first sleeps in an unbudgeted file, then runs test_crashes, which waits
# for that record and then crashes its worker: a crash, in a file whose record names another test.
CRASH = """\
import os, signal, time
from pathlib import Path

from ci.running.watchdog import record_path

def test_killed():
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except BaseException:
            pass

def test_crashes(request):
    record = record_path(Path(request.config.workerinput["ci_timeout_records"]), "tests/test_crash.py")
    end = time.monotonic() + 30
    while not record.exists() and time.monotonic() < end:
        try:
            time.sleep(0.05)
        except BaseException:
            pass
    os.kill(os.getpid(), signal.SIGKILL)
"""
CRASH_DELAY = """\
import time

def test_delay():
    # test_crashes then starts 1.5 s after test_killed: while it runs and before its kill (2 s + 1 s),
    # with 1.5 s to spare either way (3 s was a dead heat with the kill: a loaded machine lost it)
    time.sleep(1.5)
"""


def make_repo(root: Path) -> None:
    (root / "tests").mkdir(parents=True)
    (root / "registry.yaml").write_text(REGISTRY.replace(
        "tests:\n", "tests:\n  tests/test_delay.py: {tiers: [cpu], est_time: 3, owner: me, status: active}\n"))
    (root / "tests/test_swallow.py").write_text(SWALLOW)
    (root / "tests/test_c_loop.py").write_text(C_LOOP)
    (root / "tests/test_quick.py").write_text(QUICK)
    (root / "tests/test_slow_unbudgeted.py").write_text(SLOW_UNBUDGETED)
    (root / "tests/test_crash.py").write_text(CRASH)
    (root / "tests/test_delay.py").write_text(CRASH_DELAY)


def pytest(root: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "CI_HARDWARE_OVERRIDE": "none"}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "-p", "pytest_timeout",
                           "-p", "no:cacheprovider", "-o", "junit_family=xunit1", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - start


def test_under_xdist_each_is_killed_at_its_budget_and_reported_as_a_timeout(tmp_path):
    make_repo(tmp_path)
    # the swallowing file first: its second test is then still to run when the first is killed
    proc, _ = pytest(tmp_path, "-p", "xdist", "-n", "1", "--junitxml=junit.xml", "tests/test_swallow.py",
                           "tests/test_c_loop.py")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    # Killed, not run out: only the kill writes the messages below (a bound on the wall-clock time
    # was no proof: 8 s idle, 46 s with the workers descheduled 60 % of the time, 45 s unkilled).
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    for name, file in (("test_swallows_the_timeout", "test_swallow.py"), ("test_c_loop", "test_c_loop.py")):
        failure = cases[name].find("failure")
        assert failure is not None, ET.tostring(cases[name])
        assert (f"Timeout: tests/{file}::{name} ran past its file's timeout of 1 s (registry.yaml) and did not stop "
                f"at pytest-timeout's signal") in failure.get("message", "") + (failure.text or "")
    # The rest of the file, on the next worker: its budget is spent, so it fails at setup.
    error = cases["test_after_the_kill"].find("error")
    assert error is not None and "tests/test_swallow.py::test_swallows_the_timeout was killed at it" in (
        error.get("message", "") + (error.text or "")), ET.tostring(cases["test_after_the_kill"])


def test_without_xdist_the_pytest_process_is_killed_at_the_budget(tmp_path):
    make_repo(tmp_path)
    proc, _ = pytest(tmp_path, "tests/test_swallow.py")
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr  # run out, it would pass (exit 0)
    assert ("+++ Timeout: tests/test_swallow.py::test_swallows_the_timeout ran past its file's timeout of 1 s "
            "(registry.yaml)") in proc.stderr


def test_a_test_that_ends_in_time_disarms_the_watchdog(tmp_path):
    """The quick test arms the kill for 1 s + grace; once it is over, the slower test of an
    unbudgeted file after it, in the same process, runs as long as it needs."""
    make_repo(tmp_path)
    proc, _ = pytest(tmp_path, "tests/test_quick.py", "tests/test_slow_unbudgeted.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout


def test_a_crash_is_not_reported_as_another_tests_timeout(tmp_path):
    """A worker that dies on its own, in a file whose record names a test killed at the budget,
    is reported as xdist reports a crash, not with that other test's timeout."""
    make_repo(tmp_path)
    proc, _ = pytest(tmp_path, "-p", "xdist", "-n", "2", "--junitxml=junit.xml", "tests/test_crash.py::test_killed",
                     "tests/test_quick.py", "tests/test_delay.py", "tests/test_crash.py::test_crashes")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    killed = cases["test_killed"].find("failure")
    assert "Timeout: tests/test_crash.py::test_killed ran past its file's timeout of 2 s" in killed.get("message")
    crashed = cases["test_crashes"].find("failure")
    if crashed is None:
        crashed = cases["test_crashes"].find("error")
    text = crashed.get("message", "") + (crashed.text or "")
    assert "crashed while running 'tests/test_crash.py::test_crashes'" in text, ET.tostring(cases["test_crashes"])
    assert "Timeout" not in text
