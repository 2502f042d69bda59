"""``python -m ci run``: run a tier, one shard of it, or explicit files through pytest; summarise.

Examples::

    python -m ci run --tier cpu                       # the whole cpu tier, workers as pytest's config says
    python -m ci run --tier cpu --workers auto        # ... on every core (pytest-xdist -n auto)
    python -m ci run --tier gpu_b200 --shard 2/4 --base origin/main
    python -m ci run tests/quant/test_x.py --workers 0 -- -k roundtrip -x

Exit status: pytest's, except that "no tests collected" (5) is an error unless the plan itself was
empty (then 0 and "nothing to run"), and a pytest exit 0 whose JUnit report holds no test case
(``--collect-only``, a plugin that swallowed the run) is 1: files were selected, none ran; so is a
GPU tier's run in which every test skipped, unless each file that skipped is marked ``may_skip:
true`` in the registry (the skip reasons are printed, grouped with counts). 2 means
bad arguments, an unreadable registry or JUnit report. 3 means ``--tier T`` needs hardware this
machine lacks (a GPU job on a runner whose CUDA is broken or mislabelled): the plugin would skip
every test and the job would pass having tested nothing, so it fails first.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Callable, Collection, Sequence

from ci.selection.changes import ChangesError
from ci.running.hardware import LazyHardware
from ci.observe import startup
from ci.observe.files import RECORD_ENV
from ci.commands.plan import (UsageError, add_registry_arg, add_selection_args, changed_files, load, make_plans,
                              registry_file)
from ci.history.classify import QUARANTINED
from ci.history.model import is_sha
from ci.history.run_results import failures_in_report
from ci.history.store import failure_text, open_store
from ci.history.verdict import by_concern, judge, tally
from ci.results.junit import CaseResult, JUnitError, parse_junit
from ci.selection.plan import NotRun, PlanError, explicit_target_problem
from ci.registry import Registry, RegistryError, Status
from ci.running.env_groups import EnvGroup, env_groups, merge_junit, part_path
from ci.running.runner import PytestInvocation, build_invocation, parse_workers, run_invocation
from ci.running.watchdog import KILLED_RETURNCODES
from ci.selection.shard import ShardBudgetError, parse_shard_spec
from ci.results.summary import (DEFAULT_MIN_SECONDS, DEFAULT_THRESHOLD_PCT, FailureLine, append_step_summary,
                                failures_text, summarize, to_markdown, to_text, unexcused_skips)

NO_TESTS_COLLECTED = 5
EMPTY_REPORT = 1
ALL_SKIPPED = 1


def build_parser(prog: str = "python -m ci run") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    add_registry_arg(parser)
    parser.add_argument("--tier", metavar="T", help="tier whose tests to run (and pass to the plugin)")
    parser.add_argument("--shard", metavar="i/N", help="run only shard i of N (LPT over est_time)")
    add_selection_args(parser)
    add_run_args(parser)
    parser.add_argument("paths", nargs="*", help="explicit test files (instead of the tier's selection)")
    return parser


def add_run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", default=None, type=_workers,
                        help="pytest-xdist -n: auto, 0 or N (default: none passed; the project's pytest config decides, "
                             "serial when it says nothing)")
    parser.add_argument("--junit", metavar="PATH", help="JUnit XML path (default .ci-reports/junit-<what>.xml)")
    parser.add_argument("--threshold", type=float, default=DEFAULT_THRESHOLD_PCT,
                        help="flag files whose time drifts from est_time by more than this %%")
    parser.add_argument("--no-plugin", action="store_true", help="do not load ci.pytest_plugin")
    parser.add_argument("--history", metavar="URL_OR_PATH",
                        help="judge failures against this test history too (read only): broken on main, flaky "
                             "by signature; without it, only infra and failed-then-passed are told apart")
    parser.add_argument("--merge-base", metavar="SHA", default="",
                        help="with --history: the change's merge base, as `ci history verdicts --base`; the changed "
                             "files (--changed-files or --base) then judge as they do there")
    parser.add_argument("--record-depmap", metavar="PATH",
                        help="record what each test file executes and opens into this map file "
                             "(coverage.py; for `ci history ingest` and `ci plan --depmap`)")


def _workers(value: str) -> str:
    try:
        return parse_workers(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    """Everything after the first ``--`` goes to pytest untouched."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def main(argv: list[str]) -> int:
    own, extra = split_extra(argv)
    args = build_parser().parse_args(own)
    try:
        registry, root = load(args)
        return execute(args, registry, root, extra)
    except (RegistryError, ChangesError, PlanError, ShardBudgetError, UsageError, JUnitError, ValueError) as exc:
        print(f"python -m ci run: {exc}", file=sys.stderr)
        return 2


