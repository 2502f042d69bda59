"""Which recorded subprocesses ended without saving their lines, and a SIGKILL that waits for a flush.

A recorded subprocess (`ci.observe.child`, `ci.observe.coverage_child`) marks itself
live in the parts directory when it starts, ``live.<pid>`` holding its test file, and removes the
mark once its lines are saved at exit. A mark left behind means the process ended without saving
(SIGKILL, ``os._exit``, a crash): under coverage.py its lines are all lost, under the slipcover
hook the ones it ran for the first time since its last flush. The merge then counts its test
file as not complete, so that entry never narrows selection (`ci.observe.merge`).

The tests that stop servers do it with SIGKILL (SGLang's ``kill_process_tree``), so `guard_kills`
wraps ``os.kill`` and ``os.killpg`` in every recording process: before SIGKILL reaches a live
process whose lines are flushed by a thread (a ``flushes`` mark, written by the slipcover hook),
it asks that process to flush (``flush.<pid>``) and waits up to `FLUSH_WAIT` seconds for the
request to be taken away, which the process's flusher does after writing every line it has run;
asked by another process, the flusher then stops its own process (SIGSTOP), so nothing runs
between the flush and the signal that follows (unless the process is waiting for answers of its
own: two processes killing each other would both stay stopped). Acknowledged, the live mark becomes
``killed.<pid>``: ended, nothing lost. Not acknowledged in time, or a process that cannot flush
(coverage.py's), the mark stays and the entry is not complete. A SIGSTOP is asked for a flush the
same way (`ci.running.proctree.kill_tree` freezes a tree before it kills it, and a stopped
process cannot flush): answered, a ``stopped.<pid>`` mark says nothing ran since, so the SIGKILL
that follows finds the process stopped, does not wait, and counts it ended whole; a SIGCONT
through the wrapper takes that mark away (one from outside is seen as the process running again
after the stop: it is asked anew). A process that is stopped (without that mark) or dead, or that
stops or dies while it is waited for, is not waited for any longer: it cannot answer. Other
signals, other processes and a recording that is over pass straight through.

Every process one signal reaches (a process group) is asked at once and waited for together, and
so is each round of processes `kill_tree` is about to stop (the wrapper's `BEFORE_STOPPING`
attribute, which every copy of `ci.running.proctree` in the process finds): a tree of a
thousand recorded processes costs about one flush period per round, not one per process.

Contract: `mark_live`, `mark_saved`, `flush_requested`, `acknowledge` and `flush_before` never raise for the
file system (a missing parts directory is a recording that is over); `unsaved_tests` returns the
test files of the marks left in a parts directory.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Sequence

from ci.running.proctree import BEFORE_STOPPING, HALTED_STATES, await_all, process_state

FLUSH_WAIT = 5.0
_POLL = 0.02
_LIVE, _KILLED, _REQUEST, _FLUSHES, _STOPPED = "live.", "killed.", "flush.", "flushes.", "stopped."
_UNHEARD = "unheard."
_WRITING = "writing."  # a mark being written; never read
_GUARDED = (signal.SIGKILL, signal.SIGSTOP, signal.SIGCONT)
_SETTLE = 0.5  # how long a SIGSTOP just sent may take to show in /proc
_STOP = b"stop"  # what a request says when the asker is another process: stop once flushed
# the threads of this process now waiting in `flush_before`: while one waits, this process does
# not stop itself when it answers, or two recorded processes asking each other would both stop
_asking: list[int] = []
_asking_lock = threading.Lock()


def mark_live(parts: str, test: str, flushes: bool) -> None:
    """Mark this process live for ``test``; ``flushes``: a thread flushes its lines on request.

    The mark is written whole under a temporary name and renamed into place: a process killed in
    the middle (``Pool.__exit__`` terminates workers just forked) leaves no mark, having run
    nothing of the test yet, where a mark created empty would name no test file and make every
    entry of the map not complete. A mark that cannot be written whole (a full disk) is left
    empty on purpose: whose lines may be lost is then unknown."""
    pid = os.getpid()
    mark, whole = Path(parts, f"{_LIVE}{pid}"), Path(parts, f"{_WRITING}{_LIVE}{pid}")
    try:
        try:
            whole.write_text(test, encoding="utf-8")
            os.replace(whole, mark)
        except OSError:
            mark.touch()
        if flushes:
            Path(parts, f"{_FLUSHES}{pid}").write_text("", encoding="utf-8")
    except OSError:
        pass


def mark_saved(parts: str) -> None:
    """This process saved its lines: its marks go."""
    pid = os.getpid()
    for name in (f"{_LIVE}{pid}", f"{_FLUSHES}{pid}", f"{_STOPPED}{pid}"):
        try:
            Path(parts, name).unlink()
        except OSError:
            pass


def flush_requested(parts: str) -> Path | None:
    """The flush request addressed to this process, if there is one (its flusher polls this)."""
    request = Path(parts, f"{_REQUEST}{os.getpid()}")
    return request if request.exists() else None


def acknowledge(request: Path) -> None:
    """Tell the process waiting in `guard_kills` that every line run so far is written. A request
    made before a signal to this process (not by this process itself) stops it at once, so nothing
    runs between the flush and the signal; one the asker took back meanwhile does not, nor one
    that comes while this process waits for answers of its own."""
    try:
        stop = request.read_bytes() == _STOP
        request.unlink()
    except OSError:
        return  # taken back: the asker gave up waiting and counts this process as not saved
    if stop and not _asking:  # see `_asking`
        signal.raise_signal(signal.SIGSTOP)  # the whole process stops; the signal it waits for follows


def mark_unheard(parts: str, test: str, reason: str) -> None:
    """A child of ``test`` that the recorder will not hear (`ci.observe.unheard`): its
    entry is not complete, as for a process that never saved."""
    name = f"{_UNHEARD}{os.getpid()}.{threading.get_ident()}.{time.monotonic_ns()}"
    try:
        fd = os.open(os.path.join(parts, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, f"{test}\t{reason}".encode("utf-8", "replace"))
        finally:
            os.close(fd)
    except OSError:
        pass  # the recording is over: nothing to mark


def left_live(parts: Path, pid: int) -> bool:
    """Whether process ``pid`` of the recording left its live mark (it never saved)."""
    return Path(parts, f"{_LIVE}{pid}").exists()


def unsaved_tests(parts: Path) -> set[str]:
    """The test files whose subprocesses left a live mark (see the module docstring)."""
    found = set()
    for mark in [*parts.glob(f"{_LIVE}*"), *parts.glob(f"{_UNHEARD}*")]:
        try:
            found.add(mark.read_text(encoding="utf-8").split("\t", 1)[0])
        except OSError:
            continue
    return found


def unheard_reasons(parts: Path) -> dict[str, str]:
    """Test file ("" for none) -> why a child of it was not heard (`mark_unheard`), one per file."""
    found: dict[str, str] = {}
    for mark in sorted(parts.glob(f"{_UNHEARD}*")):
        try:
            test, _, reason = mark.read_text(encoding="utf-8").partition("\t")
        except OSError:
            continue
        found.setdefault(test, reason)
    return found


def _before_signal(parts: str, pids: Sequence[int], sig: int) -> None:
    if sig == signal.SIGCONT:
        for pid in pids:
            Path(parts, f"{_STOPPED}{pid}").unlink(missing_ok=True)
    else:
        flush_before(parts, pids, stopping=sig == signal.SIGSTOP)


def _cannot_answer(pid: int) -> bool:
    """``pid`` is stopped or dead as its main thread's state shows (a SIGSTOP stops every thread
    at once), so its flusher cannot answer; `proctree` waits for every thread instead."""
    return process_state(pid) in HALTED_STATES


def flush_before(parts: str, pids: Sequence[int], stopping: bool) -> None:
    """Before SIGKILL (``stopping``: SIGSTOP) reaches ``pids``: ask every live one that flushes,
    all at once, to flush, and wait for the answers together (see the module docstring). Never
    raises; an answer that does not come leaves the live mark."""
    with _asking_lock:
        _asking.append(threading.get_ident())
    try:
        _flush_before(parts, pids, stopping)
    except OSError:
        pass  # the parts directory went (the recording is over): nothing to keep
    finally:
        with _asking_lock:
            _asking.remove(threading.get_ident())


def _flush_before(parts: str, pids: Sequence[int], stopping: bool) -> None:
    # each once: asked twice, a process that answered the first request and stopped itself would
    # leave the second one unanswered
    recorded = [pid for pid in dict.fromkeys(pids)
                if Path(parts, f"{_LIVE}{pid}").exists() and Path(parts, f"{_FLUSHES}{pid}").exists()]
    answered = [pid for pid in recorded if Path(parts, f"{_STOPPED}{pid}").exists()]  # at a SIGSTOP
    ask = [pid for pid in recorded if pid not in answered]
    if answered and not stopping:
        running = await_all(answered, _cannot_answer, time.monotonic() + _SETTLE, _POLL)
        for pid in answered:
            if pid in running:  # continued from outside since: ask anew
                Path(parts, f"{_STOPPED}{pid}").unlink(missing_ok=True)
                ask.append(pid)
            else:
                _mark_killed(parts, pid)  # and has not run since
    requests = {pid: request for pid in ask if (request := _ask(parts, pid)) is not None}
    # stopped or dead meanwhile (a SIGSTOP from elsewhere landing): no answer comes
    await_all(requests, lambda pid: not requests[pid].exists() or _cannot_answer(pid), time.monotonic() + FLUSH_WAIT, _POLL)
    for pid, request in requests.items():
        try:
            request.unlink()
            continue  # taken back unanswered: the live mark stays, the entry will not be complete
        except FileNotFoundError:
            pass  # answered
        if stopping:
            try:
                Path(parts, f"{_STOPPED}{pid}").write_text("", encoding="utf-8")
            except OSError:
                pass  # no mark: the kill that follows leaves the entry not complete, never wrong
        else:
            _mark_killed(parts, pid)


def _ask(parts: str, pid: int) -> Path | None:
    """Write the flush request for ``pid`` whole (its flusher reads what it says), or None."""
    request = Path(parts, f"{_REQUEST}{pid}")
    draft = Path(parts, f".{_REQUEST}{pid}.{os.getpid()}.{threading.get_ident()}")
    try:
        draft.write_bytes(b"" if pid == os.getpid() else _STOP)
        os.replace(draft, request)
    except OSError:
        draft.unlink(missing_ok=True)
        return None
    return request


def _mark_killed(parts: str, pid: int) -> None:
    try:
        os.replace(Path(parts, f"{_LIVE}{pid}"), Path(parts, f"{_KILLED}{pid}"))
        for name in (f"{_FLUSHES}{pid}", f"{_STOPPED}{pid}"):
            Path(parts, name).unlink(missing_ok=True)
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
        parts = parts_of() if sig in _GUARDED else None
        if parts and os.path.isdir(parts):
            # 0: this process's group, -N: group N
            members = [pid] if pid > 0 else _group_members(parts, os.getpgid(0) if pid in (0, -1) else -pid)
            _before_signal(parts, members, sig)
        kill(pid, sig)

    def guarded_killpg(pgid: int, sig: int) -> None:
        parts = parts_of() if sig in _GUARDED else None
        if parts and os.path.isdir(parts):
            _before_signal(parts, _group_members(parts, pgid), sig)
        killpg(pgid, sig)

    def before_stopping(pids: Sequence[int]) -> None:  # kill_tree's round: one wait for all
        parts = parts_of()
        if parts and os.path.isdir(parts):
            flush_before(parts, pids, stopping=True)

    guarded_kill._ci_depmap = guarded_killpg._ci_depmap = True  # type: ignore[attr-defined]
    setattr(guarded_kill, BEFORE_STOPPING, before_stopping)
    os.kill, os.killpg = guarded_kill, guarded_killpg
