"""The recorder's kill guard (`ci.observe.live`): a SIGKILL or SIGSTOP of a recorded
process first asks it to flush what it ran, all the processes one signal or one round of
`ci.running.proctree.kill_tree` reaches at once. Real recorded children where a process must
answer; marks for pids above Linux's largest pid_max where nothing may be signalled."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from ci.observe import live, slipcover_core
from ci.running import proctree
from ci.running.proctree import process_state
from tests.ci.depmap_child_support import child_argv, child_env, project, recorded_lines

pytestmark = pytest.mark.skipif(not slipcover_core.available(), reason="slipcover is not installed")
NOBODY = 2 ** 22 + 4096  # above Linux's largest pid_max: no such process, ever


@contextlib.contextmanager
def _sleeping_child(root: Path, parts: Path) -> Iterator[subprocess.Popen]:
    """A recorded child that ran ``work(2)``, said ready and sleeps; killed when the block ends."""
    body = "import time; from pkg.work import work; work(2); print('ready', flush=True); time.sleep(60)"
    child = subprocess.Popen(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        yield child
    finally:
        child.kill()
        child.wait()


def _wait_state(pid: int, state: str, seconds: float = 10.0) -> str | None:
    deadline = time.monotonic() + seconds
    while process_state(pid) != state and time.monotonic() < deadline:
        time.sleep(0.01)
    return process_state(pid)


def test_a_kill_waits_for_the_flush_it_asked_for_and_leaves_the_mark_when_none_comes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "FLUSH_WAIT", 0.3)
    pid = 4_000_000  # marks only: nothing is killed here
    (tmp_path / f"live.{pid}").write_text("tests/test_a.py")
    (tmp_path / f"flushes.{pid}").write_text("")
    started = time.monotonic()
    live.flush_before(str(tmp_path), [pid], stopping=False)  # nobody answers
    assert time.monotonic() - started >= 0.3
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"flushes.{pid}", f"live.{pid}"]
    assert live.unsaved_tests(tmp_path) == {"tests/test_a.py"}

    def flusher() -> None:  # what a child's flusher does: write, then take the request away (not
        request = tmp_path / f"flush.{pid}"  # `acknowledge`: it would stop this process)
        while not request.exists():
            time.sleep(0.005)
        request.unlink()

    answering = threading.Thread(target=flusher)
    answering.start()
    live.flush_before(str(tmp_path), [pid], stopping=False)
    answering.join()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"killed.{pid}"]
    assert live.unsaved_tests(tmp_path) == set()
    (tmp_path / f"live.{pid + 1}").write_text("tests/test_b.py")  # coverage.py's child: no flusher
    started = time.monotonic()
    live.flush_before(str(tmp_path), [pid + 1], stopping=False)
    assert time.monotonic() - started < 0.3 and live.unsaved_tests(tmp_path) == {"tests/test_b.py"}


def test_a_tree_frozen_before_it_is_killed_is_flushed_at_the_stop_and_never_waited_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ci.running.proctree.kill_tree` sends SIGSTOP to a whole tree, then SIGKILL: a stopped
    process cannot answer a flush request, and waiting for one cost 5 s per process."""
    root, parts = project(tmp_path)
    with _sleeping_child(root, parts) as child:
        live._before_signal(str(parts), [child.pid], signal.SIGSTOP)  # asks, it answers: then stop
        os.kill(child.pid, signal.SIGSTOP)
        assert (parts / f"stopped.{child.pid}").exists()
        monkeypatch.setattr(live, "FLUSH_WAIT", 30.0)
        assert _wait_state(child.pid, "T") == "T"
        live._before_signal(str(parts), [child.pid], signal.SIGSTOP)  # kill_tree stops twice: still live
        assert (parts / f"live.{child.pid}").exists() and (parts / f"stopped.{child.pid}").exists()
        started = time.monotonic()
        live._before_signal(str(parts), [child.pid], signal.SIGKILL)
        assert time.monotonic() - started < 1.0  # stopped: not waited for
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    assert live.unsaved_tests(parts) == set()  # flushed at the stop: ended whole
    assert recorded_lines(parts) == {"tests/test_x.py": {"__init__.py": [0], "work.py": [1, 2, 3, 4, 5, 8]}}


