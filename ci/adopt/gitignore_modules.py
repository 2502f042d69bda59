"""Build outputs that ``.gitignore`` lists inside first-party packages, as dotted module globs.

A repository that builds code into its own package (a vendored kernel library copied in by
CMake, a generated interface file) lists those paths in ``.gitignore``; a clean checkout lacks
them, and the import check must not call their imports missing. Each ``.gitignore`` at most
`MAX_DEPTH` folders down is read line by line (never run, no git needed), and a pattern becomes a
dotted glob of ``project.generated_modules`` when it names a path, and only then:

* anchored, as git reads it: a ``/`` at its start or in its middle (``/pkg/_version.py``,
  ``pkg/vendored/*``), relative to the ``.gitignore``'s folder; an unanchored one (``build/``,
  ``*.so``) matches every folder of that name and says nothing about a package;
* a Python module or package: its last part ends in ``.py``, or is a folder (``pkg/gen/``), or
  is ``*`` (everything in a folder: ``pkg/vendored/*`` -> ``pkg.vendored`` and ``pkg.vendored.*``;
  a package the tree has, ``__init__.py`` kept by a ``!`` line, stays checked); every other part an
  identifier or a glob of identifier characters; ``**`` and ``!`` (negation) lines are passed
  over. A negated file that is in the tree stays checked anyway: the import check treats a
  generated glob only as what a module missing from the tree may be.

`ci.adopt.build_config` turns each into a dotted glob under the source root holding it; its first
part must be a literal first-party package name.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from ci.adopt.pytest_config import MAX_DEPTH, read_config_text, shallow_folders

_PART = re.compile(r"[A-Za-z_*?\[][\w*?\[\]!-]*")


def pattern_module_paths(folder: str, pattern: str) -> list[str]:
    """The repo-relative module file globs that ``pattern``, a line of the ``.gitignore`` in
    repo-relative ``folder`` (``""`` for the root), names per the module docstring:
    ``pkg/gen/`` and ``pkg/gen/*`` -> ``pkg/gen.py`` and ``pkg/gen/*.py`` (the package and
    everything in it); ``/pkg/_version.py`` -> ``pkg/_version.py``; ``[]``
    when it names no module."""
    line = pattern.strip()
    if not line or line.startswith(("#", "!")) or "**" in line or "\\" in line:
        return []
    is_dir = line.endswith("/")
    body = line.rstrip("/")
    if "/" not in body:  # unanchored: any folder of that name, anywhere below
        return []
    parts = [p for p in body.lstrip("/").split("/") if p]
    if not parts:
        return []
    last = parts[-1]
    if last.endswith(".py"):
        if is_dir:
            return []
        parts[-1] = last[:-3]
    elif last != "*" and not is_dir:
        return []  # a data file, a shared library, a name that may be either: not a module
    if not all(_PART.fullmatch(p) for p in parts):
        return []
    path = os.path.normpath(PurePosixPath(folder, *parts).as_posix()).replace(os.sep, "/")
    if path.startswith("../"):
        return []
    if last == "*":  # the folder's every file: git then tracks no such folder, so it is built too
        folder_path = path.rpartition("/")[0]
        return [f"{folder_path}.py", f"{path}.py"] if "/" in path else []
    return [f"{path}.py", f"{path}/*.py"] if is_dir else [f"{path}.py"]


def gitignored_module_paths(root: Path, max_depth: int = MAX_DEPTH) -> list[str]:
    """Every module file glob the ``.gitignore`` files below ``root`` name
    (`pattern_module_paths`), sorted and unique. An unreadable file is passed over."""
    found: set[str] = set()
    for rel, names in shallow_folders(root, max_depth):
        if ".gitignore" not in names:
            continue
        try:
            text = read_config_text(root / f"{rel}.gitignore")
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        for line in text.splitlines():
            found.update(pattern_module_paths(rel.rstrip("/"), line))
    return sorted(found)


__all__ = ["gitignored_module_paths", "pattern_module_paths"]
