"""Throw-away repository trees for the tests of ci/: one place that writes them."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write(root: Path, files: dict[str, str]) -> None:
    """Write ``files`` (repo-relative path -> text, dedented) under ``root``, making folders."""
    for rel, body in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))
