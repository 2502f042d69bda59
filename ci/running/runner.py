"""Build and run the pytest subprocess for a set of test files.

The child is ``<python> -m pytest -p ci.pytest_plugin --registry R [--tier T] [-n W]
--junitxml J -o junit_family=xunit1 FILES... EXTRA...`` run in the repository root, with the repo
and this package on ``PYTHONPATH``. ``-n`` only when workers are asked for: otherwise the
project's own pytest config decides (its addopts' ``-n``/``-p no:xdist``; serial when silent). Its output streams straight through (progress for long runs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from ci.running import proctree

PLUGIN = "ci.pytest_plugin"
_PACKAGE_PARENT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class PytestInvocation:
    """``argv`` to execute in ``cwd``; ``junit`` is where the JUnit XML will be written."""

    argv: tuple[str, ...]
    cwd: Path
    junit: Path


def parse_workers(value: str) -> str:
    """``auto``, ``0`` or a positive integer of up to 4 ASCII digits (for ``-n``); raises
    ValueError otherwise (``int`` would take ``٣``; ``str.isdigit`` takes ``²``, which ``int`` refuses)."""
    if value == "auto" or (value.isascii() and value.isdigit() and len(value) <= 4):
        return value
    raise ValueError(f"--workers must be 'auto' or a whole number from 0 to 9999 in ASCII digits, got {value!r}")


def build_invocation(files: Sequence[str], *, root: Path, registry_path: Path, junit: Path,
                     tier: str | None = None, workers: str | None = None, extra: Sequence[str] = (),
                     use_plugin: bool = True, python: str = sys.executable) -> PytestInvocation:
    argv = [python, "-m", "pytest"]
    if use_plugin:
        argv += ["-p", PLUGIN, "--registry", str(registry_path)]
        if tier is not None:
            argv += ["--tier", tier]
    if workers is not None:
        argv += ["-n", parse_workers(workers)]
    argv += [f"--junitxml={junit}", "-o", "junit_family=xunit1"]
    argv += list(files)
    argv += list(extra)
    return PytestInvocation(tuple(argv), root, junit)


def child_env(root: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's environment: ``root`` and this package importable; PYTEST_ADDOPTS untouched."""
    env = dict(os.environ if base is None else base)
    paths = [str(root), str(_PACKAGE_PARENT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def run_invocation(inv: PytestInvocation, env: Mapping[str, str] | None = None) -> int:
    """Run it, streaming output; returns pytest's exit status. Nothing it started outlives it.

    pytest runs in a session of its own, and this process is the subreaper of everything below it
    (Linux) while it runs. Once pytest has exited, whatever is left is killed: its process group,
    and every orphan of the run handed to this process (grandchildren that called ``setsid``
    included), with everything below them (`proctree.kill_tree`). SIGINT, SIGTERM and SIGHUP
    arriving meanwhile are passed on to pytest's process group, as a terminal or a CI runner
    would have sent them to it; after the clean-up a SIGTERM or SIGHUP ends this process as it
    would have before.
    """
    inv.junit.parent.mkdir(parents=True, exist_ok=True)
    if inv.junit.exists():
        inv.junit.unlink()  # a stale report from an earlier run must never be summarised as this one
    was_subreaper = proctree.set_subreaper(True)
    ours = proctree.children(os.getpid())
    received: list[int] = []
    try:
        # The handlers go in before pytest starts: a caught signal is reset to its default in the
        # child at exec, while an ignored one stays ignored. A `ci run` started with SIGINT ignored
        # (any background job of a shell script) would otherwise hand pytest an ignored SIGINT,
        # and the Ctrl-C it forwards would never stop the run.
        with _forwarding(received) as group:
            proc = subprocess.Popen(inv.argv, cwd=inv.cwd, env=child_env(inv.cwd, env), start_new_session=True)
            group.start(proc.pid)
            _wait_unreaped(proc)
            proctree.kill_tree(proctree.children(os.getpid()) - ours - {proc.pid}, group=proc.pid)
            rc = proc.wait()
            _reap_new_children(ours)
    finally:
        if was_subreaper is not None:
            proctree.set_subreaper(was_subreaper)
    for signum in received:
        if signum != signal.SIGINT:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
    return rc


_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _Group:
    """The process group signals are passed on to, once started; what came before is sent then."""

    def __init__(self, received: list[int]):
        self.pgid: int | None = None
        self.received = received

    def send(self, signum: int) -> None:
        if self.pgid is not None:
            try:
                os.killpg(self.pgid, signum)
            except OSError:
                pass

    def start(self, pgid: int) -> None:
        self.pgid = pgid
        for signum in list(self.received):
            self.send(signum)


@contextmanager
def _forwarding(received: list[int]) -> Iterator[_Group]:
    """Pass `_FORWARDED` signals on to the yielded group (noting each in ``received``) while
    inside; only the main thread can set handlers, so elsewhere nothing is forwarded."""
    group = _Group(received)

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        group.send(signum)

    try:
        previous = {s: signal.signal(s, forward) for s in _FORWARDED}
    except ValueError:  # not the main thread
        previous = {}
    try:
        yield group
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _wait_unreaped(proc: subprocess.Popen[bytes]) -> None:
    """Wait for ``proc`` to exit, leaving it a zombie where the platform allows: while it is one,
    its pid, which is its process group's id, cannot be reused by an unrelated process."""
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    except (AttributeError, ChildProcessError):  # no waitid (macOS): reap it; the group id is only
        proc.wait()                               # reused once every member of the group is gone


def _reap_new_children(ours: set[int], patience: float = 2.0) -> None:
    """Collect the exit status of the orphans just killed (this process adopted them), so none
    lingers as a zombie in a long-lived caller; gives up after ``patience`` seconds on any that
    has not died (one this process may not signal)."""
    end = time.monotonic() + patience
    while True:
        left = proctree.children(os.getpid()) - ours
        for pid in list(left):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    left.discard(pid)
            except ChildProcessError:
                left.discard(pid)
        if not left or time.monotonic() > end:
            return
        time.sleep(0.01)
