"""``python -m bench._history_gen11_verify GIT_DIR``: checks the committed
``bench/_history_gen11_data.json`` against a FlashInfer mirror: the same extraction
(`bench._history_gen11_extract`, at the data file's own range) must give the same commits, test
files, script shards, dependencies and windows. Prints each difference on one line; exit 0 when
there is none, 1 when there are, 2 when the mirror cannot be read.
"""

from __future__ import annotations

import json
import subprocess
import sys

from bench import _history_gen11_extract as extract

SECTIONS = ("first", "last", "count", "commits", "touched", "paths", "tests", "a10g_parts", "windows")


def compare(committed: dict, fresh: dict, limit: int = 20) -> list[str]:
    """The differences between two data files, one line each (at most ``limit`` per section): a
    missing or extra key, a commit, test file or window that reads otherwise."""
    problems: list[str] = []
    for section in SECTIONS:
        old, new = committed.get(section), fresh.get(section)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            lines = [f"{section}: {key} only in the data file" for key in sorted(set(old) - set(new))]
            lines += [f"{section}: {key} only in the mirror" for key in sorted(set(new) - set(old))]
            lines += [f"{section}: {key} differs" for key in sorted(set(old) & set(new)) if old[key] != new[key]]
        elif isinstance(old, list) and isinstance(new, list):
            lines = [f"{section}[{i}] differs: {_short(a)} != {_short(b)}"
                     for i, (a, b) in enumerate(zip(old, new)) if a != b]
            if len(old) != len(new):
                lines.append(f"{section}: {len(old)} entries in the data file, {len(new)} in the mirror")
        else:
            lines = [f"{section}: {_short(old)} in the data file, {_short(new)} in the mirror"]
        problems += lines[:limit]
    return problems


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 90 else text[:87] + "..."


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m bench._history_gen11_verify GIT_DIR (a FlashInfer mirror)", file=sys.stderr)
        return 2
    committed = json.loads(extract.DATA.read_text(encoding="utf-8"))
    try:
        fresh = extract.extract(argv[0], committed["last"], committed["count"])
    except (subprocess.CalledProcessError, ValueError, OSError) as exc:
        print(f"bench._history_gen11_verify: cannot read {argv[0]}: {exc}", file=sys.stderr)
        return 2
    problems = compare(committed, fresh)
    for line in problems:
        print(line)
    print(f"{len(problems)} difference(s) between {extract.DATA.name} and {argv[0]} "
          f"({committed['first'][:12]}..{committed['last'][:12]}, {committed['count']} commits)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
