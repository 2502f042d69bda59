"""How often a commit touches what a test executes, measured on a real first-parent history (the
fraction `bench culprit`'s touched prior simulates; issue 51).

``python -m bench._culprit_touch GIT_DIR COMMIT SRC_ROOT TEST_FILE... [--span N]``: at COMMIT,
each test file's static import closure (a plain AST closure over the modules under SRC_ROOT,
``.`` when the package sits at the top; not ``ci deps``, which needs a registry of that tree),
then over the last N first-parent commits up to COMMIT (default 1000) the share of commits that
change a file of the closure (the test file included), and that share within windows of 8, 32 and
128 consecutive commits (mean and 10th-90th percentile). The closure is taken at COMMIT for the
whole span: files renamed within it are missed, so the share is a slight undercount.

``--depmap MAP`` (a map recorded at COMMIT, `ci observe`): also the shares from the observed map,
as ``ci culprit`` reads them (`ci.commands.culprit_prior.observed_touches`: the test file's
executed lines, with the shared import-time lines of its files, carried through each commit's
diff): commits that change a line the test executed, and those that change a file it executed
or opened (lines or not).
"""

from __future__ import annotations

import ast
import statistics
import subprocess
import sys
from pathlib import Path, PurePosixPath

from ci.commands.culprit_prior import observed_touches
from ci.culprit.prior import Touch
from ci.selection.depmap_format import StoredTestMap, maps_of_file, parse_depmap

WINDOWS = (8, 32, 128)


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True,
                          text=True).stdout


def closure(git_dir: str, commit: str, src_root: str, test: str) -> set[str]:
    """The test file, its conftest.py files and every .py file under ``src_root`` they import,
    transitively, at ``commit``."""
    files = set(_git(git_dir, "ls-tree", "-r", "--name-only", commit).split())
    prefix = "" if src_root in ("", ".") else src_root.rstrip("/") + "/"
    parents = PurePosixPath(test).parents
    seen, todo = set(), [test, *(str(d / "conftest.py").lstrip("./") for d in parents)]
    while todo:
        path = todo.pop()
        if path in seen or path not in files:
            continue
        seen.add(path)
        try:
            tree = ast.parse(_git(git_dir, "show", f"{commit}:{path}"))
        except SyntaxError:
            continue
        package = PurePosixPath(path[len(prefix):]).parent.parts if path.startswith(prefix) else ()
        for node in ast.walk(tree):
            for name in _imported(node, package):
                parts = name.split(".")
                for i in range(1, len(parts) + 1):  # a.b.c runs a/__init__, a/b/__init__ too
                    stem = prefix + "/".join(parts[:i])
                    todo += [p for p in (stem + ".py", stem + "/__init__.py") if p in files]
    return seen


def _imported(node: ast.AST, package: tuple[str, ...]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = list(package[:len(package) - node.level + 1]) if node.level else []
        module = ".".join([*base, *(node.module.split(".") if node.module else [])])
        return [module, *(f"{module}.{a.name}" for a in node.names)] if module else []
    return []


def touched(git_dir: str, commit: str, span: int, executed: set[str]) -> list[bool]:
    """Oldest first: for each of the last ``span`` first-parent commits, whether it changes a file of
    ``executed`` (a merge's change against its first parent)."""
    out = _git(git_dir, "log", "--first-parent", "-m", "--format=%x1e%H", "--name-only", f"-{span}", commit)
    flags: list[bool] = []
    for block in out.split("\x1e")[1:]:
        lines = block.split()
        flags.append(bool(executed & set(lines[1:])))
    return flags[::-1]


def observed(git_dir: str, commit: str, span: int, stored: StoredTestMap, tests: set[str]) -> list[Touch]:
    """Oldest first: each of the last ``span`` first-parent commits up to ``commit``, its touch level
    against ``stored`` (the map's commit is ``commit``; ``tests`` the map's test files)."""
    shas = _git(git_dir, "rev-list", "--first-parent", f"-{span + 1}", commit).split()[::-1]
    return observed_touches(Path(git_dir), stored, shas[0], shas[1:], tests)


def _option(argv: list[str], name: str, default: str | None) -> tuple[str | None, list[str]]:
    if name not in argv:
        return default, argv
    i = argv.index(name)
    return argv[i + 1], argv[:i] + argv[i + 2:]


def main(argv: list[str]) -> int:
    span_text, argv = _option(argv, "--span", "1000")
    map_path, argv = _option(argv, "--depmap", None)
    span = int(span_text or 1000)
    git_dir, commit, src_root, *tests = argv
    maps = maps_of_file(parse_depmap(Path(map_path).read_text(), map_path), map_path) if map_path else {}
    for test in tests:
        executed = closure(git_dir, commit, src_root, test)
        flags = touched(git_dir, commit, span, executed)
        parts = [f"{test}: closure {len(executed)} files, {sum(flags)}/{len(flags)} commits touch it "
                 f"({sum(flags) / len(flags):.1%})"]
        if test in maps:
            levels = observed(git_dir, commit, span, maps[test], set(maps))
            own = sum(touched(git_dir, commit, span, set(maps[test].entry.files)))
            lines, files = levels.count(Touch.LINES), len(levels) - levels.count(Touch.NONE)
            parts.append(f"map {len(maps[test].entry.files)} files: {lines} change executed lines "
                         f"({lines / len(levels):.1%}), {own} its files ({own / len(levels):.1%}), {files} its "
                         f"files or import-time lines ({files / len(levels):.1%})")
        for n in (n for n in WINDOWS if len(flags) > n):  # two windows at least, for the percentiles
            shares = sorted(sum(flags[i:i + n]) / n for i in range(len(flags) - n + 1))
            q = statistics.quantiles(shares, n=10)
            parts.append(f"windows of {n}: mean {statistics.fmean(shares):.1%} (p10-p90 {q[0]:.0%}-{q[-1]:.0%})")
        print("; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
