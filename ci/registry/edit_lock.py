"""Rewriting registry.yaml without losing anyone's edit: the one way every command writes it.

The writers (``ci quarantine --apply/--release``, ``ci durations --write``, ``ci lint --fix``,
``ci init``, ``ci import-suites --output``) each read the file, compute a new text and replace it.
Two things keep an edit made meanwhile from being overwritten:

* `registry_lock`: an exclusive ``flock`` on the registry's directory (the file itself is
  replaced by every write, so it cannot carry a lock). Every writer holds it while it writes, so
  two writers never interleave; ``ci quarantine`` holds it for its whole run, so two of those queue.
  The kernel drops a flock when its holder dies, so a killed holder never blocks anyone. The wait
  is bounded (``wait_s``, else $CI_REGISTRY_LOCK_WAIT, else `DEFAULT_WAIT_S`): past it,
  `RegistryLocked`. Whoever holds it says who it is in `HOLDER_FILE` (a `LockHolder`: pid, command
  without its arguments' values, since when), so a waiter can name it: once to ``on_wait`` after
  `NOTICE_AFTER_S`, and in `RegistryLocked`.
* `RegistrySnapshot`: what the writer read (the SHA-256 of the bytes, or that there was no file).
  A person's editor takes no lock, so `write_registry` compares the file on disk with the snapshot
  under the lock, once the new text is on disk and just before the rename, and raises
  `RegistryChanged` (nothing written) if they differ. Only an edit saved in the instant between that
  comparison and the rename can still be lost.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator

from ci.atomic_write import atomic_write_text
from ci.cache_folder import CACHE_DIR, ignored_folder
from ci.limits import parse_whole
from ci.registry.files import display_path, read_registry_text
from ci.regular_file import MAX_REGISTRY_BYTES, read_regular

WAIT_ENV = "CI_REGISTRY_LOCK_WAIT"
# `ci quarantine` holds the lock while it reads the history, which may take a slow PostgreSQL a
# few statement timeouts; a writer that waits longer than this is waiting for something stuck.
DEFAULT_WAIT_S = 300
MAX_WAIT_S = 86_400
NOTICE_AFTER_S = 1.0
_POLL_S = 0.05
HOLDER_FILE = f"{CACHE_DIR}/registry-lock"  # beside the registry, in its directory's .ci-cache/


class NotWritten(Exception):
    """Nothing was written, for a reason outside the command's own input; ``str()`` is one line."""


class RegistryChanged(NotWritten):
    """The file changed on disk after it was read; nothing was written."""


class RegistryLocked(NotWritten):
    """Another process held the registry lock past the bound (named in the message); nothing written."""


class BadLockWait(NotWritten):
    """$CI_REGISTRY_LOCK_WAIT is not a whole number of seconds in range; nothing was written."""


@dataclass(frozen=True)
class LockHolder:
    """Who holds the registry lock: its pid, its command (see `own_command`), and since when (local
    time, ISO 8601)."""

    pid: int
    command: str
    since: str

    def describe(self) -> str:
        """``pid N (`command`, since HH:MM:SS)``."""
        return f"pid {self.pid} (`{self.command}`, since {self.since[11:19]})"

    def text(self) -> str:
        return f"{self.pid}\n{self.since}\n{self.command}\n"

    @classmethod
    def parse(cls, text: str) -> LockHolder | None:
        """The holder written by `text`, or None for anything else (a torn or foreign file)."""
        parts = text.split("\n")
        if len(parts) != 4 or not parts[0].isascii() or not parts[0].isdigit() or parts[3]:
            return None
        return cls(int(parts[0]), parts[2], parts[1])


