"""Safety of change-based selection on this repository, checked by breaking modules for real.

Property (issue 11): break a first-party module (``raise ImportError`` as its first statement) in
a copy of the repository, plan with that one-file change, and every test file that fails under
the break must have been selected. "Every failing test was selected" is the same statement as
"no test that was *not* selected fails", so what must run is the not-selected tests, each under
every break that did not select it:

* Modules under ``run_all_paths`` select every test (nothing to check) and registered test files
  select themselves; every other indexed module, conftest and test helper is a candidate, and
  ``MAX_BREAKS`` of them are chosen with ``SEED`` (all of them while there are no more than that).
* A test file T must pass with each module in B(T) = {breaks that did not select T} broken. The
  breaks are combined: T runs once, with all of B(T) broken at the same time. If T passes, no
  module of B(T) ran (its first statement raises) or T tolerated the ImportError, and either way
  T passes under each single break too, since a run is identical to the unbroken one up to the
  first broken module it executes. Test files with the same B(T) share one pytest run; so the
  cost is about one run of the suite's files, not one per break. On a failure, each single
  break is tried alone to name the module whose selection missed the test.
* Two checks keep this from passing vacuously: every broken file raises our ImportError when
  run, and the tests selected for the most-imported broken module fail to even collect in the
  copy (so the copy, not the original tree, is what the runs import).

Nothing is sampled among test files: every not-selected cpu-tier test file runs, whole. The
modules are sampled only if there are more than ``MAX_BREAKS`` candidates.
"""

from __future__ import annotations

import ast
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

from ci.selection.deps import TestDependencies
from ci.selection.plan import plan
from ci.registry import find_repo_root, load_registry, path_is_under

ROOT = find_repo_root()
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()
SEED = 20261203
MAX_BREAKS = 64
TIER = "cpu"
MARKER = "broken on purpose by the selection safety test"
DIAGNOSE = 3  # failing test files bisected down to the one break that fails them
_COPY_IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".hypothesis", ".pytest_cache", ".ci-cache",
                                      "*.egg-info", ".ci-reports", "build", "dist", "out")


