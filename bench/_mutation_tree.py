"""The tree ``bench mutation`` measures: its copy, universe, baseline, registry and recorded map.

Contract:
- `TreeSpec` says where a tree keeps the code to mutate (``source_root``) and its tests, where
  its packages import from (``import_root``, the source root unless said), which test files stay
  in the universe whatever their seconds (``keep``: the tests of the mutated code), and what the
  copy needs besides its tracked files (``extra_files``: a generated ``_version.py``); nothing
  here names a tree.
- `make_copy` makes ``<workdir>/tree``, a ``git clone --shared`` of the source repository checked
  out (forced, so a mutant left by a killed run is undone, and its source root's ``__pycache__``
  folders removed with it) at the commit, and writes the extra files.
- `collect_candidates`: the test files the tree's own pytest configuration collects
  (``--collect-only -q``), files with collection errors included (the baseline then drops them).
- `write_registry`: a minimal ``registry.yaml`` in the copy (`bench.mutation` writes it only
  where `has_own_registry` is False: one tree's tests read their own): one tier ``cpu``, every universe
  file (est_time: its baseline seconds, at least 1), ``project:`` with the source and test roots,
  test patterns covering every universe file's name, first-party names from the import root.
- `registry_seconds`: the est_time of each file in the copy's own ``registry.yaml`` (a tree
  that has one, as this repository does), read with `ci.registry.load_registry`; {} without one.
- `coverage_lines`: executed lines per source file, from an independent plain
  ``coverage run --parallel-mode -m pytest`` of the universe (coverage.py's data, subprocesses
  measured through its ``patch = subprocess``), read back by the tree's interpreter.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from bench._mutation_run import clean_env, run_suite
from ci.atomic_write import atomic_write_text


class TreeError(RuntimeError):
    """The tree cannot be prepared; the message says what and where, in one line."""


@dataclass(frozen=True)
class TreeSpec:
    """Where a tree keeps its code (``source_root``) and tests (``test_root``), the name globs its
    pytest configuration collects, and files its copy needs that git does not hold."""

    name: str
    commit: str
    source_root: str
    test_root: str
    name_patterns: tuple[str, ...] = ("test_*.py",)
    extra_files: Mapping[str, str] = field(default_factory=dict)
    import_root: str = ""
    keep: tuple[str, ...] = ()

    @property
    def imports_from(self) -> str:
        """The folder that goes on ``PYTHONPATH`` and whose packages are first-party."""
        return self.import_root or self.source_root

    def kept(self, path: str) -> bool:
        """True for a test file the universe keeps whatever its seconds (``keep`` prefixes)."""
        return any(path == k or path.startswith(k.rstrip("/") + "/") for k in self.keep)


def _git(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise TreeError(f"git {' '.join(args)}: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}")
    return proc.stdout


def make_copy(repo: Path, spec: TreeSpec, workdir: Path) -> Path:
    """See the module docstring; returns the copy's root."""
    tree = workdir / "tree"
    if not (tree / ".git").exists():
        _git("clone", "-q", "--shared", "--no-checkout", str(repo), str(tree))
    _git("checkout", "-q", "-f", spec.commit, cwd=tree)
    for cache in (tree / spec.source_root).rglob("__pycache__"):  # a killed run may leave a mutant's bytecode
        shutil.rmtree(cache, ignore_errors=True)
    for rel, text in spec.extra_files.items():
        atomic_write_text(tree / rel, text)
    return tree


def pythonpath(tree: Path, spec: TreeSpec, ci_root: Path) -> dict[str, str]:
    """The environment that makes the copy's own code and this repository's ``ci`` importable,
    the copy first (an editable install of the tree elsewhere must not win)."""
    return {"PYTHONPATH": f"{(tree / spec.imports_from).resolve()}:{ci_root}"}


def collect_candidates(python: str, tree: Path, env: Mapping[str, str]) -> list[str]:
    """Test files pytest collects in the copy with its own configuration (see the module docstring)."""
    proc = subprocess.run([python, "-m", "pytest", "--collect-only", "-q", "-n", "0"],
                          cwd=tree, env=clean_env(env), capture_output=True, text=True)
    found = set()
    for line in proc.stdout.splitlines():
        m = re.match(r"^(?:ERROR (?:collecting )?)?([^\s:]+\.py)(?:::|\s|$)", line)
        if m and (tree / m.group(1)).is_file():
            found.add(m.group(1))
    if not found:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        raise TreeError(f"{tree}: pytest --collect-only found no test files (exit {proc.returncode}): {tail[0]}")
    return sorted(found)


