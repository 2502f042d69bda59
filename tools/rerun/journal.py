"""The webhook server's delivery journal: SQLite in WAL mode, one row per accepted delivery.

Contract:

* `Journal.accept` records a delivery (id, raw payload) and commits before the server answers
  202; a delivery id seen before is refused, across restarts (replay protection).
* `Journal.finish` marks it handled; `Journal.fail` keeps it unfinished and counts the attempt.
* `Journal.unfinished` lists every accepted delivery not marked handled, oldest first: the server
  replays them when it starts, so a kill -9 loses nothing that got a 202.
* Every SQLite failure (a full disk, a read-only or corrupt file) is a `JournalError`, never a raw
  ``sqlite3`` exception. Opening checks the file (``PRAGMA quick_check``) and that it can be
  written (`Journal.probe`), so a corrupt or read-only journal is refused at start, not at the
  first delivery. `Journal.healthy` is False from a failed write until the next successful one
  (`Journal.probe` is a write that touches no delivery); the server's ``/healthz`` reports it.

Durability: ``synchronous=NORMAL`` in WAL mode makes each commit reach the operating system before
`accept` returns, which survives the process being killed (kill -9, OOM) but not a power loss
of the machine; ``durable=True`` (``synchronous=FULL``) fsyncs every commit and survives that too,
at the cost of one fsync per delivery. One connection serves all threads, behind a lock.

Checkpoints (copying the WAL back into the database, with an fsync) never run inside a commit,
where they would stall every acknowledgement queued behind the lock: a background thread with its
own connection runs a PASSIVE checkpoint every `CHECKPOINT_EVERY` seconds (it never blocks
writers), and a blocking RESTART one only when the WAL has grown past `MAX_WAL_FRAMES` pages
because passive ones could not keep up.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.rerun.secrets_file import redact

log = logging.getLogger(__name__)

ACCEPTED, DONE = "accepted", "done"
JOURNAL_FILE = "deliveries.sqlite3"
CHECKPOINT_EVERY = 1.0   # seconds
MAX_WAL_FRAMES = 16384   # pages (64 MiB at 4 KiB) before a checkpoint may block writers

_SCHEMA = """
CREATE TABLE IF NOT EXISTS deliveries (
    id TEXT PRIMARY KEY,
    payload BLOB NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    received REAL NOT NULL,
    finished REAL,
    last_error TEXT
);
CREATE TABLE IF NOT EXISTS probe (id INTEGER PRIMARY KEY CHECK (id = 1), at REAL NOT NULL);
"""


class JournalError(RuntimeError):
    """The journal cannot be opened or written (the server must not answer 202 then)."""


@dataclass(frozen=True)
class Entry:
    """One journalled delivery; ``payload`` is the raw request body; ``received`` epoch seconds."""

    delivery: str
    payload: bytes
    state: str
    attempts: int
    received: float


class Journal:
    """See the module docstring. ``path`` ``":memory:"`` keeps it in memory (tests only)."""

    def __init__(self, path: str | Path, *, durable: bool = False):
        self.path = str(path)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if self.path != ":memory:" and str(mode).lower() != "wal":
                raise JournalError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._db.execute("PRAGMA wal_autocheckpoint=0")  # see the module docstring
            self._db.executescript(_SCHEMA)
            check = self._db.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                raise JournalError(f"the delivery journal {self.path} is corrupt (SQLite quick_check: "
                                   f"{'; '.join(str(row[0]) for row in check[:3])[:300]}); move it aside to start "
                                   f"with an empty one (its unfinished deliveries are then not replayed)")
        except sqlite3.Error as exc:
            self._db_close_quietly()
            raise JournalError(f"cannot open the delivery journal {self.path}: {exc}") from None
        except JournalError:
            self._db_close_quietly()
            raise
        self._lock = threading.Lock()
        self.healthy = True
        self.last_error: str | None = None
        try:
            self.probe()  # a read-only file or directory, or a full disk, is refused here
        except JournalError:
            self._db_close_quietly()
            raise
        self._closed = threading.Event()
        self._checkpointer: threading.Thread | None = None
        if self.path != ":memory:" and not self.path.startswith("file:"):
            self._checkpointer = threading.Thread(target=self._checkpoint_loop, name="journal-checkpoint",
                                                  daemon=True)
            self._checkpointer.start()

    def _db_close_quietly(self) -> None:
        try:
            self._db.close()
        except (AttributeError, sqlite3.Error):
            pass

    def _write(self, what: str, sql: str, params: tuple[object, ...]) -> sqlite3.Cursor:
        """One committed write under the lock; a failure is a `JournalError` and marks the journal
        unhealthy until a later write succeeds."""
        with self._lock:
            try:
                cursor = self._db.execute(sql, params)
            except sqlite3.Error as exc:
                self.healthy, self.last_error = False, f"{what}: {exc}"
                raise JournalError(f"cannot write the delivery journal {self.path} ({what}): {exc}") from None
            self.healthy, self.last_error = True, None
            return cursor

    def _read(self, what: str, sql: str, params: tuple[object, ...] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise JournalError(f"cannot read the delivery journal {self.path} ({what}): {exc}") from None

    def probe(self) -> None:
        """A write that touches no delivery: raises `JournalError` (and leaves the journal
        unhealthy) while the journal cannot be written; marks it healthy when it can."""
        self._write("probe", "INSERT OR REPLACE INTO probe (id, at) VALUES (1, ?)", (time.time(),))

    def _checkpoint_loop(self) -> None:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        try:
            while not self._closed.wait(CHECKPOINT_EVERY):
                self.checkpoint(db)
        except sqlite3.Error as exc:  # the journal keeps working; only its WAL grows
            log.error("journal checkpoints stopped: %s", exc)
        finally:
            db.close()

    def checkpoint(self, db: sqlite3.Connection | None = None) -> tuple[int, int]:
        """One checkpoint (see the module docstring) on ``db`` (default: the journal's own connection,
        under its lock): (WAL pages, pages copied back)."""
        if db is None:
            with self._lock:
                return self.checkpoint(self._db)
        _, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if frames > MAX_WAL_FRAMES and copied < frames:
            log.warning("journal WAL at %d pages, passive checkpoints are behind: blocking one", frames)
            _, frames, copied = db.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        return frames, copied

    @classmethod
    def in_dir(cls, state_dir: str | Path, *, durable: bool = False) -> "Journal":
        """The journal file inside ``state_dir`` (created, mode 0700, if missing)."""
        directory = Path(state_dir)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        return cls(directory / JOURNAL_FILE, durable=durable)

    def accept(self, delivery: str, payload: bytes) -> bool:
        """Record a new delivery; False (nothing written) if this id was recorded before."""
        cursor = self._write(f"record delivery {delivery[:80]!r}",
                             "INSERT OR IGNORE INTO deliveries (id, payload, state, received) VALUES (?, ?, ?, ?)",
                             (delivery, payload, ACCEPTED, time.time()))
        return cursor.rowcount == 1

    def state(self, delivery: str) -> str | None:
        rows = self._read("state", "SELECT state FROM deliveries WHERE id = ?", (delivery,))
        return str(rows[0][0]) if rows else None

    def forget(self, delivery: str) -> None:
        """Remove an accepted delivery that was never acknowledged (the queue was full)."""
        self._write("forget", "DELETE FROM deliveries WHERE id = ? AND state = ?", (delivery, ACCEPTED))

    def finish(self, delivery: str) -> None:
        """Mark a delivery handled; `JournalError` when that cannot be written (it stays unfinished)."""
        self._write(f"finish {delivery[:80]!r}", "UPDATE deliveries SET state = ?, finished = ?, "
                    "attempts = attempts + 1, last_error = NULL WHERE id = ?", (DONE, time.time(), delivery))

    def fail(self, delivery: str, error: str) -> None:
        """Count a failed attempt; the delivery stays unfinished (replayed at the next start)."""
        self._write(f"fail {delivery[:80]!r}", "UPDATE deliveries SET attempts = attempts + 1, last_error = ? "
                    "WHERE id = ?", (redact(error)[:2000], delivery))  # redacted before it is cut

    def unfinished(self) -> list[Entry]:
        rows = self._read("unfinished", "SELECT id, payload, state, attempts, received FROM deliveries "
                          "WHERE state = ? ORDER BY received, rowid", (ACCEPTED,))
        return [Entry(str(r[0]), bytes(r[1]), str(r[2]), int(r[3]), float(r[4])) for r in rows]

    def counts(self) -> dict[str, int]:
        rows = self._read("counts", "SELECT state, COUNT(*) FROM deliveries GROUP BY state")
        return {str(state): int(count) for state, count in rows}

    def prune(self, older_than: float) -> int:
        """Delete handled deliveries finished more than ``older_than`` seconds ago; how many."""
        cursor = self._write("prune", "DELETE FROM deliveries WHERE state = ? AND finished < ?",
                             (DONE, time.time() - older_than))
        return cursor.rowcount

    def close(self) -> None:
        self._closed.set()
        if self._checkpointer is not None:
            self._checkpointer.join(10)
        with self._lock:
            self._db.close()


__all__ = ["ACCEPTED", "DONE", "Entry", "JOURNAL_FILE", "Journal", "JournalError"]
