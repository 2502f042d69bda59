"""Which recorded subprocesses ended without saving their lines, and a SIGKILL that waits for a flush.

A recorded subprocess (`ci.running.depmap_child`, `ci.running.depmap_subprocess`) marks itself
live in the parts directory when it starts, ``live.<pid>`` holding its test file, and removes the
mark once its lines are saved at exit. A mark left behind means the process ended without saving
(SIGKILL, ``os._exit``, a crash): under coverage.py its lines are all lost, under the slipcover
hook the ones it ran for the first time since its last flush. The merge then counts its test
file as not complete, so that entry never narrows selection (`ci.running.depmap_merge`).

The tests that stop servers do it with SIGKILL (SGLang's ``kill_process_tree``), so `guard_kills`
wraps ``os.kill`` and ``os.killpg`` in every recording process: before SIGKILL reaches a live
process whose lines are flushed by a thread (a ``flushes`` mark, written by the slipcover hook),
it asks that process to flush (``flush.<pid>``) and waits up to `FLUSH_WAIT` seconds for the
request to be taken away, which the process's flusher does after writing every line it has run.
Acknowledged, the live mark becomes ``killed.<pid>``: ended, nothing lost. Not acknowledged in
time, or a process that cannot flush (coverage.py's), the mark stays and the entry is not
complete. Other signals, other processes and a recording that is over pass straight through.

Contract: `mark_live`, `mark_saved`, `flush_requested` and `acknowledge` never raise for the
file system (a missing parts directory is a recording that is over); `unsaved_tests` returns the
test files of the marks left in a parts directory.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

FLUSH_WAIT = 5.0
_POLL = 0.02
_LIVE, _KILLED, _REQUEST, _FLUSHES = "live.", "killed.", "flush.", "flushes."


def mark_live(parts: str, test: str, flushes: bool) -> None:
    """Mark this process live for ``test``; ``flushes``: a thread flushes its lines on request."""
    pid = os.getpid()
    try:
        Path(parts, f"{_LIVE}{pid}").write_text(test, encoding="utf-8")
        if flushes:
            Path(parts, f"{_FLUSHES}{pid}").write_text("", encoding="utf-8")
    except OSError:
        pass


def mark_saved(parts: str) -> None:
    """This process saved its lines: its marks go."""
    pid = os.getpid()
    for name in (f"{_LIVE}{pid}", f"{_FLUSHES}{pid}"):
        try:
            Path(parts, name).unlink()
        except OSError:
            pass


def flush_requested(parts: str) -> Path | None:
    """The flush request addressed to this process, if there is one (its flusher polls this)."""
    request = Path(parts, f"{_REQUEST}{os.getpid()}")
    return request if request.exists() else None


def acknowledge(request: Path) -> None:
    """Tell the process waiting in `guard_kills` that every line run so far is written."""
    try:
        request.unlink()
    except OSError:
        pass


def unsaved_tests(parts: Path) -> set[str]:
    """The test files whose subprocesses left a live mark (see the module docstring)."""
    found = set()
    for mark in parts.glob(f"{_LIVE}*"):
        try:
            found.add(mark.read_text(encoding="utf-8"))
        except OSError:
            continue
    return found


def _flush_before_kill(parts: str, pid: int) -> None:
    live, flushes = Path(parts, f"{_LIVE}{pid}"), Path(parts, f"{_FLUSHES}{pid}")
    if not live.exists() or not flushes.exists():
        return
    request = Path(parts, f"{_REQUEST}{pid}")
    try:
        request.write_text("", encoding="utf-8")
    except OSError:
        return
    deadline = time.monotonic() + FLUSH_WAIT
    while request.exists() and time.monotonic() < deadline:
        time.sleep(_POLL)
    if request.exists():
        request.unlink(missing_ok=True)
        return  # no answer: the live mark stays, the entry will not be complete
    try:
        os.replace(live, Path(parts, f"{_KILLED}{pid}"))
        flushes.unlink(missing_ok=True)
    except OSError:
        pass


def _group_members(parts: str, pgid: int) -> list[int]:
    members = []
    for mark in Path(parts).glob(f"{_FLUSHES}*"):
        try:
            pid = int(mark.name[len(_FLUSHES):])
            if os.getpgid(pid) == pgid:
                members.append(pid)
        except (ValueError, OSError):
            continue
    return members


def guard_kills(parts_of) -> None:
    """Wrap ``os.kill`` and ``os.killpg`` (see the module docstring); ``parts_of()`` returns the
    parts directory of the recording in progress, or None when there is none. Wrapping twice is
    a no-op."""
    if getattr(os.kill, "_ci_depmap", False):
        return
    kill, killpg = os.kill, os.killpg

    def guarded_kill(pid: int, sig: int) -> None:
        parts = parts_of() if sig == signal.SIGKILL else None
        if parts and os.path.isdir(parts):
            if pid > 0:
                _flush_before_kill(parts, pid)
            else:  # 0: this process's group, -N: group N
                for member in _group_members(parts, os.getpgid(0) if pid in (0, -1) else -pid):
                    _flush_before_kill(parts, member)
        kill(pid, sig)

    def guarded_killpg(pgid: int, sig: int) -> None:
        parts = parts_of() if sig == signal.SIGKILL else None
        if parts and os.path.isdir(parts):
            for pid in _group_members(parts, pgid):
                _flush_before_kill(parts, pid)
        killpg(pgid, sig)

    guarded_kill._ci_depmap = guarded_killpg._ci_depmap = True  # type: ignore[attr-defined]
    os.kill, os.killpg = guarded_kill, guarded_killpg
