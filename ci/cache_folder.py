"""The repository's ``.ci-cache/`` folder: what ci caches beside the tree, never committed.

`cache_folder(root, name)` is ``<root>/.ci-cache/<name>``, made with its parents, and
``.ci-cache/.gitignore`` (``*``) written first when missing, so nothing in it ever shows up as
untracked. Raises OSError when the folder cannot be made (a read-only checkout): each caller
decides what to do without its cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from ci.atomic_write import atomic_write_text

CACHE_DIR = ".ci-cache"


def cache_folder(root: str | os.PathLike[str], name: str = "") -> Path:
    """See the module docstring; ``name`` "" is ``.ci-cache/`` itself."""
    top = Path(root) / CACHE_DIR
    top.mkdir(parents=True, exist_ok=True)
    ignore = top / ".gitignore"
    if not ignore.exists():
        atomic_write_text(ignore, "# written by ci: a cache, never committed\n*\n")
    folder = top / name if name else top
    folder.mkdir(parents=True, exist_ok=True)
    return folder
