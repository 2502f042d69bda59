"""``python -m ci [--root DIR] init [--durations REPORT.xml ...] [--observed FACTS.json] [--owner @team] [--force]``.

Writes a starter ``registry.yaml`` at the repository root (``--root DIR``; else the directory
above the working directory that already holds a registry, which it then refuses to overwrite;
else the git work tree's top; else the working directory): the layout it finds (``project:``), one ``cpu`` tier, and every test file on it, with
est_time from the JUnit reports when given (see `ci.adopt.starter`). The file lints clean unless the
tree itself has problems (shared basenames, stale imports), which it prints. GPU tests
(`ci.adopt.gpu_tests`) are ``status: manual`` on that tier, with a tally of why; files that register
suites in-source (``register_*_ci(...)``) get the ``import-suites`` command that places them, and in
such a tree a file that registers nothing is manual too (its CI runs only registered files).
``--observed FACTS.json`` (`ci observe`'s map of the adopter's own test command) adds what was seen
run (`ci.adopt.observed`): a file that touched a GPU, or failed or skipped for lack of one, is
manual with the devices and evidence as its reason, and its timeout; every observed file's
est_time comes from its observed duration; one line per GPU file says why.

Refuses to overwrite an existing registry unless ``--force``; the write is atomic (a crash leaves
the old file or the new one, never half of one) and takes the registry lock; a registry written
by someone else meanwhile (or, with ``--force``, changed since) is kept, nothing written. Exit
status: 0 written, 2 refused, bad input or not written.
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import replace
import subprocess
import sys
from pathlib import Path

from ci.registry.edit_lock import NotWritten, RegistrySnapshot, cannot_write, write_registry
from ci.results.junit import JUnitError
from ci.registry.writer import PLACEHOLDER_OWNER
from ci.registry import REGISTRY_FILENAME, Registry, RepoRootNotFound, explicit_repo_root, find_repo_root, parse_registry
from ci.registry.writer import render_registry
from ci.adopt.starter import Starter, starter_registry
from ci.adopt.observed import Observed, read_observed, with_observed

HEADER = """\
Which test files this repository has, where each runs and how long it takes.
Written by `{prog} init`; check it with `{prog} lint`. Add GPU tiers under `tiers:`
and list them in an entry's `tiers:`; `{prog} durations REPORT.xml --write` keeps est_time measured."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci init", description=__doc__.splitlines()[0])
    parser.add_argument("--durations", nargs="+", metavar="REPORT.xml", default=[], type=Path,
                        help="JUnit XML report(s) of a pytest run: est_time from the measured times")
    parser.add_argument("--observed", metavar="FACTS.json", type=Path,
                        help="`ci observe`'s map: GPU tests and est_time from what the test command did")
    parser.add_argument("--owner", default=PLACEHOLDER_OWNER, help=f"owner of every entry (default {PLACEHOLDER_OWNER})")
    parser.add_argument("--force", action="store_true", help=f"overwrite an existing {REGISTRY_FILENAME}")
    return parser