def own_command() -> str:
    """This process's command line: its program's name without the folder, ``-m`` and the module,
    a subcommand, and then only the options' names (``...`` for what is left out): a value may be
    a secret (``--store postgresql://u:pw@h/db``)."""
    argv = list(getattr(sys, "orig_argv", sys.argv)) or ["?"]
    shown, rest = [os.path.basename(argv[0])], argv[1:]
    if rest[:1] == ["-m"]:
        shown, rest = shown + rest[:2], rest[2:]
    if rest and not rest[0].startswith("-"):
        shown.append(rest.pop(0))
    options = [arg.split("=", 1)[0] for arg in rest if arg.startswith("-")]
    dropped = len(options) < len(rest) or any("=" in arg for arg in rest if arg.startswith("-"))
    text = " ".join(shown + options + (["..."] if dropped else []))[:200]
    return "".join(c if c.isprintable() else "?" for c in text)  # one line in `HOLDER_FILE`, and in messages


@dataclass(frozen=True)
class RegistrySnapshot:
    """What a writer read: the file (absolute, links resolved) and the SHA-256 of its bytes then,
    or None when there was no file."""

    path: Path
    digest: str | None

    @classmethod
    def of_text(cls, path: str | os.PathLike[str], text: str) -> RegistrySnapshot:
        """The snapshot of ``text`` as read from ``path`` (UTF-8, which decodes and re-encodes
        byte for byte)."""
        return cls(_resolved(path), _digest(text.encode("utf-8")))

    @classmethod
    def take(cls, path: str | os.PathLike[str]) -> RegistrySnapshot:
        """The file as it is now, for a writer that replaces it whole without reading it (``init``,
        ``import-suites``). Raises OSError if it exists but cannot be read."""
        try:
            return cls(_resolved(path), _digest(read_regular(path, MAX_REGISTRY_BYTES)))
        except FileNotFoundError:
            return cls(_resolved(path), None)


def read_for_edit(path: str | os.PathLike[str]) -> tuple[str, RegistrySnapshot]:
    """The registry's text (`read_registry_text`: RegistryError if unreadable or not UTF-8) and
    its snapshot, for `write_registry`."""
    text = read_registry_text(path)
    return text, RegistrySnapshot.of_text(path, text)


def write_registry(snapshot: RegistrySnapshot, text: str, *, on_wait: Callable[[str], None] | None = None) -> None:
    """Replace ``snapshot.path`` with ``text`` (crash-safe, `ci.atomic_write`) under
    `registry_lock` (``on_wait`` as there), provided the file is still what the snapshot saw.
    Raises `RegistryChanged` when it is not, the lock's `NotWritten` errors, OSError when it cannot
    be written; whatever it raises, the file is left as it was."""
    with registry_lock(snapshot.path, on_wait=on_wait):
        atomic_write_text(snapshot.path, text, before_replace=lambda: _check_unchanged(snapshot))


def cannot_write(path: str | os.PathLike[str], exc: OSError | NotWritten) -> str:
    """The one line a command prints when `write_registry` of ``path`` raised ``exc``."""
    if isinstance(exc, NotWritten):
        return str(exc)
    return f"cannot write {path}: {exc.strerror or exc}; it is unchanged"


_HELD: dict[str, int] = {}  # directory -> the descriptor whose flock this process holds
_GUARD = threading.Lock()
_THREAD_LOCKS: dict[str, threading.RLock] = {}


