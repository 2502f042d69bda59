"""``python -m bench._history_gen9_verify GIT_DIR``: is `bench/_history_gen9_data.json` what
`bench._history_gen9_extract` reads from this clone of linkedin/Liger-Kernel? Prints each
difference (`compare`) and exits 0 when there is none, 1 when there is, 2 when GIT_DIR cannot be read.
"""

from __future__ import annotations

import json
import sys

from bench._history_gen9_extract import DATA, CloneError, extract

USAGE = "python -m bench._history_gen9_verify GIT_DIR"


def compare(committed: dict, fresh: dict, limit: int = 20) -> list[str]:
    """The differences between the committed data and a fresh extraction, one line each (at most
    ``limit``): the sha range, each commit by position and field, each test file and function."""
    out = [f"{key}: committed {committed.get(key)!r}, clone {fresh.get(key)!r}"
           for key in ("source", "first", "last", "count", "command") if committed.get(key) != fresh.get(key)]
    old, new = committed.get("commits", []), fresh.get("commits", [])
    if len(old) != len(new):
        out.append(f"commits: committed {len(old)}, clone {len(new)}")
    for i, (a, b) in enumerate(zip(old, new)):
        out += [f"commit {i} ({a.get('sha', '?')[:12]}) {key}: committed {a.get(key)!r}, clone {b.get(key)!r}"
                for key in sorted(set(a) | set(b)) if a.get(key) != b.get(key)]
    tests_old, tests_new = committed.get("tests", {}), fresh.get("tests", {})
    for path in sorted(set(tests_old) | set(tests_new)):
        a, b = tests_old.get(path), tests_new.get(path)
        if a is None or b is None:
            out.append(f"{path}: {'only in the clone' if a is None else 'only in the committed data'}")
            continue
        out += [f"{path} {key}: committed {a[key]!r}, clone {b[key]!r}" for key in ("imports", "tokenizer")
                if a.get(key) != b.get(key)]
        fa, fb = a.get("functions", {}), b.get("functions", {})
        out += [f"{path}::{name}: committed {fa.get(name)!r}, clone {fb.get(name)!r}"
                for name in sorted(set(fa) | set(fb)) if fa.get(name) != fb.get(name)]
    return out[:limit] + ([f"... and {len(out) - limit} more"] if len(out) > limit else [])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(f"usage: {USAGE}", file=sys.stderr)
        return 2
    try:
        fresh = extract(argv[0])
    except CloneError as exc:
        print(f"{USAGE}: {exc}", file=sys.stderr)
        return 2
    differences = compare(json.loads(DATA.read_text(encoding="utf-8")), fresh)
    for line in differences:
        print(line)
    print(f"{DATA.name}: {'differs from' if differences else 'matches'} {argv[0]} "
          f"({fresh['first'][:12]}..{fresh['last'][:12]}, {fresh['count']} commits, {len(fresh['tests'])} test files)")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
