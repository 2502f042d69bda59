"""``python -m ci [--root DIR] import-suites [--suites run_suite.py ...] --tier-map SUITE=TIER ...``.

Converts SGLang-style suite definitions into registry entries (`ci.adopt.suites` reads them with `ast`,
never running them; `ci.adopt.suite_import` has the rules) and prints the resulting registry, or writes
it with ``--output FILE`` (atomically, under the registry lock; an existing file only with
``--force``, and never one written or changed by someone else meanwhile). The tiers, project
layout and existing entries come from the repository's registry.yaml when it has one, else from
what ``ci init`` would write (one ``cpu`` tier). A source holding no registration at all is an
error (exit 2), never an empty import. Unmapped suites, disagreeing est_times and every
file that could not be placed are listed on stderr.

In-source registrations are read only from the folders the suite runner reads: ``--registered-in
DIR``, else the folders the ``glob`` calls of the ``--suites`` files or of a ``run_suite.py``
directly in a test root name (`ci.adopt.suite_runner`; SGLang: ``test/registered``), else the
test roots. Suites the workflows run only behind an opt-in label (`ci.adopt.label_gates`, or
``--label-gated GLOB``) stay off per-commit tiers unless ``--include-label-gated``. The output
ends with a summary: where registrations were read, the entry counts, and every per-commit suite
left on no tier with its file count and the flag that would place it. Exit status: 0, or 2 on
bad input.

``--from-make [TARGET ...]`` / ``--from-workflow FILE`` / ``--from-buildkite [DIR]`` read suites
from pytest command lines instead (`ci.adopt.command_suites`: a Makefile target, a workflow job
or a Buildkite step is a suite; a step's source_file_dependencies join its files' depends_on and
its num_devices is checked against the mapped tier's gpu_count); with none of them,
a tree holding no registration falls back to the root Makefile, then the workflows.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from dataclasses import replace
from pathlib import Path

from ci.registry.edit_lock import NotWritten, RegistrySnapshot, cannot_write, write_registry
from ci.registry.writer import PLACEHOLDER_OWNER
from ci.registry import (
    REGISTRY_FILENAME, Registry, RegistryError, RepoRootNotFound, explicit_repo_root, find_repo_root, load_registry,
    parse_registry,
)
from ci.registry.model import yaml_scalar
from ci.registry.writer import render_registry
from ci.adopt.starter import empty_registry
from ci.adopt.import_summary import summary_lines
from ci.adopt.label_gates import label_gated_suites
from ci.adopt.suite_import import import_suites, is_glob, scan_sources, tiers_for
from ci.adopt.suite_args import place_args
from ci.adopt.suite_runner import SourceFolder, runner_folders
from ci.adopt.command_suites import (
    CommandSuites, discover, from_buildkite, from_make, from_workflows, makefile_in, with_depends,
)
from ci.adopt.suites import Scan


def _tier_map(values: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for value in values:
        suite, eq, tier = value.partition("=")
        if not eq or not suite or not tier:
            raise argparse.ArgumentTypeError(f"--tier-map {value!r}: expected SUITE=TIER")
        out.setdefault(suite, [])
        if tier not in out[suite]:
            out[suite].append(tier)
    return out


DEFAULT_WORKFLOWS = Path(".github/workflows")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci import-suites", description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="*", type=Path, default=[], metavar="run_suite.py",
                        help="file(s) defining suites = {name: [TestFile(path, seconds), ...]}")
    parser.add_argument("--tier-map", action="append", default=[], metavar="SUITE=TIER",
                        help="run SUITE's files on TIER (repeatable; a suite may map to several tiers; SUITE may "
                             "be a glob such as 'stage-b-*-1-gpu-large', used for suites with no exact entry)")
    parser.add_argument("--registered-in", action="append", default=[], metavar="DIR",
                        help="read register_*_ci() calls only from the .py files under DIR (repeatable; default: "
                             "the folders the suite runner globs, else the test roots)")
    parser.add_argument("--workflows", type=Path, default=None, metavar="DIR",
                        help="workflow folder read for label-gated suites, relative to the root "
                             "(default .github/workflows)")
    parser.add_argument("--label-gated", action="append", default=[], metavar="GLOB",
                        help="treat suites matching GLOB as label-gated too (repeatable)")
    parser.add_argument("--include-label-gated", action="store_true",
                        help="map label-gated suites onto per-commit tiers like any other suite")
    parser.add_argument("--from-make", nargs="*", default=None, metavar="TARGET",
                        help="suites are these targets of the root Makefile (none named: every target running "
                             "pytest); each file its pytest command collects is in the suite named like the target")
    parser.add_argument("--from-workflow", action="append", default=[], type=Path, metavar="FILE",
                        help="suites are the jobs of this workflow whose run: steps call pytest, named "
                             "<file stem>/<job id> (repeatable)")
    parser.add_argument("--from-buildkite", nargs="?", const=Path(".buildkite/test_areas"), default=None, type=Path,
                        metavar="DIR", help="suites are the steps of the Buildkite step files (*.yaml) in DIR that run "
                                            "pytest, named by key (default DIR: .buildkite/test_areas, vLLM's)")
    parser.add_argument("--step-dir", default="tests", metavar="DIR",
                        help="folder a Buildkite step without working_dir runs in (default tests, as vLLM's)")
    parser.add_argument("--owner", default=PLACEHOLDER_OWNER, help=f"owner of new entries (default {PLACEHOLDER_OWNER})")
    parser.add_argument("--manual-tier", default=None,
                        help="tier of manual entries (default: cpu if defined, else the first tier)")
    parser.add_argument("--output", type=Path, default=None, help="write the registry here instead of stdout")
    parser.add_argument("--force", action="store_true", help="overwrite --output if it exists")
    return parser


def _base(root: Path) -> Registry:
    """The repository's registry, or the one ``ci init`` would write, without its tests."""
    file = root / REGISTRY_FILENAME
    return load_registry(file) if file.exists() else empty_registry(root)