MISSING_HARDWARE = 3


def execute(args: argparse.Namespace, registry: Registry, root: Path, extra: list[str]) -> int:
    """Select, run, summarise. ``args`` carries the options of `build_parser`."""
    not_run: tuple[NotRun, ...] = ()
    merge_base = getattr(args, "merge_base", "")
    if merge_base and not is_sha(merge_base):
        raise UsageError(f"--merge-base {merge_base!r} is not a hexadecimal commit id (7 to 64 digits)")
    history = getattr(args, "history", None)
    # read before pytest runs: a bad list is exit 2 at once, not after the run
    changed = tuple(changed_files(args, root) or ()) if history or args.changed_files else ()
    if args.tier in registry.tiers:
        gap = LazyHardware().missing(registry.tiers[args.tier])
        if gap is not None:
            print(f"ci run: refusing to run --tier {args.tier} here: {gap}", file=sys.stderr)
            return MISSING_HARDWARE
    if args.paths:
        if args.shard or args.base:  # --changed-files stays: the verdicts read it
            raise UsageError("explicit paths cannot be combined with --shard or --base")
        refused = [(p, explicit_target_problem(registry, str(root), p)) for p in args.paths]
        refused = [f"{p} {why}" for p, why in refused if why is not None]
        if refused:
            raise UsageError("not running what `ci plan` would never select (registry keys that are test files):\n  "
                             + "\n  ".join(refused))
        files = list(args.paths)
        label = "explicit"
    else:
        if not args.tier:
            raise UsageError("give --tier T or explicit test paths")
        index, count = parse_shard_spec(args.shard) if args.shard else (1, 1)
        args.shards = count  # the same LPT over the same selection as `ci plan --shards N`
        (the_plan,) = make_plans(registry, [args.tier], args, root)
        shard = the_plan.shard(index, len(the_plan.shards))
        files = list(shard.tests)
        not_run = the_plan.not_run
        label = f"{args.tier}-{index}of{len(the_plan.shards)}"
        print(f"ci run: tier {args.tier} shard {index}/{len(the_plan.shards)}: {len(files)} file(s), "
              f"est. {shard.est_time:.0f}s (tier selection: {len(the_plan.selected)} selected, "
              f"{len(not_run)} not run)", flush=True)
        _print_not_run(not_run)
        if not files:
            print("ci run: nothing to run: the plan selected no tests for this shard", flush=True)
            return 0
    junit = (Path(args.junit) if args.junit else root / ".ci-reports" / f"junit-{label}.xml").resolve()
    groups = env_groups(files, registry, args.tier)
    record = getattr(args, "record_depmap", None)
    if record and args.no_plugin:
        raise UsageError("--record-depmap needs the plugin (drop --no-plugin)")
    if record and len(groups) > 1:
        raise UsageError(f"--record-depmap records one pytest run, but these files need {len(groups)}: their "
                         f"registry env{' or pytest_args' if any(g.args for g in groups) else ''} differs "
                         f"({'; '.join(g.describe_all() for g in groups)}); "
                         f"record them in separate runs")
    if record:
        startup.install()  # measures the pytest process from its first line (docs/depmaps.md)

    def build(part_files: Sequence[str], part: Path, pytest_args: Sequence[str]) -> PytestInvocation:
        return build_invocation(part_files, root=root, registry_path=registry_file(args), junit=part, tier=args.tier,
                                workers=args.workers, extra=[*pytest_args, *extra], use_plugin=not args.no_plugin)

    base = {**os.environ, RECORD_ENV: str(Path(record).resolve())} if record else dict(os.environ)
    rc = _run_groups(groups, junit, base, build)
    sys.stdout.flush()
    if not junit.is_file():
        _no_report(rc, junit)
        return rc or 1
    report = parse_junit(junit, root=root, known_files=registry.tests)
    summary = summarize(report.files, {p: e.est_time for p, e in registry.tests.items()}, report.wall_time,
                        args.threshold, DEFAULT_MIN_SECONDS)
    headline, lines = judge_run(report.cases, args.tier or label, history, merge_base=merge_base, changed=changed)
    print()
    print(to_text(summary))
    if lines:
        print(failures_text(headline, lines))
    try:
        append_step_summary(to_markdown(summary, f"ci run {label}", headline, lines))
    except OSError as exc:  # the results above and the JUnit report still stand
        print(f"ci run: warning: cannot append to $GITHUB_STEP_SUMMARY: {exc}", file=sys.stderr)
    if rc == NO_TESTS_COLLECTED:
        print(f"ci run: pytest collected no tests from {len(files)} selected file(s): {' '.join(files)}; "
              f"check the files' tier markers and the plugin's selection", file=sys.stderr)
        return rc
    if rc == 0 and summary.total.tests == 0:
        print(f"ci run: pytest exited 0 but its JUnit report holds no test case ({len(files)} file(s) "
              f"selected): nothing was tested", file=sys.stderr)
        return EMPTY_REPORT
    tier = registry.tiers.get(args.tier or "")
    if rc == 0 and tier is not None and tier.needs_gpu and not any(map(_ran_quarantined, report.cases)):
        # a quarantined file is skipped on purpose, as one marked `may_skip` is
        excused = {p for p, e in registry.tests.items() if e.may_skip or e.status is Status.QUARANTINED}
        skips = unexcused_skips(report.cases, excused)
        if skips:
            print(f"ci run: tier {tier.name} needs a GPU, but none of its {summary.total.tests} test(s) ran: "
                  "every one was skipped (mark a file `may_skip: true` in the registry only if all its tests "
                  "are meant to skip on this machine):\n    " + "\n    ".join(map(str, skips)), file=sys.stderr)
            return ALL_SKIPPED
    return rc


