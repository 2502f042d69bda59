"""``python -m ci quarantine [--apply] [--release]``: quarantine what the history shows flaky with
enough evidence, and lift quarantines the history has cleared, in registry.yaml.

Without --apply or --release it only prints what it would change (a dry run). The policy is the
registry's top-level ``quarantine:`` section (threshold, min_runs, release_runs, level, issue).
--apply quarantines a (node, tier) whose credible interval's lower end is at or above the
threshold over at least min_runs trials: the whole file (``status: quarantined``) when every test
of it the history knows is flaky, else the test alone (``quarantined_nodes:``), each with its
reason and evidence. --release lifts a quarantine ci quarantine wrote once release_runs clean runs
in a row have followed it and the interval's upper end over the runs since is below the
threshold. Broken attempts (ImportError, collection errors, no GPU) are never evidence. The
registry is edited in place, comments and everything else kept, and written atomically under the
registry lock every writer of registry.yaml takes; if the file changed after it was read (an edit
saved meanwhile), nothing is written. A second run changes nothing. See docs/history.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ci.commands.history import add_store_arg, read_history
from ci.history.quarantine import Quarantine, Release, describe_score, to_quarantine, to_release
from ci.registry import QuarantinedNode, RegistryError, Status, load_registry, parse_registry
from ci.registry.edit_lock import BadLockWait, NotWritten, read_for_edit, registry_lock, write_registry
from ci.registry.quarantine_edit import (Edit, QuarantineFile, QuarantineNodes, ReleaseFile, ReleaseNodes,
                                         edit_quarantines)
from ci.repo_root import RepoRootNotFound

EXIT_OK = 0
EXIT_BAD_INPUT = 2
EXIT_CANNOT = 3

EXIT_CODES = f"""\
exit status:
  {EXIT_OK}  done (a dry run printed what it would change; --apply / --release wrote it)
  {EXIT_BAD_INPUT}  bad input: arguments, the registry, $CI_HISTORY_*_TIMEOUT, $CI_REGISTRY_LOCK_WAIT, or no
     history at the store yet
  {EXIT_CANNOT}  the store cannot be read or did not answer in time, or the registry cannot be edited or
     written, or someone else changed it while this ran (left as it was, their edit kept), or held its
     lock past $CI_REGISTRY_LOCK_WAIT seconds (default 300)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci quarantine", description=__doc__.split("\n\n", 1)[1],
                                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--apply", action="store_true", help="write the quarantines")
    parser.add_argument("--release", action="store_true", help="write the releases")
    parser.add_argument("--list-files", metavar="TIER",
                        help="only print the quarantined files of TIER, one a line (the nightly job runs them "
                             "non-blocking); reads no history")
    parser.add_argument("--registry", metavar="PATH", help="registry.yaml to read and edit (default: the repository's)")
    add_store_arg(parser)
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from ci.commands.plan import registry_file

    try:
        path = registry_file(args)
    except RepoRootNotFound as exc:
        print(f"python -m ci quarantine: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.list_files is not None:
        return _list_files(path, args.list_files)
    try:
        with registry_lock(path, on_wait=lambda line: print(f"python -m ci quarantine: {line}", file=sys.stderr,
                                                            flush=True)):
            return _run(args, path)
    except OSError as exc:
        print(f"python -m ci quarantine: {path}: {exc.strerror or exc}; left as it was", file=sys.stderr)
        return EXIT_CANNOT
    except NotWritten as exc:  # the lock stayed held past its bound, or the bound is malformed
        print(f"python -m ci quarantine: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT if isinstance(exc, BadLockWait) else EXIT_CANNOT


def _list_files(path: Path, tier: str) -> int:
    try:
        registry = load_registry(path)
    except (RegistryError, OSError) as exc:
        print(f"python -m ci quarantine: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if tier not in registry.tiers:
        print(f"python -m ci quarantine: --list-files {tier!r}: unknown tier; known: {', '.join(registry.tiers)}",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    for entry in registry.tests.values():
        if entry.status is Status.QUARANTINED and tier in entry.tiers:
            print(entry.path)
    return EXIT_OK


def _run(args: argparse.Namespace, path: Path) -> int:
    try:
        text, snapshot = read_for_edit(path)
        registry, problems = parse_registry(text, path.name)
        if registry is None:
            raise RegistryError(problems)
    except RegistryError as exc:
        print(f"python -m ci quarantine: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    found, status = read_history(args.store, "python -m ci quarantine",
                                 lambda store: (to_quarantine(store, registry), to_release(store, registry, held=True)))
    if found is None:
        return status
    quarantines, considered = found
    releases = [r for r in considered if r.ready]
    policy = registry.quarantine
    print(f"policy: quarantine at interval low >= {policy.threshold:g} over >= {policy.min_runs} runs; release after "
          f"{policy.release_runs} clean runs with interval high < {policy.threshold:g} ({policy.level:.0%} interval)".replace("%", " %"))
    for q in quarantines:
        if q.problem:
            print(f"python -m ci quarantine: cannot quarantine {q.node!r}: {q.problem}; the others go ahead",
                  file=sys.stderr)
            continue
        print(f"{'quarantine' if args.apply else 'would quarantine'} {q.node}{' (whole file)' if q.whole_file else ''}: "
              f"{describe_score(q.score.score, q.score.interval, q.score.trials, q.score.tier)}, "
              f"{q.score.flaky_failures} flaky failure(s), fingerprint {q.evidence.fingerprint or '-'}, "
              f"example {q.evidence.example or '-'}")
    for r in releases:
        print(f"{'release' if args.release else 'would release'} {r.node}{' (whole file)' if r.whole_file else ''}: "
              f"{r.clean_runs} clean runs in a row on {r.tier}; since quarantined "
              f"{describe_score(r.failures / r.trials if r.trials else 0.0, r.interval, r.trials, r.tier)}")
    for r in considered:
        if not r.ready:
            print(f"held {r.node}: {r.clean_runs} clean runs in a row on {r.tier} (release needs "
                  f"{policy.release_runs}), interval high since quarantined {r.interval.high * 100:.1f} % "
                  f"(release needs < {policy.threshold * 100:g} %)")
    edits = _edits(quarantines if args.apply else [], releases if args.release else [], policy.issue)
    if not any(not q.problem for q in quarantines) and not releases:
        print("nothing to change")
    if not edits:
        return EXIT_OK
    try:
        updated = edit_quarantines(text, path.name, edits)
    except (ValueError, RegistryError) as exc:
        print(f"python -m ci quarantine: {exc}; {path} left as it was", file=sys.stderr)
        return EXIT_CANNOT
    try:
        write_registry(snapshot, updated)
    except NotWritten as exc:
        print(f"python -m ci quarantine: {exc}", file=sys.stderr)
        return EXIT_CANNOT
    print(f"wrote {path}: {len(edits)} entr{'y' if len(edits) == 1 else 'ies'} changed")
    return EXIT_OK


def _edits(quarantines: list[Quarantine], releases: list[Release], issue: str | None) -> list[Edit]:
    """One edit per entry: a file quarantined whole, or its nodes added; releases likewise."""
    edits: list[Edit] = []
    nodes: dict[str, list[QuarantinedNode]] = {}
    for q in quarantines:
        if q.problem:
            continue
        if q.whole_file:
            edits.append(QuarantineFile(q.file, q.reason, issue or q.evidence.example or "ci quarantine", q.evidence))
        else:
            nodes.setdefault(q.file, []).append(QuarantinedNode(q.node, q.reason, q.evidence))
    edits += [QuarantineNodes(file, tuple(found)) for file, found in nodes.items()]
    released: dict[str, set[str]] = {}
    for r in releases:
        if r.whole_file:
            edits.append(ReleaseFile(r.file))
        else:
            released.setdefault(r.file, set()).add(r.node)
    taken = {e.path for e in edits}
    # a file whose nodes are released and quarantined in one run: the release waits for the next
    edits += [ReleaseNodes(file, frozenset(found)) for file, found in released.items() if file not in taken]
    return edits
