"""``python -m ci deps``: what a test runs, or which tests a file reaches, from the import graph.

Examples::

    python -m ci deps tests/quant/test_nvfp4.py            # its import closure as a tree
    python -m ci deps tests/quant/test_nvfp4.py --flat     # one line per file, how it is reached
    python -m ci deps --reverse fp4kv.quant.e2m1           # the tests a change to it would select
    python -m ci deps --reverse fp4kv/quant/e2m1.py --format json

The closure is the test file, the conftest.py files pytest loads for it, and everything they
import (see `ci.imports.graph`). ``--reverse`` applies `ci plan`'s rules (imports, conftests,
``depends_on``, ``run_all_paths``) to a one-file change, for every tier. Exit status: 0, or 2 for
a usage error (unknown test, module or file).
"""

from __future__ import annotations

import argparse
import json
import sys

from ci.commands.plan import add_registry_arg, load
from ci.selection.deps import TestDependencies
from ci.selection.plan import plan
from ci.registry import RegistryError, normalize_path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ci deps", description=__doc__.splitlines()[0])
    add_registry_arg(parser)
    parser.add_argument("target", help="a test file; with --reverse, a module (a.b.c) or a file path")
    parser.add_argument("--reverse", action="store_true", help="list the tests a change to TARGET selects")
    parser.add_argument("--flat", action="store_true", help="one line per file instead of a tree")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    return parser


def render_tree(deps: TestDependencies, test: str) -> list[str]:
    """The closure of ``test`` as an indented tree; a file shown before is marked ``(*)`` and not
    expanded again (a package ``__init__`` shown before is left out). Iterative: import chains
    can be deeper than Python's recursion limit."""
    graph = deps.graph
    lines = [test]
    shown = {test}
    stack = [(edge.target, edge.line, edge.how, 1) for edge in reversed(graph.edges.get(test, ()))]
    stack += [(conftest, 0, "conftest", 1) for conftest in reversed(deps.conftests(test))]
    while stack:
        rel, line, how, depth = stack.pop()
        where = f"line {line}, {how}" if line else how
        if rel in shown:
            if how != "package":  # every module imports its packages: repeating that is noise
                lines.append(f"{'  ' * depth}{rel}  ({where}) (*)")
            continue
        shown.add(rel)
        lines.append(f"{'  ' * depth}{rel}  ({where})")
        stack += [(e.target, e.line, e.how, depth + 1) for e in reversed(graph.edges.get(rel, ()))]
    return lines


def render_flat(deps: TestDependencies, test: str) -> list[dict[str, object]]:
    """One record per file of the closure, breadth first: path, importer, line, how."""
    return [{"path": rel, "imported_by": via, "line": line, "how": how}
            for rel, (via, line, how) in deps.closure(test).items()]


def reverse(deps: TestDependencies, path: str) -> list[dict[str, object]]:
    """The tests a change to ``path`` selects on some tier: path, tiers, why (first tier's)."""
    impact = deps.impact([path])
    found: dict[str, dict[str, object]] = {}
    for tier in deps.registry.tiers:
        for test in plan(deps.registry, tier, [path], impact=impact).selected:
            entry = found.setdefault(test.path, {"path": test.path, "tiers": [], "why": test.why})
            entry["tiers"].append(tier)  # type: ignore[union-attr]
    return sorted(found.values(), key=lambda e: str(e["path"]))


def _resolve_target(deps: TestDependencies, target: str) -> str | None:
    """A repo-relative path for a file path or a dotted first-party module name."""
    path = normalize_path(target)
    if (deps.root / path).exists() or path in deps.registry.tests or "/" in path or path.endswith(".py"):
        return path
    module = deps.index.modules.get(target)
    return None if module is None or module.path is None else module.rel


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        registry, root = load(args)
    except (RegistryError, OSError, ValueError) as exc:  # ValueError: an undecodable registry
        print(f"python -m ci deps: {exc}", file=sys.stderr)
        return 2
    deps = TestDependencies(root, registry)
    target = _resolve_target(deps, args.target)
    if target is None:
        print(f"python -m ci deps: {args.target!r} is neither a file nor a first-party module", file=sys.stderr)
        return 2
    if args.reverse:
        tests = reverse(deps, target)
        if args.format == "json":
            print(json.dumps({"changed": target, "tests": tests, "of": len(registry.tests)}, indent=2))
            return 0
        for t in tests:
            print(f"{t['path']}  [{', '.join(t['tiers'])}]  {t['why']}")  # type: ignore[arg-type]
        print(f"{len(tests)} of {len(registry.tests)} registered tests would run if {target} changed",
              file=sys.stderr)
        return 0
    if not target.endswith(".py") or not (root / target).is_file():
        print(f"python -m ci deps: {target} is not a Python file", file=sys.stderr)
        return 2
    if target not in registry.tests:
        print(f"python -m ci deps: note: {target} is not registered", file=sys.stderr)
    records = render_flat(deps, target)
    if args.format == "json":
        print(json.dumps({"test": target, "closure": records}, indent=2))
    elif args.flat:
        for r in records:
            via = f"  <- {r['imported_by']}:{r['line']} ({r['how']})" if r["imported_by"] else "  (root)"
            print(f"{r['path']}{via}")
    else:
        print("\n".join(render_tree(deps, target)))
    print(f"{len(records)} file(s) in the closure of {target}", file=sys.stderr)
    return 0
