"""A timed-out test's processes die with it (issue #32): a grandchild it forked, or one that called
``setsid`` behind a double fork, no longer outlives the run, and under xdist no longer keeps the
controller waiting for the worker's pipes (two such grandchildren sleeping 120 s made a 2 s budget
take minutes). Real `ci run` processes on a throw-away repository; every grandchild names itself
with a fresh mark, so "gone" is checked on that very process, never on a reused pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Callable

import pytest

from ci.running import proctree
from tests.ci.tree_testutil import CPU_REGISTRY_HEAD, write

REPO = Path(__file__).resolve().parents[2]
SLEEP = 120  # what a leaked grandchild would hold the run for
BOUND = 60   # seconds `ci run` may take here; far below SLEEP

# Each test starts two sleepers: a plain fork, and a double fork whose middle process calls setsid
# and exits, so the sleeper is in no process group or session of pytest's and has lost its parent.
FORKS = """\
import ctypes, os, time

def sleeper():
    # no exec: a forked copy of the worker keeps its pipes to the xdist controller open
    ctypes.CDLL(None).prctl(15, os.environ["CI_TREE_MARK"].encode(), 0, 0, 0)  # PR_SET_NAME
    time.sleep({sleep})
    os._exit(0)

def start_grandchildren():
    if os.fork() == 0:
        sleeper()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            sleeper()
        os._exit(0)
    os.waitpid(middle, 0)
    time.sleep(0.5)  # both have their names: the test finds them by it

def named(mark):
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except (OSError, ValueError):
            continue
        if stat[stat.index(b"(") + 1:stat.rindex(b")")] == mark.encode() and stat[stat.rindex(b")") + 2:][:1] != b"Z":
            found.append(int(name))
    return found

def swallow_timeouts(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except BaseException:  # pytest-timeout's Failed too: the watchdog has to kill pytest
            pass
""".replace("{sleep}", str(SLEEP))
FILES = {
    "registry.yaml": CPU_REGISTRY_HEAD + """\
  tests/test_signal.py: {tiers: [cpu], est_time: 1, timeout: 2, owner: me, status: active}
  tests/test_killed.py: {tiers: [cpu], est_time: 1, timeout: 2, owner: me, status: active}
  tests/test_after.py: {tiers: [cpu], est_time: 1, owner: me, status: active}
  tests/test_leak.py: {tiers: [cpu], est_time: 1, owner: me, status: active}
  tests/test_long.py: {tiers: [cpu], est_time: 1, owner: me, status: active}
""",
    "tests/forks.py": FORKS,
    "tests/conftest.py": "import os, sys\nsys.path.insert(0, os.path.dirname(__file__))\n",
    # pytest-timeout's signal fails this one cleanly; pytest goes on
    "tests/test_signal.py": """\
        import time
        from forks import start_grandchildren

        def test_forks_then_runs_out_of_time():
            start_grandchildren()
            time.sleep(60)
        """,
    # runs after test_signal.py in one process: its grandchildren must be gone by then
    "tests/test_after.py": """\
        import os
        from forks import named

        def test_the_timed_out_tests_grandchildren_are_gone():
            assert named(os.environ["CI_TREE_MARK"]) == []
        """,
    # passes, leaving its grandchildren running
    "tests/test_leak.py": """\
        from forks import start_grandchildren

        def test_leaves_grandchildren_behind():
            start_grandchildren()
        """,
    # sleeps until ci run is signalled
    "tests/test_long.py": """\
        import time

        def test_sleeps():
            open("started", "w").close()
            time.sleep(60)
        """,
    # this one swallows the signal: the watchdog kills its pytest process
    "tests/test_killed.py": """\
        from forks import start_grandchildren, swallow_timeouts

        def test_forks_then_ignores_the_timeout():
            start_grandchildren()
            swallow_timeouts(60)
        """,
}


def new_mark() -> str:
    """A process name (15 bytes at most) no other process here has."""
    return f"ct{uuid.uuid4().hex[:13]}"


_FORKS: dict[str, Any] = {}
exec(FORKS, _FORKS)  # one finder for the tree's tests and these
sleepers: Callable[[str], list[int]] = _FORKS["named"]  # the live (not zombie) processes named so


def ci_run(root: Path, mark: str, *args: str) -> tuple[int | None, str, float]:
    """`python -m ci run ARGS` in ``root``: its exit status (None: still running after `BOUND`
    seconds, when its whole session is killed), its output and how long it ran. The output goes to
    a file, not a pipe, so a leaked process holding it open cannot stretch the time measured."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CI_TREE_MARK": mark, "CI_HARDWARE_OVERRIDE": "none"}
    log = root / "ci-run.log"
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ci", "run", *args], cwd=root, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc: int | None = proc.wait(timeout=BOUND)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rc = None
    return rc, log.read_text(), time.monotonic() - start


