"""Checked-hash bytecode for the recorder's own modules, which every recorded Python child imports.

A recorded subprocess imports the recorder (`ci.observe.child` and what it needs) before
its program runs. Where no valid ``.pyc`` of those modules exists, every child compiles them
again: a checkout whose test suite sets ``PYTHONDONTWRITEBYTECODE`` (this repository's does, so
that an edited test source is never run from a stale ``.pyc``) has none for any module the pytest
process did not import before that, and a timestamp ``.pyc`` goes stale when its source changes.
A recorded ``python -c pass`` cost 54.5 ms of CPU with that compile and 40.5 ms without it
(docs/depmaps.md, "Recording").

`cache_once` writes, once per recording, a *checked-hash* ``.pyc`` (PEP 552) for each loaded
module of a package whose cached one is missing or is not a checked-hash ``.pyc`` of the source
as it is now. The interpreter validates such a file against a hash of the source on every
import, not against its modification time and size, so an edit is never missed, however fast or
however the size stays (unless the interpreter runs with ``--check-hash-based-pycs never``).
``py_compile`` writes each file whole (a temporary file and ``os.replace``); a folder that
cannot be written, a full disk or a source that does not compile is skipped without a word: the
next child compiles in memory, as before.

``ci observe``'s own process does the same with `cache_checked` at its end, every time: its
modules (the command, the registry's parser for the test roots) compiled from source cost it
0.18 s of CPU against 0.13 s (``ci observe -- true`` in rich, 3.11). The recording pytest
process does not (yet): under an editable install of the package (this repository's bootstrap
venv) pytest's assertion rewriting loads the recorder's modules there and compiles them itself,
so a ``.pyc`` would not be read; with only the plugin's entry point registered and ``ci`` on
``PYTHONPATH`` (the overhead bench) it would be, for about 36 ms of ``-X importtime`` self time.

Contract: `cache_once` returns the sources it wrote a ``.pyc`` for, and does nothing (returns
``[]``) when the mark file exists already; it never raises.
"""

from __future__ import annotations

import importlib.util
import os
import sys

MARK_NAME = "bytecode.cached"  # in a recording's parts directory: the first child has cached
_HEADER = 16  # magic, flags, then the source's hash (checked-hash) or mtime and size
_CHECKED_HASH_FLAGS = 0b11  # hash-based, and checked against the source on import


def cache_once(parts: str, package: str) -> list[str]:
    """See the module docstring: the loaded modules of ``package`` (its name and every name below
    it in ``sys.modules``), in the recording whose parts directory is ``parts``."""
    try:
        os.close(os.open(os.path.join(parts, MARK_NAME), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except OSError:
        return []  # cached by another child already, or the parts are gone: nothing to do
    return cache_checked(loaded_sources(package))


def loaded_sources(package: str) -> list[str]:
    """The ``.py`` files of the modules of ``package`` in ``sys.modules``, sorted."""
    found = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if (name == package or name.startswith(package + ".")) and isinstance(path, str) and path.endswith(".py"):
            found.add(path)
    return sorted(found)


def cache_checked(sources: list[str]) -> list[str]:
    """Write a checked-hash ``.pyc`` for each of ``sources`` whose cached one is not already
    that, of that source; returns those written."""
    stale: list[tuple[str, str]] = []
    for source in sources:
        try:
            cached = importlib.util.cache_from_source(source)
            with open(source, "rb") as fh:
                current = _checked_hash_of(cached, fh.read())
        except (OSError, ValueError, NotImplementedError):
            continue  # see the module docstring: the child compiles it, as without a cache
        if not current:
            stale.append((source, cached))
    if not stale:  # every run after the first: py_compile (with traceback, textwrap) is never imported
        return []
    import py_compile  # deferred: every recorded child imports this module, one in a recording writes

    written = []
    for source, cached in stale:
        try:
            py_compile.compile(source, cfile=cached, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        except (OSError, ValueError, NotImplementedError, py_compile.PyCompileError):
            continue
        written.append(source)
    return written


def _checked_hash_of(cached: str, source: bytes) -> bool:
    """Whether ``cached`` is a checked-hash ``.pyc`` of this interpreter for ``source``."""
    try:
        with open(cached, "rb") as fh:
            header = fh.read(_HEADER)
    except OSError:
        return False
    return (len(header) == _HEADER and header[:4] == importlib.util.MAGIC_NUMBER
            and int.from_bytes(header[4:8], "little") == _CHECKED_HASH_FLAGS
            and header[8:16] == importlib.util.source_hash(source))
