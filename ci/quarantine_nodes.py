"""Lint L010: a ``quarantined_nodes`` entry must name a test its file defines.

A node id is ``path::name`` or ``path::Class::name``, with an optional ``[parameters]`` suffix on
the last part. The file is read with `ast`, never imported. A name counts as defined when the
module defines it (a ``def``, a ``class`` or an assignment, so a generated test counts); a method
counts when its class defines it, or when the class has base classes (the method may be
inherited, which the file alone cannot tell). A file that cannot be read or parsed is not judged
here (the import check reports it, I003). An entry naming no test quarantines nothing, and its
release would never come: pytest never reports that id.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from ci.imports.scan import parse_python, read_bytes
from ci.registry import Problem, Registry

UNKNOWN_NODE = "L010"


def _names(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    out: dict[str, ast.stmt] = {}
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[stmt.name] = stmt
        elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            for target in stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]:
                if isinstance(target, ast.Name):
                    out[target.id] = stmt
    return out


def defines(tree: ast.Module, parts: list[str]) -> bool:
    """True if the module ``tree`` defines the test ``parts`` (``["Class", "test_x"]``)."""
    body = tree.body
    for depth, part in enumerate(parts):
        found = _names(body).get(part.split("[", 1)[0] if depth == len(parts) - 1 else part)
        if found is None:
            return False
        if depth < len(parts) - 1:
            if not isinstance(found, ast.ClassDef):
                return False
            if found.bases and depth == len(parts) - 2 and parts[-1].split("[", 1)[0] not in _names(found.body):
                return True  # maybe inherited
            body = found.body
    return True


def unknown_node_problems(root: Path, registry: Registry) -> list[Problem]:
    """L010 at each ``quarantined_nodes`` entry whose test its file does not define."""
    problems = []
    for entry in registry.tests.values():
        if not entry.quarantined_nodes:
            continue
        try:
            tree, _ = parse_python(read_bytes(os.fspath(root / entry.path)), entry.path)
        except OSError:
            continue  # missing (L001) or unreadable: said elsewhere
        if tree is None:
            continue
        for quarantined in entry.quarantined_nodes:
            parts = quarantined.node[len(entry.path) + 2:].split("::")
            if not defines(tree, parts):
                problems.append(Problem(registry.path, quarantined.line or entry.line, 1, UNKNOWN_NODE,
                                        f"quarantined node {quarantined.node!r}: {entry.path} defines no such test; "
                                        f"fix the id or remove the entry (it quarantines nothing)"))
    return problems


__all__ = ["UNKNOWN_NODE", "defines", "unknown_node_problems"]