@pytest.fixture
def tree(tmp_path: Path):
    """The repository and the mark its sleepers carry; any sleeper still alive at the end is killed."""
    write(tmp_path, FILES)
    mark = new_mark()
    yield tmp_path, mark
    for pid in sleepers(mark):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the sleepers through /proc")
@pytest.mark.parametrize("workers", ["2", "0"])
def test_no_grandchild_of_a_timed_out_test_outlives_ci_run(tree, workers: str) -> None:
    root, mark = tree
    rc, out, elapsed = ci_run(root, mark, "--workers", workers, "tests/test_signal.py", "tests/test_killed.py")
    assert rc is not None, f"ci run --workers {workers} still running after {BOUND} s:\n{out}"
    assert elapsed < BOUND
    assert sleepers(mark) == [], f"grandchildren outlived ci run --workers {workers}:\n{out}"
    assert "+++ Timeout: tests/test_killed.py::test_forks_then_ignores_the_timeout ran past" in out
    if workers == "2":  # the run went on past the kill, to a report of both
        assert rc == 1, out
        cases = {c.get("name"): c for c in ET.parse(root / ".ci-reports/junit-explicit.xml").iter("testcase")}
        assert "Timeout" in cases["test_forks_then_runs_out_of_time"].find("failure").get("message")
        assert "Timeout" in cases["test_forks_then_ignores_the_timeout"].find("failure").get("message")
    else:  # the first test failed at its limit, the second was killed with pytest
        assert "tests/test_signal.py F" in out
        assert "ci run: pytest exited -9 and wrote no JUnit report" in out and rc != 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the sleepers through /proc")
def test_plain_pytest_kills_what_a_timed_out_test_left_before_the_next_test(tree) -> None:
    """Not only `ci run`: the plugin itself ends the grandchildren of a test that ran into its
    limit, as soon as the test is over."""
    root, mark = tree
    env = {**os.environ, "PYTHONPATH": str(REPO), "CI_TREE_MARK": mark, "CI_HARDWARE_OVERRIDE": "none"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "-p", "no:cacheprovider",
                           "-n", "0", "tests/test_signal.py", "tests/test_after.py"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=BOUND)
    assert "1 failed, 1 passed" in proc.stdout, proc.stdout + proc.stderr
    assert "FAILED tests/test_signal.py::test_forks_then_runs_out_of_time" in proc.stdout
    assert "Failed: Timeout (>2.0s) from pytest-timeout" in proc.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the sleepers through /proc")
def test_ci_run_leaves_nothing_behind_even_from_a_passing_test(tree) -> None:
    root, mark = tree
    rc, out, _ = ci_run(root, mark, "--workers", "0", "tests/test_leak.py")
    assert rc == 0, out
    assert sleepers(mark) == [], out


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize(("signum", "started_ignoring"), [
    (signal.SIGINT, False), (signal.SIGTERM, False),
    # a shell script's background job starts with SIGINT ignored: pytest must not inherit that
    (signal.SIGINT, True)], ids=["SIGINT", "SIGTERM", "SIGINT-from-a-background-job"])
