"""Finding and killing a whole process tree: what a test started dies with it.

A test that forks (``subprocess.Popen``, ``os.fork``, a server it starts) leaves processes that
outlive a kill of its pytest process alone. Under pytest-xdist they also hold the worker's pipes
open, so the controller waits for them before it replaces the worker. Three things find them:

* `set_subreaper` (Linux): a process that calls ``setsid`` and whose parent then exits (the
  classic double fork of a daemon) is handed to the nearest *subreaper* above it instead of to
  init, so it stays below the pytest process (or `ci run`) that set the flag, and in its tree.
* `descendants`: the tree below a pid, read from ``/proc/<pid>/task/<tid>/children`` (a scan of
  every ``/proc/<pid>/stat`` where the kernel lacks that file). Without ``/proc`` (macOS) it is
  empty, and a process group is all `kill_tree` can reach. `tree_order` lists the same with each
  parent before its children.
* `kill_tree`: SIGSTOP first, SIGKILL after. Every process found is stopped, then the tree is read
  again, until no new process appears; only then is any of them killed. A stopped process can
  neither fork past the walk nor exit and hand its children to someone else. Parents are stopped
  before their children: a process forking in a loop stops growing the tree first. The tree is read
  again only once what was just signalled shows stopped in ``/proc``: a SIGSTOP that arrives
  while its target is inside ``fork`` lets that fork finish, and the kernel links the new child
  into its parent's list only at the end of the call, which may come after a re-read (seen under
  load: a sleeper forked that way outlived the kill). A process shows stopped only on its way
  back from the call, when the child is listed.

Standard library only: the watchdog's helper (``python -I -S``) loads this file by its path.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import time
from typing import Callable, Collection, Iterable

_PR_SET_CHILD_SUBREAPER = 36
DEATH_WAIT_S = 5.0  # how long kill_tree waits for what it killed to be gone
STOP_WAIT_S = 5.0  # how long kill_tree waits for what it stopped to show stopped, all rounds together
DEAD_STATES = ("Z", "X")  # /proc state letters of a process that is gone: zombie, dead
HALTED_STATES = ("T", "t", *DEAD_STATES)  # ... that cannot run: stopped, stopped by a tracer, gone
_PR_GET_CHILD_SUBREAPER = 37
# the attribute of a wrapped ``os.kill`` that kill_tree calls with each round of pids it is about
# to SIGSTOP, before any of them is signalled: a recorder's guard (ci.observe.live) asks
# them all at once to save what they ran, instead of one signal at a time. It lives on os.kill,
# not here, so that every copy of this module in a process finds it (a program may import its
# own copy of this package beside the recorder's: ci.observe.aside)
BEFORE_STOPPING = "before_stopping"


def set_subreaper(enabled: bool) -> bool | None:
    """Make this process a child subreaper (or stop being one); returns the previous setting, or
    None where the platform has none (not Linux) or prctl refused."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        previous = ctypes.c_int(0)
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(previous), 0, 0, 0) != 0:
            return None
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, int(enabled), 0, 0, 0) != 0:
            return None
        return bool(previous.value)
    except (OSError, AttributeError):
        return None


