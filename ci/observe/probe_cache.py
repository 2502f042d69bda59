"""slipcover's bytecode edit of a module, done once per recording and reused by every process.

A recorded test's subprocess imports the same repository modules as the test's own process, and
slipcover puts probes into each of them again: about 50 us per probe in pure Python
(`slipcover.bytecode.Editor.insert_function_call`), 0.1-0.3 s of CPU for a child that imports a
CLI. The edit itself depends on the code object alone. So the first process that instruments a
module's code stores the result as data in the recording's parts directory: for each code object
the new ``co_code``, line table, exception table and stack size, the line of each probe, and the
same for the code objects nested in its constants. A later process with the same code (the key
is a digest of the code as marshal writes it and of the Python version, so another source or
another Python misses) rebuilds the code from that: its own probe objects (process-local C
objects, never stored), the same bytes around them, and the lines each probe stands for
(`ci.observe.blocks`), told to ``note``.

Contract: `ProbeCache(folder, plan, signal, new_probe, note).instrument(code, edit)` returns
``edit(code)`` (slipcover's own instrument) the first time, and an equal code object rebuilt
from the stored edit after;
an entry that cannot be read, does not unmarshal or does not fit the code is ignored (the edit
runs again), and a write that fails stores nothing; neither ever raises. Entries are written
through a temporary file and ``os.replace``, so a reader never sees half of one, and carry a
digest of their content: one that a crash tore or a disk mangled fails it and is ignored.

Where the entries live (`probe_folder`): in the recording's own parts directory, which its owner
makes afresh (``tempfile.mkdtemp``, mode 0700) and removes at the end; and, given a
`ci.observe.probe_store.ProbeStore`, a module's entry also beside its bytecode, trusted as a
``.pyc`` there is (that module's docstring), and nowhere else. An entry is code that the next
process runs in place of the module's own, so a cache that outlives the recording elsewhere would
let whoever can write it decide what a later recording executes: a folder restored from a CI cache
that pull-request code can save into, a shared ``.ci-cache``, a folder named by the environment. A byte flipped there (``BINARY_OP`` subtract -> add, its digest recomputed) made a
recording pass on source that says ``return a - b`` and write a complete map; and ``marshal.loads``
of crafted data is not safe either. Inside one recording every writer is a process of that very
recording, running the code under test anyway. The digest below guards against a torn write, not
against an attacker. Measured when the entries were still kept between recordings: a recording that
started with an empty cache cost within the spread of one that started warm (docs/depmaps.md,
"Overhead": 1.11x / 1.02x, 1.03x / 1.10x, 1.08x / 1.11x, 1.12x / 1.14x, cold / warm).
"""

from __future__ import annotations

import marshal
import os
import sys
import threading
from pathlib import Path
from types import CodeType
from typing import Any, Callable

from ci.observe.probe_store import ProbeStore
from ci.regular_file import MAX_CONFIG_BYTES, read_regular

PROBES_DIR = "probes"  # the folder in a recording's parts directory
MARK = "__slipcover__"  # the constant slipcover adds last to each code object it instruments


def is_marked(consts: tuple[object, ...]) -> bool:
    """Whether a code object's constants hold `MARK` (slipcover instrumented it). Only ``str``
    constants are compared: ``MARK == b"..."`` warns, and raises under ``python -bb``, in the code
    under test (a test that runs its child with ``-bb`` would fail because it was recorded)."""
    return any(type(const) is str and const == MARK for const in consts)
# the layout of an entry (`ci.observe.probe_store` keys by it too); 2: the lines each probe stands
# for (`ci.observe.blocks`) are stored too; 3: a digest
PROBE_FORMAT = _FORMAT = 3

# (co_code, co_linetable, co_exceptiontable, co_stacksize, probe lines, ((const index, entry), ...),
#  ((probe line, (the other lines of its block, ...)), ...))
Entry = tuple[bytes, bytes, bytes, int, tuple[int, ...], tuple[tuple[int, Any], ...], tuple[tuple[int, tuple[int, ...]], ...]]
Plan = Callable[[CodeType], tuple[list[int], dict[int, frozenset[int]]]]


try:  # hashlib's own blake2b, without hashlib's OpenSSL import: this runs in every recorded child
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b


def probe_folder(parts: str | os.PathLike[str]) -> Path:
    """Where a recording's processes share their edits: its parts directory's ``probes`` folder
    (see the module docstring for why nowhere else)."""
    return Path(parts) / PROBES_DIR


def _digest(data: bytes) -> bytes:
    return blake2b(data, digest_size=16).digest()


def _key(code: CodeType) -> str:
    """A digest of the code and the Python version. marshal's version 2 has no shared-object
    references: from version 3 on, marshal marks an object shared when its reference count is
    above one, and the same code dumps differently in two processes. (A frozenset constant still
    iterates in an order that differs per process: such code misses, and is edited again.)"""
    return blake2b(b"%d %s " % (_FORMAT, sys.version.encode()) + marshal.dumps(code, 2), digest_size=20).hexdigest()


