"""Finding, reading and parsing registry.yaml, and finding the test files it must cover.

* The repository root: ``--root DIR`` (the CLI calls `set_repo_root`), else the nearest directory
  at or above the working directory that holds ``registry.yaml`` (`find_repo_root`). Every
  command and the pytest plugin use this one rule.
* `read_registry_text`: bytes -> text, or one `Problem` naming the file, line and byte offset of
  the first byte that is not UTF-8 (a UTF-16 file, a NUL byte, a stray Latin-1 byte).
* `parse_registry`: the fast path when the text is in its subset, else the precise parser.
* `scan_test_tree`: the project's test files (``project.test_roots`` x ``project.test_patterns``)
  and every symlink met on the way (lint reports those that leave the repository).
"""

from __future__ import annotations

import codecs
import errno
import stat
import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ci.gc_pause import gc_paused
from ci.project import ProjectConfig
from ci.registry.fast_parse import parse_fast
from ci.registry.model import NOT_UTF8, YAML_SYNTAX, Problem, Registry, RegistryError, normalize_path
from ci.regular_file import MAX_REGISTRY_BYTES, read_regular
from ci.repo_root import REGISTRY_FILENAME, RepoRootNotFound, explicit_repo_root, find_repo_root, set_repo_root

# ---------------------------------------------------------------------------------------------
# Reading and parsing
# ---------------------------------------------------------------------------------------------

_UTF16_32_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                  (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))


def decode_registry(data: bytes, display: str) -> str:
    """``data`` as text; raises `RegistryError` with one R011 problem at the first bad byte.

    UTF-8 only (a UTF-8 byte order mark is fine). A UTF-16/32 byte order mark, a NUL byte (what
    UTF-16 without a mark looks like) and any invalid UTF-8 sequence are refused with the byte
    offset, line and column (column in bytes) of the offending byte.
    """
    for bom, name in _UTF16_32_BOMS:
        if data.startswith(bom):
            raise _encoding_error(data, 0, display, f"is {name}-encoded (byte order mark at byte offset 0)")
    nul = data.find(b"\0")
    if nul >= 0:
        raise _encoding_error(data, nul, display,
                              f"has a NUL byte at byte offset {nul} (UTF-16 without a byte order mark?)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _encoding_error(data, exc.start, display,
                              f"is not valid UTF-8 at byte offset {exc.start} (byte 0x{data[exc.start]:02X})") from None


def _encoding_error(data: bytes, offset: int, display: str, what: str) -> RegistryError:
    line = data.count(b"\n", 0, offset) + 1
    col = offset - (data.rfind(b"\n", 0, offset) + 1) + 1
    return RegistryError([Problem(display, line, col, NOT_UTF8, f"{display} {what}; save it as UTF-8")])


def read_registry_text(file: str | os.PathLike[str], display: str | None = None) -> str:
    """The registry's text. Raises `RegistryError` (one problem naming ``display``, default the
    path) when the file cannot be read or is not UTF-8."""
    file = Path(file)
    display = display if display is not None else display_path(file)
    try:
        data = read_regular(file, MAX_REGISTRY_BYTES)
    except OSError as exc:
        reason = "it is a directory" if file.is_dir() else exc.strerror
        raise RegistryError([Problem(display, 0, 0, YAML_SYNTAX, f"cannot read registry: {reason}")]) from None
    return decode_registry(data, display)


def parse_registry(text: str, path: str = REGISTRY_FILENAME) -> tuple[Registry | None, list[Problem]]:
    """Parse registry text. Returns ``(registry, [])`` or ``(None, problems)`` - never both.

    A registry in the plain block style is read by the fast path; anything else, and every
    registry with a problem, by the precise parser (both give equal registries).
    """
    with gc_paused():
        registry = parse_fast(text, path)
        if registry is not None:
            return registry, []
        from ci.registry.parse import parse_precise  # deferred: it imports PyYAML, which the fast path needs not

        return parse_precise(text, path)


def load_registry(path: str | os.PathLike[str] | None = None) -> Registry:
    """Load and validate ``registry.yaml`` (default: the one at `find_repo_root`).

    Raises `RegistryError` listing every problem, each as ``file:line:col: code message``, and
    `RepoRootNotFound` when there is no path and no repository root.
    """
    file = Path(path) if path is not None else find_repo_root() / REGISTRY_FILENAME
    display = display_path(file)
    registry, problems = parse_registry(read_registry_text(file, display), display)
    if registry is None:
        raise RegistryError(problems)
    return registry


def display_path(file: Path, base: Path | None = None) -> str:
    """``file`` relative to ``base`` (default: the working directory) if inside it, else as given."""
    try:
        return file.resolve().relative_to((base or Path.cwd()).resolve()).as_posix()
    except ValueError:
        return file.as_posix()


# ---------------------------------------------------------------------------------------------
# The test tree
# ---------------------------------------------------------------------------------------------

# Directories never searched for test files: pytest's default `norecursedirs`, plus caches and
# installed packages.
_SKIP_DIRS = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}",
              "__pycache__", "site-packages", "*.egg-info")
_SKIP = re.compile("|".join(fnmatch.translate(p) for p in _SKIP_DIRS)).match