@contextmanager
def registry_lock(path: str | os.PathLike[str], *, wait_s: float | None = None,
                  on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the exclusive lock of the registry at ``path`` (a flock on its directory), waiting for
    another holder at most ``wait_s`` seconds (None: `lock_wait_s`), then `RegistryLocked` naming
    it; ``on_wait`` gets one line naming it once the wait passes `NOTICE_AFTER_S`. Reentrant
    within a process: ``ci quarantine`` holds it around its whole run and `write_registry` takes
    it again inside. Raises `BadLockWait` for a bad $CI_REGISTRY_LOCK_WAIT, OSError if the
    directory cannot be opened."""
    key = str(_resolved(path).parent)
    with _GUARD:
        thread_lock = _THREAD_LOCKS.setdefault(key, threading.RLock())
    with thread_lock:
        outermost = key not in _HELD
        if outermost:
            fd = os.open(key, os.O_RDONLY)
            try:
                _wait_for(fd, Path(path), lock_wait_s() if wait_s is None else wait_s, on_wait)
            except BaseException:
                os.close(fd)
                raise
            _HELD[key] = fd
            _say_who_holds(Path(key))
        try:
            yield
        finally:
            if outermost:
                _forget_holder(Path(key))
                os.close(_HELD.pop(key))  # closing releases the lock


def lock_wait_s() -> int:
    """$CI_REGISTRY_LOCK_WAIT (whole seconds, 1 to `MAX_WAIT_S`), else `DEFAULT_WAIT_S`."""
    text = os.environ.get(WAIT_ENV, "")
    if not text:
        return DEFAULT_WAIT_S
    try:
        return parse_whole(text, f"${WAIT_ENV}", 1, MAX_WAIT_S)
    except ValueError as exc:
        raise BadLockWait(f"{exc} (seconds to wait for the registry lock); nothing written") from None


def _wait_for(fd: int, path: Path, wait_s: float, on_wait: Callable[[str], None] | None) -> None:
    # Polled, not a blocking flock: that one cannot be given a bound without a signal.
    directory, start, noticed = _resolved(path).parent, time.monotonic(), False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        waited = time.monotonic() - start
        if waited >= wait_s:
            raise RegistryLocked(f"{display_path(path)}: the registry lock is still held by {_holder(directory)} after "
                                 f"{wait_s:g} s; nothing written (${WAIT_ENV} sets how long to wait)")
        if on_wait is not None and not noticed and waited >= NOTICE_AFTER_S:
            on_wait(f"waiting for the registry lock held by {_holder(directory)}")
            noticed = True
        time.sleep(_POLL_S)


def _say_who_holds(directory: Path) -> None:
    """Best effort: a directory where nothing can be written still gets its lock, unnamed."""
    holder = LockHolder(os.getpid(), own_command(), datetime.now().astimezone().isoformat(timespec="seconds"))
    try:
        ignored_folder(directory / CACHE_DIR)
        atomic_write_text(directory / HOLDER_FILE, holder.text())
    except OSError:
        pass


def _forget_holder(directory: Path) -> None:
    try:
        (directory / HOLDER_FILE).unlink()
    except OSError:
        pass


def _holder(directory: Path) -> str:
    """The holder as `LockHolder.describe` says it, when its file names a live process."""
    try:
        holder = LockHolder.parse(read_regular(directory / HOLDER_FILE, 4096).decode("utf-8", "replace"))
    except OSError:
        holder = None
    if holder is not None and _alive(holder.pid):
        return holder.describe()
    return "another process (it has not said which)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: it exists
        return True
    return True


def _check_unchanged(snapshot: RegistrySnapshot) -> None:
    now = RegistrySnapshot.take(snapshot.path).digest
    if now == snapshot.digest:
        return
    shown = display_path(snapshot.path)
    if snapshot.digest is None:
        what = f"{shown} was created by someone else after this command looked"
    elif now is None:
        what = f"{shown} was removed by someone else after this command read it"
    else:
        what = f"{shown} was changed by someone else after this command read it"
    raise RegistryChanged(f"{what}; nothing written, so that edit stands: look at it, then run the command again")


def _resolved(path: str | os.PathLike[str]) -> Path:
    return Path(os.path.realpath(path))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


__all__ = ["BadLockWait", "DEFAULT_WAIT_S", "HOLDER_FILE", "LockHolder", "NOTICE_AFTER_S", "NotWritten",
           "RegistryChanged", "RegistryLocked", "RegistrySnapshot", "WAIT_ENV", "cannot_write", "lock_wait_s",
           "own_command", "read_for_edit", "registry_lock", "write_registry"]