def _root() -> Path:
    explicit = explicit_repo_root()
    if explicit is not None:
        return explicit
    try:
        return find_repo_root()
    except RepoRootNotFound:
        pass
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=30,
                             check=False)
    except (OSError, subprocess.TimeoutExpired):
        top = None
    if top is not None and top.returncode == 0 and top.stdout.strip():
        return Path(top.stdout.strip()).resolve()
    return Path.cwd().resolve()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    root = _root()
    target = root / REGISTRY_FILENAME
    try:
        snapshot = RegistrySnapshot.take(target)  # what --force replaces, or that there is nothing
    except OSError as exc:
        print(f"python -m ci init: {target}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if snapshot.digest is not None and not args.force:
        print(f"python -m ci init: {target} exists; not overwriting it (--force replaces it)", file=sys.stderr)
        return 2
    try:
        observed = read_observed(args.observed) if args.observed is not None else {}
        starter = starter_registry(root, owner=args.owner, reports=args.durations)
    except (JUnitError, OSError, ValueError) as exc:
        print(f"python -m ci init: {exc}", file=sys.stderr)
        return 2
    if observed:
        starter = replace(starter, registry=starter.registry.with_tests(with_observed(starter.registry.tests, observed)))
    prog = "fp4kv-ci" if Path(sys.argv[0]).name == "fp4kv-ci" else "python -m ci"
    text = render_registry(starter.registry, header=HEADER.format(prog=prog))
    registry, problems = parse_registry(text, REGISTRY_FILENAME)
    if registry is None:  # a bug here, never the user's: refuse to write a registry that does not load
        print("python -m ci init: the starter registry does not parse:\n" + "\n".join(map(str, problems)),
              file=sys.stderr)
        return 2
    try:
        write_registry(snapshot, text, on_wait=lambda line: print(f"python -m ci init: {line}", file=sys.stderr,
                                                                  flush=True))
    except (OSError, NotWritten) as exc:
        print(f"python -m ci init: {cannot_write(target, exc)}", file=sys.stderr)
        return 2
    project = registry.project
    gpu = f", {len(starter.gpu)} of them GPU tests kept manual" if starter.gpu else ""
    if starter.unregistered:
        gpu += f", {len(starter.unregistered)} unregistered kept manual"
    print(f"wrote {target}: {len(registry.tests)} test file(s) on tier cpu{gpu}; test roots "
          f"{', '.join(project.test_roots)}, patterns {', '.join(project.test_patterns)}, first-party "
          f"{', '.join(project.first_party) or '(discovered by lint)'}")
    for note in starter.notes:
        print(f"note: {note}")
    for line in _gpu_tally(starter) + _unregistered_tally(starter) + _import_hint(starter, root, target, prog):
        print(line)
    for line in _observed_lines(observed, registry):
        print(line)
    return 0


def _observed_lines(observed: dict[str, Observed], registry: Registry) -> list[str]:
    """One line per observed GPU test (why, and its timeout), and the observed files not registered."""
    lines = [f"observed gpu: {p}: {seen.why()}; manual, est_time {registry.tests[p].est_time:g}, "
             f"timeout {registry.tests[p].timeout:g}" for p, seen in sorted(observed.items())
             if seen.needs_gpu and p in registry.tests]
    unknown = sorted(set(observed) - registry.tests.keys())
    if unknown:
        lines.append(f"observed: {len(unknown)} file(s) are not test files of this layout, ignored: "
                     f"{', '.join(unknown[:3])}{' ...' if len(unknown) > 3 else ''}")
    return lines


def _gpu_tally(starter: Starter) -> list[str]:
    if not starter.gpu:
        return []
    by_call = Counter(e.what for e in starter.gpu.values() if e.kind == "registration")
    cuda = [e for e in starter.gpu.values() if e.kind == "cuda"]
    parts = []
    if by_call:
        calls = ", ".join(f"{what} {n}" for what, n in by_call.most_common())
        parts.append(f"{sum(by_call.values())} register a GPU backend in-source ({calls})")
    if cuda:
        parts.append(f"{len(cuda)} use CUDA (e.g. {cuda[0].what} at {cuda[0].where})")
    return [f"gpu: {len(starter.gpu)} test file(s) are manual, not run on the cpu tier: {'; '.join(parts)}"]


def _unregistered_tally(starter: Starter) -> list[str]:
    if not starter.unregistered:
        return []
    return [f"unregistered: {len(starter.unregistered)} test file(s) are manual: they call no register_*_ci while "
            f"{len(starter.registered)} file(s) do, and this repository's CI runs only registered files "
            f"(e.g. {starter.unregistered[0]})"]


def _import_hint(starter: Starter, root: Path, target: Path, prog: str) -> list[str]:
    if not starter.registered:
        return []
    suites = Counter(s for names in starter.registered.values() for s in names)
    shown = ", ".join(f"{s} ({n})" for s, n in sorted(suites.items(), key=lambda kv: (-kv[1], kv[0]))[:5])
    more = f", and {len(suites) - 5} more" if len(suites) > 5 else ""
    return [f"import: {len(starter.registered)} test file(s) register suites in-source (register_*_ci(...)), "
            f"{len(suites)} suite(s): {shown}{more}. Their suites say where they run: define GPU tiers under "
            f"`tiers:`, then place them with",
            f"  {prog} --root {root} import-suites --tier-map 'SUITE=TIER' ... --output {target} --force"]
