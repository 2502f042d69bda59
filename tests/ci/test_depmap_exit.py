"""`ci.observe.exit_save.save_on_exit`: one save however a recorded process leaves, a SIGTERM
that never cuts a save short, and no SIGTERM handler left in a forked child. Each case is a
real child process; the save writes marks to a file, read back here."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.ci.depmap_support import clean_env

PRELUDE = textwrap.dedent("""\
    import os, signal, sys, threading, time
    from ci.observe.exit_save import save_on_exit
    LOG = sys.argv[1]

    def note(text):
        with open(LOG, "a") as f:
            f.write(text + "\\n")

    def save():
        note(f"start {os.getpid()}")
        time.sleep(float(os.environ.get("SAVE_SECONDS", "0")))
        note(f"end {os.getpid()}")

    save_on_exit(save)
    """)


def _start(tmp_path: Path, body: str, save_seconds: float = 0.0) -> tuple[subprocess.Popen[str], Path]:
    log = tmp_path / "log"
    env = {**clean_env(), "SAVE_SECONDS": str(save_seconds)}
    proc = subprocess.Popen([sys.executable, "-c", PRELUDE + textwrap.dedent(body), str(log)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, log


def _wait_for(log: Path, text: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text():
            return
        time.sleep(0.01)
    raise AssertionError(f"{text!r} never reached {log}")


def _marks(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()]


def test_each_way_out_saves_once(tmp_path: Path) -> None:
    for way, code in (("sys.exit(3)", 3), ("os._exit(4)", 4), ("raise SystemExit(5)", 5)):
        proc, log = _start(tmp_path, way)
        assert proc.wait(timeout=30) == code, proc.stderr.read()
        assert _marks(log) == ["start", "end"], way
        log.unlink()


def test_a_sigterm_while_idle_saves_and_still_dies_of_sigterm(tmp_path: Path) -> None:
    proc, log = _start(tmp_path, "note('ready')\ntime.sleep(60)\n")
    _wait_for(log, "ready")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert _marks(log) == ["ready", "start", "end"]


def test_a_sigterm_in_the_middle_of_the_save_lets_it_finish_then_ends_the_process(tmp_path: Path) -> None:
    # a pool worker leaving by os._exit gets the pool's SIGTERM mid-save: cut short, it left a
    # torn data file; twice saved, it would write its lines twice
    proc, log = _start(tmp_path, "os._exit(0)\n", save_seconds=1.0)
    _wait_for(log, "start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    assert _marks(log) == ["start", "end"]


def test_a_second_caller_in_another_thread_waits_for_the_first_save(tmp_path: Path) -> None:
    # the main thread saves at exit; 0.3 s into it another thread calls os._exit
    proc, log = _start(tmp_path, "threading.Thread(target=lambda: (time.sleep(0.3), os._exit(7)), daemon=True).start()\n"
                                 "sys.exit(0)\n", save_seconds=1.0)
    assert proc.wait(timeout=30) in (0, 7)  # whichever way out comes first once the save is whole
    assert _marks(log) == ["start", "end"]  # the process did not end before the save was whole


def test_a_forked_child_gets_the_default_sigterm_back(tmp_path: Path) -> None:
    # multiprocessing.Pool ends fork workers by SIGTERM; one with a Python-level handler could
    # miss it in the queue's lock and Pool.__exit__ waited forever (reproduced without this code)
    body = """\
        here = signal.getsignal(signal.SIGTERM)
        pid = os.fork()
        if pid == 0:
            note("child " + ("default" if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else "handler"))
            os._exit(0)
        os.waitpid(pid, 0)
        note("parent " + ("default" if here == signal.SIG_DFL else "handler"))
        """
    proc, log = _start(tmp_path, body)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    lines = log.read_text().splitlines()
    assert "child default" in lines and "parent handler" in lines
    assert [m for m in _marks(log) if m in ("start", "end")] == ["start", "end", "start", "end"]  # each saved once


def test_a_fork_in_the_middle_of_a_save_saves_its_own_lines(tmp_path: Path) -> None:
    # the child's copy of the save state says "claimed, not saved": it must start afresh
    body = """\
        def fork_mid_save():
            time.sleep(0.3)
            if os.fork() == 0:
                note(f"child {os.getpid()}")
                os._exit(0)

        threading.Thread(target=fork_mid_save, daemon=True).start()
        sys.exit(0)
        """
    proc, log = _start(tmp_path, body, save_seconds=1.0)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()
    _wait_for(log, "child")
    child = next(line.split()[1] for line in log.read_text().splitlines() if line.startswith("child"))
    _wait_for(log, f"end {child}")
    assert log.read_text().count(f"start {proc.pid}") == 1


def test_a_program_with_its_own_sigterm_handler_keeps_it(tmp_path: Path) -> None:
    body = """\
        note("mine " + str(signal.getsignal(signal.SIGTERM) is mine))
        """
    prelude_first = "import signal\ndef mine(s, f):\n    pass\nsignal.signal(signal.SIGTERM, mine)\n"
    log = tmp_path / "log"
    proc = subprocess.run([sys.executable, "-c", prelude_first + PRELUDE + textwrap.dedent(body), str(log)],
                          env=clean_env(), capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "mine True" in log.read_text()