def test_a_signal_to_ci_run_reaches_pytest_in_its_own_session(tree, signum: int, started_ignoring: bool) -> None:
    """pytest runs in a session of its own, out of the terminal's reach: `ci run` passes SIGINT
    (Ctrl-C) and SIGTERM (a CI runner cancelling the job) on, so no test runs on without it."""
    root, mark = tree
    env = {**os.environ, "PYTHONPATH": str(REPO), "CI_HARDWARE_OVERRIDE": "none"}
    proc = subprocess.Popen([sys.executable, "-m", "ci", "run", "--workers", "0", "tests/test_long.py"], cwd=root,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_ignore_sigint if started_ignoring else None)
    try:
        deadline = time.monotonic() + BOUND
        while not (root / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pytest_pid = next(pid for pid in proctree.children(proc.pid))
        os.kill(proc.pid, signum)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # seen once in a loaded fresh-clone run: say where each stood
            pytest.fail(f"ci run still running 30 s after {signal.Signals(signum).name}:\n"
                        + "\n".join(_signal_state(pid) for pid in (proc.pid, pytest_pid)))
    finally:
        os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
    if signum == signal.SIGINT:  # pytest stops the test, reports, and ci run summarises as usual
        assert "KeyboardInterrupt" in out and proc.returncode == 2, out
    else:  # ci run ends by the signal, as it did when pytest shared its process group
        assert proc.returncode == -signal.SIGTERM, out
    with pytest.raises(ProcessLookupError):
        os.kill(pytest_pid, 0)


def _signal_state(pid: int) -> str:
    """One process's state, signal masks, threads and kernel wait channel, from /proc."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        keep = [line for line in status.splitlines() if line.split(":")[0] in
                ("Name", "State", "Threads", "SigQ", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")]
        wchan = Path(f"/proc/{pid}/wchan").read_text()
        return f"pid {pid}: {'; '.join(keep)}; wchan {wchan}"
    except OSError as exc:
        return f"pid {pid}: {exc}"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and the subreaper are Linux's")
def test_kill_tree_stops_a_forking_tree_and_catches_its_orphans() -> None:
    """A subreaper (as pytest is once its watchdog runs) that forks children in a loop, each of
    which double-forks a setsid'd sleeper and exits: `kill_tree` of it leaves nothing alive, though
    the tree grows while it is walked and each dead middle process hands its sleeper on."""
    mark = new_mark()
    code = ("import ctypes, os, sys, time\n"
            f"sys.path.insert(0, {str(REPO)!r})\n"
            "from ci.running.proctree import set_subreaper\n"
            "assert set_subreaper(True) is False\n"
            "while True:\n"
            "    if os.fork() == 0:\n"
            "        os.setsid()\n"
            "        if os.fork() == 0:\n"
            f"            ctypes.CDLL(None).prctl(15, {mark.encode()!r}, 0, 0, 0)\n"
            f"            time.sleep({SLEEP})\n"
            "        os._exit(0)\n"
            "    time.sleep(0.001)\n")
    spawner = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 20
        while len(sleepers(mark)) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(sleepers(mark)) >= 5
        assert set(sleepers(mark)) <= proctree.descendants(spawner.pid), "the orphans were not handed to it"
        killed = proctree.kill_tree([spawner.pid])
        assert spawner.pid in killed and set(sleepers(mark)) <= killed
        assert spawner.wait(timeout=10) == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while sleepers(mark) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sleepers(mark) == []
    finally:
        spawner.kill()
        spawner.wait()
        for pid in sleepers(mark):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_proc_scan_reads_a_parent_past_a_name_with_parentheses() -> None:
    """The fallback for kernels without ``/proc/<pid>/task/<tid>/children`` reads each
    ``/proc/<pid>/stat``, whose second field (the command name) may hold ``) (`` and spaces."""
    code = ("import ctypes, sys, time\n"
            "ctypes.CDLL(None).prctl(15, b'a) b (c', 0, 0, 0)\n"  # PR_SET_NAME
            "print('ready', flush=True)\n"
            "time.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        assert Path(f"/proc/{child.pid}/comm").read_text() == "a) b (c\n"
        assert proctree._parents()[child.pid] == os.getpid()
        assert child.pid in proctree.children(os.getpid())
    finally:
        child.kill()
        child.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads process states in /proc")
def test_kill_tree_returns_only_once_what_it_killed_is_dead() -> None:
    """A SIGKILLed process dies when the scheduler next runs it; kill_tree waits for that, so the
    next test (or the next line) never sees one of them alive. Forty stopped sleepers make the
    window wide enough to see without the wait."""
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(40)]
    try:
        for proc in procs:
            os.kill(proc.pid, signal.SIGSTOP)
        killed = proctree.kill_tree([p.pid for p in procs])
        states = {}
        for proc in procs:
            with open(f"/proc/{proc.pid}/stat", "rb") as handle:  # still ours to reap: a zombie at most
                data = handle.read()
            states[proc.pid] = data[data.rindex(b")") + 2:][:1].decode()
        assert killed == {p.pid for p in procs}
        assert set(states.values()) <= {"Z", "X"}, states
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
