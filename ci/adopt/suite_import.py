"""SGLang-style suites (`ci.adopt.suites`) -> registry entries, one per file.

Rules (`import_suites`):

* a suite's tiers are its ``tier_map`` entry, else those of every glob entry matching it
  (``stage-b-*-1-gpu-large``); a file's tiers are its suites' tiers, in the registry's tier order;
  a file in several suites (or registered in-source and in a run_suite.py) gets one entry with
  every tier;
* registrations are read only from the folders the suite runner reads (`ci.adopt.suite_runner`;
  SGLang: ``test/registered/``), so a parked test under ``test/manual/`` stays manual;
* a label-gated suite (`ci.adopt.label_gates`; SGLang's ``extra-*``) never lands on a per-commit
  tier unless ``include_label_gated``: a pull request runs it only when a label opts in;
* a registration runs only on tiers of its own backend (``register_amd_ci`` never lands on a CUDA
  tier: `ci.registry.Tier.backend`), and a nightly or weekly one (``nightly=True``, or a suite
  named ``nightly-...`` / ``weekly-...``) only on a ``schedule: nightly`` tier; every refused
  suite -> tier pair is a note with its file count;
* est_time: when its mapped registrations disagree, the **largest** wins, and the entry's
  est_time line says so with every value and where it came from. Why the largest: est_time sizes
  the shards and derives the timeout, so an underestimate makes a shard overrun and a slow but
  healthy file time out, while an overestimate only costs some packing; ``ci durations --write``
  later replaces it with measured times either way;
* tiers come from the registrations that are not ``disabled="..."``; a file whose every mapped
  registration is disabled is ``status: manual`` with those reasons;
* a file only in suites the tier map does not map is ``status: manual`` ("only in suites ...") on
  ``manual_tier``; every unmapped suite is listed in `Imported.unmapped`;
* a test file on disk (the project's roots and patterns) found in neither source is ``status:
  manual`` on ``manual_tier`` with a reason saying so;
* an entry with a GPU tier gets ``timeout: derived_timeout(est_time)`` (or the base's, if larger);
* entries the base registry already has keep their owner, issue, reruns and depends_on; its
  entries for files the import does not produce stay as they are.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Mapping

from ci.registry import (
    NIGHTLY, Registry, Status, TestEntry, Tier, derived_timeout, path_is_under, scan_test_tree,
)
from ci.registry.rules import seconds_problem
from ci.registry.writer import entry, number
from ci.imports.scan import read_bytes
from ci.adopt.suites import Registration, Scan, read_registrations, read_run_suite
from ci.adopt.suite_runner import SourceFolder

UNTIMED_EST_TIME = 60  # seconds; SGLang's own TestFile default
_SKIP_DIRS = {"__pycache__", "node_modules", "site-packages", "build", "dist"}


@dataclass(frozen=True)
class LeftOut:
    """A per-commit ``suite`` whose ``files`` run on no tier: ``why``, and the ``flag`` that would place them."""

    suite: str
    files: int
    why: str
    flag: str


@dataclass(frozen=True)
class Imported:
    """The registry with the imported entries, the est_time comments to print next to them, the
    unmapped suites (suite -> files), notes for the user (warnings, choices made), and every
    per-commit suite left on no tier (`LeftOut`, for the closing summary)."""

    registry: Registry
    comments: dict[str, str]
    unmapped: dict[str, list[str]]
    notes: list[str]
    left_out: list[LeftOut] = field(default_factory=list)


def scan_sources(root: Path, suite_files: Iterable[Path], folders: Iterable[SourceFolder]) -> Scan:
    """Registrations from each run_suite.py, and from every file under ``folders`` (matching its
    pattern) that calls a ``register_*_ci`` function."""
    scan = Scan()
    for file in suite_files:
        scan.extend(read_run_suite(file, root))
    seen: set[str] = set()
    for source in folders:
        base = root / source.folder
        for directory, dirs, files in os.walk(base):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS)
            for name in sorted(files):
                if not name.endswith(".py") or not fnmatch.fnmatchcase(name, source.pattern):
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


def is_glob(pattern: str) -> bool:
    """True for a ``--tier-map`` suite pattern with wildcards (``stage-b-*-1-gpu-large``)."""
    return any(c in pattern for c in "*?[")


def tiers_for(suite: str, tier_map: Mapping[str, list[str]]) -> list[str]:
    """The tiers ``suite`` maps to: its exact entry, else those of every glob entry matching it."""
    if suite in tier_map:
        return list(tier_map[suite])
    out: list[str] = []
    for pattern, tiers in tier_map.items():
        if is_glob(pattern) and fnmatch.fnmatchcase(suite, pattern):
            out += [t for t in tiers if t not in out]
    return out


# The backend (`ci.registry.BACKENDS`) of each ``register_<name>_ci`` name: SGLang's amd, cuda, npu,
# xpu and cpu, and the vendors' other names for them. A name not here (SGLang's mlx and musa) is
# no tier's backend, so its registrations land on no tier.
REGISTRATION_BACKENDS = {
    "cuda": "cuda", "nvidia": "cuda", "amd": "rocm", "rocm": "rocm", "hip": "rocm", "xpu": "xpu", "intel": "xpu",
    "npu": "npu", "ascend": "npu", "tpu": "tpu", "cpu": "cpu",
}


def registration_backend(name: str) -> str | None:
    """The backend a ``register_<name>_ci`` call is for (``amd`` -> ``rocm``); None if none is."""
    return REGISTRATION_BACKENDS.get(name)


def _refusal(r: Registration, tier: Tier, gate: str | None) -> str | None:
    """Why registration ``r`` may not run on ``tier`` (None: it may); ``gate`` says which label
    opts its suite in, when it is label-gated and not included."""
    if r.backend is not None and registration_backend(r.backend) != tier.backend:
        return (f"{r.how} is for {r.backend} machines and tier {tier.name!r} is a {tier.backend} tier "
                f"(arch {tier.arch}); a suite runs on its own backend")
    if r.cadence != "per-commit" and tier.schedule != NIGHTLY:
        why = "nightly=True" if r.nightly else f"a suite named {r.cadence}-..."
        return (f"{r.cadence} registrations ({why}) would run on every commit on tier {tier.name!r} "
                f"(schedule {tier.schedule}); map the suite to a 'schedule: nightly' tier")
    if gate is not None and tier.schedule != NIGHTLY:
        return (f"the suite is label-gated (pull requests run it only with {gate}) and tier {tier.name!r} runs on "
                f"every commit; --include-label-gated maps it anyway")
    return None


def import_suites(root: Path, base: Registry, scan: Scan, tier_map: Mapping[str, list[str]], *,
                  owner: str, manual_tier: str, label_gated: Mapping[str, str] | None = None,
                  read_from: Iterable[str] = ()) -> Imported:
    """The registry ``base`` with entries from ``scan`` (see the module docstring). ``label_gated``:
    suite -> the label (and workflow) that opts a pull request into it, for the suites kept off
    per-commit tiers (leave out the ones ``--include-label-gated`` maps). ``read_from``: the folders
    registrations were read from, named in the reason of a test file outside them.

    Raises ValueError when the tier map or ``manual_tier`` names a tier ``base`` does not define.
    """
    unknown = sorted({t for tiers in tier_map.values() for t in tiers if t not in base.tiers} |
                     ({manual_tier} - base.tiers.keys()))
    if unknown:
        raise ValueError(f"tier(s) {', '.join(unknown)} not defined in {base.path}; define them under 'tiers:' "
                         f"first (known: {', '.join(base.tiers) or 'none'})")
    notes = list(scan.warnings)
    gated = dict(label_gated or {})
    by_path: dict[str, list[Registration]] = {}
    for r in scan.registrations:
        by_path.setdefault(r.path, []).append(r)
    used = {r.suite for r in scan.registrations}
    suite_tiers = {suite: tiers_for(suite, tier_map) for suite in used}
    unmapped: dict[str, list[str]] = {}
    placed: dict[int, list[str]] = {}  # id(registration) -> the tiers it may run on
    refused: dict[tuple[str, str], tuple[str, set[str]]] = {}  # (suite, tier) -> (why, files)
    for r in scan.registrations:
        tiers = suite_tiers[r.suite]
        if not tiers:
            unmapped.setdefault(r.suite, [])
            if r.path not in unmapped[r.suite]:
                unmapped[r.suite].append(r.path)
        placed[id(r)] = []
        for tier in tiers:
            why = _refusal(r, base.tiers[tier], gated.get(r.suite))
            if why is None:
                placed[id(r)].append(tier)
            else:
                refused.setdefault((r.suite, tier), (why, set()))[1].add(r.path)
    for (suite, tier), (why, files) in sorted(refused.items()):
        notes.append(f"suite {suite!r} -> tier {tier!r} refused for {len(files)} file(s) (e.g. {min(files)}): {why}")
    for pattern in sorted(tier_map):
        if is_glob(pattern) and not any(fnmatch.fnmatchcase(suite, pattern) for suite in used):
            notes.append(f"--tier-map pattern {pattern!r} matches no suite of any run_suite.py or register_*_ci() call")
        elif not is_glob(pattern) and pattern not in used:
            notes.append(f"--tier-map names suite {pattern!r}, which no run_suite.py or register_*_ci() call uses")
    order = list(base.tiers)
    entries: dict[str, TestEntry] = {}
    comments: dict[str, str] = {}
    for path, regs in sorted(by_path.items()):
        if not (root / path).is_file():
            notes.append(f"{path}: registered in {', '.join(r.where for r in regs)} but not a file here; left out")
            continue
        mapped = [r for r in regs if placed[id(r)]]
        live = [r for r in mapped if r.disabled is None]
        est, comment = _est_time(path, live or mapped or regs, notes)
        if live:
            tiers = tuple(sorted({t for r in live for t in placed[id(r)]}, key=order.index))
            status, reason = Status.ACTIVE, None
        elif mapped:
            tiers = tuple(sorted({t for r in mapped for t in placed[id(r)]}, key=order.index))
            status = Status.MANUAL
            reason = "disabled in source: " + "; ".join(sorted({r.disabled for r in mapped if r.disabled}))
        else:
            tiers, status = (manual_tier,), Status.MANUAL
            suites = ", ".join(sorted({r.suite for r in regs}))
            if any(r.suite in gated for r in regs if suite_tiers[r.suite]):
                reason = (f"only in label-gated suite(s) {suites}, kept off per-commit tiers "
                          f"(--include-label-gated maps them)")
            elif any(suite_tiers[r.suite] for r in regs):
                reason = f"its suite(s) {suites} map only to tiers of another backend or schedule (see the notes)"
            else:
                reason = f"only in suite(s) {suites}, which --tier-map does not map"
        entries[path] = entry(path, tiers, est, owner, status=status, reason=reason)
        if comment:
            comments[path] = comment
    sources = "no run_suite.py suite" if not scan.registrations else "no suite"
    folders = [f for f in read_from if f != "."]
    for path in scan_test_tree(root, base.project).files:
        if path not in entries and path not in by_path:
            if folders and not any(path_is_under(path, f) for f in folders):
                reason = (f"not under {', '.join(folders)}, where the suite runner reads registrations; "
                          f"it never runs there (move it, or give it tiers here)")
            else:
                reason = (f"in {sources} and not registered in-source (register_*_ci); "
                          f"add it to a suite or give it tiers here")
            entries[path] = entry(path, (manual_tier,), UNTIMED_EST_TIME, owner, status=Status.MANUAL, reason=reason)
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
    return Imported(registry, comments, unmapped, notes, _left_out(scan, suite_tiers, placed, gated))


def _left_out(scan: Scan, suite_tiers: Mapping[str, list[str]], placed: Mapping[int, list[str]],
              gated: Mapping[str, str]) -> list[LeftOut]:
    """Every per-commit suite none of whose registrations landed on a tier, with why and the flag.
    A suite name registered for several backends is one suite per backend (SGLang's runner selects
    by both), named ``suite (backend)``."""
    regs: dict[tuple[str, str], list[Registration]] = {}
    for r in scan.registrations:
        if r.cadence == "per-commit":
            regs.setdefault((r.suite, r.backend or ""), []).append(r)
    shared = {suite for suite, _ in regs if sum(1 for s, _ in regs if s == suite) > 1}
    out: list[LeftOut] = []
    for (suite, backend), rs in sorted(regs.items()):
        if any(placed[id(r)] for r in rs):
            continue
        files = len({r.path for r in rs})
        name = f"{suite} ({backend})" if suite in shared and backend else suite
        kind = f"{backend} tier" if backend else "tier"
        if not suite_tiers[suite]:
            out.append(LeftOut(name, files, "no --tier-map matches it", f"--tier-map '{suite}=<{kind}>'"))
        elif suite in gated:
            out.append(LeftOut(name, files, f"label-gated: {gated[suite]}", "--include-label-gated"))
        else:
            out.append(LeftOut(name, files, "its tiers are of another backend or schedule",
                               f"--tier-map '{suite}=<{kind}>'"))
    return out


__all__ = ["Imported", "LeftOut", "UNTIMED_EST_TIME", "import_suites", "is_glob", "scan_sources", "tiers_for"]