def broken(source: str, rel: str) -> str:
    """``source`` with ``raise ImportError`` as its first statement (after the docstring and
    ``from __future__`` imports, which must stay first)."""
    body = ast.parse(source).body
    keep = 0
    for i, stmt in enumerate(body):
        is_doc = i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
            and isinstance(stmt.value.value, str)
        if is_doc or (isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"):
            keep = stmt.end_lineno or stmt.lineno
        else:
            break
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return "".join(lines[:keep]) + f"raise ImportError({MARKER + ': ' + rel!r})\n" + "".join(lines[keep:])


def candidates(deps: TestDependencies) -> list[str]:
    registry = deps.registry
    files = {m.rel for m in deps.index.files()}
    files.update(c for test in registry.tests for c in deps.conftests(test))
    return sorted(f for f in files if f.endswith(".py") and f not in registry.tests
                  and not any(path_is_under(f, p) for p in registry.run_all_paths))


def pytest_env() -> dict[str, str]:
    """The environment for a nested pytest: nothing of the outer run's xdist or options."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST"))}


def run_pytest(root: Path, args: list[str], workers: int = 0) -> subprocess.CompletedProcess[str]:
    """``workers``: pytest-xdist processes (0: none). The group runs use two: by the time they run,
    the outer suite's other workers are done, and the machine's second core would sit idle."""
    spread = ["-n", str(workers), "--dist", "loadfile"] if workers else []
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=line", *spread,
                           "-W", "ignore::pytest.PytestUnraisableExceptionWarning", *args],
                          cwd=root, env=pytest_env(), capture_output=True, text=True, timeout=600)


def _failed_files(output: str) -> list[str]:
    """Test files named by pytest's short summary (``FAILED path::test``, ``ERROR path``)."""
    found = []
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            path = line.split(" ", 1)[1].split("::", 1)[0].split(" ", 1)[0]
            if path.endswith(".py") and path not in found:
                found.append(path)
    return found


def _culprit(copy: Path, breaker: Breaker, test: str, breaks: frozenset[str]) -> str | None:
    """Which single break fails ``test`` (bisection over ``breaks``, a few pytest runs). None when
    ``test`` passes when run alone with the same breaks: it failed only beside the other files of
    its group run (a timing test on a loaded machine), which no break explains."""
    clean = _run_with(copy, breaker, test, [])
    if clean.returncode != 0:  # what failed, so that a red run names its test and its error
        said = [line for line in clean.stdout.splitlines()
                if line.startswith(("FAILED ", "ERROR ", "E ")) or re.search(r"\.py:\d+: ", line)]  # --tb=line
        return f"{test} fails with nothing broken: the suite itself is red:\n" + "\n".join(said[:20])
    suspects = sorted(breaks)
    if not _fails(copy, breaker, test, suspects):
        return None
    while len(suspects) > 1:
        half = suspects[: len(suspects) // 2]
        suspects = half if _fails(copy, breaker, test, half) else suspects[len(half):]
    if _fails(copy, breaker, test, suspects):
        return f"{test} fails when {suspects[0]} is broken, but a change to it does not select the test"
    return f"{test} fails with {len(breaks)} modules broken, but with none of them alone"


def _fails(copy: Path, breaker: Breaker, test: str, modules: list[str]) -> bool:
    return _run_with(copy, breaker, test, modules).returncode != 0


def _run_with(copy: Path, breaker: Breaker, test: str, modules: list[str]) -> subprocess.CompletedProcess[str]:
    """``test`` run alone in the copy with exactly ``modules`` broken."""
    breaker.apply(frozenset(modules))
    return run_pytest(copy, [test])


def _module_level_closure(deps: TestDependencies, test: str) -> set[str]:
    """Files ``test`` imports at collection: its top-level imports, followed transitively through
    the top-level imports of what they import (a cheap under-estimate: only plain statements)."""
    seen, stack = set(), [test]
    while stack:
        rel = stack.pop()
        if rel in seen:
            continue
        seen.add(rel)
        tree = ast.parse((deps.root / rel).read_bytes())
        for stmt in tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                lines = {stmt.lineno}
                stack += [e.target for e in deps.graph.edges.get(rel, ()) if e.line in lines or e.how == "package"]
    return seen


class Breaker:
    """Applies and undoes breaks in the copy at ``root``."""

    def __init__(self, root: Path, modules: list[str]):
        self.root = root
        self.original = {rel: (root / rel).read_text(encoding="utf-8") for rel in modules}

    def apply(self, modules: frozenset[str]) -> None:
        for rel, text in self.original.items():
            (self.root / rel).write_text(broken(text, rel) if rel in modules else text, encoding="utf-8")


def test_every_test_a_break_fails_was_selected(tmp_path, record_property):
    registry = load_registry(ROOT / "registry.yaml")
    deps = TestDependencies(ROOT, registry, cache=None)
    pool = candidates(deps)
    modules = sorted(random.Random(SEED).sample(pool, min(MAX_BREAKS, len(pool))))
    assert len(modules) >= 20, f"only {len(modules)} modules to break: {modules}"
    cpu_tests = [e.path for e in registry.tests_for_tier(TIER) if e.path not in deps.not_files and e.path != THIS]

    selected: dict[str, set[str]] = {}
    for rel in modules:
        chosen = plan(registry, TIER, [rel], impact=deps.impact([rel])).selected
        selected[rel] = {t.path for t in chosen}
    breaks_for: dict[str, frozenset[str]] = {
        test: frozenset(m for m in modules if test not in selected[m]) for test in cpu_tests}
    groups: dict[frozenset[str], list[str]] = {}
    for test, breaks in breaks_for.items():
        if breaks:
            groups.setdefault(breaks, []).append(test)

    copy = tmp_path / "repo"
    shutil.copytree(ROOT, copy, ignore=_COPY_IGNORE, symlinks=True)
    if (ROOT / ".venv").is_dir():  # the bootstrap test checks the checkout's environment: lend it ours
        (copy / ".venv").symlink_to(ROOT / ".venv", target_is_directory=True)
    breaker = Breaker(copy, modules)

    # 1. Each break is live: the broken file raises our ImportError before anything else runs.
    breaker.apply(frozenset(modules))
    probe = ("import runpy, sys\nbad = []\nfor f in sys.argv[1:]:\n    try:\n        runpy.run_path(f)\n"
             f"    except ImportError as e:\n        bad += [] if {MARKER!r} in str(e) else [f]\n"
             "    else:\n        bad.append(f)\nprint(bad)\n")
    done = subprocess.run([sys.executable, "-c", probe, *modules], cwd=copy, capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr

    # 2. The runs import the copy: a break makes a test it selected fail to collect. Checked on the
    #    quickest such test (by est_time) whose own imports reach the module at module level.
    est = {e.path: e.est_time for e in registry.tests.values()}
    pairs = sorted((est[t], t, m) for m in modules for t in selected[m] & set(cpu_tests)
                   if m in _module_level_closure(deps, t))
    _, victim, module = pairs[0]
    breaker.apply(frozenset({module}))
    done = run_pytest(copy, ["--collect-only", victim])
    assert done.returncode != 0 and MARKER in done.stdout + done.stderr, (module, victim, done.stdout[-2000:])

    # 3. The property: no test that a break did not select fails under it.
    misses, alone_passed = [], []
    for breaks, tests in sorted(groups.items(), key=lambda kv: sorted(kv[1])):
        breaker.apply(breaks)
        done = run_pytest(copy, sorted(tests), workers=2 if len(tests) > 1 else 0)
        if done.returncode != 0:
            for test in _failed_files(done.stdout) or tests:  # bisect for the first few only: minutes
                found = (_culprit(copy, breaker, test, breaks) if len(misses) < DIAGNOSE else
                         f"{test} fails with {len(breaks)} modules broken (not bisected)")
                (misses if found is not None else alone_passed).append(found or test)
    breaker.apply(frozenset())

    sizes = sorted(len(selected[m] & set(cpu_tests)) for m in modules)
    summary = (f"{len(modules)} of {len(pool)} candidate modules broken; {len(cpu_tests)} cpu test files; "
               f"selected per break: median {sizes[len(sizes) // 2]}, max {sizes[-1]}, min {sizes[0]}; "
               f"{sum(len(t) for t in groups.values())} test files run in {len(groups)} pytest runs; "
               f"collection check: {victim} with {module} broken; failed only beside its group, passed alone "
               f"with the same breaks: {', '.join(alone_passed) or 'none'}")
    record_property("selection_safety", summary)
    print(summary)
    assert misses == [], "\n".join(misses)
