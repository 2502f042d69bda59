"""``python -m ci [--root DIR] import-suites [--suites run_suite.py ...] --tier-map SUITE=TIER ...``.

Converts SGLang-style suite definitions into registry entries (`ci.adopt.suites` reads them with `ast`,
never running them; `ci.adopt.suite_import` has the rules) and prints the resulting registry, or writes
it with ``--output FILE`` (atomically, under the registry lock; an existing file only with
``--force``, and never one written or changed by someone else meanwhile). The tiers, project
layout and existing entries come from the repository's registry.yaml when it has one, else from
what ``ci init`` would write (one ``cpu`` tier). A source holding no registration at all is an
error (exit 2), never an empty import. Unmapped suites, disagreeing est_times and every
file that could not be placed are listed on stderr. Exit status: 0, or 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ci.registry.edit_lock import RegistryChanged, RegistrySnapshot, cannot_write, write_registry
from ci.registry.writer import PLACEHOLDER_OWNER
from ci.registry import (
    REGISTRY_FILENAME, Registry, RegistryError, RepoRootNotFound, explicit_repo_root, find_repo_root, load_registry,
    parse_registry,
)
from ci.registry.writer import render_registry
from ci.adopt.starter import empty_registry
from ci.adopt.suite_import import import_suites, scan_sources


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci import-suites", description=__doc__.splitlines()[0])
    parser.add_argument("--suites", nargs="*", type=Path, default=[], metavar="run_suite.py",
                        help="file(s) defining suites = {name: [TestFile(path, seconds), ...]}")
    parser.add_argument("--tier-map", action="append", default=[], metavar="SUITE=TIER",
                        help="run SUITE's files on TIER (repeatable; a suite may map to several tiers; SUITE may "
                             "be a glob such as 'stage-b-*-1-gpu-large', used for suites with no exact entry)")
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
        scan = scan_sources(root, [f.resolve() for f in args.suites], base.project.test_roots)
        imported = import_suites(root, base, scan, tier_map, owner=args.owner, manual_tier=manual_tier)
        if not scan.registrations:
            for warning in scan.warnings:
                print(f"warning: {warning}", file=sys.stderr)
            where = ", ".join(f.as_posix() for f in args.suites) or "no --suites file"
            print(f"python -m ci import-suites: found no suite registration ({where}; no register_*_ci() call "
                  f"under {', '.join(base.project.test_roots)}); nothing imported", file=sys.stderr)
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
    if snapshot is None:  # no --output
        sys.stdout.write(text)
        print(f"import-suites: {len(registry.tests)} entries ({summary})", file=sys.stderr)
    else:
        try:
            write_registry(snapshot, text)
        except (OSError, RegistryChanged) as exc:
            print(f"python -m ci import-suites: {cannot_write(args.output, exc)}", file=sys.stderr)
            return 2
        print(f"wrote {args.output}: {len(registry.tests)} entries ({summary})")
    return 0