def children(pid: int) -> set[int]:
    """The live children of ``pid`` (empty when it is gone or there is no ``/proc``)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return set()
    found: set[int] = set()
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                found.update(int(n) for n in handle.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{task}"):
                continue  # the thread ended meanwhile
            return {child for child, parent in _parents().items() if parent == pid}  # no children files
        except (OSError, ValueError):
            continue
    return found


def descendants(pid: int, spare: Collection[int] = ()) -> set[int]:
    """Every process below ``pid`` (not ``pid``), leaving out ``spare`` and everything below it."""
    return set(tree_order([pid], spare)[1:])


def tree_order(roots: Iterable[int], spare: Collection[int] = ()) -> list[int]:
    """``roots`` and every process below them (leaving out ``spare`` and what is below it), each
    parent before its children (breadth first), each pid once."""
    order = list(dict.fromkeys(roots))
    found = set(order)
    for parent in order:  # grows while it is walked
        for child in sorted(children(parent)):
            if child not in found and child not in spare:
                found.add(child)
                order.append(child)
    return order


def kill_tree(roots: Iterable[int], *, spare: Collection[int] = (), group: int | None = None) -> set[int]:
    """SIGKILL each of ``roots``, every process below them and, with ``group``, every member of
    that process group; never a process in ``spare`` nor anything below it (unless it is in
    ``group``: a group is signalled whole). The caller must be in none of them. Returns the pids
    found in the tree (one already gone, or not this user's, is skipped silently).

    Everything is stopped (SIGSTOP) before anything is killed, and the tree re-read until nothing
    new appears (see the module docstring), so a process forking as it is found is caught too.
    """
    roots = [r for r in roots if r not in spare]
    if group is not None:
        _signal(group, signal.SIGSTOP, group=True)
    stopped: set[int] = set()
    stop_deadline = time.monotonic() + STOP_WAIT_S
    while True:
        # parents first: a process that forks in a loop stops forking before its children are
        # stopped one by one (a stop hook may take a moment: a recorder waits for flushes)
        fresh = [pid for pid in tree_order(roots, spare) if pid not in stopped]
        if not fresh:
            break
        before_stopping = getattr(os.kill, BEFORE_STOPPING, None)
        if before_stopping is not None:
            before_stopping(fresh)
        for pid in fresh:
            _signal(pid, signal.SIGSTOP)
        stopped.update(fresh)
        # a process stuck in an uninterruptible wait never shows stopped: it is killed anyway
        await_all(fresh, _halted, stop_deadline, 0.001)
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    if group is not None:
        _signal(group, signal.SIGKILL, group=True)
    # a SIGKILLed process dies only when the scheduler next runs it: on a loaded machine the next
    # test could otherwise still see it alive
    await_all(stopped, lambda pid: not _alive(pid), time.monotonic() + DEATH_WAIT_S, 0.005)
    return stopped


def await_all(pids: Collection[int], settled: Callable[[int], bool], deadline: float, poll: float) -> set[int]:
    """Return once ``settled`` holds for each of ``pids``, or at ``deadline`` (`time.monotonic`),
    looking again every ``poll`` seconds; returns those for which it never held (empty when all
    settled). Each is looked at at least once, even past the deadline."""
    waiting = set(pids)
    while waiting:
        waiting = {pid for pid in waiting if not settled(pid)}
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(poll)
    return waiting


def _halted(pid: int) -> bool:
    """Every thread of ``pid`` is stopped, traced or dead, or ``pid`` is gone. True without
    ``/proc``: there is nothing to wait on there."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for task in tasks:
        try:
            if _state(pid, task) not in HALTED_STATES:
                return False
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return True


def _alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie (``/proc``; without it, whether a signal reaches it)."""
    try:
        return _state(pid) not in DEAD_STATES
    except FileNotFoundError:
        return False
    except (OSError, ValueError, IndexError):
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True


def _signal(pid: int, signum: int, *, group: bool = False) -> None:
    """Send ``signum`` to ``pid`` (or process group ``pid``), unless it is gone or not ours."""
    try:
        (os.killpg if group else os.kill)(pid, signum)
    except OSError as exc:
        if exc.errno not in (errno.ESRCH, errno.EPERM):
            raise


def process_state(pid: int) -> str | None:
    """The state letter of ``pid`` in ``/proc`` (R, S, D, T, t, Z, ...); None where it has none
    (gone, or no ``/proc``)."""
    try:
        return _state(pid)
    except (OSError, ValueError, IndexError):
        return None


def _state(pid: int, task: str | None = None) -> str:
    """The state letter of ``pid`` (or of its thread ``task``); raises as `_stat_fields` does."""
    return _stat_fields(pid, task)[0].decode("ascii", "replace")


def _stat_fields(pid: int, task: str | None = None) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` (with ``task``, of that thread's) after the command name,
    from the state on (the name may hold spaces and parentheses, so they are read after its last
    ``)``). OSError when there is no such file; ValueError when it holds no name in parentheses."""
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    with open(path, "rb") as handle:
        data = handle.read()
    return data[data.rindex(b")") + 2:].split()


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process in ``/proc``."""
    out: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                out[int(name)] = int(_stat_fields(int(name))[1])
            except (OSError, ValueError, IndexError):
                continue
    return out


__all__ = ["BEFORE_STOPPING", "DEAD_STATES", "HALTED_STATES", "await_all", "children", "descendants", "kill_tree",
           "process_state", "set_subreaper", "tree_order"]
