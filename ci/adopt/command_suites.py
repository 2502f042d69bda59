"""Suites from pytest command lines: Makefile targets and workflow jobs, as `ci.adopt.suites.Scan`.

A repository without ``register_*_ci`` calls or a run_suite.py often says what its CI runs in a
``make test`` target (Liger-Kernel), a workflow step (``pytest tests/ --ignore=...``) or a
Buildkite step (vLLM). Each target (`ci.adopt.makefile`), job (`ci.adopt.workflow_pytest`) or
step (`ci.adopt.buildkite_steps`: with its ``source_file_dependencies`` for ``depends_on`` and
its ``num_devices``) is a suite; every file its pytest
commands collect (`ci.adopt.pytest_argv.selected_files`) is a `Registration` of it, with no time
(`ci.adopt.suite_import.UNTIMED_EST_TIME` until ``ci durations --write`` measures it). The
``-k`` / ``-m`` / ``--deselect`` / node-id filters select within files: they are listed per suite
in `CommandSuites.filters`, and per (suite, file) in `CommandSuites.file_filters`, which
`ci.adopt.suite_args.place_args` turns into ``pytest_args``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from ci.adopt.buildkite_steps import pytest_steps
from ci.adopt.makefile import pytest_targets
from ci.adopt.pytest_argv import PytestCommand, selected_files
from ci.adopt.suite_args import FileFilter, command_filters
from ci.adopt.suites import Registration, Scan
from ci.adopt.workflow_pytest import pytest_jobs
from ci.registry import Registry

DEFAULT_MAKEFILES = ("Makefile", "makefile", "GNUmakefile")


@dataclass
class CommandSuites:
    """The registrations of every suite, where they came from (``source``, one phrase), each
    suite's within-file filters (suite -> the options as written) and file count."""

    scan: Scan
    source: str
    filters: dict[str, list[str]] = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)
    depends: dict[str, tuple[str, ...]] = field(default_factory=dict)  # suite -> paths whose change runs it
    devices: dict[str, int] = field(default_factory=dict)  # suite -> the GPU count its step asks for
    optional: list[str] = field(default_factory=list)  # suites whose step runs only when unblocked
    file_filters: list[FileFilter] = field(default_factory=list)  # what selects within each (suite, file)
    env: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)  # suite -> NAME -> (value, where)

    def absorb(self, more: CommandSuites) -> None:
        """Add the suites of ``more`` (another source read in the same import) to these."""
        self.scan.extend(more.scan)
        self.source = "; ".join(s for s in (self.source, more.source) if s)
        self.filters.update(more.filters)
        self.files.update(more.files)
        self.depends.update(more.depends)
        self.devices.update(more.devices)
        self.optional += more.optional
        self.file_filters += more.file_filters
        self.env.update(more.env)


def _suites(root: Path, suites: Iterable[tuple[str, list[PytestCommand]]], how: str, source: str) -> CommandSuites:
    out = CommandSuites(Scan(), source)
    for suite, commands in suites:
        paths: list[str] = []
        for command in commands:
            files, problems = selected_files(root, command)
            out.scan.warnings += problems
            out.scan.registrations += [Registration(f, suite, None, command.where, how) for f in files
                                       if f not in paths]
            paths += [f for f in files if f not in paths]
            out.file_filters += [FileFilter(suite, f, args) for f, args in command_filters(command, files)]
            if command.filters:
                out.filters.setdefault(suite, []).append(" ".join(command.filters))
            for word in command.env:
                name, _, value = word.partition("=")
                out.env.setdefault(suite, {}).setdefault(name, (value, command.where))
        out.files[suite] = len(paths)
        if not paths:
            out.scan.warnings.append(f"suite {suite!r} ({commands[0].where}) collects no test file here")
    return out


def makefile_in(root: Path) -> Path | None:
    """The Makefile make would read at ``root``, if any."""
    return next((root / n for n in DEFAULT_MAKEFILES if (root / n).is_file()), None)


