"""``python -m ci tiers move --to TIER [--from TIER | --add] GLOB... | --list FILE``: put files on a tier.

Each GLOB (``fnmatch``: ``*`` also crosses ``/``) is matched against the registered paths; ``--list
FILE`` names one glob or path per line (blank lines and ``#`` comments skipped). By default the
matched files' tiers become exactly ``[TO]`` (a move); ``--from T`` replaces only T in their
tiers and matches only files on T; ``--add`` appends TO and keeps the rest.

A file that lands on a GPU tier gets the ``timeout:`` lint's L007 asks for, computed as ``ci
durations --write`` does: from its measured p90 in ``--durations FILE`` (``ci durations --json``'s
output) when it is there (est_time becomes ``ceil(p90 x 1.1)``, timeout ``max(120, 4 x est_time)``),
else from its registered est_time by the same rule; a higher timeout already there stays. One line
per file says which, then a summary.

``--observed FACTS.json`` (`ci observe`'s map, `ci.adopt.observed`) names the files instead: those
that touched a GPU, or failed or skipped for lack of one, in the observed run, each with its
observed duration as the p90 above and its devices and evidence on its line. ``--dry-run`` prints the diff and writes nothing.

Everything is checked before anything is written: an unknown tier (the known ones named), a glob
that matches nothing, or an unreadable list or durations file is exit 2 with nothing changed. The
registry is written once, crash-safely, under the registry lock and only if nobody changed it
since it was read (`ci.registry.edit_lock`; exit 3 otherwise).
"""

from __future__ import annotations

import argparse
import difflib
import sys
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from ci.adopt.observed import Observed, read_observed
from ci.commands.plan import UsageError, add_registry_arg, read_durations, registry_file
from ci.registry import Registry, RegistryError, derived_timeout, display_path, parse_registry
from ci.registry.edit_lock import BadLockWait, NotWritten, cannot_write, read_for_edit, write_registry
from ci.registry.tier_edit import set_entry_tiers
from ci.regular_file import MAX_REPORT_BYTES, read_regular
from ci.results.durations import propose, rewrite_est_times

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_WRITE_FAILED = 3


