"""``python -m bench._history_gen12_verify GIT_DIR``: re-extract gen12's data from DeepSpeed's mirror
and report every difference from the committed ``bench/_history_gen12_data.json`` (exit 0 when none).

Contract: the comparison walks both JSON trees and names each differing path (``commits[12].time``),
at most `SHOWN` of them, then their count; a missing or unreadable data file or git directory is a
one-line error (exit 1), a wrong command line the usage (exit 2).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from bench._history_gen12_extract import DATA, ExtractError, extract

SHOWN = 20


def differences(old: Any, new: Any, where: str = "") -> list[str]:
    """The paths at which two JSON values differ."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                out.append(f"{where}.{key}: only in the {'data file' if key in old else 're-extraction'}")
            else:
                out += differences(old[key], new[key], f"{where}.{key}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        out = [f"{where}: {len(old)} items in the data file, {len(new)} re-extracted"] if len(old) != len(new) else []
        for i, (a, b) in enumerate(zip(old, new)):
            out += differences(a, b, f"{where}[{i}]")
        return out
    return [] if old == new else [f"{where}: {old!r:.60} in the data file, {new!r:.60} re-extracted"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen12_verify GIT_DIR (a bare clone of deepspeedai/DeepSpeed)",
              file=sys.stderr)
        return 2
    try:
        stored = json.loads(DATA.read_text(encoding="utf-8"))
        fresh = json.loads(json.dumps(extract(argv[0])))
    except (OSError, ValueError, ExtractError) as exc:
        print(f"python -m bench._history_gen12_verify: {exc}", file=sys.stderr)
        return 1
    found = differences(stored, fresh)
    for line in found[:SHOWN]:
        print(line.lstrip("."))
    print(f"{len(found)} differences between {DATA.name} and a re-extraction from {argv[0]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
