"""The repository root: one rule for every command and the pytest plugin (standard library only,
so the CLI's dispatcher imports no YAML before a command asks for it).

The root is the directory given to `set_repo_root` (the CLI's global ``--root DIR``), else the
nearest directory at or above the working directory that holds ``registry.yaml``.
"""

from __future__ import annotations

import os
from pathlib import Path

REGISTRY_FILENAME = "registry.yaml"

_root_override: Path | None = None


class RepoRootNotFound(FileNotFoundError):
    """No registry.yaml at or above the starting directory (and no ``--root``)."""


def set_repo_root(root: str | os.PathLike[str] | None) -> None:
    """Make `find_repo_root()` (called without ``start``) return ``root``; None restores the search.

    The CLI's global ``--root DIR`` calls this once, before running a command.
    """
    global _root_override
    _root_override = None if root is None else Path(root).resolve()


def explicit_repo_root() -> Path | None:
    """The root given to `set_repo_root` (the CLI's ``--root``), or None."""
    return _root_override


def find_repo_root(start: str | os.PathLike[str] | None = None) -> Path:
    """The repository root: the ``--root`` given to `set_repo_root` (when ``start`` is None), else
    the nearest directory at or above ``start`` (default: the working directory) holding
    registry.yaml. Raises `RepoRootNotFound` saying where it looked and what to do."""
    if start is None and _root_override is not None:
        return _root_override
    here = Path(start if start is not None else Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / REGISTRY_FILENAME).is_file():
            return candidate
    raise RepoRootNotFound(
        f"no {REGISTRY_FILENAME} in {here} or any directory above it: run this inside a repository that has "
        f"one, or pass --root DIR (`python -m ci init` writes a starter {REGISTRY_FILENAME})")


__all__ = ["REGISTRY_FILENAME", "RepoRootNotFound", "explicit_repo_root", "find_repo_root", "set_repo_root"]
