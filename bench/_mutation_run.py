"""Running a tree's test suite once and reading which test files failed, for ``bench mutation``.

Contract:
- `run_suite` runs ``PY -m pytest`` in the tree on the given files with xdist (``-n``), a JUnit
  report (``junit_family=xunit1``, so each case names its file), ``--continue-on-collection-errors``
  (without it one file that fails to import stops the whole run) and a wall-clock limit. The
  cache plugin stays on (a tree's tests may use the ``cache`` fixture: with ``-p no:cacheprovider``
  pytest's ``test_legacypath.py::test_cache_makedir`` errors at setup, and the file left the universe);
  the process group is killed at the limit. The environment is this process's without
  ``PYTEST_ADDOPTS``, ``CI_DEPMAP*`` and ``COVERAGE_*``, plus ``extra_env``.
- `failing_files` reads that report with `ci.results.junit.parse_junit` (the one JUnit parser): a
  test file fails when any attempt of any of its cases failed or errored, teardown errors and
  collection errors included. It returns None for a report that is missing or unreadable.
- `SuiteRun.failing` is None when the run gave no usable verdict: the limit was hit, pytest
  exited 2, 3, 4 or 5 (interrupted, internal error, usage error, nothing collected: the universe
  always holds tests), or the JUnit is missing or unreadable; ``broken`` says which. The report keeps such a run
  out of the failing pairs and lists it (`bench._mutation_report`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ci.results.junit import ERROR, FAILED, CaseResult, JUnitError, JUnitReport, parse_junit

_NO_VERDICT = {2: "pytest was interrupted (exit 2)", 3: "pytest hit an internal error (exit 3)",
               4: "pytest was misused (exit 4)", 5: "pytest collected no tests (exit 5)"}


@dataclass(frozen=True)
class SuiteRun:
    """One suite run: ``failing`` test files (None: no usable verdict, see ``broken``),
    per-file summed test ``durations`` in seconds, ``wall`` seconds, pytest's ``exit`` status."""

    failing: frozenset[str] | None
    durations: Mapping[str, float]
    wall: float
    exit: int | None
    broken: str = ""
    tail: str = ""


def read_report(junit: Path, root: Path, known: Iterable[str]) -> JUnitReport | None:
    """One pytest JUnit report, parsed; None when it is missing or not readable JUnit."""
    if not junit.is_file():
        return None
    try:
        return parse_junit(junit, root=root, known_files=known)
    except JUnitError:
        return None


def case_failed(case: CaseResult) -> bool:
    """Any attempt of the case failed or errored (teardown and collection errors included)."""
    return case.outcome in (FAILED, ERROR) or any(a.outcome in (FAILED, ERROR) for a in case.attempts)


def failing_files(junit: Path, root: Path, known: Iterable[str]) -> tuple[frozenset[str], dict[str, float]] | None:
    """Failing test files and per-file durations of one pytest JUnit report; None when the report
    is missing or not readable JUnit."""
    report = read_report(junit, root, known)
    if report is None:
        return None
    return frozenset(case.file for case in report.cases if case_failed(case)), {f: r.time for f, r in report.files.items()}


def clean_env(extra_env: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without what would steer pytest or coverage, plus ``extra_env``."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CI_DEPMAP", "COVERAGE_")) and k != "PYTEST_ADDOPTS"}
    env.update(extra_env)
    return env


def run_suite(python: str, tree: Path, files: Sequence[str], junit: Path, *, workers: int, limit: float,
              extra_env: Mapping[str, str], plugin_args: Sequence[str] = (), prefix: Sequence[str] = ()) -> SuiteRun:
    """See the module docstring. ``prefix`` goes before ``-m pytest`` (``-m coverage run ...``)."""
    if junit.exists():
        junit.unlink()
    # -p no:slipcover: slipcover's own pytest plugin, where slipcover is installed for the recorder's
    # core, would load in every run of the tree (the recorder imports what it needs itself)
    argv = [python, *(prefix or ("-m",)), "pytest", "-p", "no:slipcover", *plugin_args, "-n", str(workers),
            "-q", "--continue-on-collection-errors", "-o", "junit_family=xunit1", f"--junitxml={junit}", *files]
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=tree, env=clean_env(extra_env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return SuiteRun(None, {}, time.monotonic() - start, None, f"timed out after {limit:.0f} s",
                        _tail(out))
    wall = time.monotonic() - start
    tail = _tail(out)
    if proc.returncode in _NO_VERDICT:
        return SuiteRun(None, {}, wall, proc.returncode, _NO_VERDICT[proc.returncode], tail)
    read = failing_files(junit, tree, files)
    if read is None:
        return SuiteRun(None, {}, wall, proc.returncode, f"no usable JUnit report (exit {proc.returncode})", tail)
    return SuiteRun(read[0], read[1], wall, proc.returncode, "", tail)


def _tail(out: bytes | None, chars: int = 2000) -> str:
    return (out or b"").decode("utf-8", "replace")[-chars:]


def drop_bytecode(path: Path) -> None:
    """Remove the cached bytecode of the module ``path``: a same-size rewrite within the same
    second as the original would otherwise pass the .pyc's mtime + size check and run stale code."""
    cache = path.parent / "__pycache__"
    if cache.is_dir():
        for pyc in cache.glob(f"{path.stem}.*.pyc"):
            pyc.unlink(missing_ok=True)


__all__ = ["SuiteRun", "case_failed", "clean_env", "drop_bytecode", "failing_files", "read_report", "run_suite"]