def test_kill_tree_inside_a_recording_keeps_the_frozen_childs_lines_without_waiting(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    body = textwrap.dedent("""\
        import subprocess, sys, time
        from ci.running.proctree import kill_tree
        code = "import time; from pkg.work import work; work(3); print('ready', flush=True); time.sleep(60)"
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "ready"
        started = time.monotonic()
        kill_tree([child.pid])
        child.wait()
        print(f"{time.monotonic() - started:.2f}")
        """)
    proc = subprocess.run(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout) < 4.0  # a flush at the stop, none waited for at the kill (FLUSH_WAIT is 5 s)
    assert live.unsaved_tests(parts) == set()
    assert recorded_lines(parts)["tests/test_x.py"]["work.py"] == [1, 2, 3, 4, 5, 8]


def test_a_process_stopped_without_a_flush_is_not_waited_for_and_stays_unsaved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "FLUSH_WAIT", 30.0)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f"live.{sleeper.pid}").write_text("tests/test_a.py")
        (tmp_path / f"flushes.{sleeper.pid}").write_text("")
        (tmp_path / f"stopped.{sleeper.pid}").write_text("")
        live._before_signal(str(tmp_path), [sleeper.pid], signal.SIGCONT)  # continued: the mark goes
        assert not (tmp_path / f"stopped.{sleeper.pid}").exists()
        os.kill(sleeper.pid, signal.SIGSTOP)  # by someone the recording does not see
        deadline = time.monotonic() + 10
        while process_state(sleeper.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        started = time.monotonic()
        live._before_signal(str(tmp_path), [sleeper.pid], signal.SIGKILL)
        assert time.monotonic() - started < 1.0
    finally:
        sleeper.kill()
        sleeper.wait()
    assert live.unsaved_tests(tmp_path) == {"tests/test_a.py"}  # what it ran last may be lost
    assert process_state(4_000_000) is None


def test_a_wait_ends_when_the_process_is_stopped_from_elsewhere_and_a_continued_one_is_asked_anew(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # never answers
    try:
        (tmp_path / f"live.{sleeper.pid}").write_text("tests/test_a.py")
        (tmp_path / f"flushes.{sleeper.pid}").write_text("")
        monkeypatch.setattr(live, "FLUSH_WAIT", 30.0)
        stopper = threading.Timer(0.3, os.kill, (sleeper.pid, signal.SIGSTOP))
        stopper.start()
        started = time.monotonic()
        live._before_signal(str(tmp_path), [sleeper.pid], signal.SIGKILL)
        stopper.join()
        assert time.monotonic() - started < 5.0  # not the 30 s of FLUSH_WAIT
        assert not (tmp_path / f"flush.{sleeper.pid}").exists()
        os.kill(sleeper.pid, signal.SIGCONT)  # from outside the guard: its stopped mark would be stale
        (tmp_path / f"stopped.{sleeper.pid}").write_text("")
        monkeypatch.setattr(live, "FLUSH_WAIT", 0.3)
        live._before_signal(str(tmp_path), [sleeper.pid], signal.SIGKILL)
        assert not (tmp_path / f"stopped.{sleeper.pid}").exists()  # running: asked anew, no answer
    finally:
        sleeper.kill()
        sleeper.wait()
    assert live.unsaved_tests(tmp_path) == {"tests/test_a.py"}


def test_a_group_kill_finds_the_recorded_members_of_the_group(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        (tmp_path / f"flushes.{child.pid}").write_text("")
        (tmp_path / f"flushes.{os.getpid()}").write_text("")  # another group: this test's own
        (tmp_path / "flushes.nonsense").write_text("")
        assert live._group_members(str(tmp_path), child.pid) == [child.pid]
    finally:
        child.kill()
        child.wait()


def test_one_signal_to_many_asks_them_all_before_it_waits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The flusher here answers only once every request is there at the same time: asked one
    after another, the first would wait in vain and none would count as flushed."""
    monkeypatch.setattr(live, "FLUSH_WAIT", 3.0)
    pids = [NOBODY + i for i in range(5)]
    for pid in pids:
        (tmp_path / f"live.{pid}").write_text("tests/test_a.py")
        (tmp_path / f"flushes.{pid}").write_text("")
    (tmp_path / f"live.{NOBODY + 9}").write_text("tests/test_b.py")  # cannot flush: not asked
    said: dict[int, bytes] = {}

    def flushers() -> None:
        requests = [tmp_path / f"flush.{pid}" for pid in pids]
        deadline = time.monotonic() + 10
        while not all(r.exists() for r in requests) and time.monotonic() < deadline:
            time.sleep(0.005)
        for pid, request in zip(pids, requests):
            said[pid] = request.read_bytes()
            request.unlink()

    asked: list[int] = []
    ask = live._ask
    monkeypatch.setattr(live, "_ask", lambda parts, pid: asked.append(pid) or ask(parts, pid))
    answering = threading.Thread(target=flushers)
    answering.start()
    live.flush_before(str(tmp_path), [*pids, pids[0], NOBODY + 9], stopping=True)
    answering.join()
    # each once: a second request, written after the first was answered, would go unanswered
    assert sorted(asked) == pids
    assert said == {pid: b"stop" for pid in pids}  # asked by another process: stop once flushed
    assert sorted(p.name for p in tmp_path.glob("stopped.*")) == sorted(f"stopped.{pid}" for pid in pids)
    assert not list(tmp_path.glob("flush.*")) and not list(tmp_path.glob(".flush.*"))  # no draft left
    assert live.unsaved_tests(tmp_path) == {"tests/test_a.py", "tests/test_b.py"}  # not killed yet


def test_the_guard_takes_kill_tree_s_rounds_whole_from_any_copy_of_it(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # on the wrapped os.kill, where every copy of proctree finds it (`test_process_tree_stop`)
    # nothing is signalled here; and a recording of this very test has wrapped the real ones already
    monkeypatch.setattr(os, "kill", lambda pid, sig: None)
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: None)
    rounds: list[tuple[str, list[int], bool]] = []
    monkeypatch.setattr(live, "flush_before",
                        lambda parts, pids, stopping=False: rounds.append((parts, list(pids), stopping)))
    recording: list[str | None] = [str(tmp_path)]
    live.guard_kills(lambda: recording[0])
    before_stopping = getattr(os.kill, proctree.BEFORE_STOPPING)
    before_stopping([NOBODY, NOBODY + 1])
    assert rounds == [(str(tmp_path), [NOBODY, NOBODY + 1], True)]
    recording[0] = None  # the recording is over: nothing to ask
    before_stopping([NOBODY])
    assert len(rounds) == 1


def test_a_child_asked_before_a_stop_stops_itself_once_flushed(tmp_path: Path) -> None:
    """Nothing the child runs after its flush is lost: it stops itself right after answering,
    before the asker's own SIGSTOP (never sent here) could land."""
    root, parts = project(tmp_path)
    with _sleeping_child(root, parts) as child:
        assert live.unsaved_tests(parts) == {"tests/test_x.py"} and live.left_live(parts, child.pid)
        live.flush_before(str(parts), [child.pid], stopping=True)
        assert (parts / f"stopped.{child.pid}").exists()  # it answered
        assert _wait_state(child.pid, "T") == "T"  # and stopped itself
        live.flush_before(str(parts), [child.pid], stopping=False)  # the kill: stopped, not asked
        assert (parts / f"killed.{child.pid}").exists() and not live.left_live(parts, child.pid)
        assert not list(parts.glob("stopped.*"))  # a later process with its pid would not be taken as stopped
    assert live.unsaved_tests(parts) == set()
    assert recorded_lines(parts) == {"tests/test_x.py": {"__init__.py": [0], "work.py": [1, 2, 3, 4, 5, 8]}}


def test_a_child_that_kills_itself_flushes_first_and_does_not_stop_itself(tmp_path: Path) -> None:
    """Its own guard asks its own flusher: a stop there would freeze the asker with it."""
    root, parts = project(tmp_path)
    body = "import os, signal\nfrom pkg.work import work\nwork(2)\nos.kill(os.getpid(), signal.SIGKILL)"
    proc = subprocess.run(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len(list(parts.glob("killed.*"))) == 1 and live.unsaved_tests(parts) == set()
    assert recorded_lines(parts) == {"tests/test_x.py": {"__init__.py": [0], "work.py": [1, 2, 3, 4, 5, 8]}}


def test_a_process_waiting_for_answers_of_its_own_answers_without_stopping(tmp_path: Path) -> None:
    """Two recorded processes killing each other at once: each waits for the other's answer, so
    neither may stop itself when it answers, or both would stay stopped for good."""
    root, parts = project(tmp_path)
    body = textwrap.dedent(f"""\
        import os, pathlib
        from ci.observe import live
        parts = os.environ["CI_DEPMAP_PARTS"]
        pathlib.Path(parts, "live.{NOBODY}").write_text("tests/test_b.py")
        pathlib.Path(parts, "flushes.{NOBODY}").write_text("")
        live.FLUSH_WAIT = 60.0
        live.flush_before(parts, [{NOBODY}], stopping=False)  # nobody answers
        """)
    child = subprocess.Popen(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root)
    try:
        deadline = time.monotonic() + 30
        while not (parts / f"flush.{NOBODY}").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert (parts / f"flush.{NOBODY}").exists()  # it is waiting
        live.flush_before(str(parts), [child.pid], stopping=True)
        assert (parts / f"stopped.{child.pid}").exists()  # it answered
        assert _wait_state(child.pid, "T", 1.0) != "T"  # and runs on
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("call", ["kill 0", "kill -1", "killpg", "stop"])
def test_every_form_of_a_guarded_signal_asks_the_recorded_processes_it_reaches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str) -> None:
    # nothing is signalled: the guard wraps stand-ins of os.kill and os.killpg
    monkeypatch.setattr(os, "kill", lambda pid, sig: None)
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: None)
    asked: list[tuple[list[int], bool]] = []
    monkeypatch.setattr(live, "flush_before",
                        lambda parts, pids, stopping=False: asked.append((list(pids), stopping)))
    live.guard_kills(lambda: str(tmp_path))
    me = os.getpid()
    (tmp_path / f"flushes.{me}").write_text("")  # this process: a recorded member of its own group
    signals = {"kill 0": lambda: os.kill(0, signal.SIGKILL),  # this process's group
               "kill -1": lambda: os.kill(-1, signal.SIGKILL),  # every process it may signal: its group too
               "killpg": lambda: os.killpg(os.getpgid(0), signal.SIGKILL),
               "stop": lambda: os.kill(me, signal.SIGSTOP)}
    signals[call]()
    assert asked == [([me], call == "stop")]


def test_a_recording_that_ends_while_its_guard_waits_ends_the_wait_quietly(tmp_path: Path) -> None:
    parts = tmp_path / "parts"
    parts.mkdir()
    (parts / f"live.{NOBODY}").write_text("tests/test_a.py")
    (parts / f"flushes.{NOBODY}").write_text("")

    def end_recording() -> None:
        deadline = time.monotonic() + 10
        while not (parts / f"flush.{NOBODY}").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        shutil.rmtree(parts)
        parts.write_text("")  # its name now a file: taking the request back fails with NotADirectoryError

    ending = threading.Thread(target=end_recording)
    ending.start()
    live.flush_before(str(parts), [NOBODY], stopping=False)  # never raises for the file system
    ending.join()
    assert parts.is_file()


_MARK_IN_A_CHILD = textwrap.dedent("""\
    import os, resource, signal, sys
    from ci.observe import live
    opened = []
    sys.addaudithook(lambda event, args: opened.append((event, str(args[0]), str(args[1])))
                     if event == "open" and "live." in str(args[0]) else None)
    if sys.argv[2] == "full":  # a full disk: the mark's file can be created, not written
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    live.mark_live(sys.argv[1], "tests/test_x.py", flushes=False)
    written = [path for _, path, mode in opened if "w" in mode or "a" in mode or "x" in mode]
    print(os.getpid(), *written)
    """)


def _mark_in_a_child(parts: Path, disk: str) -> tuple[int, list[str]]:
    out = subprocess.run([sys.executable, "-c", _MARK_IN_A_CHILD, str(parts), disk], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert out.returncode == 0, out.stderr
    pid, *written = out.stdout.split()
    return int(pid), written


def test_a_live_mark_appears_whole_or_not_at_all(tmp_path: Path) -> None:
    # Pool.__exit__ terminates workers that are still marking themselves live: a mark opened
    # under its own name and cut off before its text is written named no test file, and made
    # every entry of the map not complete (1 run in 12 of test_depmap_forked under load)
    pid, written = _mark_in_a_child(tmp_path, "ok")
    assert not [path for path in written if Path(path).name == f"live.{pid}"]  # only renamed into place
    assert (tmp_path / f"live.{pid}").read_text() == "tests/test_x.py"
    assert live.unsaved_tests(tmp_path) == {"tests/test_x.py"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"live.{pid}"]  # nothing half-written left beside it


def test_a_live_mark_that_cannot_be_written_whole_is_left_empty_so_no_entry_is_complete(tmp_path: Path) -> None:
    pid, _ = _mark_in_a_child(tmp_path, "full")
    assert (tmp_path / f"live.{pid}").read_text() == ""
    assert live.unsaved_tests(tmp_path) == {""}  # whose lines may be lost is unknown: the merge trusts no entry
