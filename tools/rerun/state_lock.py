"""One ``serve`` per state directory: an exclusive lock held for the life of the process.

Two servers on one journal would both replay its unfinished deliveries and dispatch them twice.
`StateLock.acquire` takes ``flock(LOCK_EX | LOCK_NB)`` on ``<state dir>/serve.lock`` and keeps the
file open until `StateLock.release` or the process ends (a killed process loses the lock with its
descriptors, so a stale lock never blocks a restart). The descriptor is not inherited by children
(Python opens files non-inheritable and the worker process is spawned). The lock file holds no data,
so it is never rewritten.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from tools.rerun.journal import JournalError

LOCK_FILE = "serve.lock"


class StateLockError(JournalError):
    """The state directory is in use by another process (or the lock file cannot be opened)."""


class StateLock:
    """A held lock on one state directory (see the module docstring)."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, state_dir: str | Path) -> "StateLock":
        """Lock ``state_dir`` (created, mode 0700, if missing); `StateLockError` when another
        process holds it or the lock file cannot be opened."""
        directory = Path(state_dir)
        path = directory / LOCK_FILE
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StateLockError(f"cannot open the state lock {path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateLockError(f"the state directory {directory} is in use by another `serve` process "
                                 f"(it holds {path}); two servers on one journal would replay and dispatch "
                                 f"the same deliveries twice. Stop the other one, or give this one its own "
                                 f"--state-dir") from None
        except OSError as exc:
            os.close(fd)
            raise StateLockError(f"cannot lock {path}: {exc.strerror or exc}") from None
        return cls(path, fd)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd = -1


__all__ = ["LOCK_FILE", "StateLock", "StateLockError"]