def _read_from(root: Path, args: argparse.Namespace, base: Registry) -> tuple[list[SourceFolder], list[str]]:
    """The folders to read registrations from, and notes on how they were found."""
    if args.registered_in:
        return [SourceFolder(d.strip("/") or ".", "*.py", "--registered-in") for d in args.registered_in], []
    runners = [f.resolve() for f in args.suites]
    runners += [p for p in (root / r / "run_suite.py" for r in base.project.test_roots)
                if p.is_file() and p.resolve() not in runners]
    folders: list[SourceFolder] = []
    notes: list[str] = []
    for runner in runners:
        found = runner_folders(root, runner)
        folders += [f for f in found.folders if f not in folders]
        notes += found.notes
    if not folders:
        folders = [SourceFolder(r, "*.py", "test root") for r in base.project.test_roots]
    return folders, notes


def _gates(root: Path, args: argparse.Namespace, suites: set[str]) -> dict[str, str]:
    """suite -> the label that gates it, for the suites kept off per-commit tiers."""
    if args.include_label_gated:
        return {}
    workflows = root / (args.workflows or DEFAULT_WORKFLOWS)
    gates = {suite: gate.describe() for suite, gate in label_gated_suites(workflows, suites).items()}
    for pattern in args.label_gated:
        for suite in suites:
            if suite not in gates and (fnmatch.fnmatchcase(suite, pattern) if is_glob(pattern) else suite == pattern):
                gates[suite] = f"--label-gated {pattern}"
    return gates


def _from_commands(root: Path, args: argparse.Namespace) -> CommandSuites | None:
    """The suites of ``--from-make`` / ``--from-workflow``, or None when neither is given."""
    if args.from_make is None and not args.from_workflow and args.from_buildkite is None:
        return None
    found = CommandSuites(Scan(), "")
    if args.from_buildkite is not None:
        steps = sorted(p for p in (root / args.from_buildkite).glob("*.y*ml") if p.is_file())
        found.absorb(from_buildkite(root, steps, args.step_dir.strip("/") or "."))
    if args.from_make is not None:
        found.absorb(from_make(root, makefile_in(root) or root / "Makefile", args.from_make))
    if args.from_workflow:
        found.absorb(from_workflows(root, [root / f for f in args.from_workflow]))
    return found


