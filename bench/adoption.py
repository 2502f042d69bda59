"""Adopting ci on a real tree (SGLang's, vLLM's): ``python -m bench adoption --repo=PATH [--commits=A,B] [--name=N]``.

``PATH`` is a git repository holding SGLang's history (this project's ``fetch`` of
``github:nokiaMS/sglang`` gives one, without a work tree). For each commit (default: the one
before PR #28013, which still has the stale ``KVFP4QuantizeUtil`` imports, and the newest), the
commit is checked out into a temporary worktree, and there, as a CI maintainer would, without
any configuration of our own:

1. ``fp4kv-ci init`` writes the starter registry (timed);
2. ``fp4kv-ci lint`` runs on it (wall time, best of 3; ``--quick``: once), its problems counted
   by code, the stale imports of the seed bug counted, and every I001/I002 listed for a reader
   to judge (real or false);
3. where the commit registers tests in-source (``register_*_ci``, SGLang's ``ci_register.py``),
   ``fp4kv-ci import-suites`` maps its suites onto tiers, and each per-commit tier's files are
   compared with what SGLang's own run_suite.py runs for the same suites (`bench._sglang_suites`);
   then the import three ways (as it is, with ``--include-label-gated``, and as before this round:
   the whole test root read, label-gated suites mapped): how many parked files (registered outside
   the folders SGLang's runner reads) and label-gated-only files are active, and the GPU time of a
   pull request against SGLang's default PR run. The default import's closing summary follows.

Any other repository's history works the same way; ``--name`` (default ``SGLang``) only names it
in the titles: vLLM's first lint is ``python -m bench adoption --repo=PATH --commits=9aaf83ef5
--name=vLLM`` (it has no in-source registrations, so step 3 is skipped).

Baseline in the same run: ``git ls-files '*.py'`` piped through ``python -c`` ``ast.parse`` of
every file, the least any import check must do. Nothing is written outside the temporary folder.
Without ``--repo`` it says so and does nothing (it needs a repository this project does not ship).
"""

from __future__ import annotations

import ast
import collections
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._sglang_suites import compare
from bench.table import format_table

SEED_NAME = "KVFP4QuantizeUtil"
DEFAULT_COMMITS = ("627ed3476~1", "HEAD")  # the commit before "Fix invalid KVFP4QuantizeUtil references (#28013)"
_CODE = re.compile(r":\d+:\d+: ([A-Z]\d{3}) ")


def _flag(argv: list[str], name: str) -> str | None:
    for arg in argv:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def _cli(root: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "ci", "--root", str(root), *args], capture_output=True, text=True,
                            timeout=1800)
    return time.perf_counter() - start, result


def _parse_all(root: Path) -> float:
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    start = time.perf_counter()
    for rel in files:
        try:
            ast.parse((root / rel).read_bytes())
        except (SyntaxError, ValueError, RecursionError, MemoryError, OSError):
            pass
    return time.perf_counter() - start


def measure(repo: Path, commit: str, repeat: int) -> tuple[list[object], list[str], tuple | None]:
    """One table row for ``commit``, its import problems and the import-suites comparison (None
    where the commit has no in-source registrations), from a temporary worktree."""
    with tempfile.TemporaryDirectory(prefix="bench-adoption-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", "-f", str(tree), commit],
                       check=True, capture_output=True)
        try:
            sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True, text=True,
                                 check=True).stdout.strip()
            t_init, init = _cli(tree, "init", "--owner", "@sglang")
            if init.returncode != 0:
                raise RuntimeError(f"init failed at {commit}: {init.stderr[-2000:]}")
            registered = (tree / "registry.yaml").read_text().count("\n    tiers: [")
            runs = [_cli(tree, "lint") for _ in range(repeat)]
            t_lint = min(t for t, _ in runs)
            out = runs[-1][1].stdout
            t_parse = _parse_all(tree)
            suites = compare(tree) if (tree / "python/sglang/test/ci/ci_register.py").is_file() else None
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], capture_output=True)
    codes = collections.Counter(_CODE.findall(out))
    imports = [line for line in out.splitlines() if re.search(r": I00[12] ", line)]
    seed = sum(SEED_NAME in line.split(" I001 ", 1)[-1] for line in imports if " I001 " in line)
    other = sum(n for code, n in codes.items() if code not in ("L003", "L009", "I001", "I002"))
    row = [commit, sha, registered, sum(codes.values()), codes.get("L003", 0), codes.get("L009", 0), other,
           codes.get("I001", 0), codes.get("I002", 0), seed, f"{t_init:.1f}", f"{t_lint:.1f}", f"{t_parse:.1f}", f"{t_lint / t_parse:.1f}x"]
    return row, imports, suites


def main(argv: list[str]) -> int:
    repo = _flag(argv, "repo")
    if repo is None:
        print("bench adoption: give --repo=PATH, a git repository with SGLang's history (see the module docstring); "
              "nothing measured")
        return 0
    commits = tuple((_flag(argv, "commits") or ",".join(DEFAULT_COMMITS)).split(","))
    repeat = 1 if "--quick" in argv else 3
    rows, listings, comparisons = [], [], []
    for commit in commits:
        row, imports, suites = measure(Path(repo), commit, repeat)
        rows.append(row)
        listings.append((commit, imports))
        if suites is not None:
            comparisons.append((commit, suites))
    print(format_table(["commit", "sha", "test files", "problems", "L003", "L009 (info)", "other", "I001", "I002",
                        f"{SEED_NAME} hits",
                        "init s", "lint s", "ast.parse s", "lint / parse"], rows,
                       title=f"ci init + ci lint on {_flag(argv, 'name') or 'SGLang'}, lint best of {repeat}"))
    for commit, found in comparisons:
        print()
        print(format_table(["tier", "suites", "SGLang runs", "ours", "only SGLang", "only ours"], found.tier_rows,
                           title=f"import-suites at {commit}: per-commit tiers vs SGLang's own selection "
                                 f"({found.seconds:.1f} s; {found.closing[0]})"))
        print()
        print(format_table(["import", "entries", "active", "parked active", "label-gated active", "GPU s per PR",
                            "vs SGLang"], found.run_rows,
                           title=f"import-suites at {commit}: parked and label-gated files, GPU time of a PR"))
        print(f"\nimport-suites at {commit}, its closing summary:")
        print("\n".join(found.closing[1:]))
    for commit, imports in listings:
        print(f"\nimport problems at {commit} ({len(imports)}):")
        print("\n".join(f"  {line}" for line in imports))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
