"""`kill_tree` reads the tree again only once what it stopped shows stopped.

A SIGSTOP that reaches a process inside ``fork`` lets the fork finish, and the kernel lists the new
child under its parent only at the end of that call: a re-read made before then misses the child,
which outlives the kill (seen once in a loaded run of the whole suite). The kernel's side of that
is modelled here, on real processes: the child is hidden from its parent's listing until the
parent has been seen stopped; the processes themselves, their signals and their deaths are real.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time

import pytest

from ci.running import proctree

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

PARENT = ("import os, sys, time\n"
          "child = os.fork()\n"
          "if child == 0:\n"
          "    time.sleep(60)\n"
          "    os._exit(0)\n"
          "print(child, flush=True)\n"
          "time.sleep(60)\n")


def _stat(pid: int) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, parent, ...), read here
    rather than through the code under test."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        data = handle.read()
    return data[data.rindex(b")") + 2:].split()


def _state(pid: int) -> str:
    """The state letter of ``pid``; X once it is reaped."""
    try:
        return _stat(pid)[0].decode()
    except FileNotFoundError:
        return "X"


def _wait_for_state(pid: int, wanted: set[str]) -> str:
    deadline = time.monotonic() + 10
    while (state := _state(pid)) not in wanted and time.monotonic() < deadline:
        time.sleep(0.01)
    return state


@pytest.fixture
def parent_and_child():
    """A real process and the real child it forked, both asleep; whatever is left is killed."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        yield parent, child
    finally:
        for pid in (child, parent.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        parent.wait()


def test_a_child_listed_only_once_its_parent_stopped_is_killed_too(parent_and_child, monkeypatch) -> None:
    parent, child = parent_and_child
    seen_stopped: set[int] = set()
    polls = {"parent": 0}
    real_children, real_halted = proctree.children, proctree._halted

    def halted(pid: int) -> bool:
        if pid == parent.pid:  # a stop that takes a few looks to show, as one inside fork does
            polls["parent"] += 1
            if polls["parent"] <= 3:
                return False
        answer = real_halted(pid)
        if answer:
            seen_stopped.add(pid)
        return answer

    def children(pid: int) -> set[int]:
        found = real_children(pid)
        return found if pid != parent.pid or pid in seen_stopped else found - {child}

    monkeypatch.setattr(proctree, "_halted", halted)
    monkeypatch.setattr(proctree, "children", children)
    killed = proctree.kill_tree([parent.pid])
    assert killed == {parent.pid, child}
    assert polls["parent"] > 3
    assert _wait_for_state(child, {"Z", "X"}) in {"Z", "X"}
    assert parent.wait(timeout=10) == -signal.SIGKILL


def test_a_process_that_never_shows_stopped_is_killed_at_the_deadline(parent_and_child, monkeypatch) -> None:
    parent, child = parent_and_child
    looks = []
    monkeypatch.setattr(proctree, "STOP_WAIT_S", 0.3)
    monkeypatch.setattr(proctree, "_halted", lambda pid: looks.append(pid) or False)
    started = time.monotonic()
    killed = proctree.kill_tree([parent.pid])
    assert killed == {parent.pid, child}
    assert time.monotonic() - started < proctree.DEATH_WAIT_S
    assert parent.wait(timeout=10) == -signal.SIGKILL
    assert set(looks) == {parent.pid, child}


def test_halted_follows_the_real_state(parent_and_child) -> None:
    parent, child = parent_and_child
    assert _wait_for_state(child, {"S"}) == "S"
    assert not proctree._halted(child)
    os.kill(child, signal.SIGSTOP)
    assert _wait_for_state(child, {"T"}) == "T"
    assert proctree._halted(child)
    os.kill(child, signal.SIGCONT)
    assert _wait_for_state(child, {"S", "R"}) in {"S", "R"}
    assert not proctree._halted(child)
    os.kill(child, signal.SIGKILL)
    assert _wait_for_state(child, {"Z", "X"}) in {"Z", "X"}  # its parent sleeps: a zombie
    assert proctree._halted(child)
    assert proctree._halted(2 ** 22 + 7)  # above pid_max's default: no such process


def test_halted_waits_for_every_thread(monkeypatch) -> None:
    """A thread of its own may be inside ``fork`` while the main thread already shows stopped."""
    proc = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                             "threading.Thread(target=time.sleep, args=(60,)).start()\n"
                             "print('ready', flush=True)\n"
                             "time.sleep(60)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        tasks = sorted(os.listdir(f"/proc/{proc.pid}/task"), key=int)  # more under a recording: its flusher
        assert len(tasks) >= 2 and tasks[0] == str(proc.pid)
        os.kill(proc.pid, signal.SIGSTOP)
        assert _wait_for_state(proc.pid, {"T"}) == "T"
        deadline = time.monotonic() + 10
        while not proctree._halted(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proctree._halted(proc.pid)
        real = proctree._stat_fields
        thread = tasks[-1]

        def running_thread(pid: int, task: str | None = None) -> list[bytes]:
            fields = real(pid, task)
            return [b"R", *fields[1:]] if task == thread else fields

        monkeypatch.setattr(proctree, "_stat_fields", running_thread)
        assert not proctree._halted(proc.pid)
    finally:
        proc.kill()
        proc.wait()


TREE = ("import os, sys, time\n"
        "for _ in range(4):\n"
        "    if os.fork() == 0:\n"
        "        for _ in range(2):\n"
        "            if os.fork() == 0:\n"
        "                time.sleep(60)\n"
        "                os._exit(0)\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n")


def test_parents_are_stopped_before_their_children(monkeypatch) -> None:
    """Three levels (a root, 4 children, 2 grandchildren each): `tree_order` and `kill_tree`'s
    SIGSTOPs put each process after its parent, so a process forking in a loop stops first; the
    parents are read from /proc, not from the code under test."""
    root = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while len(proctree.descendants(root.pid)) < 12 and time.monotonic() < deadline:
            time.sleep(0.01)
        order = proctree.tree_order([root.pid])
        assert len(order) == 13 and len(set(order)) == 13 and order[0] == root.pid
        parents = {pid: int(_stat(pid)[1]) for pid in order}
        assert all(order.index(parents[pid]) < order.index(pid) for pid in order[1:])
        spare = next(pid for pid in order if parents[pid] == root.pid)
        assert proctree.tree_order([root.pid], spare=[spare]) == [
            pid for pid in order if pid != spare and parents[pid] != spare]

        signalled: list[int] = []
        real_kill = os.kill

        def noting_kill(pid: int, sig: int) -> None:
            if sig == signal.SIGSTOP:
                signalled.append(pid)
            real_kill(pid, sig)

        monkeypatch.setattr(os, "kill", noting_kill)
        killed = proctree.kill_tree([root.pid])
        monkeypatch.undo()
        assert killed == set(order) and sorted(signalled) == sorted(order)
        assert all(signalled.index(parents[pid]) < signalled.index(pid) for pid in order[1:])
    finally:
        proctree.kill_tree([root.pid])
        root.wait()


def test_the_stop_order_does_not_follow_pid_values(monkeypatch) -> None:
    """The real tree above gets consecutive pids, where a set happens to iterate parents first
    about half the time; here the root's pid sorts last in a set of the tree and its children's
    first. The pids lie above Linux's largest pid_max (2**22), so none exists: each counts as
    stopped and dead at once, and the signals are only noted."""
    base = 2 ** 22 + 1024  # a multiple of a set's table size: a set iterates these by pid - base
    root, kids = base + 31, [base + 1, base + 2, base + 3]
    grandkids = {kid: {base + 10 + 2 * i, base + 11 + 2 * i} for i, kid in enumerate(kids)}
    tree = {root: set(kids), **grandkids}
    parents = {child: parent for parent, below in tree.items() for child in below}
    monkeypatch.setattr(proctree, "children", lambda pid: set(tree.get(pid, ())))
    signalled: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: signalled.append((pid, sig)))
    assert list({root, *parents})[0] != root  # the premise: set order puts a child first

    assert proctree.tree_order([root])[0] == root
    killed = proctree.kill_tree([root])
    stops = [pid for pid, sig in signalled if sig == signal.SIGSTOP]
    assert killed == {root, *parents} and sorted(stops) == sorted(killed)
    assert all(stops.index(parents[pid]) < stops.index(pid) for pid in parents)


def _loaded_by_path():
    """Another copy of the module, loaded by its path as the watchdog's helper loads it."""
    spec = importlib.util.spec_from_file_location("proctree_by_path", proctree.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("copy", ["imported", "loaded by path"])
def test_each_round_is_handed_to_the_kill_wrapper_before_any_of_it_is_stopped(monkeypatch, copy: str) -> None:
    """A recorder asks every process of a round to flush at once (`ci.observe.live`):
    the hook must see the whole round, and see it before the first SIGSTOP of it. The second
    round is a child that appears only once the first is stopped. Pids as above: none exists.
    The hook is the wrapped ``os.kill``'s, so any copy of the module finds it."""
    module = proctree if copy == "imported" else _loaded_by_path()
    assert copy == "imported" or module is not proctree
    base = 2 ** 22 + 2048
    root, kids, late = base, [base + 1, base + 2], base + 3
    tree = {root: set(kids)}
    monkeypatch.setattr(module, "children", lambda pid: set(tree.get(pid, ())))
    events: list[tuple[str, object]] = []

    def kill(pid: int, sig: int) -> None:
        events.append(("signal", (pid, sig)))
        tree[kids[0]] = {late}  # forked just before its parent stopped

    setattr(kill, proctree.BEFORE_STOPPING, lambda pids: events.append(("hook", list(pids))))
    monkeypatch.setattr(os, "kill", kill)
    assert module.kill_tree([root]) == {root, *kids, late}
    hooks = [i for i, (kind, _) in enumerate(events) if kind == "hook"]
    assert [events[i][1] for i in hooks] == [[root, *kids], [late]]
    stops = [i for i, (kind, what) in enumerate(events) if kind == "signal" and what[1] == signal.SIGSTOP]
    assert hooks[0] < stops[0] and stops[2] < hooks[1] < stops[3] and len(stops) == 4

