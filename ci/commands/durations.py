"""``python -m ci durations REPORT.xml [...]``: measured time per file vs est_time; optionally fix it.

Each XML is one sample per file it contains (pass every shard's XML of one or more runs). The
statistic is the nearest-rank p90 (the max below 10 samples); the proposed est_time is
ceil(p90 * 1.1) whole seconds. ``--write`` rewrites only those numbers in registry.yaml, in place
(comments and layout untouched); ``--json FILE`` writes ``{path: p90 seconds}`` for
``ci plan --durations``. Output is sorted by path so the diff is reviewable.

Every input is checked before anything is written, and every file is written crash-safely
(`ci.atomic_write`): a kill or a full disk leaves registry.yaml as it was or fully updated. The
registry is written under the lock every writer of it takes, and only if it is still what was
read (`ci.registry.edit_lock`): an edit saved meanwhile is kept and nothing is written (exit 3).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ci.atomic_write import atomic_write_text
from ci.commands.plan import add_registry_arg, load, registry_file
from ci.results.durations import DEFAULT_MARGIN, DurationReport, collect, rewrite_est_times
from ci.results.junit import JUnitError, parse_junit
from ci.registry import Registry, RegistryError
from ci.registry.edit_lock import BadLockWait, NotWritten, RegistrySnapshot, cannot_write, read_for_edit, write_registry

EXIT_OK = 0
EXIT_DRIFT = 1
EXIT_BAD_INPUT = 2
EXIT_WRITE_FAILED = 3

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  done (with --check: no entry drifts)
  {EXIT_DRIFT}  drift found (with --check)
  {EXIT_BAD_INPUT}  bad input: arguments, registry, $CI_REGISTRY_LOCK_WAIT, or a report that cannot be read
     or holds an impossible time (inf, nan, negative, over one day); nothing was written
  {EXIT_WRITE_FAILED}  cannot write an output (full disk, permissions, registry.yaml changed on disk after it
     was read, or its lock held by another process past $CI_REGISTRY_LOCK_WAIT seconds, default 300);
     a file not rewritten is unchanged, never truncated
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci durations", description=__doc__.splitlines()[0],
                                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_registry_arg(parser)
    parser.add_argument("reports", nargs="+", metavar="REPORT.xml")
    parser.add_argument("--threshold", type=float, default=25.0, help="drift threshold in %% (default 25)")
    parser.add_argument("--min-seconds", type=float, default=5.0,
                        help="ignore drift smaller than this many seconds (default 5)")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="safety margin (default 0.10)")
    parser.add_argument("--write", action="store_true", help="rewrite drifting est_time values in registry.yaml")
    parser.add_argument("--write-all", action="store_true", help="rewrite every measured est_time")
    parser.add_argument("--json", metavar="FILE", help="write {path: p90 seconds} as JSON")
    parser.add_argument("--check", action="store_true", help=f"exit {EXIT_DRIFT} when any entry drifts")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        registry, root = load(args)
        reports = [parse_junit(r, root=root, known_files=registry.tests) for r in args.reports]
        result = collect(reports, registry, margin=args.margin, threshold_pct=args.threshold,
                         min_seconds=args.min_seconds)
        new = _new_est_times(args, registry, result) if args.write or args.write_all else None
        outputs = _outputs(args, registry, result, new)
    except (RegistryError, JUnitError, KeyError, ValueError, OSError) as exc:
        print(f"python -m ci durations: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    _print_report(registry, result, len(reports))
    written: list[str] = []
    for path, text, snapshot in outputs:
        done = f"; already written: {', '.join(written)}" if written else ""
        try:
            if snapshot is None:
                atomic_write_text(path, text)
            else:
                write_registry(snapshot, text, on_wait=_say)
        except (OSError, NotWritten) as exc:
            print(f"python -m ci durations: {cannot_write(path, exc)}{done}", file=sys.stderr)
            return EXIT_BAD_INPUT if isinstance(exc, BadLockWait) else EXIT_WRITE_FAILED
        written.append(str(path))
    if new is not None:
        print(f"updated {len(new)} est_time value(s) in {registry.path}")
    return EXIT_DRIFT if args.check and result.drifts else EXIT_OK


def _say(line: str) -> None:
    print(f"python -m ci durations: {line}", file=sys.stderr, flush=True)


def _new_est_times(args: argparse.Namespace, registry: Registry, result: DurationReport) -> dict[str, int]:
    new = ({p: m.proposed for p, m in result.measurements.items()} if args.write_all
           else {d.path: d.proposed for d in result.drifts})
    return {p: v for p, v in new.items() if v != registry.tests[p].est_time}


def _outputs(args: argparse.Namespace, registry: Registry, result: DurationReport,
             new: dict[str, int] | None) -> list[tuple[Path, str, RegistrySnapshot | None]]:
    """Every file to write, its new text and (for the registry) the snapshot of the text the edit
    rests on; all computed (and validated) before the first write."""
    outputs: list[tuple[Path, str, RegistrySnapshot | None]] = []
    if new is not None:
        file = registry_file(args)
        text, snapshot = read_for_edit(file)
        updated = rewrite_est_times(text, new, registry.path)
        if updated != text:
            outputs.append((file, updated, snapshot))
    if args.json:
        outputs.append((Path(args.json), json.dumps({p: m.value for p, m in result.measurements.items()},
                                                    indent=2, sort_keys=True) + "\n", None))
    return outputs


def _print_report(registry: Registry, result: DurationReport, n_reports: int) -> None:
    print(f"{len(result.measurements)} measured file(s) from {n_reports} report(s)")
    for path, m in result.measurements.items():
        est = registry.tests[path].est_time
        print(f"  {path}: p90 {m.value:.1f}s over {len(m.samples)} sample(s), est_time {est:g}s")
    for d in result.drifts:
        print(f"drift: {d.path}: measured {d.measured:.1f}s vs est_time {d.est_time:g}s "
              f"({d.pct:+.0f}%), proposed {d.proposed}")
    for path in result.unknown:
        print(f"unknown: {path} is in the reports but not in the registry")
    for path in result.all_skipped:
        print(f"no sample: {path} (every test skipped)")
