"""``python -m ci history ingest REPORT.xml [...] --repo R --sha S --event E --tier T``: store JUnit
reports with their run's identity in the test history.

A ``.json`` argument is a runtime dependency map (``ci run --record-depmap``), stored with the
same identity (docs/selection.md). Every report and map is read and checked first (the JUnit
reader's refusals, and the identity's), so one bad report writes nothing; then each report is one transaction. The same report with the same
identity a second time adds nothing (it is reported as already stored). The store is ``--store``,
else $CI_HISTORY_STORE, else .ci-history/history.sqlite (a PostgreSQL URL,
``postgresql://user:pass@host/db``, or a SQLite file path).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, TypeVar

from ci.commands import history_verdicts
from ci.history.depmaps import ingest_depmap, prepare_depmap
from ci.history.ingest import ingest, prepare_all
from ci.history.location import DEFAULT_SQLITE, ENV_VAR, describe, resolve_location
from ci.history.merge_queue import parse_batch, tail_pr
from ci.history.model import EVENTS, RunIdentity
from ci.history.store import BadStoreSetting, Store, StoreMissing, failure_text, open_store
from ci.limits import MAX_INT4, parse_whole, whole_number
from ci.registry import Registry, RegistryError, load_registry
from ci.repo_root import REGISTRY_FILENAME, RepoRootNotFound
from ci.results.junit import JUnitError

ATTEMPT_ENV = "GITHUB_RUN_ATTEMPT"
EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_WRITE_FAILED = 3

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  every report stored (or already stored)
  {EXIT_BAD_INPUT}  bad input: arguments (or $GITHUB_RUN_ATTEMPT, $CI_HISTORY_*_TIMEOUT), or a report that
     cannot be read, is not pytest's JUnit XML or holds an impossible time; nothing was written
  {EXIT_WRITE_FAILED}  the store cannot be opened or written, or did not answer in time; the reports
     stored before it failed are listed, the one it failed on is not stored at all
"""


def add_store_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", metavar="URL_OR_PATH",
                        help=f"postgresql://..., libpq's host=... dbname=..., or a SQLite file "
                             f"(default: ${ENV_VAR}, else {DEFAULT_SQLITE})")


T = TypeVar("T")


