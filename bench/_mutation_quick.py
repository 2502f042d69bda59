"""The tiny tree ``bench mutation --quick`` measures: a git repository made in a temp dir.

Package ``shapes`` under ``src/`` (three modules; ``__init__`` imports two of them, so the static
import graph reaches every module from any test) and four test files under ``tests/``, one of
which (``test_report.py``) exercises two modules, so the path-prefix rule misses it for a change
of ``area.py``; ``test_other.py`` runs none of the package and takes the most time. No network, no mirror: the bench runs it with this repository's interpreter.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench._mutation_tree import TreeSpec

FILES = {
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\n',
    "src/shapes/__init__.py": '"""Shapes."""\nfrom shapes.area import area\nfrom shapes.names import label\n',
    "src/shapes/area.py": (
        '"""Areas."""\n\n\ndef area(kind, size):\n    if kind == "square":\n        return size * size\n'
        '    if kind == "circle" and size > 0:\n        return 3 * size * size\n    return 0\n\n\n'
        'def is_big(value, limit=10):\n    return value >= limit\n'),
    "src/shapes/names.py": (
        '"""Names."""\n\nSEPARATOR = ": "\n\n\ndef label(kind, value):\n    text = kind + SEPARATOR + str(value)\n'
        '    if not kind:\n        text = "?" + text\n    return text.strip()\n'),
    "src/shapes/unused.py": '"""Never run by a test."""\n\n\ndef nothing():\n    return 1 < 2\n',
    "tests/test_area.py": (
        'from shapes.area import area, is_big\n\n\ndef test_square():\n    assert area("square", 3) == 9\n\n\n'
        'def test_circle():\n    assert area("circle", 2) == 12\n\n\ndef test_big():\n    assert is_big(10) is True\n'),
    "tests/test_names.py": 'from shapes.names import label\n\n\ndef test_label():\n    assert label("a", 1) == "a: 1"\n',
    "tests/test_report.py": (
        'import shapes\n\n\ndef test_report():\n    assert shapes.label("square", shapes.area("square", 2)) == "square: 4"\n'),
    # some work, so that the baseline's per-file seconds (the est-time columns) are not all zero
    "tests/test_other.py": 'def test_nothing_of_shapes():\n    assert sum(range(2_000_000)) > 0\n',
}


def commit_files(root: Path, files: dict[str, str]) -> str:
    """Write ``files`` (relative path -> text) into ``root``, make it a git repository holding
    them in one commit, and return that commit."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "tiny tree"], cwd=root, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
    return commit.stdout.strip()


def build_quick_tree(root: Path) -> TreeSpec:
    """Write `FILES` into ``root``, commit them, and return the tree's spec at that commit."""
    return TreeSpec("quick", commit_files(root, FILES), "src", "tests")


__all__ = ["FILES", "build_quick_tree", "commit_files"]
