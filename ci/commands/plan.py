"""``python -m ci plan``: select the tests of one or more tiers and shard them.

Examples::

    python -m ci plan --tier cpu
    python -m ci plan --gpu-tiers --base origin/main --shard-budget 1800 --format github-matrix \\
        --github-output        # appends matrix=... and has_tests=true|false to $GITHUB_OUTPUT
    python -m ci plan --gpu-tiers --base origin/main --shard-budget 1800 --format buildkite \\
        | buildkite-agent pipeline upload

An empty selection prints ``{"include":[]}`` and ``has_tests=false``; guard the matrix job with
``if: needs.plan.outputs.has_tests == 'true'`` (GitHub rejects an empty matrix).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

from ci.atomic_write import atomic_write_text
from ci.limits import whole_number
from ci.regular_file import MAX_REPORT_BYTES, read_regular
from ci.selection.changes import ChangesError, git_changed_files, read_changed_files
from ci.selection.deps import Impact, TestDependencies, registered_non_files
from ci.selection.depmap_select import DEFAULT_MAX_AGE_DAYS, MapSelection, select_by_maps
from ci.selection.buildkite import BuildkiteError, to_buildkite
from ci.results.summary import append_step_summary
from ci.selection.plan import Plan, PlanError, decided_summary, ids_file_text, plan, to_json, to_text
from ci.selection.shard_ids import carried_ids, to_github_matrix
from ci.registry import PER_COMMIT, REGISTRY_FILENAME, SCHEDULES, Registry, RegistryError, find_repo_root, load_registry
from ci.selection.shard import MAX_SHARDS, ShardBudgetError


class UsageError(Exception):
    """Bad command-line input; the message is printed and the exit status is 2."""


def add_registry_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", metavar="PATH", help="registry.yaml (default: the repository's)")


def add_selection_args(parser: argparse.ArgumentParser) -> None:
    """--changed-files/--base and --durations (shared with ``ci run``)."""
    changes = parser.add_mutually_exclusive_group()
    changes.add_argument("--changed-files", metavar="FILE", help="file listing changed paths, one per line")
    changes.add_argument("--base", metavar="REF", help="select by `git diff --name-only REF...HEAD`")
    parser.add_argument("--durations", metavar="FILE",
                        help="JSON {path: seconds} overriding est_time (from `ci durations --json`)")


def add_shard_args(parser: argparse.ArgumentParser) -> None:
    split = parser.add_mutually_exclusive_group()
    split.add_argument("--shards", type=whole_number(1, MAX_SHARDS), metavar="N",
                       help=f"number of shards, 1 to {MAX_SHARDS} (default 1)")
    split.add_argument("--shard-budget", type=float, metavar="SECONDS",
                       help="use the fewest shards whose estimated makespan fits SECONDS "
                            "(a single test longer than the budget is an error)")


def registry_file(args: argparse.Namespace) -> Path:
    """The absolute registry path; its directory is the repository root."""
    return (Path(args.registry) if args.registry else find_repo_root() / REGISTRY_FILENAME).resolve()


def load(args: argparse.Namespace) -> tuple[Registry, Path]:
    """The registry and the repository root (the registry file's directory)."""
    path = registry_file(args)
    return load_registry(path), path.parent


def changed_files(args: argparse.Namespace, root: Path) -> list[str] | None:
    if args.changed_files:
        return read_changed_files(args.changed_files)
    if args.base:
        return git_changed_files(args.base, root)
    return None


def read_durations(path: str | None) -> dict[str, float] | None:
    if path is None:
        return None
    try:
        data = json.loads(read_regular(path, MAX_REPORT_BYTES))
    except OSError as exc:
        raise UsageError(f"cannot read durations file {path}: {exc.strerror}") from exc
    except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
        raise UsageError(f"cannot read durations file {path}: {exc}") from exc
    if not isinstance(data, dict) or not all(
            isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in data.items()):
        raise UsageError(f"durations file {path} must be a JSON object of path -> seconds")
    return {k: float(v) for k, v in data.items()}


def make_plans(registry: Registry, tiers: list[str], args: argparse.Namespace, root: Path) -> list[Plan]:
    """One plan per tier. With changed files, one import graph of the repository (its records
    cached in ``.ci-cache/``) says which tests each change reaches, for every tier at once."""
    changes = changed_files(args, root)
    durations = read_durations(args.durations)
    shards, budget = getattr(args, "shards", None), getattr(args, "shard_budget", None)
    deps = None
    if changes is None:
        impact = Impact(None, not_files=registered_non_files(root, registry))
    else:
        deps = TestDependencies(root, registry)
        impact = deps.impact(changes)
    return [plan(registry, t, changes, shards=shards, shard_budget=budget, durations=durations, impact=impact,
                 maps=_maps(registry, t, changes, args, deps)) for t in tiers]


def add_depmap_args(parser: argparse.ArgumentParser) -> None:
    """Runtime dependency maps (docs/selection.md#runtime-dependency-maps)."""
    parser.add_argument("--depmap", action="append", default=[], metavar="FILE",
                        help="a map file a recording run wrote (repeatable); maps of other tiers are skipped")
    from_store = parser.add_mutually_exclusive_group()
    from_store.add_argument("--depmaps-from-store", action="store_true",
                            help="use each test's newest complete map of the tier from the history store (--store); "
                                 "the default when the store exists, this flag makes a missing store a warning")
    from_store.add_argument("--no-depmaps-from-store", action="store_true",
                            help="do not read maps from the history store: only --depmap files and the static graph")
    parser.add_argument("--store", metavar="URL_OR_PATH", help="the history store (default: $CI_HISTORY_STORE, "
                                                               "else .ci-history/history.sqlite)")
    parser.add_argument("--depmap-repo", metavar="OWNER/NAME", help="only the store's maps of this repository")
    parser.add_argument("--depmap-max-age", type=_days, default=DEFAULT_MAX_AGE_DAYS, metavar="DAYS",
                        help=f"an older map is not used (default {DEFAULT_MAX_AGE_DAYS:g})")


def _days(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a number of days >= 0, got {text!r}")
    return value


def _maps(registry: Registry, tier: str, changes: list[str] | None, args: argparse.Namespace,
          deps: TestDependencies | None) -> MapSelection | None:
    """The tier's map verdicts, or None without changed files or maps. The store is read unless
    ``--no-depmaps-from-store``; without ``--depmaps-from-store`` a store that does not exist, or
    holds no map of the tier, leaves the plan as the static graph makes it. A map source that
    cannot be read is a warning on stderr: its tests fall back to the static graph."""
    files, explicit = getattr(args, "depmap", []), getattr(args, "depmaps_from_store", False)
    from_store = explicit or not getattr(args, "no_depmaps_from_store", True)
    if changes is None or not (files or from_store):
        return None
    from ci.history.depmaps import gather_maps  # deferred: a plan without maps needs no store

    now = datetime.now(timezone.utc)
    gathered = gather_maps(tier, files, use_store=from_store, store_location=args.store, repo=args.depmap_repo,
                           since=now - timedelta(days=args.depmap_max_age), now=now, missing_ok=not explicit)
    for problem in gathered.problems:
        print(f"python -m ci plan: warning: {problem}", file=sys.stderr)
    if not (files or explicit or gathered.tests):
        return None
    tests = [e.path for e in registry.tests_for_tier(tier, include_inactive=True)]
    if not hasattr(args, "_git_lines"):  # one per plan command: its git answers serve every tier
        from ci.selection.git_lines import GitLines  # deferred: only map selection reads lines

        args._git_lines = GitLines(registry_file(args).parent, changes, args.base)
    reach = (lambda path: deps.impact([path]).reasons) if deps is not None else (lambda path: {})
    return select_by_maps(gathered.tests, tests, changes, now=now, max_age_days=args.depmap_max_age,
                          scopes_for=args._git_lines.scopes_for, module_reach=reach,
                          references_for=args._git_lines.references_for, drift_for=args._git_lines.drift_for,
                          imports_of=deps.imports_of if deps is not None else None)


def selection_args(args: argparse.Namespace) -> list[str]:
    """The selection arguments ``ci run --shard i/N`` must repeat to plan what this plan did (a
    ``--changed-files`` list travels in the step's env: see `ci.selection.buildkite`)."""
    out: list[str] = []
    for flag, value in (("--base", args.base), ("--durations", args.durations)):
        if value:
            out += [flag, value]
    return out


def _summarize(plans: list[Plan]) -> bool:
    """Append who decided each tier's tests to ``$GITHUB_STEP_SUMMARY`` (when set, and maps were
    consulted); False when it cannot be written."""
    lines = [f"- `{p.tier.name}`: {text}" for p in plans if (text := decided_summary(p)) is not None]
    if not lines:
        return True
    try:
        append_step_summary("### Test selection\n\n" + "\n".join(lines) + "\n")
    except OSError as exc:
        print(f"python -m ci plan: cannot append to $GITHUB_STEP_SUMMARY: {exc}", file=sys.stderr)
        return False
    return True


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci plan", description=__doc__.splitlines()[0])
    add_registry_arg(parser)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--tier", action="append", metavar="T", help="tier to plan (repeatable)")
    which.add_argument("--all-tiers", action="store_true", help="every tier in the registry")
    which.add_argument("--gpu-tiers", action="store_true", help="every tier with gpu_count > 0")
    parser.add_argument("--schedule", choices=(*SCHEDULES, "all"), default=PER_COMMIT,
                        help="with --all-tiers / --gpu-tiers: only tiers of this schedule (default per-commit: "
                             "nightly tiers run in the nightly workflow, which passes 'all'); --tier plans what it names")
    add_selection_args(parser)
    add_shard_args(parser)
    add_depmap_args(parser)
    parser.add_argument("--format", choices=("text", "json", "github-matrix", "buildkite"), default="text",
                        help="buildkite: a pipeline for `buildkite-agent pipeline upload` (one step per tier)")
    parser.add_argument("--ids-out", metavar="FILE",
                        help="write the node ids (and whole files) to run, one per line, for `-p ci.pytest_ids "
                             "--ci-ids FILE` (files a map with per-id lines narrowed; see docs/depmaps.md)")
    parser.add_argument("--github-output", action="store_true",
                        help="also append matrix=<json> and has_tests=<bool> to $GITHUB_OUTPUT")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        registry, root = load(args)
        if args.all_tiers or args.gpu_tiers:
            tiers = [t.name for t in registry.tiers.values() if (t.needs_gpu or args.all_tiers)
                     and args.schedule in ("all", t.schedule)]
        else:
            tiers = args.tier
        plans = make_plans(registry, tiers, args, root)
    except (RegistryError, ChangesError, PlanError, ShardBudgetError, UsageError, ValueError) as exc:
        print(f"python -m ci plan: {exc}", file=sys.stderr)
        return 2
    carried = carried_ids(plans) if args.format in ("buildkite", "github-matrix") or args.github_output else None
    for note in carried.notes if carried is not None else ():
        print(f"python -m ci plan: warning: {note}", file=sys.stderr)
    if args.format == "buildkite":
        try:
            text = to_buildkite(plans, registry, selection_args(args),
                                read_changed_files(args.changed_files) if args.changed_files else None, carried)
            # a plan that runtime maps decided: each job runs its shard's files (or ids), never plans again
        except (BuildkiteError, ChangesError) as exc:
            print(f"python -m ci plan: {exc}", file=sys.stderr)
            return 2
        print(text, end="")
    else:
        if args.format == "github-matrix":
            print(to_github_matrix(plans, carried))
        else:
            print((to_text if args.format == "text" else to_json)(plans, args.ids_out))
    if args.ids_out:
        try:
            atomic_write_text(Path(args.ids_out), ids_file_text(plans))
        except OSError as exc:
            print(f"python -m ci plan: cannot write --ids-out {args.ids_out}: {exc.strerror or exc}", file=sys.stderr)
            return 3
    if not _summarize(plans):
        return 3
    if args.github_output:
        target = os.environ.get("GITHUB_OUTPUT")
        if not target:
            print("python -m ci plan: --github-output needs $GITHUB_OUTPUT", file=sys.stderr)
            return 2
        has_tests = any(p.has_tests for p in plans)
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(f"matrix={to_github_matrix(plans, carried)}\nhas_tests={'true' if has_tests else 'false'}\n")
    return 0