def _run_groups(groups: Sequence[EnvGroup], junit: Path, base: dict[str, str],
                build: Callable[[Sequence[str], Path, Sequence[str]], PytestInvocation]) -> int:
    """One pytest per group of `ci.running.env_groups`, under ``base`` plus the group's env, with
    its pytest_args, its report joined into ``junit``. Stops after a pytest that was interrupted, killed or wrote no
    report. The status: the first failure's, else 5 if a group collected nothing, else 0."""
    status, written = 0, []
    if len(groups) > 1:
        junit.unlink(missing_ok=True)  # a stale report must never be summarised as this run's
    for i, group in enumerate(groups):
        part = junit if len(groups) == 1 else part_path(junit, i)
        inv = build(group.files, part, group.args)
        print("ci run: " + (f"env {group.describe()}: " if group.env else "") + shlex.join(inv.argv), flush=True)
        rc = run_invocation(inv, {**base, **group.env})
        if part.is_file():
            written.append(part)
        elif len(groups) > 1:
            _no_report(rc, part)
            rc = rc or 1
        if status in (0, NO_TESTS_COLLECTED):
            status = rc or status
        if rc not in (0, 1, NO_TESTS_COLLECTED) or not part.is_file():
            break
    if len(groups) > 1 and written:
        merge_junit(written, junit)
    return status


def _no_report(rc: int, junit: Path) -> None:
    why = (": a test ran past its file's timeout and was killed with pytest (its line is above)"
           if rc in KILLED_RETURNCODES else "")
    print(f"ci run: pytest exited {rc} and wrote no JUnit report ({junit}){why}", file=sys.stderr)


def _ran_quarantined(case: CaseResult) -> bool:
    """A quarantined test that ran non-blocking: JUnit reports its xfail as a skip."""
    return any(a.message.startswith(QUARANTINED) for a in case.attempts)


def judge_run(cases: Sequence[CaseResult], tier: str, history: str | None, *, merge_base: str = "",
              changed: Collection[str] = ()) -> tuple[str, list[FailureLine]]:
    """The run's verdict line and its failing tests with their verdicts (`ci.history.verdict`),
    against ``history`` when given (read only; a store that cannot be read is a warning, and the
    verdicts fall back to what the run alone shows), with the change's ``merge_base`` and
    ``changed`` paths as `ci history verdicts` judges them, so the two never disagree."""
    env = os.environ
    failures, passed, failed, skipped = failures_in_report(cases, tier, sha=env.get("GITHUB_SHA", "").lower(),
                                                           repo=env.get("GITHUB_REPOSITORY", ""),
                                                           runner=env.get("RUNNER_NAME", ""))
    verdicts = None
    if history and failures:
        try:
            with open_store(history, create=False) as store:
                verdicts = judge(store, failures, merge_base=merge_base, changed=changed)
        except Exception as exc:  # the store's or its driver's: the run's own verdicts still stand
            print(f"ci run: warning: history not read: {failure_text(exc, history)}", file=sys.stderr)
    if verdicts is None:
        verdicts = judge(None, failures)
    head = tally(verdicts, passed, failed, skipped).headline
    return head, [FailureLine(v.node, v.verdict, v.detail, v.error) for v in by_concern(verdicts)]


def _print_not_run(not_run: tuple[NotRun, ...]) -> None:
    if not not_run:
        return
    print(f"ci run: {len(not_run)} registered test(s) of the tier not run here:")
    for nr in not_run:
        print(f"    {nr.path}: {nr.reason}\n        run it: {nr.command}")
