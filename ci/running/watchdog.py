"""The hard end of a test file's budget (``timeout:`` in the registry), for `ci.pytest_plugin`.

pytest-timeout's signal method fails a test cleanly at its limit, and the session goes on; but a
test that catches the exception it raises (``except BaseException``), blocks the signal, or sits
in C code that never returns to the interpreter is not stopped by it. A thread cannot stop it
either: C code that holds the GIL (``sum(range(10**9))``) keeps every other thread of the process
waiting, pytest-timeout's thread method included. So the kill comes from outside: a `Watchdog`
is a small helper process (standard library only, started once per pytest process) that each
budgeted test arms with its deadline, `KILL_GRACE` seconds after its budget, and disarms when it
ends. At the deadline the helper records the timeout (`read_record`), writes it to stderr and
kills the pytest process with SIGKILL, together with every process below it
(`ci.running.proctree.kill_tree`: what the test forked, grandchildren that called ``setsid``
included, since `Watchdog.start` makes pytest their subreaper on Linux) and, when pytest leads its
own session (`ci run` starts it so), its whole process group. Under pytest-xdist that process is a
worker: the controller reports the test as failed with the recorded message and starts a new
worker, which reads the record and fails the file's remaining tests at setup; no grandchild is
left holding the worker's pipes open, which would keep the controller waiting for it. Without
xdist the run ends there, with the message on stderr and the exit status of a SIGKILL
(`KILLED_EXIT` as a shell shows it, -9 from ``subprocess``).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from ci.running import proctree

_PROCTREE = str(Path(proctree.__file__).resolve())
KILL_GRACE = 1.0            # seconds the signal method gets to end the test before the kill
KILLED_EXIT = 128 + signal.SIGKILL
KILLED_RETURNCODES = (-signal.SIGKILL, KILLED_EXIT)  # subprocess's, a shell's

# The helper: reads one JSON line per command from stdin (an arm: {"seconds", "record", "nodeid",
# "message"}; a disarm: null), exits when stdin closes (its pytest process is done or gone). It
# loads proctree.py by path only at the kill, and kills pytest alone if that fails: a broken tree
# walk must never cost the kill itself.
_HELPER = r"""
import json, os, select, signal, sys, time
parent, armed, pending = int(sys.argv[1]), None, b""

def kill_everything():
    try:
        import importlib.util
        spec = importlib.util.spec_from_file_location("_ci_proctree", sys.argv[2])
        proctree = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(proctree)
        group = parent if os.getsid(parent) == parent else None
        proctree.kill_tree([parent], spare={os.getpid()}, group=group)
    except Exception:
        os.kill(parent, signal.SIGKILL)

while True:
    wait = None if armed is None else max(0.0, armed[0] - time.monotonic())
    if select.select([0], [], [], wait)[0]:
        chunk = os.read(0, 65536)
        if not chunk:
            sys.exit(0)
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            command = json.loads(line)
            armed = None if command is None else (time.monotonic() + command["seconds"], command)
        continue
    if armed is not None:
        command = armed[1]
        if command["record"]:
            temp = command["record"] + ".tmp"
            try:
                with open(temp, "w", encoding="utf-8") as handle:
                    json.dump({"nodeid": command["nodeid"], "message": command["message"]}, handle)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(temp, command["record"])
            except OSError:
                pass
        try:
            os.write(2, ("\n+++ " + command["message"] + " +++\n").encode("utf-8", "replace"))
        except OSError:
            pass
        kill_everything()
        sys.exit(0)
"""


def record_path(directory: Path, file: str) -> Path:
    """Where the timeout record of test file ``file`` (repo-relative) lives in ``directory``."""
    return directory / f"{hashlib.sha256(file.encode()).hexdigest()[:24]}.json"


def read_record(directory: Path | None, file: str) -> tuple[str, str] | None:
    """``(nodeid, message)`` of the test of ``file`` killed at its budget in this run, or None."""
    if directory is None:
        return None
    try:
        data = json.loads(record_path(directory, file).read_text(encoding="utf-8"))
        return str(data["nodeid"]), str(data["message"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Watchdog:
    """One helper process per pytest process, started by the first `arm` (so it inherits the
    stderr in place then: call it with pytest's capture suspended)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def started(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> None:
        """Start the helper (a no-op while it runs) and make this process the subreaper of what
        its tests fork (`proctree.set_subreaper`), so that a kill finds them all. The helper runs
        in a session of its own: never in the process group it kills, nor hit by a terminal's
        Ctrl-C meant for pytest. Raises OSError if it cannot be started."""
        if not self.started():
            proctree.set_subreaper(True)
            self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _HELPER, str(os.getpid()), _PROCTREE],
                                          stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True,
                                          start_new_session=True)

    def arm(self, seconds: float, file: str, nodeid: str, message: str, directory: Path | None) -> None:
        """Kill this process and everything below it in ``seconds`` unless `disarm` comes first;
        record ``message`` for ``nodeid`` of ``file`` in ``directory`` (when given) before."""
        record = str(record_path(directory, file)) if directory is not None else ""
        self._send({"seconds": seconds, "record": record, "nodeid": nodeid, "message": message})

    def disarm(self) -> None:
        self._send(None)

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._proc.stdin.close()  # type: ignore[union-attr]
                self._proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
            self._proc = None

    def _send(self, command: object) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        try:
            os.write(self._proc.stdin.fileno(), (json.dumps(command) + "\n").encode())
        except OSError:  # the helper is gone: pytest-timeout's signal is all that is left
            self._proc = None


__all__ = ["KILLED_EXIT", "KILLED_RETURNCODES", "KILL_GRACE", "Watchdog", "read_record", "record_path"]
