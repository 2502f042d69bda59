"""``python -m ci history verdicts (--pr N | --sha SHA) [--tier T]``: each failing test of a run, and
whose it is: ``broken_on_main``, ``flaky``, ``infra`` or ``new`` (`ci.history.verdict`).

The run is read back from the history (`ci.history.run_results`): a pull request's newest commit,
or the newest merge queue batch it was queued in when that ran later, or one commit. A merge queue's run (``merge_group``) is judged against main before its
batch, and a failure main's base does not have is the batch's (`ci.history.merge_queue`). The
default branch's commit order comes from git (``--git-ref REF``, the default branch in this
checkout, e.g. ``origin/main``) when given and known, else from the order its commits were
ingested. ``--base SHA`` is the pull request's merge base (else the one ingested with its reports,
if any). ``--changed-files FILE`` lists the paths the change touched (one a line, as `ci plan`
reads it): a failure of a test whose code it touched is never read as main's from other pull
requests' runs (`ci.history.pr_base_evidence`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any, Callable

from ci.history.mainline import first_parent_order
from ci.history.merge_queue import batch_text, batch_verdicts
from ci.history.model import MERGE_GROUP, is_sha
from ci.history.run_results import RunResults, load_pr_run, load_run
from ci.history.verdict import Verdict, judge, tally
from ci.limits import whole_number
from ci.selection.changes import ChangesError, read_changed_files

EXIT_OK, EXIT_BAD_INPUT, EXIT_STORE = 0, 2, 3
PROG = "python -m ci history verdicts"


def add_parser(sub: Any, add_store_arg: Any) -> None:
    """The ``verdicts`` action of `python -m ci history`."""
    parser = sub.add_parser("verdicts", help="each failing test of a run with its verdict",
                            description=__doc__.split("\n\n", 1)[1],
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="exit status: 0 printed (whatever the verdicts); 2 bad input, or no such run in "
                                   "the history; 3 the store cannot be read")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--pr", type=whole_number(1),
                       help="a pull request: its newest commit's runs, or its merge queue batch's when newer")
    which.add_argument("--sha", help="a commit (7 to 64 hex digits)")
    parser.add_argument("--tier", help="only this tier")
    parser.add_argument("--repo", help="only this repository (owner/name)")
    parser.add_argument("--base", default="", help="the pull request's merge base (default: as ingested)")
    parser.add_argument("--git-ref", metavar="REF",
                        help="order the default branch's commits by REF's first-parent history in this checkout")
    parser.add_argument("--changed-files", metavar="FILE", help="the paths the change touched, one a line")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    add_store_arg(parser)


def run(args: argparse.Namespace, read_history: Callable[..., tuple[Any, int]]) -> int:
    """Print the verdicts of the run ``args`` names; the exit status. ``read_history`` is
    `ci.commands.history.read_history` (passed in: that module dispatches here)."""
    for flag in ("sha", "base"):
        value = getattr(args, flag)
        if value and not is_sha(value):
            print(f"{PROG}: --{flag} {value!r} is not a hexadecimal commit id (7 to 64 digits)", file=sys.stderr)
            return EXIT_BAD_INPUT
    if args.git_ref is not None and (not args.git_ref or args.git_ref.startswith("-")):
        print(f"{PROG}: --git-ref {args.git_ref!r} is not a git ref", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        changed = read_changed_files(args.changed_files) if args.changed_files else []
    except ChangesError as exc:
        print(f"{PROG}: --changed-files: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    order = first_parent_order(".", args.git_ref) if args.git_ref else None
    if args.git_ref and order is None:
        print(f"{PROG}: note: git knows no {args.git_ref!r} here; ordering the default branch by ingest order",
              file=sys.stderr)

    def read(store: Any) -> tuple[RunResults, list[Verdict]] | str:
        try:
            results = load_pr_run(store, args.pr, tier=args.tier, repo=args.repo) if args.pr is not None else \
                load_run(store, sha=args.sha, tier=args.tier, repo=args.repo)
        except LookupError as exc:
            return str(exc)
        verdicts = judge(store, results.failures, merge_base=args.base or results.base_sha, git_order=order,
                         as_of=results.report_id, changed=changed)
        return results, batch_verdicts(verdicts, results.batch) if MERGE_GROUP in results.events else verdicts

    found, status = read_history(args.store, PROG, read)
    if status:
        return status
    if isinstance(found, str):
        print(f"{PROG}: {found}", file=sys.stderr)
        return EXIT_BAD_INPUT
    assert found is not None
    results, verdicts = found
    head = tally(verdicts, results.passed, results.failed, results.skipped).headline
    if args.format == "json":
        print(json.dumps({"repo": results.repo, "sha": results.sha, "pr": results.pr, "events": list(results.events),
                          "batch": list(results.batch), "tiers": list(results.tiers),
                          "headline": head, "passed": results.passed, "failed": results.failed,
                          "skipped": results.skipped, "verdicts": [_json(v) for v in verdicts]}, indent=2))
        return EXIT_OK
    who = f"PR #{results.pr} at {results.sha[:7]}" if results.pr else f"{results.sha[:7]}"
    if MERGE_GROUP in results.events:
        who = f"merge queue batch ({batch_text(results.batch)}) at {results.sha[:7]} on {results.base_sha[:7]}"
    print(f"{who} ({', '.join(results.tiers)}): {head}")
    for v in verdicts:
        print(f"  {v.verdict:<14}  {v.node} [{v.tier}]")
        print(f"      {v.detail}")
        if v.error:
            print(f"      {v.error}")
    return EXIT_OK


def _json(v: Verdict) -> dict[str, Any]:
    out = asdict(v)
    out["candidates"] = list(v.candidates)
    return out
