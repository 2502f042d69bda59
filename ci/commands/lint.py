"""``python -m ci lint [--root DIR] [--registry FILE] [--format text|github|json] [--fix]
[--base REF | --baseline FILE | --write-baseline FILE] [--deepen N]``.

Exit status: 0 clean, 1 problems found (one per line, ``file:line:col: CODE message`` first),
2 usage error (bad option, missing root or registry, a bad ``--base`` ref, an unusable baseline),
3 the baseline could not be written. Info-level findings (L005, a redundant ``depends_on``
entry) are printed but never fail; ``--fix`` removes those entries first.

``--base REF`` and ``--baseline FILE`` are gates (`ci.lint_gate`): they print and fail on only the
problems that the merge base of REF and HEAD (`ci.lint_base`), or the baseline file
(`ci.lint_baseline`), does not already have, and count the others in one line.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from ci.lint_base import BaseLint, BaseRefError, lint_merge_base
from ci.lint_baseline import BaselineError, read_baseline, write_baseline
from ci.lint_gate import GateResult, gate, problem_key
from ci.selection.deps_lint import fix_registry, is_info
from ci.lint import lint_repo
from ci.registry import REGISTRY_FILENAME, Problem, RepoRootNotFound, find_repo_root
from ci.registry.edit_lock import BadLockWait, NotWritten, RegistryChanged


def format_text(problems: list[Problem]) -> str:
    return "\n".join(str(p) for p in problems)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def format_github(problems: list[Problem]) -> str:
    """GitHub Actions workflow commands: ``::error file=F,line=L,col=C,title=CODE::message``."""
    lines = []
    for p in problems:
        props = [f"file={_escape_property(p.path)}"]
        if p.line:
            props.append(f"line={p.line}")
            if p.col:
                props.append(f"col={p.col}")
        props.append(f"title={_escape_property(p.code)}")
        lines.append(f"::{'notice' if is_info(p) else 'error'} {','.join(props)}::{_escape_data(p.message)}")
    return "\n".join(lines)


def format_json(problems: list[Problem]) -> str:
    return json.dumps([{"path": p.path, "line": p.line, "col": p.col, "code": p.code, "message": p.message}
                       for p in problems], indent=2)


FORMATS = {"text": format_text, "github": format_github, "json": format_json}
PROG = "python -m ci lint"


def _depth(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


_TERMINATED: list[int] = []  # the SIGTERMs `_exit_on_term` turned into SystemExit


def _exit_on_term(signum: int, frame: object) -> None:
    _TERMINATED.append(signum)
    raise SystemExit(128 + signum)  # unwinds through lint_merge_base's cleanup, unlike the default


def _unraisable_unless_terminated(previous):
    """``sys.unraisablehook`` while `_exit_on_term` is the handler: a handler that runs inside a
    finalizer (a ``__del__``, a generator's ``finally`` run by the garbage collector) raises where
    Python can only print the exception and go on; `_TERMINATED` remembers that SIGTERM, so the
    message is left out and the command exits after its cleanup instead (see `_merge_base`)."""
    def hook(unraisable) -> None:
        if not (isinstance(unraisable.exc_value, SystemExit) and _TERMINATED):
            previous(unraisable)
    return hook


def _merge_base(root: Path, ref: str, registry: Path) -> BaseLint:
    """`lint_merge_base` with SIGTERM turned into an exit status (128 + 15) that still removes the
    merge base's tree, even where the exception the handler raised was swallowed by a finalizer."""
    _TERMINATED.clear()
    previous, previous_hook = signal.signal(signal.SIGTERM, _exit_on_term), sys.unraisablehook
    sys.unraisablehook = _unraisable_unless_terminated(previous_hook)
    try:
        base = lint_merge_base(root, ref, registry)
    finally:
        signal.signal(signal.SIGTERM, previous)
        sys.unraisablehook = previous_hook
    if _TERMINATED:
        raise SystemExit(128 + _TERMINATED[0])
    return base


def _split(args: argparse.Namespace, root: Path, registry: Path, problems: list[Problem]) -> tuple[GateResult, str]:
    """``problems`` split against the gate's reference, and what that reference is; raises
    BaseRefError / BaselineError."""
    if args.baseline is not None:
        return gate(problems, read_baseline(args.baseline)), f"in baseline {args.baseline}"
    base = _merge_base(root, args.base, registry)
    keys = [problem_key(p) for p in base.problems]
    return gate(problems, keys, base.renamed), f"at {base.merge_base} (merge base of {args.base} and HEAD)"


def _counted(errors: int, notes: int, new: str = "") -> str:
    return f"{errors} {new}problem(s)" + (f" and {notes} {new}note(s)" if notes else "")


def _gate(args: argparse.Namespace, root: Path, registry: Path, problems: list[Problem]) -> int:
    try:
        result, where = _split(args, root, registry, problems)
    except (BaseRefError, BaselineError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    errors = [p for p in result.new if not is_info(p)]
    if result.new or args.format == "json":
        print(FORMATS[args.format](result.new))
    old_errors = sum(not is_info(p) for p in result.known)
    print(f"{PROG}: {_counted(len(errors), len(result.new) - len(errors), 'new ')}; "
          f"{_counted(old_errors, len(result.known) - old_errors)} already {where}, not failed on "
          f"(`{PROG}` lists every problem)", file=sys.stderr)
    if args.baseline is not None and result.fixed:
        print(f"{PROG}: {len(result.fixed)} baseline entry(ies) fixed since: delete them from {args.baseline} "
              f"(or rewrite it with --write-baseline):", file=sys.stderr)
        for key in result.fixed:
            print(f"  {key.code} {key.path}: {key.subject}", file=sys.stderr)
    return 1 if errors else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m ci lint",
                                     description="check registry.yaml, the test tree and first-party imports")
    parser.add_argument("--root", type=Path, default=None,
                        help=f"repository root (default: python -m ci --root, else the nearest directory at or above "
                             f"the cwd holding {REGISTRY_FILENAME})")
    parser.add_argument("--registry", type=Path, default=None, help=f"registry file (default: ROOT/{REGISTRY_FILENAME})")
    parser.add_argument("--format", choices=sorted(FORMATS), default="text", help="output format (default: text)")
    parser.add_argument("--fix", action="store_true",
                        help="remove redundant depends_on entries (L005) from the registry, then lint")
    gates = parser.add_mutually_exclusive_group()
    gates.add_argument("--base", metavar="REF",
                       help="fail only on problems the change adds to the merge base of REF and HEAD")
    gates.add_argument("--baseline", type=Path, metavar="FILE",
                       help="fail only on problems not in FILE (written by --write-baseline)")
    gates.add_argument("--write-baseline", type=Path, metavar="FILE",
                       help="write the current problems to FILE as the baseline, and exit 0")
    parser.add_argument("--deepen", type=_depth, default=0, metavar="N",
                        help="in a shallow clone, fetch up to N commits of history for rename hints (default 0: never)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        root = args.root if args.root is not None else find_repo_root()
    except RepoRootNotFound as exc:
        print(f"python -m ci lint: {exc}", file=sys.stderr)
        return 2
    if not root.is_dir():
        print(f"python -m ci lint: --root {root}: not a directory", file=sys.stderr)
        return 2
    registry = args.registry if args.registry is not None else root / REGISTRY_FILENAME
    if not registry.is_file():
        what = "not a regular file" if registry.exists() else "no such file"
        print(f"python -m ci lint: registry {registry}: {what}", file=sys.stderr)
        return 2
    if args.fix:
        try:
            removed = fix_registry(root, registry, on_wait=lambda line: print(f"python -m ci lint --fix: {line}",
                                                                               file=sys.stderr, flush=True))
        except (OSError, ValueError) as exc:  # RegistryError is a ValueError
            print(f"python -m ci lint --fix: {exc}; {registry} left as it was", file=sys.stderr)
            return 1
        except NotWritten as exc:  # changed meanwhile: 1, as a finding; the lock: 3; its setting: 2
            print(f"python -m ci lint --fix: {exc}", file=sys.stderr)
            return 1 if isinstance(exc, RegistryChanged) else 2 if isinstance(exc, BadLockWait) else 3
        for r in removed:
            print(f"python -m ci lint --fix: removed {r.dependency!r} from {r.test!r} depends_on", file=sys.stderr)
    problems = lint_repo(root, registry, info=True, deepen=args.deepen)
    if args.write_baseline is not None:
        try:
            write_baseline(args.write_baseline, [problem_key(p) for p in problems])
        except OSError as exc:
            print(f"{PROG}: cannot write baseline {args.write_baseline}: {exc.strerror or exc}", file=sys.stderr)
            return 3
        print(f"{PROG}: wrote {args.write_baseline}: {len(problems)} problem(s)", file=sys.stderr)
        return 0
    if args.base is not None or args.baseline is not None:
        return _gate(args, root, registry, problems)
    errors = [p for p in problems if not is_info(p)]
    if problems or args.format == "json":
        print(FORMATS[args.format](problems))
    if problems and args.format != "json":
        print(f"python -m ci lint: {len(errors)} problem(s)"
              + (f", {len(problems) - len(errors)} note(s)" if len(errors) < len(problems) else ""), file=sys.stderr)
    return 1 if errors else 0
