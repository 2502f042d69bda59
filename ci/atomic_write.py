"""Crash-safe file rewrites: the one way this project writes a file that already matters.

`atomic_write_text` writes to a temporary file in the target's directory, fsyncs it, gives it the
original file's permission bits (and owner, where allowed), and `os.replace`s it over the target,
then fsyncs the directory. A reader (or a crash, kill -9, or a full disk at any point) sees either
the old file whole or the new file whole, never a truncated one; on any error the temporary file
is removed and the target is untouched. A symlink is followed: the file it points to is replaced
and the link stays a link.

A process killed between creating and renaming the temporary file leaves it behind, named
``.<target name>.<random>.tmp`` beside the target; it is never read, and safe to delete.

``before_replace``, when given, is called once the new content is safely on disk, just before
the rename: the last moment a writer can still decide not to replace the target (the registry's
writers check there that nobody changed it meanwhile, `ci.registry.edit_lock`). An exception it
raises leaves the target untouched and removes the temporary file.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Callable


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes,
                       before_replace: Callable[[], None] | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring).

    A new file gets the mode a plain ``open(path, "w")`` would give it (0o666 less the umask).
    Raises OSError (for example ENOSPC) with the target unchanged.
    """
    target = Path(os.path.realpath(path))
    directory = target.parent
    try:
        old: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        old = None
    if old is not None:
        mode = stat.S_IMODE(old.st_mode)
    else:
        umask = os.umask(0o077)  # read it; another thread creating a file meanwhile gets a stricter mode
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if old is not None and hasattr(os, "chown") and (old.st_uid, old.st_gid) != (os.getuid(), os.getgid()):
            try:
                os.chown(tmp, old.st_uid, old.st_gid)
            except PermissionError:
                pass  # only root may give a file away; the content and mode still carry over
        os.chmod(tmp, mode)
        if before_replace is not None:
            before_replace()
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory)


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8",
                      before_replace: Callable[[], None] | None = None) -> None:
    """`atomic_write_bytes` of ``text`` encoded with ``encoding`` (newlines written as given)."""
    atomic_write_bytes(path, text.encode(encoding), before_replace)


def _fsync_directory(directory: Path) -> None:
    """Make the rename itself durable; not every platform can open a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["atomic_write_bytes", "atomic_write_text"]