@dataclass(frozen=True)
class Move:
    """One matched file: its tiers before and after, and where its timeout comes from."""

    path: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    measured: float | None  # p90 seconds from --durations, if any


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci tiers", description=__doc__.splitlines()[0])
    actions = parser.add_subparsers(dest="action", required=True)
    move = actions.add_parser("move", prog="python -m ci tiers move", description=__doc__.split("\n\n", 1)[1],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_registry_arg(move)
    move.add_argument("--to", required=True, metavar="TIER", help="the tier the files go to")
    how = move.add_mutually_exclusive_group()
    how.add_argument("--from", dest="from_tier", metavar="TIER", help="replace only this tier (files on it)")
    how.add_argument("--add", action="store_true", help="add the tier, keep the others")
    move.add_argument("--list", dest="list_file", metavar="FILE", help="globs or paths, one per line")
    move.add_argument("--durations", metavar="FILE", help="JSON {path: p90 seconds} from `ci durations --json`")
    move.add_argument("--observed", metavar="FACTS.json", help="move the files `ci observe` saw touch a GPU")
    move.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    move.add_argument("globs", nargs="*", metavar="GLOB")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        file = registry_file(args)
        shown = display_path(file)
        text, snapshot = read_for_edit(file)
        registry, problems = parse_registry(text, shown)
        if registry is None:
            raise RegistryError(problems)
        observed = _observed_gpu(args, registry)
        if args.observed is not None and not observed:
            print(f"no file of {args.observed} touched a GPU; {shown} unchanged")
            return EXIT_OK
        durations = {p: s.duration_s for p, s in observed.items() if s.duration_s is not None}
        moves = plan_moves(registry, args.to, args.from_tier, args.add, sorted(observed) or _patterns(args),
                           {**(read_durations(args.durations) or {}), **durations})
        new_text = _edited(text, registry, moves, shown)
    except (UsageError, RegistryError, KeyError, ValueError, OSError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else exc
        print(f"python -m ci tiers: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    after, _ = parse_registry(new_text, shown)
    assert after is not None  # `_edited` re-parsed it
    for move in moves:
        seen = observed.get(move.path)
        print(_describe(move, registry, after) + (f"; observed {seen.why()}" if seen is not None else ""))
    changed = sum(m.before != m.after for m in moves)
    summary = (f"{changed} file(s) moved to {args.to}, {len(moves) - changed} already there "
               f"({len(moves)} matched)")
    if args.dry_run:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new_text.splitlines(True), shown, shown))
        print(f"{summary}; dry run, nothing written")
        return EXIT_OK
    if new_text != text:
        try:
            write_registry(snapshot, new_text, on_wait=_say)
        except (OSError, NotWritten) as exc:
            print(f"python -m ci tiers: {cannot_write(file, exc)}", file=sys.stderr)
            return EXIT_BAD_INPUT if isinstance(exc, BadLockWait) else EXIT_WRITE_FAILED
    print(f"{summary}; {shown} {'written' if new_text != text else 'unchanged'}")
    return EXIT_OK


def _say(line: str) -> None:
    print(f"python -m ci tiers: {line}", file=sys.stderr, flush=True)


def _observed_gpu(args: argparse.Namespace, registry: Registry) -> dict[str, Observed]:
    """The registered files ``--observed`` saw touch a GPU; UsageError for a bad map or with globs."""
    if args.observed is None:
        return {}
    if args.globs or args.list_file:
        raise UsageError("--observed FACTS.json names the files itself: give no GLOB or --list")
    try:
        seen = read_observed(args.observed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return {p: s for p, s in seen.items() if s.needs_gpu and p in registry.tests}


def _patterns(args: argparse.Namespace) -> list[str]:
    patterns = list(args.globs)
    if args.list_file:
        try:
            lines = read_regular(args.list_file, MAX_REPORT_BYTES).decode("utf-8").splitlines()
        except OSError as exc:
            raise UsageError(f"cannot read the list {args.list_file}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise UsageError(f"the list {args.list_file} is not UTF-8: {exc}") from exc
        patterns += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not patterns:
        raise UsageError("name the files: GLOB... or --list FILE")
    return patterns


def plan_moves(registry: Registry, to: str, from_tier: str | None, add: bool, patterns: list[str],
               durations: dict[str, float]) -> list[Move]:
    """The matched files sorted by path, each with its new tiers; UsageError for an unknown tier
    or a pattern that matches no registered file (on ``from_tier``, when given)."""
    for tier in (to, from_tier):
        if tier is not None and tier not in registry.tiers:
            raise UsageError(f"unknown tier {tier!r}; the registry's tiers are {', '.join(registry.tiers)}")
    candidates = [p for p, e in registry.tests.items() if from_tier is None or from_tier in e.tiers]
    matched: set[str] = set()
    unmatched = []
    for pattern in patterns:
        hits = [p for p in candidates if fnmatchcase(p, pattern)]
        matched.update(hits)
        if not hits:
            unmatched.append(pattern)
    if unmatched:
        where = f" on tier {from_tier}" if from_tier else ""
        raise UsageError(f"no registered file{where} matches {', '.join(map(repr, unmatched))}; nothing changed")
    moves = []
    for path in sorted(matched):
        before = registry.tests[path].tiers
        if add:
            after = before if to in before else (*before, to)
        elif from_tier is not None:
            after = tuple(dict.fromkeys(to if t == from_tier else t for t in before))
        else:
            after = (to,)
        moves.append(Move(path, before, after, durations.get(path)))
    return moves


def _edited(text: str, registry: Registry, moves: list[Move], shown: str) -> str:
    """The new registry text: tiers set, then est_time/timeout as `ci durations --write` sets them
    for files now on a GPU tier."""
    changed = {m.path: m.after for m in moves if m.before != m.after}
    out = set_entry_tiers(text, changed, shown) if changed else text
    gpu = {name for name, tier in registry.tiers.items() if tier.needs_gpu}
    est_times = {m.path: propose(m.measured) if m.measured is not None else registry.tests[m.path].est_time
                 for m in moves if not gpu.isdisjoint(m.after)}
    return rewrite_est_times(out, est_times, shown) if est_times else out


def _describe(move: Move, before: Registry, after: Registry) -> str:
    old, new = before.tests[move.path], after.tests[move.path]
    line = f"{move.path}: [{', '.join(move.before)}] -> [{', '.join(move.after)}]"
    if move.before == move.after:
        line += " (already there)"
    if new.timeout is None or not any(after.tiers[t].needs_gpu for t in move.after):
        return line
    if move.measured is not None:
        why = f"measured p90 {move.measured:g} s -> est_time {new.est_time:g}"
    else:
        why = f"no measurement: est_time {new.est_time:g} as registered"
    rule = derived_timeout(new.est_time)
    if old.timeout is not None and new.timeout == old.timeout and old.timeout > rule:
        return f"{line}; timeout {new.timeout:g} kept (above the rule's {rule}; {why})"
    return f"{line}; timeout {new.timeout:g} (max(120, 4 x est_time); {why})"
