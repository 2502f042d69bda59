"""Repository lint: the registry, the test tree and first-party imports agree.

`lint_repo` returns every `Problem` (sorted; empty = clean). The test tree is what the registry's
``project`` section says (``test_roots`` x ``test_patterns``). Codes:

* ``R0xx`` registry problems from `ci.registry` (not UTF-8, YAML syntax, anchors/aliases,
  duplicate/unknown/missing keys, wrong types, unknown tiers, times outside (0, one day],
  manual/quarantined without reason or issue);
* ``L001`` a registered test file does not exist, or is a directory (at the registry entry);
* ``L002`` a test file is not registered (at the file, with the entry to add);
* ``L003`` two test files share a basename (``/rerun-test`` resolves basenames), unless
  ``project: unique_basenames: false`` allows it;
* ``L004`` a ``depends_on`` or ``run_all_paths`` path does not exist (at the registry line);
* ``L006`` a test file (or a directory under a test root) is a symlink that leaves the repository,
  leads nowhere, or is a loop (the plugin refuses to collect it);
* ``L008`` a directory under a test root (or a package) cannot be listed: what is in it is
  unknown, so it is a problem, never silently nothing (`ci.registry.unreadable_dir_problem`);
* ``L007`` an entry with a GPU tier has no ``timeout``, or one below what its est_time derives
  (`ci.registry.derived_timeout`): a hung GPU test must not hold a runner until the job's limit;
* ``I0xx`` import integrity, from `ci.imports.check`;
* ``L005`` (info, with ``info=True``) a ``depends_on`` entry the import graph covers, `ci.selection.deps_lint`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Sequence

from ci.imports.check import check_imports, project_for
from ci.imports.index import ModuleIndex
from ci.quarantine_nodes import unknown_node_problems
from ci.project import ProjectConfig
from ci.registry import (
    REGISTRY_FILENAME, Problem, Registry, RegistryError, TestEntry, derived_timeout, display_path, gc_paused, link_problem,
    parse_registry, read_registry_text, scan_test_tree,
)
from ci.registry.rules import MIN_TIMEOUT, TIMEOUT_FACTOR
from ci.registry.writer import suggested_entry

MISSING_FILE = "L001"
UNREGISTERED = "L002"
DUPLICATE_BASENAME = "L003"
MISSING_DEPENDENCY = "L004"
LINK_OUTSIDE = "L006"
GPU_TIMEOUT = "L007"


def lint_registry(root: Path, registry: Registry, test_files: list[str], links: Sequence[str] = ()) -> list[Problem]:
    """Registry <-> tree checks (L001-L004, L006, L007) for an already parsed registry.

    ``test_files`` and ``links`` are `ci.registry.scan_test_tree`'s for ``registry.project``.
    """
    problems: list[Problem] = []
    where = registry.path
    on_disk = set(test_files)
    exists: dict[str, bool] = {}  # depends_on prefixes repeat across entries: stat each once
    gpu_tiers = {name for name, tier in registry.tiers.items() if tier.needs_gpu}
    for entry in registry.tests.values():
        if entry.path not in on_disk and not (root / entry.path).is_file():
            what = ("is a directory, not a file: register the test files in it one by one"
                    if (root / entry.path).is_dir() else "does not exist")
            problems.append(Problem(where, entry.line, entry.col, MISSING_FILE,
                                    f"registered test file {entry.path!r} {what}"))
        for dep in entry.depends_on:
            if dep not in exists:
                exists[dep] = (root / dep).exists()
            if not exists[dep]:
                problems.append(Problem(where, entry.line, entry.col, MISSING_DEPENDENCY,
                                        f"{entry.path!r} depends_on {dep!r}, which does not exist"))
        if not gpu_tiers.isdisjoint(entry.tiers) and (entry.timeout is None
                                                      or entry.timeout < derived_timeout(entry.est_time)):
            problems.append(_gpu_timeout(where, gpu_tiers, entry))
    for path in registry.run_all_paths:
        if not (root / path.removeprefix("!")).exists():
            problems.append(Problem(where, 0, 0, MISSING_DEPENDENCY,
                                    f"run_all_paths names {path!r}, which does not exist"))
    for path in test_files:
        if path not in registry.tests:
            problems.append(Problem(path, 1, 1, UNREGISTERED,
                                    f"test file is not registered in {where}; add under 'tests:'\n"
                                    + suggested_entry(path, registry).rstrip("\n")))
    for path in links:
        problem = link_problem(root, path)
        if problem is not None:
            advice = ("fix or remove the link" if problem.startswith("is a symlink loop")
                      else "pytest refuses to collect it: keep test code in the repository")
            problems.append(Problem(path, 1, 1, LINK_OUTSIDE, f"{problem}; {advice}"))
    if registry.project.unique_basenames:
        problems += _duplicate_basenames(on_disk | registry.tests.keys())
    return problems


def _gpu_timeout(where: str, gpu_tiers: set[str], entry: TestEntry) -> Problem:
    needed = derived_timeout(entry.est_time)
    gpu = ", ".join(t for t in entry.tiers if t in gpu_tiers)
    rule = f"max({MIN_TIMEOUT}, {TIMEOUT_FACTOR} x est_time {entry.est_time:g})"
    if entry.timeout is None:
        message = f"{entry.path!r} runs on GPU tier(s) {gpu} without a timeout; add 'timeout: {needed}' ({rule})"
    else:
        message = (f"{entry.path!r} has timeout {entry.timeout:g}, below the {needed} its est_time derives ({rule}); "
                   f"set 'timeout: {needed}' or more")
    return Problem(where, entry.line, entry.col, GPU_TIMEOUT, message)


def _duplicate_basenames(every_path: set[str]) -> list[Problem]:
    # Count first, then group only the shared basenames (sorting all 10,000 paths costs more).
    shared = {name for name, count in Counter(p.rsplit("/", 1)[-1] for p in every_path).items() if count > 1}
    by_name: dict[str, list[str]] = {}
    for path in sorted(p for p in every_path if p.rsplit("/", 1)[-1] in shared):
        by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
    problems = []
    for name, paths in by_name.items():
        for path in paths:
            others = ", ".join(p for p in paths if p != path)
            problems.append(Problem(path, 1, 1, DUPLICATE_BASENAME,
                                    f"basename {name!r} is also used by {others}; "
                                    f"/rerun-test resolves files by basename: rename one, or set "
                                    f"'unique_basenames: false' under 'project:' (/rerun-test then asks for a path)"))
    return problems


def lint_repo(root: Path, registry_path: Path | None = None,
              packages: tuple[str, ...] | None = None, *, info: bool = False,
              project: ProjectConfig | None = None, history: bool = True, deepen: int = 0) -> list[Problem]:
    """Every problem in the repository at ``root`` (registry default ``root/registry.yaml``);
    ``info=True`` adds the info-level ones that never fail lint (`ci.selection.deps_lint.is_info`).
    ``history``: a missing name's hint comes from git history (`ci.imports.renames`; ``deepen``:
    how deep it may fetch a shallow clone's history, 0 never), else from spelling.
    First-party code is what ``project``, else the registry's ``project``, says, or the
    ``packages`` given.

    Sorted by path, line, column; empty means clean. Raises FileNotFoundError if the registry
    file does not exist.
    """
    root = Path(root)
    registry_file = Path(registry_path) if registry_path is not None else root / REGISTRY_FILENAME
    if not registry_file.exists():
        raise FileNotFoundError(f"registry {registry_file}: no such file")
    display = display_path(registry_file, root)
    with gc_paused():
        try:
            registry, problems = parse_registry(read_registry_text(registry_file, display), display)
        except RegistryError as exc:
            registry, problems = None, list(exc.problems)
        if project is None and packages is None:
            project = registry.project if registry is not None else ProjectConfig()
        if registry is not None:
            tree = scan_test_tree(root, registry.project)
            problems += lint_registry(root, registry, tree.files, tree.links) + tree.unreadable
            problems += unknown_node_problems(root, registry)
        index = ModuleIndex(root, project_for(packages, project))  # one parse for both checks
        problems += check_imports(root, index=index, history=history, deepen=deepen)
        if info and registry is not None:
            from ci.selection.deps_lint import redundant_problems
            problems += redundant_problems(root, registry, index)
        # Freed here by reference counting rather than traversed by the collection that
        # re-enabling the GC triggers (10,000 entries).
        del registry, index
    return sorted(set(problems))  # an unreadable directory: the tree scan and the index both say so


__all__ = ["DUPLICATE_BASENAME", "GPU_TIMEOUT", "LINK_OUTSIDE", "MISSING_DEPENDENCY", "MISSING_FILE", "UNREGISTERED",
           "lint_registry", "lint_repo", "suggested_entry"]
