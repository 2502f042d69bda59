"""``python -m ci durations REPORT.xml [...]``: measured time per file vs est_time; optionally fix it.

Each XML is one sample per file it contains (pass every shard's XML of one or more runs). The
statistic is the nearest-rank p90 (the max below 10 samples); the proposed est_time is
ceil(p90 * 1.1) whole seconds. ``--write`` rewrites only those numbers in registry.yaml, in place
(comments and layout untouched); ``--json FILE`` writes ``{path: p90 seconds}`` for
``ci plan --durations``. Output is sorted by path so the diff is reviewable.
Exit status: 0, or 1 with ``--check`` when some entry drifts, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ci.commands.plan import add_registry_arg, load, registry_file
from ci.durations import DEFAULT_MARGIN, collect, rewrite_est_times
from ci.junit import JUnitError, parse_junit
from ci.registry import RegistryError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci durations", description=__doc__.splitlines()[0])
    add_registry_arg(parser)
    parser.add_argument("reports", nargs="+", metavar="REPORT.xml")
    parser.add_argument("--threshold", type=float, default=25.0, help="drift threshold in %% (default 25)")
    parser.add_argument("--min-seconds", type=float, default=5.0,
                        help="ignore drift smaller than this many seconds (default 5)")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN, help="safety margin (default 0.10)")
    parser.add_argument("--write", action="store_true", help="rewrite drifting est_time values in registry.yaml")
    parser.add_argument("--write-all", action="store_true", help="rewrite every measured est_time")
    parser.add_argument("--json", metavar="FILE", help="write {path: p90 seconds} as JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when any entry drifts")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        registry, root = load(args)
        reports = [parse_junit(r, root=root, known_files=registry.tests) for r in args.reports]
        result = collect(reports, registry, margin=args.margin, threshold_pct=args.threshold,
                         min_seconds=args.min_seconds)
        print(f"{len(result.measurements)} measured file(s) from {len(reports)} report(s)")
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
        if args.json:
            Path(args.json).write_text(json.dumps({p: m.value for p, m in result.measurements.items()},
                                                  indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if args.write or args.write_all:
            new = ({p: m.proposed for p, m in result.measurements.items()} if args.write_all
                   else {d.path: d.proposed for d in result.drifts})
            new = {p: v for p, v in new.items() if v != registry.tests[p].est_time}
            file = registry_file(args)
            text = file.read_text(encoding="utf-8")
            updated = rewrite_est_times(text, new, registry.path)
            if updated != text:
                file.write_text(updated, encoding="utf-8")
            print(f"updated {len(new)} est_time value(s) in {registry.path}")
    except (RegistryError, JUnitError, KeyError, ValueError, OSError) as exc:
        print(f"python -m ci durations: {exc}", file=sys.stderr)
        return 2
    return 1 if args.check and result.drifts else 0
