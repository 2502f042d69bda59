"""SGLang-style suites (`ci.adopt.suites`) -> registry entries, one per file.

Rules (`import_suites`):

* a file's tiers are the ``tier_map`` tiers of its suites, in the registry's tier order; a file in
  several suites (or registered in-source and in a run_suite.py) gets one entry with every tier;
* est_time: when its mapped registrations disagree, the **largest** wins, and the entry's
  est_time line says so with every value and where it came from. Why the largest: est_time sizes
  the shards and derives the timeout, so an underestimate makes a shard overrun and a slow but
  healthy file time out, while an overestimate only costs some packing; ``ci durations --write``
  later replaces it with measured times either way;
* a file whose every mapped registration is ``disabled="..."`` is ``status: manual`` with that reason;
* a file only in suites the tier map does not map is ``status: manual`` ("only in suites ...") on
  ``manual_tier``; every unmapped suite is listed in `Imported.unmapped`;
* a test file on disk (the project's roots and patterns) found in neither source is ``status:
  manual`` on ``manual_tier`` with a reason saying so;
* an entry with a GPU tier gets ``timeout: derived_timeout(est_time)`` (or the base's, if larger);
* entries the base registry already has keep their owner, issue, reruns and depends_on; its
  entries for files the import does not produce stay as they are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Mapping

from ci.registry import Registry, Status, TestEntry, derived_timeout, scan_test_tree
from ci.registry.rules import seconds_problem
from ci.registry.writer import entry, number
from ci.imports.scan import read_bytes
from ci.adopt.suites import Registration, Scan, read_registrations, read_run_suite

UNTIMED_EST_TIME = 60  # seconds; SGLang's own TestFile default
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist"}


@dataclass(frozen=True)
class Imported:
    """The registry with the imported entries, the est_time comments to print next to them, the
    unmapped suites (suite -> files), and notes for the user (warnings, choices made)."""

    registry: Registry
    comments: dict[str, str]
    unmapped: dict[str, list[str]]
    notes: list[str]


def scan_sources(root: Path, suite_files: Iterable[Path], test_roots: Iterable[str]) -> Scan:
    """Registrations from each run_suite.py, and from every ``.py`` file under the test roots that
    calls a ``register_*_ci`` function."""
    scan = Scan()
    for file in suite_files:
        scan.extend(read_run_suite(file, root))
    seen: set[str] = set()
    for under in test_roots:
        base = root / under
        for directory, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
            for name in sorted(files):
                if not name.endswith(".py"):
                    continue
                path = Path(directory, name)
                rel = path.relative_to(root).as_posix()
                if rel in seen:
                    continue
                seen.add(rel)
                try:
                    data = read_bytes(os.fspath(path))
                except OSError as exc:  # a FIFO, a device, a file over the bound: never blocks or reads it all
                    scan.warnings.append(f"{rel}: cannot read it ({exc.strerror}); skipped")
                    continue
                if b"register_" in data and b"_ci(" in data:
                    scan.extend(read_registrations(path, rel))
    scan.warnings = list(dict.fromkeys(scan.warnings))  # a run_suite.py under a test root is read twice
    return scan


def _est_time(path: str, regs: list[Registration], notes: list[str]) -> tuple[float, str]:
    """(est_time, comment) from the registrations' times; the largest valid one wins."""
    valid: list[Registration] = []
    for r in regs:
        if r.est_time is None:
            continue
        problem = seconds_problem(r.est_time)
        if problem is not None:
            notes.append(f"{r.where}: est_time {problem}; ignored")
            continue
        valid.append(r)
    if not valid:
        return float(UNTIMED_EST_TIME), f"no time given where registered; {UNTIMED_EST_TIME} s assumed"
    best = max(valid, key=lambda r: r.est_time)
    values = {r.est_time for r in valid}
    if len(values) == 1:
        return best.est_time, ""
    listed = ", ".join(f"{number(r.est_time)} ({r.suite}, {r.where})" for r in sorted(valid, key=lambda r: -r.est_time))
    notes.append(f"{path}: est_time disagrees: {listed}; using {number(best.est_time)}, the largest "
                 f"(est_time sizes shards and the timeout: an underestimate overruns both)")
    return best.est_time, f"largest of {listed}"


