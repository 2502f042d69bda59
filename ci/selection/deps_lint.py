"""Lint L005: a ``depends_on`` entry the import graph (or ``run_all_paths``) already covers.

``depends_on`` is for what imports cannot show: data files, kernels loaded by path, C++ sources,
workflow files, a test that reads the whole tree. An entry is redundant when removing it cannot
change any selection:

* it lies under a ``run_all_paths`` entry (a change there selects every test anyway), or
* it is the test file itself, or
* it is a file in the test's import closure (`ci.selection.deps.TestDependencies.closure`, without the
  scripts ``depends_on`` names: those are why the entry exists), or a directory whose every file
  is (``__pycache__`` aside; one data file in it keeps the entry).

L005 is info level: lint prints it, it never fails lint, and ``python -m ci lint --fix`` removes
those entries from the registry (`fix_registry`), keeping every comment, the key order and the
list style, via a temp file and ``os.replace`` (`ci.atomic_write`). A ``depends_on`` path that
does not exist stays an error (L004, `ci.lint`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import yaml

from ci.selection.deps import TestDependencies
from ci.imports.computed_args import literal_arguments
from ci.imports.index import ModuleIndex
from ci.registry import (
    Problem, Registry, RegistryError, covers_everything_under, normalize_path, parse_registry, run_all_rule,
)
from ci.registry.edit_lock import read_for_edit, write_registry

REDUNDANT_DEPENDENCY = "L005"
COMPUTED_IMPORT = "L009"
INFO_CODES = frozenset({REDUNDANT_DEPENDENCY, COMPUTED_IMPORT})


def is_info(problem: Problem) -> bool:
    """True for problems that are reported but never fail lint."""
    return problem.code in INFO_CODES


@dataclass(frozen=True)
class Redundant:
    """``test``'s ``depends_on`` entry ``dependency`` is redundant, because ``reason``."""

    test: str
    dependency: str
    reason: str
    line: int
    col: int


def find_redundant(deps: TestDependencies) -> list[Redundant]:
    """Every redundant ``depends_on`` entry of the registry ``deps`` was built from, in file order."""
    registry = deps.registry
    found = []
    listing: dict[str, list[str]] = {}
    for entry in registry.tests.values():
        if not entry.depends_on or entry.path in deps.not_files:
            continue
        closure = None
        for dep in entry.depends_on:
            if covers_everything_under(registry.run_all_paths, dep):
                trigger = run_all_rule(registry.run_all_paths, dep)
                why = f"run_all_paths entry {trigger!r} already selects every test on a change there"
            elif dep == entry.path:
                why = "the test file itself always counts"
            else:
                if closure is None:
                    closure = deps.closure(entry.path, scripts=False)
                why = _covered_by_imports(deps, entry.path, dep, closure, listing)
            if why is not None:
                found.append(Redundant(entry.path, dep, why, entry.line, entry.col))
    return found


def _covered_by_imports(deps: TestDependencies, test: str, dep: str,
                        closure: Mapping[str, tuple[str | None, int, str]], listing: dict[str, list[str]]) -> str | None:
    full = deps.root / dep
    if full.is_file():
        if dep not in closure:
            return None
        importer = closure[dep][0]
        if importer is None:
            return "pytest loads it (a conftest above the test)"
        return "the test imports it" + ("" if importer == test else f" via {deps.graph.label(importer)}")
    if not full.is_dir():
        return None  # missing: L004 says so
    if dep not in listing:
        listing[dep] = _files_under(deps.root, dep)
    files = listing[dep]
    if files and all(f in closure for f in files):
        return f"the test imports all {len(files)} file(s) under it"
    return None


