"""``python -m ci lint [--root DIR] [--registry FILE] [--format text|github|json]``.

Exit status: 0 clean, 1 problems found (one per line, ``file:line:col: CODE message`` first),
2 usage error (bad option, missing root or registry).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ci.lint import lint_repo
from ci.registry import REGISTRY_FILENAME, Problem, RepoRootNotFound, find_repo_root


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
        lines.append(f"::error {','.join(props)}::{_escape_data(p.message)}")
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
        print(f"python -m ci lint: registry {registry}: no such file", file=sys.stderr)
        return 2
    problems = lint_repo(root, registry)
    if problems or args.format == "json":
        print(FORMATS[args.format](problems))
    if problems and args.format != "json":
        print(f"python -m ci lint: {len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0
