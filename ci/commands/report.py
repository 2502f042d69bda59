"""``python -m ci report --html DIR``: the HUD, one static page of the state of CI (and the same
data as JSON beside it), from the test history, the registry and the plan.

The page shows a tier x file matrix over the default branch's last commits (one column each,
rows failing now first, with the commit they fail since, why each cell failed and its verdict),
the flaky tests ranked, each file's measured duration against its est_time and timeout, each
tier's plan as a shard timeline, and with --pr N a pull request's view: its failing tests first,
what its change selected and why, what ran, and the /rerun-test command for what did not. It
opens from file:// and loads nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ci.commands.history import add_store_arg, read_history
from ci.commands.plan import (UsageError, add_registry_arg, add_selection_args, add_shard_args, load, make_plans,
                              read_durations)
from ci.history.flaky import DEFAULT_LEVEL
from ci.limits import whole_number
from ci.registry import RegistryError
from ci.report.build import build_report
from ci.report.write import write_report
from ci.selection.changes import ChangesError
from ci.selection.plan import PlanError, plan
from ci.selection.shard import ShardBudgetError

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_CANNOT = 3

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  the page and its JSON were written
  {EXIT_BAD_INPUT}  bad input: arguments, the registry, the change, $CI_HISTORY_*_TIMEOUT, or no history at
     the store yet
  {EXIT_CANNOT}  the store cannot be read or did not answer in time, or DIR cannot be written (or, with
     --screenshot, no browser)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci report", description=__doc__.split("\n\n", 1)[1],
                                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--html", required=True, metavar="DIR", help="write DIR/index.html and DIR/report.json")
    parser.add_argument("--runs", type=whole_number(1), default=30, metavar="N",
                        help="the default branch's last N commits, each with every run of it (default 30)")
    parser.add_argument("--repo", metavar="OWNER/NAME", help="whose runs (default: the newest report's repository)")
    parser.add_argument("--tier", action="append", metavar="T",
                        help="plan only this tier for the timeline (repeatable; default every tier)")
    parser.add_argument("--pr", type=whole_number(1), metavar="N",
                        help="add pull request N's view; its selection comes from --changed-files or --base")
    parser.add_argument("--level", type=float, default=DEFAULT_LEVEL, help="credible level of the flaky intervals")
    parser.add_argument("--min-runs", type=whole_number(0), default=5, metavar="N",
                        help="fewest trials a flaky score rests on")
    parser.add_argument("--screenshot", metavar="PNG", help="also save a screenshot of the page (needs chromium)")
    add_registry_arg(parser)
    add_selection_args(parser)
    add_shard_args(parser)
    add_store_arg(parser)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not 0 < args.level < 1:
        print("python -m ci report: --level must be in (0, 1)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if (args.changed_files or args.base) and args.pr is None:
        print("python -m ci report: --changed-files and --base describe a pull request's change: give --pr N",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        registry, root = load(args)
        tiers = args.tier or list(registry.tiers)
        durations = read_durations(args.durations)
        plans = [plan(registry, t, shards=args.shards, shard_budget=args.shard_budget, durations=durations)
                 for t in tiers]
        pr_plans = make_plans(registry, tiers, args, root) if args.pr is not None else []
    except (RegistryError, ChangesError, PlanError, ShardBudgetError, UsageError, ValueError) as exc:
        print(f"python -m ci report: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    changed = pr_plans[0].changed_files or () if pr_plans else ()
    report, status = read_history(args.store, "python -m ci report", lambda store: build_report(
        store, registry, plans, runs=args.runs, repo=args.repo, pr=args.pr, pr_plans=pr_plans, changed=changed,
        level=args.level, min_trials=args.min_runs))
    if report is None:
        return status  # 2: no history there yet; 3: the store cannot be read (read_history said which)
    try:
        page, data = write_report(report, args.html)
    except OSError as exc:
        print(f"python -m ci report: cannot write {args.html}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CANNOT
    print(f"wrote {page} and {data}: {len(report.runs)} commit(s), {len(report.rows)} row(s), "
          f"{len(report.flaky)} flaky, {len(report.plans)} plan(s){'' if report.pull is None else ', 1 pull request'}")
    if args.screenshot:
        return _screenshot(page, Path(args.screenshot))
    return EXIT_OK


def _screenshot(page: Path, target: Path) -> int:
    from ci.report.browser import Browser, BrowserError

    try:
        with Browser() as browser:
            tab = browser.open(page)
            target.write_bytes(tab.screenshot(full_page=False))
    except (BrowserError, OSError) as exc:
        print(f"python -m ci report: screenshot: {exc}", file=sys.stderr)
        return EXIT_CANNOT
    print(f"wrote {target}")
    return EXIT_OK
