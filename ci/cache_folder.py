"""The repository's ``.ci-cache/`` folder: what ci caches beside the tree, never committed.

`ignored_folder(folder)` makes ``folder`` (with its parents) and writes ``folder/.gitignore``
(``*``) when missing, so nothing in it ever shows up as untracked; `cache_folder(root, name)` is
``<root>/.ci-cache/<name>``, made inside such a ``.ci-cache/``. Both raise OSError when a folder
cannot be made (a read-only checkout): each caller decides what to do without its cache.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR = ".ci-cache"


def ignored_folder(folder: str | os.PathLike[str]) -> Path:
    """See the module docstring."""
    from ci.atomic_write import atomic_write_text  # deferred: it imports tempfile, and a recorded child only looks

    top = Path(folder)
    top.mkdir(parents=True, exist_ok=True)
    ignore = top / ".gitignore"
    if not ignore.exists():
        atomic_write_text(ignore, "# written by ci: a cache, never committed\n*\n")
    return top


def cache_folder(root: str | os.PathLike[str], name: str = "") -> Path:
    """See the module docstring; ``name`` "" is ``.ci-cache/`` itself."""
    top = ignored_folder(Path(root) / CACHE_DIR)
    folder = top / name if name else top
    folder.mkdir(parents=True, exist_ok=True)
    return folder