def _files_under(root: Path, folder: str) -> list[str]:
    found = []
    for directory, dirs, files in os.walk(root / folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = Path(directory).relative_to(root).as_posix()
        found += [f"{rel}/{name}" for name in files if not name.endswith((".pyc", ".pyo"))]
    return sorted(found)


def redundant_problems(root: str | os.PathLike[str], registry: Registry,
                       index: ModuleIndex | None = None) -> list[Problem]:
    """L005 problems (info level) at each entry's registry line; ``index`` shares lint's parse."""
    deps = TestDependencies(root, registry, cache=None, index=index)
    return [Problem(registry.path, r.line, r.col, REDUNDANT_DEPENDENCY,
                    f"{r.test!r} depends_on {r.dependency!r} is redundant: {r.reason} "
                    f"(`python -m ci lint --fix` removes it)")
            for r in find_redundant(deps)] + computed_import_problems(deps)


def computed_import_problems(deps: TestDependencies) -> list[Problem]:
    """L009 (info level) at each first-party import by a computed name that ``project:
    dynamic_imports`` does not describe: selection cannot see what it loads, so a change to a
    module loaded that way selects none of the tests that reach it through the importer."""
    out = []
    passed = literal_arguments(deps.index, [(rel, line) for rel, lines in deps.graph.computed.items() for line in lines])
    for rel, lines in sorted(deps.graph.computed.items()):
        module = deps.index.by_rel[rel]
        package = module.name if module.is_package else module.name.rpartition(".")[0] or module.name
        for line in lines:
            if (rel, line) in passed:
                # Every caller passes a literal: only the first-party ones are this project's to describe.
                names = [n for n in passed[(rel, line)] if deps.index.first_party(n.partition(".")[0])]
                if not names:
                    continue
                example = ", ".join(f'"{n}"' for n in names)
            else:
                example = f'"{package}.*"'
            out.append(Problem(rel, line, 1, COMPUTED_IMPORT,
                               f"imports a module by a computed name, so selection cannot see what it loads; say what "
                               f"it may load under 'project: dynamic_imports:', e.g. {module.name}: [{example}]"))
    return out


def fix_registry(root: str | os.PathLike[str], registry_file: str | os.PathLike[str], *,
                 on_wait: Callable[[str], None] | None = None) -> list[Redundant]:
    """Remove every redundant ``depends_on`` entry from ``registry_file`` (atomically, under the
    registry lock, ``on_wait`` told who holds it as `write_registry` says); returns what was removed.
    Raises `RegistryError` for a registry that does not parse, ValueError if the rewrite would change
    anything else, `RegistryChanged` if the file changed on disk after it was read, the lock's other
    `NotWritten` errors, OSError if it cannot be written (file untouched)."""
    registry_file = Path(registry_file)
    text, snapshot = read_for_edit(registry_file)
    registry, problems = parse_registry(text, registry_file.name)
    if registry is None:
        raise RegistryError(problems)
    redundant = find_redundant(TestDependencies(root, registry, cache=None))
    if redundant:
        removals: dict[str, set[str]] = {}
        for r in redundant:
            removals.setdefault(r.test, set()).add(r.dependency)
        write_registry(snapshot, remove_dependencies(text, removals, registry_file.name), on_wait=on_wait)
    return redundant


def remove_dependencies(text: str, removals: Mapping[str, set[str]], path: str = "registry.yaml") -> str:
    """``text`` without the given ``depends_on`` entries (test path -> normalized entries).

    Only those characters change: a flow list keeps its other items' text, a block list loses
    the removed items' lines, and an emptied ``depends_on`` loses its key (its line, or its
    ``, depends_on: [...]`` inside a flow mapping). The result must parse to the same registry
    less those entries, else ValueError and nothing is returned.
    """
    before, problems = parse_registry(text, path)
    if before is None:
        raise RegistryError(problems)
    edits: list[tuple[int, int, str]] = []
    for test_key, test_value, pairs in _test_mappings(text):
        remove = removals.get(test_key)
        if not remove:
            continue
        for index, (key, value) in enumerate(pairs):
            if key.value == "depends_on" and isinstance(value, yaml.SequenceNode):
                edits += _edits_for(text, test_value, pairs, index, remove)
    out = text
    for start, end, replacement in sorted(edits, reverse=True):
        out = out[:start] + replacement + out[end:]
    after, problems = parse_registry(out, path)
    if after is None:
        raise ValueError(f"{path}: removing depends_on entries would break the registry: {problems[0]}")
    for name, entry in before.tests.items():
        expected = tuple(d for d in entry.depends_on if d not in removals.get(name, ()))
        other = after.tests.get(name)
        if other is None or other.depends_on != expected or _sans_deps(other) != _sans_deps(entry):
            raise ValueError(f"{path}: cannot rewrite the depends_on of {name} (line {entry.line}) "
                             "without changing anything else; edit it by hand")
    return out


def _sans_deps(entry: object) -> tuple:
    fields = ("path", "tiers", "est_time", "owner", "status", "reason", "issue", "timeout", "reruns", "may_skip")
    return tuple(getattr(entry, f) for f in fields)


def _test_mappings(text: str):
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    for key, value in root.value:
        if key.value == "tests" and isinstance(value, yaml.MappingNode):
            for test_key, test_value in value.value:
                if isinstance(test_value, yaml.MappingNode):
                    yield normalize_path(test_key.value), test_value, test_value.value


def _edits_for(text: str, mapping: yaml.MappingNode, pairs: list, index: int,
               remove: set[str]) -> list[tuple[int, int, str]]:
    key, value = pairs[index]
    items = value.value
    keep = [item for item in items if normalize_path(str(item.value)) not in remove]
    if len(keep) == len(items):
        return []
    if keep and value.flow_style:
        kept = ", ".join(text[i.start_mark.index:i.end_mark.index] for i in keep)
        return [(value.start_mark.index, value.end_mark.index, f"[{kept}]")]
    if keep:  # block list: drop each removed item's whole line
        return [_line_span(text, item.start_mark.index, item.end_mark.index)
                for item in items if item not in keep]
    if mapping.flow_style:  # `{..., depends_on: [a]}`: drop the pair and one comma
        if index > 0:
            return [(pairs[index - 1][1].end_mark.index, value.end_mark.index, "")]
        end = pairs[1][0].start_mark.index if len(pairs) > 1 else value.end_mark.index
        return [(key.start_mark.index, end, "")]
    end = value.end_mark.index if value.flow_style else items[-1].end_mark.index
    return [_line_span(text, key.start_mark.index, end)]


def _line_span(text: str, start: int, end: int) -> tuple[int, int, str]:
    """The whole lines from ``start`` to ``end`` (through the newline), if nothing but
    indentation, a list dash or a comment shares them; else ValueError."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end + 1
    head = text[line_start:start].strip()
    tail = text[end:line_end].strip()
    if head not in ("", "-") or not (tail == "" or tail.startswith("#")):
        raise ValueError(f"line {text.count(chr(10), 0, start) + 1}: depends_on shares its line with "
                         "other content; edit it by hand")
    return line_start, line_end, ""


__all__ = ["INFO_CODES", "REDUNDANT_DEPENDENCY", "Redundant", "find_redundant", "fix_registry", "is_info",
           "redundant_problems", "remove_dependencies"]
