"""``python -m bench._history_gen14_verify GIT_DIR``: re-extract gen14's data from a bitsandbytes
clone at the data file's own head and report every difference from the committed file (exit 0 when
there are none, 1 otherwise, 2 on a usage or repository error)."""

from __future__ import annotations

import json
import sys

from bench._history_gen14_extract import DATA, ExtractError, dump, extract


def differences(stored: object, fresh: object, where: str = "") -> list[str]:
    """Each path at which ``stored`` and ``fresh`` (parsed JSON) differ, with both values shortened."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        out: list[str] = []
        for key in sorted(set(stored) | set(fresh)):
            if key not in stored or key not in fresh:
                out.append(f"{where}/{key}: only in {'the fresh extraction' if key in fresh else 'the data file'}")
            else:
                out += differences(stored[key], fresh[key], f"{where}/{key}")
        return out
    if isinstance(stored, list) and isinstance(fresh, list):
        out = [f"{where}: {len(stored)} items in the data file, {len(fresh)} fresh"] if len(stored) != len(fresh) else []
        for i, (a, b) in enumerate(zip(stored, fresh)):
            out += differences(a, b, f"{where}[{i}]")
        return out
    return [] if stored == fresh else [f"{where}: {str(stored)[:80]!r} in the data file, {str(fresh)[:80]!r} fresh"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen14_verify GIT_DIR", file=sys.stderr)
        return 2
    if not DATA.exists():
        print(f"python -m bench._history_gen14_verify: no {DATA.name}: run bench._history_gen14_extract first",
              file=sys.stderr)
        return 2
    stored = json.loads(DATA.read_text())
    try:
        fresh = json.loads(dump(extract(argv[0], stored["head"])))
    except ExtractError as exc:
        print(f"python -m bench._history_gen14_verify: {exc}", file=sys.stderr)
        return 2
    found = differences(stored, fresh)
    for line in found[:50]:
        print(line)
    print(f"{len(found)} differences between {DATA.name} and a fresh extraction at {stored['head'][:12]}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
