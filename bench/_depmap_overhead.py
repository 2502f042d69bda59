"""What recording a dependency map costs, part by part: the overhead half of ``bench depmap``.

Every measurement is one pytest over a list of files (``-n WORKERS``, 0 by default: one process,
so a tracer's cost is not hidden by idle workers), run by `run_pytest`; its cost is the CPU time (user + system) of pytest and every process it waited for,
which on a shared machine swings much less than wall time. `compare` runs each `Mode` ``repeat``
times, the modes alternating within each round so that a change in the machine's load hits all of
them alike, and keeps each mode's best; every ratio is against the baseline (no recording) of the
same call. `audit_events` counts the audit events the pytest process raises while recording:
each is one call of every Python audit hook, the recorder's "open" hook included.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench._depmap_audit import COUNTS_ENV
from ci.observe.options import CORE_ENV, MEASURE_ENV


@dataclass(frozen=True)
class Mode:
    """One way to run the files: ``record`` False is the baseline; ``env`` picks parts and core."""

    label: str
    record: bool
    env: dict[str, str] = field(default_factory=dict)


BASELINE = Mode("no recording (baseline)", False)
FULL_CTRACE = Mode("recording: everything, ctrace core", True, {CORE_ENV: "ctrace"})
FULL_SLIPCOVER = Mode("recording: everything, slipcover core (default)", True, {CORE_ENV: "slipcover"})
BREAKDOWN = (
    BASELINE,
    Mode("audit hook only (opened)", True, {MEASURE_ENV: "opened"}),
    Mode("ctrace lines only (no hook, no subprocesses)", True, {CORE_ENV: "ctrace", MEASURE_ENV: "lines"}),
    Mode("ctrace lines + audit hook (no subprocesses)", True, {CORE_ENV: "ctrace", MEASURE_ENV: "lines,opened"}),
    FULL_CTRACE,
    Mode("slipcover lines + audit hook (no subprocesses)", True, {CORE_ENV: "slipcover", MEASURE_ENV: "lines,opened"}),
    FULL_SLIPCOVER,
)


@dataclass(frozen=True)
class Measured:
    """A mode's best wall and CPU seconds over its runs, and the exit codes pytest gave."""

    mode: Mode
    wall: float
    cpu: float
    codes: frozenset[int]


def plain_env(extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without any recording's variables or PYTEST_ADDOPTS, plus ``extra_env``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CI_DEPMAP", "COVERAGE_"))}
    env.pop("PYTEST_ADDOPTS", None)
    env.update(extra_env or {})
    return env


def run_argv(argv: list[str], cwd: Path, log: Path | None, env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system of the process and every descendant waited for),
    exit status of ``argv`` run in ``cwd`` (``env``: `plain_env` by default); its output goes to
    ``log`` (discarded when None)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    if log is None:
        proc = subprocess.run(argv, cwd=cwd, env=env or plain_env(), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    else:
        with open(log, "w", encoding="utf-8") as out:
            proc = subprocess.run(argv, cwd=cwd, env=env or plain_env(), stdout=out, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.returncode


def run_pytest(root: Path, files: list[str], record: Path | None, extra_env: dict[str, str] | None = None,
               plugins: tuple[str, ...] = (), workers: int = 0, log: Path | None = None) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system of pytest and every process it waited for), exit
    status; ``log``: where pytest's output goes (discarded by default)."""
    env = plain_env({"CI_DEPMAP": str(record)} if record is not None else None)
    env.update(extra_env or {})
    argv = [sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", *(a for p in plugins for a in ("-p", p)),
            "--tier", "cpu", "-n", str(workers), "-q", "-p", "no:cacheprovider", *files]
    return run_argv(argv, root, log, env)


def compare(root: Path, files: list[str], modes: tuple[Mode, ...], repeat: int, out: Path,
            workers: int = 0, logs: Path | None = None) -> list[Measured]:
    """See the module docstring; a recording mode writes its map to ``out`` with the mode's index
    before the suffix (``depmap.1.json``), so each mode's map can be read afterwards; ``logs``: a
    folder for each run's pytest output (``<mode index>.<round>.log``)."""
    runs: dict[int, list[tuple[float, float, int]]] = {i: [] for i in range(len(modes))}
    for round_ in range(repeat):
        for i, mode in enumerate(modes):
            record = out.with_suffix(f".{i}{out.suffix}") if mode.record else None
            log = logs / f"{i}.{round_}.log" if logs is not None else None
            runs[i].append(run_pytest(root, files, record, mode.env, workers=workers, log=log))
    return [Measured(mode, min(r[0] for r in runs[i]), min(r[1] for r in runs[i]), frozenset(r[2] for r in runs[i]))
            for i, mode in enumerate(modes)]


def table_rows(measured: list[Measured]) -> list[tuple[object, ...]]:
    """Rows for `bench.table.format_table`: mode, best wall, best CPU, x baseline CPU, exit codes."""
    base = next(m.cpu for m in measured if not m.mode.record)
    return [(m.mode.label, f"{m.wall:.1f}", f"{m.cpu:.2f}", f"{m.cpu / base:.2f}", ",".join(map(str, sorted(m.codes))))
            for m in measured]


def audit_events(root: Path, files: list[str], mode: Mode) -> dict[str, int]:
    """Audit events by name raised in the pytest process of one (untimed) run recording in ``mode``."""
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmp:
        counts = Path(tmp) / "counts.json"
        run_pytest(root, files, Path(tmp) / "map.json", {**mode.env, COUNTS_ENV: str(counts)},
                   plugins=("bench._depmap_audit",))
        return json.loads(counts.read_text(encoding="utf-8")) if counts.is_file() else {}