def write_registry(tree: Path, spec: TreeSpec, universe: Sequence[str], durations: Mapping[str, float]) -> Path:
    """The minimal registry (see the module docstring); returns its path."""
    names = sorted({Path(p).name for p in universe})
    patterns = list(spec.name_patterns) + [n for n in names if not any(fnmatch.fnmatch(n, p) for p in spec.name_patterns)]
    src = tree / spec.imports_from
    first_party = sorted(p.stem for p in src.iterdir() if p.stem.isidentifier()
                         and (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").is_file())))
    lines = ["version: 1", "project:", f"  first_party: {json.dumps(first_party)}",
             f"  source_roots: {json.dumps([spec.imports_from])}", f"  test_roots: {json.dumps([spec.test_root])}",
             f"  test_patterns: {json.dumps(patterns)}", "  unique_basenames: false",
             "tiers:", "  cpu:", f"    description: {json.dumps(spec.name + ' test suite on CPU')}",
             "    runner_labels: [local]", "    gpu_count: 0", "    arch: cpu", "tests:"]
    for path in universe:
        lines += [f"  {json.dumps(path)}:", "    tiers: [cpu]", f"    est_time: {max(1, round(durations.get(path, 0)))}",
                  '    owner: "@bench"', "    status: active"]
    target = tree / "registry.yaml"
    atomic_write_text(target, "\n".join(lines) + "\n")
    return target


def has_own_registry(tree: Path) -> bool:
    """True when the copy's git tracks a ``registry.yaml`` at its root (the tree has its own)."""
    proc = subprocess.run(["git", "ls-files", "--error-unmatch", "registry.yaml"], cwd=tree, capture_output=True)
    return proc.returncode == 0


def registry_seconds(tree: Path) -> dict[str, float]:
    """See the module docstring."""
    from ci.registry import RegistryError, load_registry  # deferred: only a tree with a registry needs it

    path = tree / "registry.yaml"
    if not path.is_file():
        return {}
    try:
        return {p: float(e.est_time) for p, e in load_registry(path).tests.items()}
    except RegistryError as exc:
        raise TreeError(f"{path}: {exc}") from None


_DUMP = """
import json, os, sys
import coverage
rc, out, root = sys.argv[1:4]
cov = coverage.Coverage(config_file=rc)
cov.combine()
data = cov.get_data()
lines = {os.path.relpath(f, root): sorted(data.lines(f) or ()) for f in data.measured_files()}
with open(out, "w") as fh:
    json.dump(lines, fh)
"""


def coverage_lines(python: str, tree: Path, spec: TreeSpec, universe: Sequence[str], workdir: Path, *,
                   workers: int, limit: float, env: Mapping[str, str]) -> tuple[dict[str, frozenset[int]], float]:
    """Executed lines per source file (repo-relative), from a plain coverage.py run (module
    docstring), and that run's wall seconds."""
    data = workdir / "coverage"
    data.mkdir(exist_ok=True)
    for old in data.glob(".coverage*"):
        old.unlink()
    rc = workdir / "coveragerc"
    atomic_write_text(rc, f"[run]\nparallel = true\ndata_file = {data / '.coverage'}\n"
                          f"source = {tree / spec.source_root}\npatch = subprocess\n")
    run = run_suite(python, tree, universe, workdir / "coverage.xml", workers=workers, limit=limit, extra_env=env,
                    prefix=("-m", "coverage", "run", f"--rcfile={rc}", "--parallel-mode", "-m"))
    if not list(data.glob(".coverage*")):
        raise TreeError(f"{tree}: the coverage run wrote no data ({run.broken or f'exit {run.exit}'}): {run.tail[-300:]!r}")
    out = workdir / "executed.json"
    proc = subprocess.run([python, "-c", _DUMP, str(rc), str(out), str(tree)], cwd=tree, env=clean_env(env),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise TreeError(f"{tree}: reading coverage data failed: {proc.stderr.strip().splitlines()[-1:]}")
    return read_executed(out), run.wall


def read_executed(path: Path) -> dict[str, frozenset[int]]:
    """The executed-lines file `coverage_lines` wrote."""
    return {k: frozenset(v) for k, v in json.loads(path.read_text()).items()}


__all__ = ["TreeError", "TreeSpec", "collect_candidates", "coverage_lines", "has_own_registry", "make_copy",
           "pythonpath", "read_executed", "registry_seconds", "write_registry"]
