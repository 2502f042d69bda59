"""``python -m ci lint [--root DIR] [--registry FILE] [--format text|github|json] [--fix]``.

Exit status: 0 clean, 1 problems found (one per line, ``file:line:col: CODE message`` first),
2 usage error (bad option, missing root or registry). Info-level findings (L005, a redundant
``depends_on`` entry) are printed but never fail; ``--fix`` removes those entries first.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ci.selection.deps_lint import fix_registry, is_info
from ci.lint import lint_repo
from ci.registry import REGISTRY_FILENAME, Problem, RepoRootNotFound, find_repo_root
from ci.registry.edit_lock import RegistryChanged


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
            removed = fix_registry(root, registry)
        except (OSError, ValueError) as exc:  # RegistryError is a ValueError
            print(f"python -m ci lint --fix: {exc}; {registry} left as it was", file=sys.stderr)
            return 1
        except RegistryChanged as exc:
            print(f"python -m ci lint --fix: {exc}", file=sys.stderr)
            return 1
        for r in removed:
            print(f"python -m ci lint --fix: removed {r.dependency!r} from {r.test!r} depends_on", file=sys.stderr)
    problems = lint_repo(root, registry, info=True)
    errors = [p for p in problems if not is_info(p)]
    if problems or args.format == "json":
        print(FORMATS[args.format](problems))
    if problems and args.format != "json":
        print(f"python -m ci lint: {len(errors)} problem(s)"
              + (f", {len(problems) - len(errors)} note(s)" if len(errors) < len(problems) else ""), file=sys.stderr)
    return 1 if errors else 0
