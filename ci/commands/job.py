"""``python -m ci job --tier cpu``: the README's main job.

1. lint (``ci.lint.lint_repo``): on any problem, print them and exit 1 without running tests;
2. plan the tier and print the plan;
3. run it as ``python -m ci run --tier T`` would, printing the summary.

Exit status is non-zero on any failure, and never 0 when the tier has active tests but none ran.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ci.selection.changes import ChangesError
from ci.commands.plan import UsageError, add_registry_arg, load, make_plans, registry_file
from ci.commands.run import add_run_args, execute, split_extra
from ci.results.junit import JUnitError
from ci.selection.plan import PlanError, to_text
from ci.registry import Problem, RegistryError


def lint(root: Path, registry_path: Path) -> list[Problem]:
    from ci.lint import lint_repo  # imported late: lint lives in its own module with its own deps

    return list(lint_repo(root, registry_path))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci job", description=__doc__.splitlines()[0])
    add_registry_arg(parser)
    parser.add_argument("--tier", default="cpu", help="tier to run (default cpu)")
    add_run_args(parser)
    return parser


def main(argv: list[str]) -> int:
    own, extra = split_extra(argv)
    args = build_parser().parse_args(own)
    reg_file = registry_file(args)
    print(f"== lint ({reg_file.parent})", flush=True)
    try:
        problems = lint(reg_file.parent, reg_file)
    except OSError as exc:
        print(f"python -m ci job: cannot lint: {exc}", file=sys.stderr)
        return 2
    if problems:
        for p in problems:
            print(p)
        print(f"ci job: lint found {len(problems)} problem(s); tests not run", file=sys.stderr)
        return 1
    print("lint: ok", flush=True)
    try:
        registry, root = load(args)
        # ``ci run`` options not offered by ``job``: the whole tier, no change filter, one shard.
        args.paths, args.shard, args.shards = [], None, None
        args.changed_files = args.base = args.durations = None
        (the_plan,) = make_plans(registry, [args.tier], args, root)
        print(f"== plan\n{to_text([the_plan])}", flush=True)
        print(f"== run ({len(the_plan.selected)} active test file(s))", flush=True)
        # `execute` fails a run that collects nothing or reports no test case, so a 0 here means
        # tests ran (or the tier has no active test at all, which the plan above shows).
        rc = execute(args, registry, root, extra)
    except (RegistryError, ChangesError, PlanError, UsageError, JUnitError, ValueError) as exc:
        print(f"python -m ci job: {exc}", file=sys.stderr)
        return 2
    print(f"== job {'passed' if rc == 0 else f'FAILED (exit {rc})'}")
    return rc