@dataclass(frozen=True)
class TestTree:
    """``files``: repo-relative test files, sorted. ``links``: every symlink met under the test roots
    that is a test file or a directory (dangling ones and loops included), repo-relative, sorted;
    whether each stays inside the repository is for the caller to judge (`link_problem`).
    ``unreadable``: each directory under a test root that could not be listed, as the `Problem`
    (`UNREADABLE_DIR`) to report at it, sorted: its test files are unknown, never silently none."""

    __test__ = False  # not a pytest test class, despite the name

    files: list[str]
    links: list[str] = field(default_factory=list)
    unreadable: list[Problem] = field(default_factory=list)


UNREADABLE_DIR = "L008"


def unreadable_dir_problem(rel: str, exc: OSError) -> Problem:
    """The one problem for a directory that cannot be listed (the test-tree scan and the import
    index both meet it; equal problems, so a caller reporting both reports it once)."""
    return Problem(rel or ".", 0, 0, UNREADABLE_DIR,
                   f"cannot list this directory ({exc.strerror or exc}): the files in it are neither checked "
                   f"nor run; fix its permissions or remove it")


def entry_is(entry: os.DirEntry[str], kind: str) -> bool:
    """``entry.is_file()`` / ``entry.is_dir()`` following symlinks, False instead of raising for a
    symlink that cannot be followed (a loop: ELOOP; a denied directory on the way)."""
    try:
        return entry.is_file() if kind == "file" else entry.is_dir()
    except OSError:
        return False


def scan_test_tree(root: str | os.PathLike[str], project: ProjectConfig = ProjectConfig()) -> TestTree:
    """The project's test files below ``root``: names matching one of ``project.test_patterns`` in
    ``project.test_roots`` (an os.scandir walk, about 15x faster than ``Path.rglob`` on a tree of
    10,000 files). Symlinked directories are reported, never followed."""
    # One regex for all patterns (each translation is a self-contained "(?s:...)\Z" group).
    translated = [fnmatch.translate(pattern) for pattern in project.test_patterns]
    matches = re.compile("|".join(translated)).match if translated else (lambda name: None)
    found: set[str] = set()
    links: set[str] = set()
    unreadable: dict[str, Problem] = {}
    for under in project.test_roots:
        prefix = normalize_path(under)
        stack = [(os.path.join(root, prefix), "" if prefix in ("", ".") else prefix + "/")]
        while stack:
            directory, rel = stack.pop()
            try:
                entries = list(os.scandir(directory))
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:  # PermissionError and the like: one problem at that directory
                unreadable[rel] = unreadable_dir_problem(rel.rstrip("/"), exc)
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):  # as rglob's "**" before Python 3.13
                    if not _SKIP(entry.name):
                        stack.append((entry.path, f"{rel}{entry.name}/"))
                elif entry.is_symlink():
                    if matches(entry.name):
                        links.add(rel + entry.name)
                        if entry_is(entry, "file"):
                            found.add(rel + entry.name)
                    elif not _SKIP(entry.name) and (entry_is(entry, "dir") or _is_loop(entry.path)):
                        links.add(rel + entry.name)
                elif matches(entry.name) and entry.is_file():
                    found.add(rel + entry.name)
    return TestTree(sorted(found), sorted(links), [unreadable[k] for k in sorted(unreadable)])


def _is_loop(path: str) -> bool:
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def iter_test_files(root: str | os.PathLike[str], patterns: Iterable[str] = ("test_*.py",),
                    under: str = "tests") -> list[str]:
    """Repo-relative paths of every file matching ``patterns`` below ``root/under``, sorted."""
    return scan_test_tree(root, ProjectConfig(test_roots=(under,), test_patterns=tuple(patterns))).files


def registered_file_problem(root: str | os.PathLike[str], path: str) -> str | None:
    """The one rule for which registry keys name a test that can run: None when ``path`` (a
    repo-relative registry key) is a regular file under ``root``, symlinks followed; otherwise what
    it is, in words. ``ci plan`` never selects, ``ci run`` refuses and the rerun bot never
    dispatches any other key: a directory would run every test below it. One ``stat``."""
    try:
        mode = os.stat(os.path.join(os.fspath(root), path)).st_mode
    except OSError:  # missing, a dangling symlink, a loop
        return "does not exist"
    if stat.S_ISDIR(mode):
        return "is a directory, not a test file (registry keys name files)"
    if not stat.S_ISREG(mode):
        return "is not a regular file"
    return None


def link_problem(root: str | os.PathLike[str], rel: str) -> str | None:
    """None if the symlink at repo-relative ``rel`` resolves to an existing path inside ``root``;
    otherwise what is wrong with it, in words."""
    real_root = os.path.realpath(root)
    if _is_loop(os.path.join(root, rel)):
        return "is a symlink loop (following it leads back to a link on the way), so it names no file"
    target = os.path.realpath(os.path.join(root, rel))
    if not os.path.exists(target):
        return f"is a symlink to {target}, which does not exist"
    if os.path.commonpath([real_root, target]) != real_root:
        return f"is a symlink (or lies under one) to {target}, outside the repository"
    return None


__all__ = [
    "RepoRootNotFound", "TestTree", "UNREADABLE_DIR", "entry_is", "registered_file_problem", "unreadable_dir_problem", "decode_registry", "display_path", "explicit_repo_root", "find_repo_root",
    "gc_paused",
    "iter_test_files", "link_problem", "load_registry", "parse_registry", "read_registry_text", "scan_test_tree",
    "set_repo_root",
]
