"""Check gen8's data file against a clone of vLLM: ::

    python -m bench._history_gen8_verify GIT_DIR [DATA_FILE]

Extracts the skeleton again (`bench._history_gen8_extract`) and compares it with the committed
file (`bench._history_gen8_story.DATA` by default). Exit 0: the same; 1: they differ (the first
difference is named); 2: bad input (no such clone, the span not in it, an unreadable data file).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench._history_gen8_extract import ExtractError, extract
from bench._history_gen8_story import DATA


def first_difference(want: Any, got: Any, where: str = "") -> str | None:
    """Where ``got`` first differs from ``want`` (a JSON path and both values), None if equal."""
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got)):
            if key not in want or key not in got:
                return f"{where}/{key}: only in the {'clone' if key in got else 'data file'}"
            found = first_difference(want[key], got[key], f"{where}/{key}")
            if found:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list):
        for i, (a, b) in enumerate(zip(want, got)):
            found = first_difference(a, b, f"{where}[{i}]")
            if found:
                return found
        if len(want) == len(got):
            return None
        return f"{where}: {len(want)} items in the data file, {len(got)} from the clone"
    return None if want == got else f"{where}: data file {str(want)[:80]!r}, clone {str(got)[:80]!r}"


def verify(git_dir: str, data: Path = DATA) -> str | None:
    """The first difference between ``data`` and what ``git_dir`` gives, None when they match.
    Raises `ExtractError` (the clone) or `ValueError` (the data file) on bad input."""
    try:
        want = json.loads(data.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{data}: cannot read the data file: {exc}") from exc
    return first_difference(want, json.loads(json.dumps(extract(git_dir))))


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: python -m bench._history_gen8_verify GIT_DIR [DATA_FILE]", file=sys.stderr)
        return 2
    try:
        found = verify(argv[0], Path(argv[1]) if len(argv) == 2 else DATA)
    except (ExtractError, ValueError) as exc:
        print(f"bench._history_gen8_verify: {exc}", file=sys.stderr)
        return 2
    if found:
        print(f"bench._history_gen8_verify: the data file differs from {argv[0]}: {found}")
        return 1
    print(f"bench._history_gen8_verify: the data file matches {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
