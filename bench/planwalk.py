"""What ``ci plan`` costs at two versions of this code, on another tree's real commits:
``python -m bench planwalk --tree DIR --commits C1,C2,... --code REF_A --code REF_B [--tier T]
[--repeats N] [--static-commits K] [--map-every N]``.

For each commit ``C`` of ``--tree`` (a git clone whose ``registry.yaml`` is untracked, e.g. from
``ci init``): the tree is checked out at ``C^`` and a stand-in map written with ``sha = C^``
(`bench._planwalk_map`: every active test of the tier imported its closure and ran none of it,
so every test is walked back; no observation; ``--map-every N``: only every N-th active test has an
entry, the static graph deciding the rest), then the tree is checked out at ``C`` and
``python -m ci --root DIR plan --tier T --changed-files (C^..C) --format json
--no-depmaps-from-store --depmap MAP`` is run with each code version (a ``git worktree`` of
``REF_A`` and of ``REF_B`` of this repository, made in a temp dir), once untimed each (the import
cache warmed), then ``--repeats`` times each in alternating order (A B, B A, ...). The first
``--static-commits`` commits are planned the same way without ``--depmap`` too (the static graph).
Each run's wall seconds and CPU seconds (user + system of the child, ``os.wait4``) are kept; the
table gives per commit and mode the sums of each side, B over A, and whether the selected files
of every run were the same (a difference is printed). The tree is left at its original commit.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench._planwalk_map import import_only_map
from bench.table import format_table, ratio
from ci.registry import load_registry
from ci.selection.depmap_format import dump_depmap

CI_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Side:
    """One code version's runs of one (commit, mode): seconds and the selections seen."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    selections: set[tuple[str, ...]] = field(default_factory=set)


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=tree, capture_output=True, text=True, check=True).stdout


def plan_once(code: Path, tree: Path, argv: list[str]) -> tuple[float, float, tuple[str, ...]]:
    """(wall s, CPU s, selected files) of one ``ci plan`` with the code at ``code``."""
    out = tempfile.TemporaryFile()
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ci", "--root", str(tree), "plan", *argv], cwd=code,
                            stdout=out, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(code)})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"bench planwalk: ci plan at {code} exited {proc.returncode}: {err[-500:]}")
    out.seek(0)
    plans = json.loads(out.read())["plans"]
    selected = tuple(sorted(t["path"] if isinstance(t, dict) else t for p in plans for s in p.get("shards", [])
                            for t in (s.get("tests", []) if isinstance(s, dict) else s)))
    return wall, usage.ru_utime + usage.ru_stime, selected


def measure(tree: Path, commits: list[str], codes: dict[str, Path], tier: str, repeats: int,
            static_commits: int, work: Path, every: int = 1) -> list[tuple[str, str, dict[str, Side]]]:
    """Every (commit, mode) with both sides' runs (module docstring)."""
    rows = []
    registry = load_registry(tree / "registry.yaml")
    for i, commit in enumerate(commits):
        changed = _git(tree, "diff", "--name-only", f"{commit}^", commit)
        (work / "changed.txt").write_text(changed)
        parent = _git(tree, "rev-parse", f"{commit}^").strip()
        _git(tree, "checkout", "-q", parent)
        map_path = work / "map.json"
        map_path.write_text(dump_depmap(import_only_map(tree, registry, tier, parent, every)))
        _git(tree, "checkout", "-q", commit)
        base = ["--tier", tier, "--changed-files", str(work / "changed.txt"), "--format", "json",
                "--no-depmaps-from-store"]
        modes = [("map", [*base, "--depmap", str(map_path)])] + ([("static graph", base)] if i < static_commits else [])
        for mode, argv in modes:
            sides = {name: Side() for name in codes}
            for code in codes.values():
                plan_once(code, tree, argv)  # warm: the import cache, the page cache
            for r in range(repeats):
                for name in (list(codes) if r % 2 == 0 else list(codes)[::-1]):
                    wall, cpu, selected = plan_once(codes[name], tree, argv)
                    side = sides[name]
                    side.wall.append(wall)
                    side.cpu.append(cpu)
                    side.selections.add(selected)
            every = set().union(*(s.selections for s in sides.values()))
            print(f"bench planwalk: {commit} {mode}: " + ", ".join(
                f"{n} {sum(s.wall):.1f} s wall, {sum(s.cpu):.1f} s CPU" for n, s in sides.items())
                  + f"; {'the same selection' if len(every) == 1 else 'SELECTIONS DIFFER'} in every run",
                  file=sys.stderr, flush=True)  # the table comes at the end: a run stopped early keeps these
            rows.append((commit, mode, sides))
    return rows


