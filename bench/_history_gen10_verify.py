"""``python -m bench._history_gen10_verify GIT_DIR``: checks the committed data file of the tenth
history (``bench/_history_gen10_data.json``) against a clone of pytorch/ao: the extract run afresh
on GIT_DIR must give the same commits and tests. Prints each difference (at most 20) and exits 1
when there is one, 0 when the file matches, 2 when GIT_DIR cannot be read.
"""

from __future__ import annotations

import json
import sys

from bench import _history_gen10_extract as extract


def compare(committed: dict, fresh: dict, limit: int = 20) -> list[str]:
    """The differences between the committed data and a fresh extract (empty when they match):
    the window's ends, each commit's fields by position, and each test file's functions and imports."""
    out: list[str] = []
    for key in ("repo", "first", "last", "count"):
        if committed.get(key) != fresh.get(key):
            out.append(f"{key}: committed {committed.get(key)!r}, fresh {fresh.get(key)!r}")
    old, new = committed.get("commits", []), fresh.get("commits", [])
    if len(old) != len(new):
        out.append(f"commits: committed {len(old)}, fresh {len(new)}")
    for i, (a, b) in enumerate(zip(old, new)):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                out.append(f"commit {i} ({b.get('sha', '?')[:12]}) {key}: committed {a.get(key)!r}, "
                           f"fresh {b.get(key)!r}")
    tests_old, tests_new = committed.get("tests", {}), fresh.get("tests", {})
    for path in sorted(set(tests_old) ^ set(tests_new)):
        out.append(f"test file {path}: only in the {'committed' if path in tests_old else 'fresh'} data")
    for path in sorted(set(tests_old) & set(tests_new)):
        for key in ("functions", "imports"):
            if tests_old[path].get(key) != tests_new[path].get(key):
                out.append(f"test file {path} {key}: committed and fresh differ")
    return out[:limit]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen10_verify GIT_DIR  (a clone of https://github.com/pytorch/ao)",
              file=sys.stderr)
        return 2
    try:
        fresh = extract.extract(argv[0])
    except extract.ExtractError as exc:
        print(f"python -m bench._history_gen10_verify: {exc}", file=sys.stderr)
        return 2
    committed = json.loads(extract.DATA.read_text(encoding="utf-8"))
    problems = compare(committed, fresh)
    for line in problems:
        print(line)
    print(f"{extract.DATA.name}: {'differs from' if problems else 'matches'} {argv[0]} "
          f"({len(fresh['commits'])} commits {fresh['first'][:12]}..{fresh['last'][:12]}, {len(fresh['tests'])} test files)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
