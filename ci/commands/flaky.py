"""``python -m ci flaky [--tier T] [--min-runs N] [--format text|json]``: the flaky tests, most
certainly flaky first, from the test history.

Each row: the node and tier, the score (the posterior mean failure rate) with its credible
interval, the trials and failures behind it, how many failures are flaky evidence, the failure
fingerprints, the owner (from the registry), when it last failed, and links to example runs.
Only evidence that the code did not change counts: a failure and a pass on one commit, or a short
failure streak between passes on the default branch; broken attempts (ImportError, collection
errors, no GPU) never do. See docs/history.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace

from ci.commands.history import add_store_arg, find_registry, read_history
from ci.history.flaky import DEFAULT_LEVEL, flaky_scores
from ci.history.location import describe, resolve_location
from ci.history.model import FlakyScore
from ci.limits import whole_number
from ci.registry import RegistryError

EXIT_OK = 0
EXIT_FOUND = 1
EXIT_BAD_INPUT = 2
EXIT_CANNOT_READ = 3

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  done (with --check: nothing flaky)
  {EXIT_FOUND}  flaky tests found (with --check)
  {EXIT_BAD_INPUT}  bad input: arguments, the registry, $CI_HISTORY_*_TIMEOUT, or no history at the store yet
  {EXIT_CANNOT_READ}  the store cannot be opened or read, or did not answer in time
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci flaky", description=__doc__.split("\n\n", 1)[1],
                                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tier", help="only this tier")
    parser.add_argument("--min-runs", type=whole_number(0), default=5, metavar="N",
                        help="the fewest trials a score may rest on (default 5)")
    parser.add_argument("--level", type=float, default=DEFAULT_LEVEL,
                        help=f"credible level of the interval (default {DEFAULT_LEVEL})")
    parser.add_argument("--limit", type=whole_number(0), default=50, metavar="N",
                        help="show at most N rows (0: all; default 50)")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.add_argument("--check", action="store_true", help=f"exit {EXIT_FOUND} when anything is flaky")
    parser.add_argument("--registry", metavar="PATH", help="registry.yaml for owners (default: the repository's, if any)")
    add_store_arg(parser)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.level < 1:
        print("python -m ci flaky: --level must be in (0, 1)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        owners = _owners(args.registry)
    except (RegistryError, OSError) as exc:
        print(f"python -m ci flaky: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    where = describe(resolve_location(args.store))
    scores, status = read_history(args.store, "python -m ci flaky", lambda store: flaky_scores(
        store, tier=args.tier, min_trials=args.min_runs, level=args.level))
    if scores is None:
        return status
    scores = [replace(s, owner=owners.get(s.file, "")) for s in scores]
    shown = scores[:args.limit] if args.limit else scores
    if args.format == "json":
        print(json.dumps({"store": where, "level": args.level, "flaky": [asdict(s) for s in shown],
                          "total": len(scores)}, indent=2))
    else:
        _print_text(shown, len(scores), args.level)
    return EXIT_FOUND if args.check and scores else EXIT_OK


def _owners(registry: str | None) -> dict[str, str]:
    found, _ = find_registry(registry)
    return {path: entry.owner for path, entry in found.tests.items()} if found else {}


def _print_text(scores: list[FlakyScore], total: int, level: float) -> None:
    print(f"{total} flaky test(s); score = posterior mean failure rate, [{level:.0%} credible interval]")
    for s in scores:
        fp = s.fingerprints[0] if s.fingerprints else ("", "", 0)
        print(f"{s.score:6.3f} [{s.interval.low:.3f}, {s.interval.high:.3f}]  {s.failures}/{s.trials} failed "
              f"({s.flaky_failures} flaky, {s.broken} broken, {s.runs} runs)  {s.tier}  {s.node}")
        print(f"       owner {s.owner or '-'}; last failed {s.last_seen}; "
              f"{len(s.fingerprints)} fingerprint(s), most often {fp[0] or '-'} x{fp[2]}: {fp[1]}")
        for url in s.examples:
            print(f"       {url}")