def _entry(original: CodeType, edited: CodeType, plan: Plan) -> Entry | None:
    """The edit of ``original`` into ``edited`` as data, or None when its constants are not laid
    out as slipcover lays them (original constants, the probe signal, one probe per line, the mark)."""
    probe_lines, implied = plan(original)
    n = len(original.co_consts)
    consts = edited.co_consts
    if len(consts) != n + 2 + len(probe_lines) or not is_marked(consts[-1:]):
        return None
    nested = []
    for i, const in enumerate(original.co_consts):
        if isinstance(const, CodeType):
            sub = _entry(const, consts[i], plan) if isinstance(consts[i], CodeType) else None
            if sub is None:
                return None
            nested.append((i, sub))
        elif consts[i] is not const and consts[i] != const:
            return None
    return (edited.co_code, edited.co_linetable, edited.co_exceptiontable, edited.co_stacksize,
            tuple(probe_lines), tuple(nested), tuple((line, tuple(sorted(o))) for line, o in sorted(implied.items())))


def _rebuild(code: CodeType, entry: Entry, signal: object, new_probe: Callable[[str, int], object],
             note: Callable[[str, dict[int, frozenset[int]]], None]) -> CodeType:
    co_code, linetable, exceptiontable, stacksize, probe_lines, nested, implied = entry
    consts = list(code.co_consts)
    for i, sub in nested:
        consts[i] = _rebuild(consts[i], sub, signal, new_probe, note)
    note(code.co_filename, {line: frozenset(others) for line, others in implied})
    consts.append(signal)
    consts.extend(new_probe(code.co_filename, line) for line in probe_lines)
    consts.append(MARK)
    return code.replace(co_code=co_code, co_consts=tuple(consts), co_linetable=linetable,
                        co_exceptiontable=exceptiontable, co_stacksize=stacksize)


def _fits(code: CodeType, entry: object) -> bool:
    """The entry's shape matches ``code``: nested entries where its code constants are."""
    if not (isinstance(entry, tuple) and len(entry) == 7 and isinstance(entry[0], bytes)
            and isinstance(entry[4], tuple) and isinstance(entry[5], tuple) and isinstance(entry[6], tuple)):
        return False
    codes = {i for i, c in enumerate(code.co_consts) if isinstance(c, CodeType)}
    nested = entry[5]
    if {i for i, _ in nested} != codes:
        return False
    return all(_fits(code.co_consts[i], sub) for i, sub in nested)


def _load(path: Path) -> object | None:
    """The entry stored at ``path``; None when it is missing, unreadable or fails its digest."""
    try:
        raw = read_regular(path, MAX_CONFIG_BYTES)  # a FIFO or /dev/zero there is no entry
    except OSError:
        return None
    digest, data = raw[:16], raw[16:]
    if len(digest) < 16 or _digest(data) != digest:
        return None
    return _unmarshal(data)


def _unmarshal(data: bytes | None) -> object | None:
    if data is None:
        return None
    try:
        return marshal.loads(data)
    except (EOFError, ValueError, TypeError):
        return None


class ProbeCache:
    """See the module docstring. ``plan(code)``: the line of each probe slipcover puts into
    ``code`` (in order), and the lines each stands for (`ci.observe.blocks.plan`);
    ``signal`` and ``new_probe(filename, line)``: slipcover's probe signal and probe constructor
    for this process; ``note(filename, implied)``: told the lines each probe of a rebuilt code
    object stands for."""

    def __init__(self, folder: Path, plan: Plan, signal: object, new_probe: Callable[[str, int], object],
                 note: Callable[[str, dict[int, frozenset[int]]], None], store: ProbeStore | None = None):
        self.folder, self.plan, self.signal, self.new_probe, self.note = folder, plan, signal, new_probe, note
        self.store = store

    def instrument(self, code: CodeType, edit: Callable[[CodeType], CodeType]) -> CodeType:
        key = _key(code)
        path = self.folder / f"{key}.code"
        entry = _load(path)
        if entry is None and self.store is not None:
            entry = _unmarshal(self.store.load(code.co_filename, code))
        if entry is not None and _fits(code, entry):
            try:
                rebuilt = _rebuild(code, entry, self.signal, self.new_probe, self.note)
            except (TypeError, ValueError):
                pass
            else:
                return rebuilt
        edited = edit(code)
        fresh = _entry(code, edited, self.plan)
        if fresh is not None:
            data = self._store(path, fresh)
            if self.store is not None and data is not None:
                self.store.save(code.co_filename, code, data)
        return edited

    def _store(self, path: Path, entry: Entry) -> bytes | None:
        # no fsync: an entry a crash tore fails its digest and is ignored like any bad one, and
        # the edit runs again
        tmp = path.with_name(f".tmp-{os.getpid()}-{threading.get_ident()}-{path.name}")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                data = marshal.dumps(entry, 2)
                with os.fdopen(fd, "wb") as fh:
                    fh.write(_digest(data) + data)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except (OSError, ValueError):
            return None  # no entry: the next process edits the code itself
        return data


__all__ = ["MARK", "PROBE_FORMAT", "PROBES_DIR", "ProbeCache", "is_marked", "probe_folder"]