def from_make(root: Path, makefile: Path, targets: list[str]) -> CommandSuites:
    """The suites of ``targets`` (all targets running pytest when empty). Raises ValueError
    (`ci.adopt.makefile.MakefileError`, or a target that runs no pytest) or OSError."""
    found = {t.name: t for t in pytest_targets(root, makefile, targets)}
    display = makefile.relative_to(root).as_posix()
    unknown = [t for t in targets if t not in found]
    if unknown:
        raise ValueError(f"{display}: target(s) {', '.join(unknown)} run no pytest command (targets that do: "
                         f"{', '.join(found) or 'none'})")
    chosen = [found[t] for t in targets] if targets else list(found.values())
    return _suites(root, ((t.name, t.commands) for t in chosen), "make",
                   f"{display} target(s) {', '.join(t.name for t in chosen) or '(none)'}")


def from_workflows(root: Path, workflows: list[Path]) -> CommandSuites:
    """The suites of the jobs of ``workflows`` that run pytest. Raises ValueError or OSError."""
    jobs = [job for w in workflows for job in pytest_jobs(root, w)]
    names = ", ".join(w.relative_to(root).as_posix() for w in workflows)
    return _suites(root, ((j.name, j.commands) for j in jobs), "workflow", f"pytest steps of {names}")


def _existing(root: Path, prefix: str) -> list[str]:
    """Repo-relative paths that Buildkite's string-prefix ``prefix`` names: itself when it exists,
    else the entries of its folder whose names start with its last part."""
    prefix = prefix.strip().rstrip("/")
    if not prefix or (root / prefix).exists():
        return [prefix or "."]
    folder, _, start = prefix.rpartition("/")
    base = root / folder if folder else root
    names = sorted(p.name for p in base.iterdir() if p.name.startswith(start)) if base.is_dir() else []
    return [f"{folder}/{n}" if folder else n for n in names]


def from_buildkite(root: Path, files: list[Path], default_dir: str) -> CommandSuites:
    """The suites of the Buildkite steps in ``files`` that run pytest, with each step's
    ``source_file_dependencies`` (as paths that exist here), ``num_devices`` and ``optional``."""
    steps = [step for f in files for step in pytest_steps(root, f, default_dir)]
    names = ", ".join(f.relative_to(root).as_posix() for f in files[:3]) + (" ..." if len(files) > 3 else "")
    out = _suites(root, ((s.name, list(s.commands)) for s in steps), "buildkite",
                  f"{len(steps)} pytest step(s) of {names}")
    for step in steps:
        found = [p for d in step.depends for p in _existing(root, d)]
        lost = [d for d in step.depends if not _existing(root, d)]
        if lost:
            out.scan.warnings.append(f"step {step.name!r}: source_file_dependencies {', '.join(lost)} match nothing "
                                     f"here; left out of depends_on")
        out.depends[step.name] = tuple(dict.fromkeys(out.depends.get(step.name, ()) + tuple(found)))
        if step.devices is not None:
            out.devices[step.name] = step.devices
        if step.optional:
            out.optional.append(step.name)
    return out


def with_depends(registry: Registry, scan: Scan, depends: dict[str, tuple[str, ...]]) -> Registry:
    """``registry`` with each imported file's entry depending on its suites' paths too (what
    Buildkite's ``source_file_dependencies`` say should select it)."""
    extra: dict[str, list[str]] = {}
    for r in scan.registrations:
        extra.setdefault(r.path, []).extend(depends.get(r.suite, ()))
    tests = dict(registry.tests)
    for path, paths in extra.items():
        entry = tests.get(path)
        if entry is not None and paths:
            tests[path] = replace(entry, depends_on=tuple(dict.fromkeys(entry.depends_on + tuple(paths))))
    return registry.with_tests(tests)


def discover(root: Path, workflows: Path) -> CommandSuites | None:
    """With no suite registration in the tree: the root Makefile's pytest targets, else the pytest
    steps of the workflows under ``workflows``; None when neither runs pytest."""
    makefile = makefile_in(root)
    if makefile is not None:
        found = from_make(root, makefile, [])
        if found.scan.registrations:
            return found
    files = sorted(p for p in workflows.glob("*.y*ml") if p.is_file()) if workflows.is_dir() else []
    found = from_workflows(root, files) if files else None
    return found if found is not None and found.scan.registrations else None


__all__ = ["CommandSuites", "discover", "from_buildkite", "from_make", "from_workflows", "makefile_in", "with_depends"]