def table(rows: list[tuple[str, str, dict[str, Side]]], files_changed: dict[str, int]) -> str:
    """Sums per side, B over A, and whether every run selected the same files."""
    out = []
    for commit, mode, sides in rows:
        (na, a), (nb, b) = sides.items()
        same = a.selections == b.selections and len(a.selections) == 1
        sizes = sorted({len(s) for s in a.selections | b.selections})
        out.append((commit, files_changed.get(commit, ""), mode, len(a.wall), f"{sum(a.wall):.1f}", f"{sum(b.wall):.1f}",
                    ratio(sum(b.wall) / sum(a.wall)), f"{sum(a.cpu):.1f}", f"{sum(b.cpu):.1f}",
                    ratio(sum(b.cpu) / sum(a.cpu)), "/".join(map(str, sizes)), "yes" if same else "NO"))
    for mode in sorted({m for _, m, _ in rows}):
        mine = [s for _, m, s in rows if m == mode]
        wall = [sum(sum(s.wall) for s in (list(x.values())[k] for x in mine)) for k in (0, 1)]
        cpu = [sum(sum(s.cpu) for s in (list(x.values())[k] for x in mine)) for k in (0, 1)]
        out.append(("all", "", mode, "", f"{wall[0]:.1f}", f"{wall[1]:.1f}", ratio(wall[1] / wall[0]),
                    f"{cpu[0]:.1f}", f"{cpu[1]:.1f}", ratio(cpu[1] / cpu[0]), "", ""))
    (na, _), (nb, _) = rows[0][2].items()
    return format_table(("commit", "files changed", "mode", "runs each", f"wall s {na}", f"wall s {nb}", "wall B/A",
                         f"CPU s {na}", f"CPU s {nb}", "CPU B/A", "files selected", "same selection"), out,
                        title=f"ci plan: A = {na}, B = {nb} (alternated runs, sums)")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench planwalk", description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--commits", required=True, help="comma-separated commits of --tree")
    parser.add_argument("--code", action="append", required=True, help="a ref of this repository (twice: A, then B)")
    parser.add_argument("--tier", default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--static-commits", type=int, default=1)
    parser.add_argument("--map-every", type=int, default=1, help="a map entry for every N-th active test only")
    args = parser.parse_args(argv)
    if len(args.code) != 2 or not (args.tree / "registry.yaml").is_file():
        print("bench planwalk: give --code twice and a --tree holding registry.yaml", file=sys.stderr)
        return 2
    tree = args.tree.resolve()
    start = _git(tree, "rev-parse", "HEAD").strip()
    commits = [c for c in args.commits.split(",") if c]
    with tempfile.TemporaryDirectory(prefix="bench-planwalk-") as tmp:
        work = Path(tmp)
        codes = {}
        for ref in args.code:
            where = work / f"code-{len(codes)}"
            _git(CI_ROOT, "worktree", "add", "-q", "--detach", str(where), ref)
            codes[f"{ref} ({_git(CI_ROOT, 'rev-parse', '--short', ref).strip()})"] = where
        try:
            rows = measure(tree, commits, codes, args.tier, args.repeats, args.static_commits, work, args.map_every)
        finally:
            _git(tree, "checkout", "-q", start)
            for where in codes.values():
                _git(CI_ROOT, "worktree", "remove", "--force", str(where))
        counts = {c: len(_git(tree, "diff", "--name-only", f"{c}^", c).split()) for c in commits}
        print(table(rows, counts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
