"""What ``ci init`` adds to ``run_all_paths`` for a repository that builds native code.

The import graph sees Python only: a change to a CUDA kernel under ``csrc/``, to ``CMakeLists.txt``
or to a pinned requirement imports nothing, so without a rule it would select no test although it
changes what every test runs against (vLLM: ``csrc/``, ``cmake/``, ``requirements/``). Mapping each
kernel to the tests that call it would need the build's own bindings; a change there runs
everything instead. `native_run_all` returns, repo-relative and sorted:

* build and dependency files at the root: ``CMakeLists.txt``, ``*.cmake``, ``setup.py``,
  ``pyproject.toml``, ``requirements*.txt`` / ``requirements*.in``;
* the folders ``cmake/`` and ``requirements/`` at the root;
* every folder holding native sources (`NATIVE_SUFFIXES`) or a ``CMakeLists.txt``: its top-level
  folder (``csrc``), or the folder itself when the top-level one is a source root, a first-party
  package or a test root (a kernel folder inside ``vllm/`` must not make all of ``vllm/`` run-all).

Native files under a test root or a top-level test folder (``tests/``) are test helpers, never
run-all. Vendored, hidden and build folders
(`ci.adopt.pytest_config.SKIP_DIRS`) are not walked; nothing is read but names.
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path

from ci.adopt.pytest_config import SKIP_DIRS
from ci.adopt.test_definitions import is_test_folder
from ci.project import ProjectConfig
from ci.registry import path_is_under

NATIVE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hip", ".metal")
ROOT_BUILD_FILES = ("CMakeLists.txt", "setup.py", "pyproject.toml")
ROOT_BUILD_GLOBS = ("*.cmake", "requirements*.txt", "requirements*.in")
ROOT_BUILD_DIRS = ("cmake", "requirements")


def _skip(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in SKIP_DIRS)


def native_run_all(root: Path, project: ProjectConfig) -> tuple[str, ...]:
    """The run-all prefixes for the native code and build files of the tree at ``root`` (see the
    module docstring); ``project`` gives the source roots, first-party packages and test roots."""
    try:
        top = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return ()
    found = {e.name for e in top if e.is_file(follow_symlinks=False)
             and (e.name in ROOT_BUILD_FILES or any(fnmatch.fnmatch(e.name, g) for g in ROOT_BUILD_GLOBS))}
    found |= {e.name for e in top if e.name in ROOT_BUILD_DIRS and e.is_dir(follow_symlinks=False)}
    python_tops = {r for r in project.source_roots if r != "."}
    python_tops |= {p for p in project.first_party} | {r.split("/", 1)[0] for r in project.test_roots if r != "."}
    tests = [r for r in project.test_roots if r != "."]
    for entry in top:
        if (not entry.is_dir(follow_symlinks=False) or _skip(entry.name) or entry.name in found
                or is_test_folder(entry.name)):
            continue
        for directory, dirs, files in os.walk(entry.path):
            dirs[:] = sorted(d for d in dirs if not _skip(d))
            rel = Path(directory).relative_to(root).as_posix()
            if any(path_is_under(rel, t) for t in tests):
                dirs[:] = []
                continue
            if not any(f.endswith(NATIVE_SUFFIXES) or f == "CMakeLists.txt" for f in files):
                continue
            if entry.name not in python_tops:
                found.add(entry.name)
                break  # the whole top-level folder is run-all
            found.add(rel)
            dirs[:] = []  # its subfolders are under it
    return tuple(sorted(found))


__all__ = ["NATIVE_SUFFIXES", "native_run_all"]
