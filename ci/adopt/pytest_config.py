"""Where a repository's own pytest configuration says its tests are.

pytest reads its settings from the first of ``pytest.ini``, ``pyproject.toml``
(``[tool.pytest.ini_options]``), ``tox.ini`` (``[pytest]``) and ``setup.cfg`` (``[tool:pytest]``)
in a directory; a repository may keep one at its root or in a subfolder it runs pytest from
(SGLang: ``test/pytest.ini``, so pytest's rootdir there is ``test/``). `find_pytest_configs` finds
every such file down to `MAX_DEPTH` levels, outside vendored and build directories, and reads the
two settings that say which files are tests:

* ``testpaths``: directories relative to the config's folder; none means the folder itself;
* ``python_files``: file-name globs; none means pytest's default (``test_*.py``, ``*_test.py``).

Nothing is imported or run. A file that cannot be read or parsed is not a pytest configuration
for this purpose and is skipped (pytest would refuse it too); `PytestConfig.problem` says why, so
``ci init`` can tell the user.
"""

from __future__ import annotations

import configparser
import fnmatch
import os
import posixpath
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterator

from ci.project import PYTEST_CONFIG_FILES
from ci.regular_file import MAX_CONFIG_BYTES, read_regular

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

PYTEST_DEFAULT_FILES = ("test_*.py", "*_test.py")
MAX_DEPTH = 3
# Directories never searched: what pytest skips by default, plus vendored code and caches.
SKIP_DIRS = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}", "__pycache__",
             "site-packages", "*.egg-info", "3rdparty", "third_party", "thirdparty", "vendor", "_vendor")


@dataclass(frozen=True)
class PytestConfig:
    """One pytest configuration file: ``path`` repo-relative; ``test_roots`` repo-relative
    directories (``testpaths`` resolved against the file's folder); ``python_files`` as written,
    or pytest's default; ``problem`` set (and the rest empty) when the file could not be read."""

    path: str
    test_roots: tuple[str, ...]
    python_files: tuple[str, ...]
    problem: str | None = None


def _skip(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in SKIP_DIRS)


def read_config_text(path: Path) -> str:
    """A configuration file's text: a regular file within `MAX_CONFIG_BYTES`, UTF-8. Raises
    OSError (not a regular file, too large, unreadable; `ci.regular_file`) or UnicodeDecodeError."""
    return read_regular(path, MAX_CONFIG_BYTES).decode("utf-8")


def read_toml(path: Path) -> dict[str, object]:
    """A TOML file as a mapping (`read_config_text`'s errors, or ValueError when it is not TOML)."""
    return tomllib.loads(read_config_text(path))


def _ini_section(text: str, name: str, section: str) -> dict[str, str] | None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text, source=name)
    return dict(parser[section]) if parser.has_section(section) else None


def _settings(path: Path) -> dict[str, object] | None:
    """The pytest section of ``path`` as a mapping, or None when the file holds none (a
    ``pyproject.toml`` without ``[tool.pytest.ini_options]`` is not a pytest configuration)."""
    text = read_config_text(path)
    if path.name == "pyproject.toml":
        table = tomllib.loads(text).get("tool", {})
        table = table.get("pytest", {}) if isinstance(table, dict) else {}
        options = table.get("ini_options") if isinstance(table, dict) else None
        return options if isinstance(options, dict) else None
    if path.name in ("pytest.ini", ".pytest.ini"):
        return _ini_section(text, path.name, "pytest") or {}  # pytest.ini counts even when empty
    return _ini_section(text, path.name, "tool:pytest" if path.name == "setup.cfg" else "pytest")


def _words(value: object) -> tuple[str, ...]:
    """An ini line list (whitespace-separated) or a TOML list of strings, as a tuple."""
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list):
        return tuple(str(v) for v in value)
    return ()


def _join(folder: str, rel: str) -> str | None:
    """``rel`` (from a config in ``folder``) as a normalised repo-relative path; None when it is
    absolute or leaves the repository."""
    rel = rel.replace("\\", "/")
    if rel.startswith("/"):
        return None
    joined = posixpath.normpath(posixpath.join(folder, rel))
    return None if joined == ".." or joined.startswith("../") else joined


def read_pytest_config(root: Path, rel: str) -> PytestConfig | None:
    """The configuration in repo-relative file ``rel``; None when the file holds no pytest section."""
    folder = str(PurePosixPath(rel).parent)
    try:
        settings = _settings(root / rel)
    except (OSError, UnicodeDecodeError, ValueError, configparser.Error) as exc:
        return PytestConfig(rel, (), (), problem=f"cannot read {rel}: {exc}")
    if settings is None:
        return None
    paths = _words(settings.get("testpaths"))
    joined = [_join(folder, p) for p in paths] if paths else [_join(folder, ".")]
    roots = tuple(dict.fromkeys(r for r in joined if r is not None))
    files = _words(settings.get("python_files")) or PYTEST_DEFAULT_FILES
    return PytestConfig(rel, roots, files)


def shallow_folders(root: Path, max_depth: int = MAX_DEPTH) -> Iterator[tuple[str, set[str]]]:
    """Each folder at most ``max_depth`` below ``root`` (outside `SKIP_DIRS`, never through a
    symlink), as (repo-relative prefix ending in ``/`` or ``""``, names of its regular files),
    parents before children, siblings in name order. An unreadable folder is passed over."""
    stack = [(root, "", 0)]
    while stack:
        folder, rel, depth = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        yield rel, {e.name for e in entries if e.is_file(follow_symlinks=False)}
        if depth < max_depth:
            stack += [(Path(e.path), f"{rel}{e.name}/", depth + 1) for e in reversed(entries)
                      if e.is_dir(follow_symlinks=False) and not _skip(e.name)]


def find_pytest_configs(root: Path, max_depth: int = MAX_DEPTH) -> list[PytestConfig]:
    """Every pytest configuration at most ``max_depth`` folders below ``root``, shallowest first;
    in one folder only the file pytest itself would use (the first of `PYTEST_CONFIG_FILES` holding a
    pytest section)."""
    found: list[PytestConfig] = []
    for rel, names in shallow_folders(root, max_depth):
        for candidate in PYTEST_CONFIG_FILES:
            if candidate in names:
                config = read_pytest_config(root, f"{rel}{candidate}")
                if config is not None:
                    found.append(config)
                    break
    return sorted(found, key=lambda c: (c.path.count("/"), c.path))


__all__ = ["MAX_DEPTH", "PYTEST_DEFAULT_FILES", "PytestConfig", "find_pytest_configs",
           "read_config_text", "read_pytest_config", "read_toml", "shallow_folders"]
