"""Run an adopter's own command unchanged and write what each test file ran (a ci-depmap v3 map).

    python -m ci observe --out FACTS.json [--tier T] [--by-test] -- COMMAND [ARG...]
    python -m ci observe --env DIR [--tier T]          # then: env $(cat ...) COMMAND, in any step
    python -m ci observe --collect DIR --out FACTS.json

The first form runs COMMAND with recording switched on through the environment
(`ci.observe.observed`), writes the map when it ends, whatever its status, names each test file
without a complete entry on stderr (one line each), and exits with COMMAND's own status (128 + N
for a signal N), or 1 when it succeeded but the map holds no test file. ``--env`` prepares DIR
and prints its variables as ``NAME=value`` lines (a ``docker run --env-file``, or ``set -a; .
FILE``) for steps that cannot be wrapped; ``--collect`` writes the map from DIR afterwards and
removes DIR (1 too for a map without a test file). ``--by-test`` (opt-in, a nightly's: about
twice the per-file recorder's cost) also records the lines of each pytest node id
(`ci.observe.bytest`), a version-4 map that `ci plan` narrows files to ids by. Exit 2 for bad
input, 3 when no map could be written. The first form leaves its own modules as checked-hash
bytecode (`ci.observe.bytecode`), so the next run compiles none of them where nothing writes
bytecode. See docs/depmaps.md, "Observing an adopter's own command".
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ci.atomic_write import atomic_write_text
from ci.observe.bytecode import cache_checked, loaded_sources
from ci.observe.layout import read_layout
from ci.observe.observed import META, collect, observed_env, prepare
from ci.repo_root import RepoRootNotFound, find_repo_root
from ci.selection.depmap_format import dump_depmap

PROG = "python -m ci observe"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the map file to write (FACTS.json)")
    parser.add_argument("--tier", help="the tier name the map is for (default: none)")
    parser.add_argument("--by-test", action="store_true",
                        help="also record the lines each pytest node id ran (a version-4 map; about twice the cost)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--env", metavar="DIR", help="prepare DIR and print its NAME=value variables")
    mode.add_argument("--collect", metavar="DIR", help="write the map of a command run with --env DIR's variables")
    return parser


def _fail(message: str, status: int = 2) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return status


def _prepared(parts: Path, tier: str | None, by_test: bool = False) -> dict[str, str]:
    """Prepare ``parts`` for the tree's registry; ValueError (bad input) or OSError with the reason."""
    try:
        root = find_repo_root()
    except RepoRootNotFound as exc:
        raise ValueError(f"{exc} (observe needs the tree's registry: `python -m ci init` writes one)") from None
    layout = read_layout(root)  # the registry's test roots, patterns and tiers; cached (`ci.observe.layout`)
    if tier is not None and tier not in layout.tiers:
        raise ValueError(f"--tier {tier!r}: unknown tier; known tiers: {', '.join(layout.tiers)}")
    return prepare(parts, root, layout.test_roots, layout.test_patterns, tier, by_test,
                   os.environ.get("PYTEST_PLUGINS", ""))


def _write(parts: Path, out: str) -> int:
    """Merge ``parts`` into ``out``; 0, or 3 with the reason on stderr. Names partial entries."""
    try:
        depmap, partial = collect(parts)
        atomic_write_text(Path(out), dump_depmap(depmap))
    except (OSError, ValueError) as exc:
        return _fail(f"no map written to {out}: {exc}", 3)
    for entry in partial:
        print(f"{PROG}: {entry.test or 'the command itself'}: not complete: {entry.reason}", file=sys.stderr)
    print(f"{PROG}: wrote {out} ({len(depmap.tests)} test file(s), {len(partial)} not complete)", file=sys.stderr)
    if not depmap.tests:  # never a silent success: a map with no test file decides nothing
        return _fail("no test file was recorded: the command ran none that the registry's test_roots and "
                     "test_patterns name, or ran them unrecorded (see above)", 1)
    return 0


def _run(command: list[str], out: str, tier: str | None, by_test: bool) -> int:
    parts = Path(tempfile.mkdtemp(prefix="ci-observe-"))
    try:
        try:
            env = observed_env(dict(os.environ), _prepared(parts, tier, by_test))
        except (OSError, ValueError) as exc:
            return _fail(str(exc), 3 if isinstance(exc, OSError) else 2)
        try:
            status = subprocess.run(command, env=env).returncode
        except OSError as exc:  # not found, not executable
            return _fail(f"cannot run {command[0]!r}: {exc.strerror or exc}")
        written = _write(parts, out)
        cache_checked(loaded_sources(__name__.split(".")[0]))  # the next `ci observe` compiles none of its modules
        status = 128 - status if status < 0 else status
        return status if status or not written else written
    finally:
        shutil.rmtree(parts, ignore_errors=True)


def main(argv: list[str]) -> int:
    """See the module docstring."""
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    args = build_parser().parse_args(argv)
    if args.env is not None:
        if command or args.out:
            return _fail("--env DIR takes no command and no --out")
        parts = Path(args.env)
        if parts.exists() and (not parts.is_dir() or any(parts.iterdir())):
            return _fail(f"--env {parts}: must be a new or empty directory")
        try:
            parts.mkdir(parents=True, exist_ok=True)
            variables = _prepared(parts.resolve(), args.tier, args.by_test)
        except (OSError, ValueError) as exc:
            return _fail(str(exc), 3 if isinstance(exc, OSError) else 2)
        print("".join(f"{name}={value}\n" for name, value in sorted(variables.items())), end="")
        return 0
    if not args.out:
        return _fail("--out FACTS.json is required (the map to write)")
    if args.collect is not None:
        if command:
            return _fail("--collect DIR takes no command")
        if not (Path(args.collect) / META).is_file():
            return _fail(f"--collect {args.collect}: not a directory that `ci observe --env` prepared (no {META})")
        status = _write(Path(args.collect), args.out)
        if status != 3:  # the map is written
            shutil.rmtree(args.collect, ignore_errors=True)
        return status
    if not command:
        return _fail("no command: python -m ci observe --out FACTS.json -- COMMAND [ARG...]")
    return _run(command, args.out, args.tier, args.by_test)
