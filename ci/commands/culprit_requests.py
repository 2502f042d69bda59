"""``python -m ci culprit-requests --sha SHA [--repo OWNER/NAME] [--store URL_OR_PATH] [--github-output]``:
the culprit searches a default-branch run calls for (docs/culprit.md#automatic-requests-ci-culprit-requests).

The run of commit SHA is read back from the history and judged (`ci history verdicts`' rules);
each new breakage on the default branch with more than one candidate commit, on a tier whose
registry entry has ``culprit: {auto: true}``, is one request per (tier, test file, good, bad).
Requests are recorded in the history first, then printed, one JSON object a line (tier, test, good,
bad, budget, runners, candidates); a window recorded before is never printed again, so a re-run
requests nothing twice. ``--github-output`` also appends ``requests=<JSON list>`` to $GITHUB_OUTPUT.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Any

from ci.commands.history import add_store_arg
from ci.history.culprits import CulpritRequest, breakage_requests, record_requests
from ci.history.model import is_sha
from ci.history.run_results import load_run
from ci.history.store import BadStoreSetting, StoreMissing, failure_text, open_store
from ci.history.verdict import judge
from ci.registry import RegistryError, load_registry
from ci.repo_root import REGISTRY_FILENAME, RepoRootNotFound, find_repo_root

EXIT_OK, EXIT_BAD_INPUT, EXIT_STORE = 0, 2, 3
PROG = "python -m ci culprit-requests"
EXIT_CODES = """\
exit status:
  0  recorded and printed (none is fine)
  2  bad input: --sha, the registry, or no report of that commit in the history
  3  the store cannot be read or written, or $GITHUB_OUTPUT cannot be appended to
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n", 1)[1], epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sha", required=True, help="the default-branch commit whose run was just ingested")
    parser.add_argument("--repo", help="only this repository (owner/name; default: the run's)")
    parser.add_argument("--github-output", action="store_true", help="also append requests=<json> to $GITHUB_OUTPUT")
    add_store_arg(parser)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not is_sha(args.sha):
        return _bad(f"--sha {args.sha!r} is not a hexadecimal commit id (7 to 64 digits)")
    target = os.environ.get("GITHUB_OUTPUT", "")
    if args.github_output and not target:
        return _bad("--github-output needs $GITHUB_OUTPUT")
    try:
        registry = load_registry(find_repo_root() / REGISTRY_FILENAME)
    except (RegistryError, RepoRootNotFound) as exc:
        return _bad(str(exc).splitlines()[0])
    policies = {name: t.culprit for name, t in registry.tiers.items() if t.culprit is not None}
    try:
        with open_store(args.store, create=False) as store:
            try:
                run = load_run(store, sha=args.sha, repo=args.repo)
            except LookupError as exc:
                return _bad(str(exc))
            asked: list[CulpritRequest] = []
            if any(p.auto for p in policies.values()) and run.pr is None:  # a pull request's run is no breakage of the default branch
                verdicts = judge(store, run.failures, as_of=run.report_id)
                asked = breakage_requests(run.repo, verdicts, policies)
            store.migrate()  # the table of requests (a store an older ci wrote has none yet)
            new = record_requests(store, asked) if asked else []
    except (StoreMissing, BadStoreSetting) as exc:
        return _bad(str(exc))
    except Exception as exc:  # StoreError, or a driver's own: the store could not be read or written
        print(f"{PROG}: {failure_text(exc, args.store)}", file=sys.stderr)
        return EXIT_STORE
    rows = [_row(r) for r in new]
    for row in rows:
        print(json.dumps(row, sort_keys=True))
    if args.github_output:
        try:
            with open(target, "a", encoding="utf-8") as out:
                out.write(f"requests={json.dumps(rows, sort_keys=True)}\n")
        except OSError as exc:
            print(f"{PROG}: cannot append to $GITHUB_OUTPUT: {exc}", file=sys.stderr)
            return EXIT_STORE
    return EXIT_OK


def _row(r: CulpritRequest) -> dict[str, Any]:
    row = asdict(r)
    del row["repo"]
    return row


def _bad(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT
