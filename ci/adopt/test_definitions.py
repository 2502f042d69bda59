"""Which files that match a test pattern are not tests: ``*_test.py`` helpers outside test folders.

pytest's default ``python_files`` include ``*_test.py``, and a repository whose test root is ``.``
(vLLM) has files that merely end so: ``tools/pre_commit/generate_nightly_torch_test.py`` (a script
generating a test list), ``vllm/.../marlin_utils_test.py`` (helpers for the tests). pytest collects
nothing from them, so ``ci init`` must not make them active tests. A file is **not a test** when

* no folder on its path is a test folder (`is_test_folder`: ``test``, ``tests``, ``testing``,
  ``test_*``, ``*_test``, ``*_tests``), since a helper inside a test folder is the tests' business; and
* read with `ast`, it defines nothing pytest's defaults collect: no module-level ``test*`` function,
  no ``Test*`` class and no class deriving from a ``...TestCase``.

A file that cannot be read or parsed counts as a test (lint reports what it can about it).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Iterable

from ci.imports.scan import parse_python, read_bytes

TEST_FOLDERS = ("test", "tests", "testing")


def is_test_folder(name: str) -> bool:
    """True for a folder name that says it holds tests (see the module docstring)."""
    return name in TEST_FOLDERS or name.startswith("test_") or name.endswith(("_test", "_tests"))


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def defines_tests(tree: ast.Module) -> bool:
    """True when the module defines something pytest collects with its default settings."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            return True
        if isinstance(node, ast.ClassDef) and (node.name.startswith("Test")
                                               or any(_base_name(b).endswith("TestCase") for b in node.bases)):
            return True
    return False


def not_tests(root: Path, files: Iterable[str]) -> list[str]:
    """The repo-relative ``files`` that are not tests (see the module docstring), in the given order."""
    out: list[str] = []
    for rel in files:
        if any(is_test_folder(part) for part in rel.split("/")[:-1]):
            continue
        try:
            tree, failure = parse_python(read_bytes(os.fspath(root / rel)), rel)
        except OSError:
            continue
        if tree is not None and failure is None and not defines_tests(tree):
            out.append(rel)
    return out


NOT_A_TEST_REASON = ("defines no test (no test* function, Test* class or TestCase) and lies outside a test folder: "
                     "its name only matches *_test.py, pytest collects nothing from it")

__all__ = ["NOT_A_TEST_REASON", "TEST_FOLDERS", "defines_tests", "is_test_folder", "not_tests"]