def read_history(location: str | None, prog: str, read: Callable[[Store], T]) -> tuple[T | None, int]:
    """``(read(store), 0)`` on the existing store; else ``(None, 2)`` when there is no history
    there yet, ``(None, 3)`` when it cannot be opened or read, each said on stderr as ``prog: ...``."""
    try:
        with open_store(location, create=False) as store:
            return read(store), 0
    except (StoreMissing, BadStoreSetting) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return None, 2
    except Exception as exc:  # StoreError, or a driver's own: the store could not be read
        print(f"{prog}: {failure_text(exc, location)}", file=sys.stderr)
        return None, 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci history", description=__doc__.splitlines()[0],
                                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True, metavar="{ingest,verdicts}")
    ing = sub.add_parser("ingest", help="store JUnit reports with their run's identity",
                         description=__doc__.split("\n\n", 1)[1], epilog=EXIT_CODES,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    ing.add_argument("reports", nargs="+", metavar="REPORT.xml",
                     help="JUnit reports; a .json file is a runtime dependency map (`ci run --record-depmap`)")
    ing.add_argument("--repo", required=True, help="owner/name")
    ing.add_argument("--sha", required=True, help="the commit the run tested")
    ing.add_argument("--event", required=True, choices=EVENTS, help="what started the run")
    ing.add_argument("--tier", required=True, help="the registry tier the reports ran")
    ing.add_argument("--pr", type=whole_number(1), help="pull request number")
    ing.add_argument("--runner", default="", help="the machine's name")
    ing.add_argument("--shard", default="", help="e.g. 2/4")
    ing.add_argument("--run-id", default=os.environ.get("GITHUB_RUN_ID", ""),
                     help="the CI run's id (default: $GITHUB_RUN_ID, set on GitHub's runners)")
    ing.add_argument("--attempt", type=whole_number(1),
                     help=f"the CI run's attempt (default: ${ATTEMPT_ENV}, else 1)")
    ing.add_argument("--run-url", default="", help="a link to the run, shown by `ci flaky`")
    ing.add_argument("--author", default="", help="who pushed the commit or opened the pull request")
    ing.add_argument("--base-sha", default="", help="a pull request's merge base with the default branch")
    ing.add_argument("--batch", default="",
                     help="a merge_group run's pull requests, e.g. 12,15 (merge_group.head_ref names the last)")
    ing.add_argument("--head-ref", default="",
                     help="a merge_group run's ref, refs/heads/gh-readonly-queue/<base>/pr-<N>-<sha>: adds PR N "
                          "to --batch")
    ing.add_argument("--unscored", action="store_true",
                     help="JUnit written by code not yet reviewed (a pull request's): keep it for the run's "
                          "verdicts, never for flakiness, quarantine or runner health")
    ing.add_argument("--registry", metavar="PATH",
                     help=f"{REGISTRY_FILENAME} whose paths resolve xunit2 reports (default: the repository's, if any)")
    add_store_arg(ing)
    history_verdicts.add_parser(sub, add_store_arg)
    return parser


def github_attempt() -> int:
    """$GITHUB_RUN_ATTEMPT (GitHub's runners set it), else 1; ValueError naming the variable when
    it is set to anything but a whole number in range."""
    value = os.environ.get(ATTEMPT_ENV, "")
    return parse_whole(value, f"${ATTEMPT_ENV}", 1, MAX_INT4) if value else 1


def queue_batch(batch: str, head_ref: str) -> tuple[int, ...]:
    """``--batch``'s pull requests, then ``--head-ref``'s tail pull request if not among them;
    ValueError naming the bad value."""
    numbers = parse_batch(batch)
    tail = (tail_pr(head_ref),) if head_ref else ()
    return numbers + tuple(n for n in tail if n not in numbers)


def find_registry(registry: str | None) -> tuple[Registry | None, Path | None]:
    """``--registry``, else the repository's registry if there is one (xunit2 reports resolve their
    paths by it, `ci flaky` reads owners from it); ``(None, None)`` outside a repository."""
    from ci.commands.plan import registry_file

    try:
        path = registry_file(argparse.Namespace(registry=registry))
    except RepoRootNotFound:
        return None, None
    if registry is None and not path.is_file():
        return None, None
    return load_registry(path), path.parent


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "verdicts":
        return history_verdicts.run(args, read_history)
    try:
        attempt = args.attempt if args.attempt is not None else github_attempt()
        identity = RunIdentity(args.repo, args.sha, args.event, args.tier, args.pr, args.runner, args.shard,
                               args.run_id, attempt, args.run_url, args.author, args.base_sha,
                               not args.unscored, queue_batch(args.batch, args.head_ref))
        registry, root = find_registry(args.registry)
        maps = [prepare_depmap(p, identity) for p in args.reports if p.endswith(".json")]
        junit = [p for p in args.reports if not p.endswith(".json")]
        prepared = prepare_all(junit, identity, root=root, known_files=registry.tests if registry else ())
    except (JUnitError, ValueError, RegistryError, OSError) as exc:
        print(f"python -m ci history ingest: {exc}; nothing was written", file=sys.stderr)
        return EXIT_BAD_INPUT
    where = describe(resolve_location(args.store))
    done: list[str] = []
    try:
        with open_store(args.store) as store:
            for report in prepared:
                result = ingest(store, report)
                state = "stored" if result.added else "already stored"
                print(f"{report.source}: {state}, {result.cases} test(s), {result.attempts} attempt(s)")
                done.append(report.source)
            for depmap in maps:
                state = "stored" if ingest_depmap(store, depmap) else "already stored"
                print(f"{depmap.source}: {state}, dependency map of {len(depmap.depmap.tests)} test file(s)")
                done.append(depmap.source)
    except BadStoreSetting as exc:
        print(f"python -m ci history ingest: {exc}; nothing was written", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # StoreError, or a driver's own (disk full, connection lost)
        stored = f"; stored before it: {', '.join(done)}" if done else ""
        print(f"python -m ci history ingest: {failure_text(exc, args.store)}{stored}", file=sys.stderr)
        return EXIT_WRITE_FAILED
    print(f"history: {where}")
    return EXIT_OK
