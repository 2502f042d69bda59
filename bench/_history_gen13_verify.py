"""``python -m bench._history_gen13_verify GIT_DIR``: re-extract TransformerEngine's history from the
git directory at the committed data's head and report every difference from
``bench/_history_gen13_data.json`` (exit 0 on none, 1 on some, 2 on bad input)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

from bench._history_gen13_extract import DATA, extract, git


def compare(old: object, new: object, where: str = "") -> list[str]:
    """Every path at which ``old`` and ``new`` (decoded JSON) differ, as ``where: old != new``."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            if key not in old or key not in new:
                out.append(f"{where}/{key}: {'missing' if key not in old else 'present'} in the committed data")
            else:
                out += compare(old[key], new[key], f"{where}/{key}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{where}: {len(old)} items committed, {len(new)} re-extracted"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in compare(a, b, f"{where}[{i}]")]
    return [] if old == new else [f"{where}: {old!r} != {new!r}"]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m bench._history_gen13_verify GIT_DIR (TransformerEngine's git directory)",
              file=sys.stderr)
        return 2
    committed = json.loads(DATA.read_text())
    head = committed["head"]
    try:
        git(argv[0], "cat-file", "-e", f"{head}^{{commit}}")
        with tempfile.TemporaryDirectory(prefix="gen13-verify-") as scratch:
            # extract reads HEAD: a scratch repository borrowing the objects, its HEAD at the committed head
            subprocess.run(["git", "init", "-q", "--bare", scratch], check=True, capture_output=True)
            with open(f"{scratch}/objects/info/alternates", "w", encoding="utf-8") as alternates:
                alternates.write(git(argv[0], "rev-parse", "--path-format=absolute", "--git-path", "objects").strip()
                                 + "\n")
            git(scratch, "update-ref", "HEAD", head)
            fresh = extract(scratch)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        print(f"python -m bench._history_gen13_verify: {argv[0]}: {exc}", file=sys.stderr)
        return 2
    differences = compare(committed, json.loads(json.dumps(fresh)))
    for line in differences[:50]:
        print(line)
    print(f"{len(differences)} differences between {DATA.name} and a re-extraction at {head[:12]}")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
