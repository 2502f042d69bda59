"""``python -m bench._history_gen15_verify GIT_DIR``: extract PEFT's history again from the clone
and compare it with the committed ``_history_gen15_data.json``, printing each difference (a path
into the JSON and both values) and their count. Exit status 0 with 0 differences, 1 otherwise, 2
on bad usage or an unreadable clone.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from bench._history_gen15_extract import DATA, ExtractError, dumps, extract


def differences(old: Any, new: Any, path: str = "$") -> list[str]:
    """Every place the two JSON values differ, as ``path: old != new`` (values cut to 80 chars)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new)):
            if key not in old or key not in new:
                out.append(f"{path}.{key}: {'missing' if key not in old else 'present'} in the committed data")
            else:
                out += differences(old[key], new[key], f"{path}.{key}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{path}: {len(old)} items committed, {len(new)} extracted"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if old == new else [f"{path}: {str(old)[:80]} != {str(new)[:80]}"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen15_verify GIT_DIR (a clone of huggingface/peft)", file=sys.stderr)
        return 2
    try:
        fresh = json.loads(dumps(extract(argv[0])))
    except ExtractError as exc:
        print(f"python -m bench._history_gen15_verify: {exc}", file=sys.stderr)
        return 2
    found = differences(json.loads(DATA.read_text(encoding="utf-8")), fresh)
    for line in found:
        print(line)
    print(f"{len(found)} differences between {DATA.name} and a fresh extraction")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