def _device_notes(commands: CommandSuites, tier_map: dict[str, list[str]], registry: Registry) -> list[str]:
    """A note per suite mapped to a tier whose gpu_count is not the GPU count its step asks for."""
    notes = []
    for suite, devices in sorted(commands.devices.items()):
        for tier in tiers_for(suite, tier_map):
            if tier in registry.tiers and registry.tiers[tier].gpu_count != devices:
                notes.append(f"suite {suite!r} asks for {devices} device(s) (num_devices) and tier {tier!r} has "
                             f"gpu_count {registry.tiers[tier].gpu_count}")
    return notes


def _env_notes(commands: CommandSuites, tier_map: dict[str, list[str]], registry: Registry) -> list[str]:
    """A note per (suite, tier) where the suite's command sets a variable (``VAR=x pytest``) that
    the tier's ``env:`` does not set to that value: its tests would run without it."""
    notes = []
    for suite, env in sorted(commands.env.items()):
        for tier in tiers_for(suite, tier_map):
            missing = {n: v for n, v in env.items() if tier in registry.tiers and registry.tiers[tier].env.get(n) != v[0]}
            if missing:
                flow = ", ".join(f"{n}: {yaml_scalar(v)}" for n, (v, _) in missing.items())
                notes.append(f"suite {suite!r} runs pytest with {' '.join(f'{n}={v}' for n, (v, _) in missing.items())} "
                             f"({next(iter(missing.values()))[1]}), which tier {tier!r} does not set: its tests would "
                             f"run without it; give the tier env: {{{flow}}}")
    return notes


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        tier_map = _tier_map(args.tier_map)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    root = explicit_repo_root()
    if root is None:
        try:
            root = find_repo_root()
        except RepoRootNotFound:
            root = Path.cwd().resolve()
    missing = [f"{f} ({'not a regular file' if f.exists() else 'no such file'})" for f in args.suites
               if not f.is_file()]
    missing += [f"--registered-in {d} (no such folder under {root})" for d in args.registered_in
                if not (root / d).is_dir()]
    missing += [f"--from-workflow {f} (no such file under {root})" for f in args.from_workflow
                if not (root / f).is_file()]
    if args.from_buildkite is not None and not (root / args.from_buildkite).is_dir():
        missing.append(f"--from-buildkite {args.from_buildkite} (no such folder under {root})")
    if args.from_make is not None and makefile_in(root) is None:
        missing.append(f"--from-make (no Makefile at {root})")
    if args.workflows is not None and not (root / args.workflows).is_dir():
        missing.append(f"--workflows {args.workflows} (no such folder under {root})")
    if missing:
        print(f"python -m ci import-suites: cannot read: {', '.join(missing)}", file=sys.stderr)
        return 2
    snapshot = None
    if args.output is not None:
        try:
            snapshot = RegistrySnapshot.take(args.output)  # what --force replaces, or that there is nothing
        except OSError as exc:
            print(f"python -m ci import-suites: {args.output}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        if snapshot.digest is not None and not args.force:
            print(f"python -m ci import-suites: {args.output} exists; not overwriting it (--force replaces it)",
                  file=sys.stderr)
            return 2
    try:
        base = _base(root)
        manual_tier = args.manual_tier or ("cpu" if "cpu" in base.tiers else next(iter(base.tiers), "cpu"))
        commands = _from_commands(root, args)
        if commands is None:
            folders, runner_notes = _read_from(root, args, base)
            scan = scan_sources(root, [f.resolve() for f in args.suites], folders)
            scan.warnings = list(dict.fromkeys(runner_notes + scan.warnings))  # a runner given as --suites: once
            if not scan.registrations and not args.suites and not args.registered_in:
                commands = discover(root, root / (args.workflows or DEFAULT_WORKFLOWS))
        if commands is not None:
            folders, scan = [SourceFolder(".", "*.py", commands.source)], commands.scan
        gates = _gates(root, args, {r.suite for r in scan.registrations})
        imported = import_suites(root, base, scan, tier_map, owner=args.owner, manual_tier=manual_tier,
                                 label_gated=gates, read_from=[f.folder for f in folders])
        if commands is not None:
            placed = place_args(with_depends(imported.registry, scan, commands.depends), commands.file_filters, tier_map)
            imported = replace(imported, registry=placed.registry)
            imported.notes.extend(placed.notes)
            imported.notes[:0] = [f"suites read from the pytest command lines of {commands.source}"]
            imported.notes.extend(_device_notes(commands, tier_map, imported.registry))
            imported.notes.extend(_env_notes(commands, tier_map, imported.registry))
        if not scan.registrations:
            for warning in scan.warnings:
                print(f"warning: {warning}", file=sys.stderr)
            where = ", ".join(f.as_posix() for f in args.suites) or "no --suites file"
            print(f"python -m ci import-suites: found no suite registration ({where}; no register_*_ci() call "
                  f"under {', '.join(f.folder for f in folders)}); nothing imported", file=sys.stderr)
            return 2
    except (RegistryError, ValueError, OSError) as exc:
        print(f"python -m ci import-suites: {exc}", file=sys.stderr)
        return 2
    text = render_registry(imported.registry, est_time_comments=imported.comments,
                           header="Imported by `python -m ci import-suites`; check it with `python -m ci lint`.")
    registry, problems = parse_registry(text, REGISTRY_FILENAME)
    if registry is None:  # a bug here, never the user's: refuse to emit a registry that does not load
        print("python -m ci import-suites: the result does not parse:\n" + "\n".join(map(str, problems)),
              file=sys.stderr)
        return 2
    for note in imported.notes:
        print(f"note: {note}", file=sys.stderr)
    for suite, files in sorted(imported.unmapped.items()):
        print(f"unmapped suite {suite!r} ({len(files)} file(s), e.g. {files[0]}): add --tier-map {suite}=<tier>",
              file=sys.stderr)
    counts = {s.value: sum(1 for e in registry.tests.values() if e.status is s) for s in {e.status for e in registry.tests.values()}}
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    closing = summary_lines(folders, imported.left_out, include_label_gated=args.include_label_gated)
    if commands is not None:
        closing[0] = f"summary: suites read from {commands.source}: " + ", ".join(
            f"{suite} ({n} file(s))" for suite, n in commands.files.items())
        if commands.optional:
            closing.insert(1, f"summary: {len(commands.optional)} optional step(s) (run only when unblocked), imported "
                              f"like the rest: {', '.join(commands.optional[:5])}{' ...' if len(commands.optional) > 5 else ''}")
        closing[1:1] = [f"summary: suite {suite!r} selects within its files with {'; '.join(f)}: "
                        + (f"pytest_args of {placed.carried[suite]}" if suite in placed.carried
                           else "not carried (its files run whole, see the notes)") for suite, f in commands.filters.items()]
    if snapshot is None:  # no --output: stdout is the registry alone
        sys.stdout.write(text)
        print(f"import-suites: {len(registry.tests)} entries ({summary})", file=sys.stderr)
        print("\n".join(closing), file=sys.stderr)
    else:
        try:
            write_registry(snapshot, text, on_wait=lambda line: print(f"python -m ci import-suites: {line}",
                                                                    file=sys.stderr, flush=True))
        except (OSError, NotWritten) as exc:
            print(f"python -m ci import-suites: {cannot_write(args.output, exc)}", file=sys.stderr)
            return 2
        sys.stderr.flush()  # the notes before the summary, also where both streams share a terminal
        print(f"wrote {args.output}: {len(registry.tests)} entries ({summary})")
        print("\n".join(closing))
    return 0
