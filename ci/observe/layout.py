"""What `ci observe` needs of the registry: the test roots, the test patterns and the tier names.

The observing process needs nothing else of ``registry.yaml``, yet loading it through
`ci.registry` (the parsers and PyYAML) was about half of that process's instructions on every
recording (355 of 720 million on rich, 3.12). `read_layout` keeps the three in a small cache,
``.ci-cache/observe-layout.json`` under the repository root, keyed by a digest of the registry's
bytes and of the parser's own sources (their sizes and modification times: an upgraded ``ci`` that
parses or defaults differently misses), and goes through `ci.registry.load_registry` on a miss,
which then rewrites the cache (atomically; a checkout it cannot write just has no cache).

Only a registry that loaded without a problem is ever cached, and the parser is a pure function of
the text, so a hit gives what a load would: a broken registry always reaches the parser and its
first problem. A cache that is unreadable, malformed or of another key is a miss, never an error.

Contract: `read_layout(root)` returns a `Layout`; raises `ValueError` with one line naming the
registry and its first problem (what `ci lint` reports in full), never prints.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ci.regular_file import MAX_CONFIG_BYTES, MAX_REGISTRY_BYTES, read_regular
from ci.repo_root import REGISTRY_FILENAME

try:  # hashlib's own blake2b, without hashlib's OpenSSL import (as `ci.observe.probe_store`)
    from _blake2 import blake2b
except ImportError:  # pragma: no cover - an interpreter built without it
    from hashlib import blake2b

CACHE_NAME = "observe-layout.json"
_FORMAT = b"ci observe layout 1"
_CI = Path(__file__).resolve().parent.parent  # the `ci` package whose parser the cache stands for


@dataclass(frozen=True)
class Layout:
    """The registry's ``project.test_roots`` and ``project.test_patterns``, and its tier names in
    the file's order."""

    test_roots: tuple[str, ...]
    test_patterns: tuple[str, ...]
    tiers: tuple[str, ...]


def read_layout(root: Path) -> Layout:
    """See the module docstring."""
    registry = root / REGISTRY_FILENAME
    try:
        data = read_regular(registry, MAX_REGISTRY_BYTES)
    except OSError:
        data = None  # the parser says why, in its words
    key = _key(data) if data is not None else None
    cache = root / ".ci-cache" / CACHE_NAME
    if key is not None:
        found = _cached(cache, key)
        if found is not None:
            return found
    layout = _parsed(registry)
    if key is not None:
        _store(root, cache, key, layout)
    return layout


def _key(data: bytes) -> str:
    digest = blake2b(_FORMAT, digest_size=20)
    digest.update(b"%d\0" % len(data))
    digest.update(data)
    for folder in (_CI, _CI / "registry"):  # the parser and `ci.project`'s defaults
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                info = os.stat(folder / name)
                digest.update(b"\0%s %d %d" % (name.encode(), info.st_size, info.st_mtime_ns))
    return digest.hexdigest()


def _cached(cache: Path, key: str) -> Layout | None:
    try:
        found = json.loads(read_regular(cache, MAX_CONFIG_BYTES))
        if found["key"] != key:
            return None
        parts = tuple(tuple(found[name]) for name in ("test_roots", "test_patterns", "tiers"))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not all(isinstance(item, str) for part in parts for item in part):
        return None
    return Layout(*parts)


def _parsed(registry: Path) -> Layout:
    from ci.registry import RegistryError, load_registry  # deferred: the parsers and PyYAML, on a miss only

    try:
        loaded = load_registry(registry)
    except RegistryError as exc:
        raise ValueError(f"{registry}: {exc.problems[0]} (run `python -m ci lint`)") from None
    return Layout(tuple(loaded.project.test_roots), tuple(loaded.project.test_patterns), tuple(loaded.tiers))


def _store(root: Path, cache: Path, key: str, layout: Layout) -> None:
    from ci.atomic_write import atomic_write_text
    from ci.cache_folder import cache_folder

    text = json.dumps({"key": key, "test_roots": layout.test_roots, "test_patterns": layout.test_patterns,
                       "tiers": layout.tiers})
    try:
        cache_folder(root)
        atomic_write_text(cache, text)
    except OSError:
        pass  # a read-only checkout: every recording parses the registry, as before this cache
