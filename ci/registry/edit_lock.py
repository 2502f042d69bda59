"""Rewriting registry.yaml without losing anyone's edit: the one way every command writes it.

The writers (``ci quarantine --apply/--release``, ``ci durations --write``, ``ci lint --fix``,
``ci init``, ``ci import-suites --output``) each read the file, compute a new text and replace it.
Two things keep an edit made meanwhile from being overwritten:

* `registry_lock`: an exclusive ``flock`` on the registry's directory (the file itself is
  replaced by every write, so it cannot carry a lock). Every writer holds it while it writes, so
  two writers never interleave; ``ci quarantine`` holds it for its whole run, so two of those queue.
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
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ci.atomic_write import atomic_write_text
from ci.registry.files import display_path, read_registry_text
from ci.regular_file import MAX_REGISTRY_BYTES, read_regular


class RegistryChanged(Exception):
    """The file changed on disk after it was read; nothing was written. ``str()`` is one line."""


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


def write_registry(snapshot: RegistrySnapshot, text: str) -> None:
    """Replace ``snapshot.path`` with ``text`` (crash-safe, `ci.atomic_write`) under
    `registry_lock`, provided the file is still what the snapshot saw. Raises `RegistryChanged`
    when it is not, OSError when it cannot be written; either way the file is left as it was."""
    with registry_lock(snapshot.path):
        atomic_write_text(snapshot.path, text, before_replace=lambda: _check_unchanged(snapshot))


def cannot_write(path: str | os.PathLike[str], exc: OSError | RegistryChanged) -> str:
    """The one line a command prints when `write_registry` of ``path`` raised ``exc``."""
    if isinstance(exc, RegistryChanged):
        return str(exc)
    return f"cannot write {path}: {exc.strerror or exc}; it is unchanged"


_HELD: dict[str, int] = {}  # directory -> the descriptor whose flock this process holds
_GUARD = threading.Lock()
_THREAD_LOCKS: dict[str, threading.RLock] = {}


@contextmanager
def registry_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the exclusive lock of the registry at ``path`` (a flock on its directory), waiting for
    another holder. Reentrant within a process: ``ci quarantine`` holds it around its whole run and
    `write_registry` takes it again inside. Raises OSError if the directory cannot be opened."""
    key = str(_resolved(path).parent)
    with _GUARD:
        thread_lock = _THREAD_LOCKS.setdefault(key, threading.RLock())
    with thread_lock:
        outermost = key not in _HELD
        if outermost:
            fd = os.open(key, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            _HELD[key] = fd
        try:
            yield
        finally:
            if outermost:
                os.close(_HELD.pop(key))  # closing releases the lock


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


__all__ = ["RegistryChanged", "RegistrySnapshot", "cannot_write", "read_for_edit", "registry_lock", "write_registry"]
