"""Reading a file of the repository (or a report) safely: regular files only, with a size bound
(standard library only; a foundation module every layer may import).

A repository is input, and a hostile or broken one holds FIFOs named like test files (``open``
blocks forever), symlinks to ``/dev/zero`` (a read never ends) or a 47 MB generated module (the
parser takes a minute and gigabytes). `read_regular` opens without blocking, checks on the open
descriptor (no race with a rename) that it is a regular file, and reads at most ``limit`` bytes;
anything else raises `UnreadableFile`, an `OSError` whose ``strerror`` says what the path is, so
the callers' existing ``except OSError`` report it as one problem at that path.
"""

from __future__ import annotations

import os
import stat

# The bounds, in bytes. A larger file is refused, never read: none of these is ever that big in a
# real repository, and parsing one would cost gigabytes.
MAX_SOURCE_BYTES = 4 << 20     # a Python module or a run_suite.py (ast.parse needs ~150x this in memory)
MAX_REGISTRY_BYTES = 64 << 20  # registry.yaml (10,000 entries are about 1.2 MB)
MAX_REPORT_BYTES = 256 << 20   # a JUnit XML report, a durations JSON, a changed-files list
MAX_CONFIG_BYTES = 4 << 20     # pyproject.toml, a cache or stamp file

_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
          | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class UnreadableFile(OSError):
    """The path is not a regular file, or is larger than the bound: ``strerror`` says which
    (``is a FIFO, not a regular file``), ``filename`` is the path."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}" if self.filename is not None else str(self.strerror)


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file at ``path`` (a symlink is followed), at most ``limit`` bytes.

    Raises `UnreadableFile` when the path is not a regular file (a FIFO, a device, a directory,
    a socket) or holds more than ``limit`` bytes (also when it grows past it while being read),
    and the `OSError` of ``os.open`` otherwise (missing, permission denied, a symlink loop).
    Never blocks on a FIFO and never reads more than ``limit + 1`` bytes.
    """
    fd = os.open(path, _FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
            raise UnreadableFile(None, f"is {kind}, not a regular file", os.fspath(path))
        if info.st_size > limit:
            raise UnreadableFile(None, _too_big(info.st_size, limit), os.fspath(path))
        # One read for the whole file: a regular file reads short only at its end, so fewer bytes
        # than asked (its size + 1) means the end was reached. More means it grew since fstat.
        chunks = [os.read(fd, info.st_size + 1)]
        total = len(chunks[0])
        if total > info.st_size:
            while total <= limit:
                chunk = os.read(fd, min(1 << 20, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            if total > limit:
                raise UnreadableFile(None, _too_big(total, limit, grew=True), os.fspath(path))
    finally:
        os.close(fd)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_big(size: int, limit: int, *, grew: bool = False) -> str:
    what = "grew past" if grew else f"is {size:,} bytes, over"
    return f"{what} the limit of {limit:,} bytes ({limit >> 20} MiB) for this kind of file"


__all__ = ["MAX_CONFIG_BYTES", "MAX_REGISTRY_BYTES", "MAX_REPORT_BYTES", "MAX_SOURCE_BYTES", "UnreadableFile",
           "read_regular"]
