"""What narrowing a changed constant to its uses costs and yields on a real tree:
``python -m bench uses [--repo GIT_DIR] [--commit SHA] [--under python/] [--changes 50] [--seed 5]``
(default: this repository at HEAD; ``--quick``: its ``fp4kv/`` as on disk, 5 changes).

`ci.selection.definition_uses` turns a module-level change that only redefines names into the
tests that ran a use of them. This bench takes ``--changes`` module-level integer constants at
random from the tree at ``--commit`` (one per file, ``third_party`` folders left out), changes
each by one, and asks `ci.selection.module_definitions.changed_definitions` and
`ci.selection.definition_uses.DefinitionUses` what the change is: narrowed to N uses, or module
level (every importer). The index covers every Python file under ``--under``, with no import
graph (so a name counts in any file: the upper bound of the work). It prints the counts, then
the seconds of the word index and of the changes against the seconds of ``ast.parse`` of the
files holding the names, measured in the same run (the baseline: what any reader of those files
pays). ``--repo`` may be a bare
mirror (``fetch github:nokiaMS/sglang``).
"""

from __future__ import annotations

import argparse
import ast
import random
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from bench.table import format_table, ratio
from ci.selection.definition_uses import DefinitionUses
from ci.selection.git_lines import read_at
from ci.selection.module_definitions import changed_definitions, pure_assignment
from ci.selection.reach import ReferenceIndex


def _constants(sources: dict[str, bytes], count: int, rng: random.Random) -> list[tuple[str, ast.Assign]]:
    picked: list[tuple[str, ast.Assign]] = []
    for path in sorted(sources):
        if "third_party" in path.split("/"):
            continue
        try:
            tree = ast.parse(sources[path])
        except (SyntaxError, ValueError, RecursionError):
            continue
        own = [s for s in tree.body if isinstance(s, ast.Assign) and pure_assignment(s)
               and isinstance(s.value, ast.Constant) and type(s.value.value) is int]
        if own:
            picked.append((path, rng.choice(own)))
    rng.shuffle(picked)
    return picked[:count]


def _changed(text: str, stmt: ast.Assign) -> str:
    lines = text.splitlines(keepends=True)
    value = stmt.value
    assert isinstance(value, ast.Constant)
    line = lines[value.lineno - 1]
    lines[value.lineno - 1] = line[:value.col_offset] + repr(value.value + 1) + line[value.end_col_offset:]
    return "".join(lines)


def sources_at(repo: Path, commit: str, under: str) -> dict[str, bytes] | None:
    """Every Python file under ``under`` at ``commit`` (None when git cannot list them)."""
    listed = subprocess.run(["git", "ls-tree", "-r", "--name-only", commit, "--", under], cwd=repo,
                            capture_output=True, text=True)
    if listed.returncode != 0:
        print(f"bench uses: git ls-tree {commit} in {repo}: {listed.stderr.strip()}", file=sys.stderr)
        return None
    return read_at(repo, commit, [p for p in listed.stdout.split() if p.endswith(".py")], from_root=True)


def measure(sources: dict[str, bytes], where: str, changes: int, seed: int) -> int:
    rng = random.Random(seed)
    picked = _constants(sources, changes, rng)
    start = time.perf_counter()
    index = ReferenceIndex(sources)
    index.common("")  # builds the word index
    indexed = time.perf_counter()
    uses = DefinitionUses(index)
    counts: list[int] = []
    holders: set[str] = set()
    for path, stmt in picked:
        text = sources[path].decode("utf-8", "surrogateescape")
        names = changed_definitions(text, _changed(text, stmt))
        found = uses.of(path, names) if names is not None else None
        holders.update(h for n in (names or ()) for h in index.paths_with(n))
        counts.append(-1 if found is None else len(found))
    done = time.perf_counter()
    parse_start = time.perf_counter()
    for path in holders:
        ast.parse(sources[path])
    parsed = time.perf_counter() - parse_start
    narrowed = [c for c in counts if c >= 0]
    print(f"{where}: {len(sources)} Python files; {len(picked)} constants changed: "
          f"{len(narrowed)} narrowed to their uses (median {median(narrowed) if narrowed else '-'}, "
          f"max {max(narrowed, default='-')}), {len(counts) - len(narrowed)} module level")
    rows = [("ast.parse of the files holding the names (baseline)", parsed),
            ("word index over every file", indexed - start),
            ("the changes: changed_definitions + DefinitionUses.of", done - indexed)]
    print(format_table(("step", "s", "x baseline"),
                       [(name, f"{secs:.3f}", ratio(secs / parsed) if parsed else "") for name, secs in rows]))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench uses", description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--under", default=".")
    parser.add_argument("--changes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="this repository's fp4kv/ as on disk, 5 changes")
    args = parser.parse_args(argv)
    if args.quick:  # the files on disk: a copy of the tracked files without .git runs it too
        root = Path(__file__).resolve().parents[1]
        found = {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "fp4kv").rglob("*.py"))}
        return measure(found, "this repository's fp4kv/ on disk", 5, args.seed)
    sources = sources_at(args.repo, args.commit, args.under)
    if sources is None:
        return 2
    return measure(sources, f"{args.repo} at {args.commit[:12]}, under {args.under}", args.changes, args.seed)
