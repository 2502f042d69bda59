"""Repository lint: the registry, the test tree and first-party imports agree.

`lint_repo` returns every `Problem` (sorted; empty = clean). Codes:

* ``R0xx`` registry parse problems from `ci.registry` (YAML syntax, duplicate/unknown/missing keys,
  wrong types, unknown tiers, non-positive times, manual/quarantined without reason or issue);
* ``L001`` a registered test file does not exist (at the registry entry);
* ``L002`` a ``tests/**/test_*.py`` file is not registered (at the file, with the entry to add);
* ``L003`` two test files share a basename (``/rerun-test`` resolves basenames);
* ``L004`` a ``depends_on`` or ``run_all_paths`` path does not exist (at the registry line);
* ``I0xx`` import integrity, from `ci.import_check`;
* ``L005`` (info, with ``info=True``) a ``depends_on`` entry the import graph covers, `ci.deps_lint`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ci.import_check import check_imports, project_for
from ci.import_index import ModuleIndex
from ci.project import ProjectConfig
from ci.registry import (
    REGISTRY_FILENAME, Problem, Registry, gc_paused, iter_test_files, parse_registry, yaml_scalar,
)

MISSING_FILE = "L001"
UNREGISTERED = "L002"
DUPLICATE_BASENAME = "L003"
MISSING_DEPENDENCY = "L004"

TESTS_DIR = "tests"
DEFAULT_EST_TIME = 30
PLACEHOLDER_OWNER = "@your-github-handle"


def suggested_entry(path: str, registry: Registry | None = None) -> str:
    """The YAML entry (indented for the ``tests:`` mapping) that registers ``path``.

    The owner is the most common owner of registered files in the same directory, if any.
    """
    directory = path.rsplit("/", 1)[0]
    owners = Counter(e.owner for e in (registry.tests.values() if registry else ())
                     if e.path.rsplit("/", 1)[0] == directory)
    owner = owners.most_common(1)[0][0] if owners else PLACEHOLDER_OWNER
    return (f"  {path}:\n"
            f"    tiers: [cpu]\n"
            f"    est_time: {DEFAULT_EST_TIME}  # seconds, measured: pytest {path} --durations=0\n"
            f"    owner: {yaml_scalar(owner)}\n"
            f"    status: active\n")


def lint_registry(root: Path, registry: Registry, test_files: list[str]) -> list[Problem]:
    """Registry <-> tree checks (L001-L004) for an already parsed registry."""
    problems: list[Problem] = []
    where = registry.path
    on_disk = set(test_files)
    exists: dict[str, bool] = {}  # depends_on prefixes repeat across entries: stat each once
    for entry in registry.tests.values():
        if entry.path not in on_disk and not (root / entry.path).is_file():
            problems.append(Problem(where, entry.line, entry.col, MISSING_FILE,
                                    f"registered test file {entry.path!r} does not exist"))
        for dep in entry.depends_on:
            if dep not in exists:
                exists[dep] = (root / dep).exists()
            if not exists[dep]:
                problems.append(Problem(where, entry.line, entry.col, MISSING_DEPENDENCY,
                                        f"{entry.path!r} depends_on {dep!r}, which does not exist"))
    for path in registry.run_all_paths:
        if not (root / path).exists():
            problems.append(Problem(where, 0, 0, MISSING_DEPENDENCY,
                                    f"run_all_paths names {path!r}, which does not exist"))
    for path in test_files:
        if path not in registry.tests:
            problems.append(Problem(path, 1, 1, UNREGISTERED,
                                    f"test file is not registered in {where}; add under 'tests:'\n"
                                    + suggested_entry(path, registry).rstrip("\n")))
    # Count first, then group only the shared basenames (sorting all 10,000 paths costs more).
    every_path = on_disk | registry.tests.keys()
    shared = {name for name, count in Counter(p.rsplit("/", 1)[-1] for p in every_path).items() if count > 1}
    by_name: dict[str, list[str]] = {}
    for path in sorted(p for p in every_path if p.rsplit("/", 1)[-1] in shared):
        by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
    for name, paths in by_name.items():
        if len(paths) > 1:
            for path in paths:
                others = ", ".join(p for p in paths if p != path)
                problems.append(Problem(path, 1, 1, DUPLICATE_BASENAME,
                                        f"basename {name!r} is also used by {others}; "
                                        f"/rerun-test resolves files by basename, rename one"))
    return problems


def lint_repo(root: Path, registry_path: Path | None = None,
              packages: tuple[str, ...] | None = None, *, info: bool = False,
              project: ProjectConfig | None = None) -> list[Problem]:
    """Every problem in the repository at ``root`` (registry default ``root/registry.yaml``);
    ``info=True`` adds the info-level ones that never fail lint (`ci.deps_lint.is_info`).
    First-party code is what ``project``, else the registry's ``project``, says, or the
    ``packages`` given.

    Sorted by path, line, column; empty means clean. Raises FileNotFoundError if the registry
    file does not exist.
    """
    root = Path(root)
    registry_file = Path(registry_path) if registry_path is not None else root / REGISTRY_FILENAME
    text = registry_file.read_text(encoding="utf-8")
    with gc_paused():
        registry, problems = parse_registry(text, _display(registry_file, root))
        if registry is not None:
            problems += lint_registry(root, registry, iter_test_files(root, under=TESTS_DIR))
        if project is None and packages is None and registry is not None:
            project = registry.project
        index = ModuleIndex(root, project_for(packages, project))  # one parse for both checks
        problems += check_imports(root, index=index)
        if info and registry is not None:
            from ci.deps_lint import redundant_problems
            problems += redundant_problems(root, registry, index)
        # Freed here by reference counting rather than traversed by the collection that
        # re-enabling the GC triggers (10,000 entries).
        del registry, index
    return sorted(problems)


def _display(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path.as_posix()


__all__ = ["DUPLICATE_BASENAME", "MISSING_DEPENDENCY", "MISSING_FILE", "UNREGISTERED", "lint_registry", "lint_repo",
           "suggested_entry"]
