"""slipcover's edit of a module kept between recordings, where the module's own bytecode is cached.

`ci.observe.probe_cache` shares a module's edit between the processes of one recording; this
store keeps it for the next recording, as CPython keeps a ``.pyc``: beside the source, in the
``__pycache__`` folder (or under ``sys.pycache_prefix``) that `importlib` would write the
module's bytecode to, one file per module (``calc.cpython-311.ci-probes``). An entry is code that
runs in place of the module's, so it is trusted exactly as far as a ``.pyc`` there is: whoever
can write that folder can already make the interpreter run their bytecode. Hence:

- the folder must be a real folder (not a link) owned by this process's user, never writable by
  others, and writable by the group only where the source's own folder is;
- an entry must be a regular file (a FIFO or a link is not opened for reading: ``O_NONBLOCK``,
  ``O_NOFOLLOW``), owned by this user, writable by nobody else, at most `MAX_BYTES`;
- it holds the key it was written for: a digest of the code object as ``marshal`` writes it
  (which the source's bytes, the file's name and the compiler decide: another source, even one
  that compiles alike but for a line number, misses), the Python version and bytecode magic,
  slipcover's version and the layout of the entry (`probe_cache`'s format); and a digest of its
  content. A missing, truncated, corrupt, foreign (another key: another source, another Python,
  another slipcover) or untrusted entry is ignored and, where the folder is trusted, rewritten;
- writes go through a temporary file beside the entry (``O_EXCL``), ``fsync`` and
  ``os.replace``: two processes writing one entry leave one whole entry.

Only module code (``<module>``) is kept, one entry per source: a function's code replaced at
`start` would overwrite its module's entry. Contract: `ProbeStore(salt).load(filename, code)`
returns the stored entry's marshal data for exactly that code, or None; `save(filename, code,
data)` stores it where trusted; neither raises nor prints.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
import threading
from importlib._bootstrap_external import MAGIC_NUMBER, cache_from_source  # what `importlib.util` re-exports, loaded at start-up
from pathlib import Path
from types import CodeType

SUFFIX = ".ci-probes"
MAX_BYTES = 16 * 1024 * 1024
_HEADER = b"ci-probes 1\n"
_KEY = 20
_DIGEST = 16
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH

try:  # hashlib's own blake2b, without hashlib's OpenSSL import: this runs in every recorded child
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b


def entry_path(filename: str) -> Path | None:
    """Where ``filename``'s entry lives (beside its ``.pyc``), or None for a name that has none."""
    if not filename.endswith(".py") or not os.path.isabs(filename):
        return None
    try:
        return Path(cache_from_source(filename)).with_suffix(SUFFIX)
    except (NotImplementedError, ValueError):  # no cache tag on this interpreter
        return None


def _trusted_folder(folder: Path, source: str) -> bool:
    try:
        st = os.lstat(folder)
        group_may = os.stat(os.path.dirname(source)).st_mode & stat.S_IWGRP
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & stat.S_IWOTH
            and not st.st_mode & stat.S_IWGRP & ~group_may)


class ProbeStore:
    """See the module docstring; ``salt``: what else the key depends on (slipcover's version and
    the entry's layout, from the caller)."""

    def __init__(self, salt: bytes):
        self.salt = b"%s %s %s " % (salt, sys.version.encode(), MAGIC_NUMBER)

    def key(self, code: CodeType) -> bytes:
        """The key an entry for ``code`` carries (marshal version 2: see `probe_cache._key`)."""
        return blake2b(self.salt + marshal.dumps(code, 2), digest_size=_KEY).digest()

    def load(self, filename: str, code: CodeType) -> bytes | None:
        """See the module docstring."""
        path = entry_path(filename)
        if path is None or code.co_name != "<module>" or not _trusted_folder(path.parent, filename):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & _OTHERS_WRITE \
                    or st.st_size > MAX_BYTES:
                return None
            raw = os.read(fd, st.st_size + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        head, key, digest, data = _split(raw)
        if head != _HEADER or key != self.key(code) or blake2b(data, digest_size=_DIGEST).digest() != digest:
            return None
        return data

    def save(self, filename: str, code: CodeType, data: bytes) -> None:
        """See the module docstring."""
        path = entry_path(filename)
        if path is None or code.co_name != "<module>" or not os.path.isfile(filename):
            return  # code compiled under a name that is no file makes no folder
        folder = path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)  # as the import system makes __pycache__
        except OSError:
            return
        if not _trusted_folder(folder, filename):
            return
        tmp = folder / f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        blob = _HEADER + self.key(code) + blake2b(data, digest_size=_DIGEST).digest() + data
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError:
            return
        try:
            try:
                # a umask that lets others write would make the entry one that `load` refuses
                os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) & ~_OTHERS_WRITE)
                view = memoryview(blob)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _split(raw: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    n = len(_HEADER)
    return raw[:n], raw[n:n + _KEY], raw[n + _KEY:n + _KEY + _DIGEST], raw[n + _KEY + _DIGEST:]


__all__ = ["MAX_BYTES", "SUFFIX", "ProbeStore", "entry_path"]
