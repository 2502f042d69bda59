"""A stand-in runtime map for a tree no one here can record (its tests need GPUs), for ``bench planwalk``.

Contract: `import_only_map(root, registry, tier, sha)` gives each active test file of ``tier`` an
entry as if the test had imported its static import closure and run none of it: executed lines
are the test file's own lines and the module-level lines of every file in its closure
(`ci.selection.deps.TestDependencies.closure`), nothing inside a function body. It is not an
observation: a change inside a function is then never "executed" by a test, so ``ci plan`` walks
the references back (`ci.selection.reach`) for every test, the most walking a map can cause. A registered
file absent at this commit gets no entry. The map is complete, of ``tier``, recorded now, at ``sha``.
"""

from __future__ import annotations

import ast
from datetime import datetime, timezone
from pathlib import Path

from ci.registry import Registry
from ci.selection.deps import TestDependencies
from ci.selection.depmap_format import DepMap, TestMap


def module_level_lines(text: str) -> frozenset[int]:
    """The lines of ``text``'s statements outside any function body (classes' bodies included:
    they run at import too); empty when it does not parse."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return frozenset()
    lines: set[int] = set()

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines.update(range(stmt.lineno - len(stmt.decorator_list), stmt.body[0].lineno))
                continue
            lines.add(stmt.lineno)
            if isinstance(stmt, ast.ClassDef):
                visit(stmt.body)
    visit(tree.body)
    return frozenset(lines)


def import_only_map(root: Path, registry: Registry, tier: str, sha: str, every: int = 1) -> DepMap:
    """See the module docstring; ``every``: only every n-th of those tests (sorted by path) gets an
    entry, the rest none (the static graph decides them), for a map a slow machine can plan with."""
    deps = TestDependencies(root, registry)  # the import records cached on disk, reused across commits
    known: dict[str, frozenset[int]] = {}

    def lines_of(path: str) -> frozenset[int]:
        if path not in known:
            file = root / path
            known[path] = module_level_lines(file.read_text(encoding="utf-8", errors="replace")) \
                if file.is_file() else frozenset()
        return known[path]

    tests = {}
    active = [test for test, entry in sorted(registry.tests.items())
              # a file the registry names that this commit does not have: no entry, no map
              if tier in entry.tiers and entry.status.value == "active" and (root / test).is_file()]
    for test in active[::every]:
        text = (root / test).read_text(encoding="utf-8", errors="replace")
        lines = {test: frozenset(range(1, len(text.splitlines()) + 1))}
        lines.update({p: lines_of(p) for p in deps.closure(test) if p != test and p.endswith(".py")})
        lines = {p: v for p, v in lines.items() if v}
        tests[test] = TestMap(frozenset(lines), items=1, ran=1, lines=lines)
    return DepMap(tier, datetime.now(timezone.utc).isoformat(timespec="seconds"), tests, sha=sha)


__all__ = ["import_only_map", "module_level_lines"]
