"""On-disk cache of per-file import records, keyed by each file's content hash.

`ci.imports.graph.ImportGraph` asks `get(rel, hash)` before parsing a file and `put`s what it
parsed; `save` writes the cache back when anything changed. A file whose content is unchanged is
never parsed again, whatever its mtime (a fresh checkout, a branch switch back). The records are
the raw import statements, before resolution, so the cache does not depend on the project
layout; it does depend on the record format and the Python version's parser, both part of the
key. A missing, unreadable, corrupt or foreign cache is ignored (everything is parsed); one that
cannot be written is left as it was (`save` returns False). Writes are atomic
(`ci.atomic_write.atomic_write_text`), so concurrent runs or a kill mid-write leave either the
old cache or the new one.

Default location: ``<root>/.ci-cache/import-records.json``; the directory gets its own
``.gitignore`` (``*``) so it never shows up as untracked.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ci.atomic_write import atomic_write_text
from ci.cache_folder import CACHE_DIR, ignored_folder
from ci.regular_file import MAX_REPORT_BYTES, read_regular

CACHE_FILE = "import-records.json"
FORMAT = 2


def default_cache_path(root: str | os.PathLike[str]) -> Path:
    return Path(root) / CACHE_DIR / CACHE_FILE


class RecordCache:
    """rel path -> (content hash, import records), loaded from and saved to ``path``."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.key = f"{FORMAT}/{sys.implementation.name}-{sys.version_info[0]}.{sys.version_info[1]}"
        self.entries: dict[str, list] = {}
        self.hits = self.misses = 0
        self._dirty = False
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(read_regular(self.path, MAX_REPORT_BYTES))
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and data.get("key") == self.key and isinstance(data.get("files"), dict):
            self.entries = data["files"]

    def get(self, rel: str, digest: str) -> list | None:
        """The records stored for ``rel`` if its content hash is ``digest``, else None."""
        entry = self.entries.get(rel)
        if isinstance(entry, list) and len(entry) == 2 and entry[0] == digest and isinstance(entry[1], list):
            self.hits += 1
            return entry[1]
        self.misses += 1
        return None

    def put(self, rel: str, digest: str, records: list) -> None:
        self.entries[rel] = [digest, records]
        self._dirty = True

    def prune(self, keep: set[str]) -> None:
        """Forget files not in ``keep`` (deleted or renamed since the cache was written)."""
        stale = self.entries.keys() - keep
        for rel in stale:
            del self.entries[rel]
        self._dirty = self._dirty or bool(stale)

    def save(self) -> bool:
        """Write the cache if it changed; False if it could not be written (nothing else happens)."""
        if not self._dirty:
            return True
        try:
            ignored_folder(self.path.parent)
            atomic_write_text(self.path, json.dumps({"key": self.key, "files": self.entries},
                                                    separators=(",", ":"), sort_keys=True))
        except OSError:
            return False
        self._dirty = False
        return True


__all__ = ["CACHE_DIR", "CACHE_FILE", "RecordCache", "default_cache_path"]