def import_suites(root: Path, base: Registry, scan: Scan, tier_map: Mapping[str, list[str]], *,
                  owner: str, manual_tier: str) -> Imported:
    """The registry ``base`` with entries from ``scan`` (see the module docstring).

    Raises ValueError when the tier map or ``manual_tier`` names a tier ``base`` does not define.
    """
    unknown = sorted({t for tiers in tier_map.values() for t in tiers if t not in base.tiers} |
                     ({manual_tier} - base.tiers.keys()))
    if unknown:
        raise ValueError(f"tier(s) {', '.join(unknown)} not defined in {base.path}; define them under 'tiers:' "
                         f"first (known: {', '.join(base.tiers) or 'none'})")
    notes = list(scan.warnings)
    by_path: dict[str, list[Registration]] = {}
    for r in scan.registrations:
        by_path.setdefault(r.path, []).append(r)
    used = {r.suite for r in scan.registrations}
    unmapped: dict[str, list[str]] = {}
    for r in scan.registrations:
        if r.suite not in tier_map:
            unmapped.setdefault(r.suite, [])
            if r.path not in unmapped[r.suite]:
                unmapped[r.suite].append(r.path)
    notes += [f"--tier-map names suite {s!r}, which no run_suite.py or register_*_ci() call uses"
              for s in sorted(set(tier_map) - used)]
    order = list(base.tiers)
    entries: dict[str, TestEntry] = {}
    comments: dict[str, str] = {}
    for path, regs in sorted(by_path.items()):
        if not (root / path).is_file():
            notes.append(f"{path}: registered in {', '.join(r.where for r in regs)} but not a file here; left out")
            continue
        mapped = [r for r in regs if r.suite in tier_map]
        est, comment = _est_time(path, mapped or regs, notes)
        if mapped:
            tiers = tuple(sorted({t for r in mapped for t in tier_map[r.suite]}, key=order.index))
            live = [r for r in mapped if r.disabled is None]
            status, reason = ((Status.ACTIVE, None) if live else
                              (Status.MANUAL, "disabled in source: " + "; ".join(sorted({r.disabled for r in mapped}))))
        else:
            tiers = (manual_tier,)
            status = Status.MANUAL
            reason = f"only in suite(s) {', '.join(sorted({r.suite for r in regs}))}, which --tier-map does not map"
        entries[path] = entry(path, tiers, est, owner, status=status, reason=reason)
        if comment:
            comments[path] = comment
    sources = "no run_suite.py suite" if not scan.registrations else "no suite"
    for path in scan_test_tree(root, base.project).files:
        if path not in entries and path not in by_path:
            entries[path] = entry(path, (manual_tier,), UNTIMED_EST_TIME, owner, status=Status.MANUAL,
                                  reason=f"in {sources} and not registered in-source (register_*_ci); "
                                         f"add it to a suite or give it tiers here")
    tests = dict(base.tests)
    for path, new in sorted(entries.items()):
        old = base.tests.get(path)
        if old is not None:
            new = replace(new, owner=old.owner, issue=old.issue, reruns=old.reruns, depends_on=old.depends_on)
        if base.has_gpu_tier(new):
            kept = old.timeout if old is not None and old.timeout is not None else 0.0
            new = replace(new, timeout=max(float(derived_timeout(new.est_time)), kept))
        tests[path] = new
    registry = base.with_tests(dict(sorted(tests.items())))
    return Imported(registry, comments, unmapped, notes)


__all__ = ["Imported", "UNTIMED_EST_TIME", "import_suites", "scan_sources"]
