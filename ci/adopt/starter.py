"""A starter registry for a repository that has none: its layout, its test files, one cpu tier.

`detect_project` reads the layout from the tree: test files are what pytest's default patterns
(``test_*.py``, ``*_test.py``) find outside hidden, virtual-env and build directories; the test
roots are the top-level directories holding them (so a new subdirectory is covered too); source roots
are ``src``/``python``/``lib`` when they hold a package, else ``.``; first-party packages are the
package directories (``__init__.py``) directly under the source roots; generated modules come
from a setuptools-scm / hatch-vcs ``version_file`` in ``pyproject.toml``.

`starter_registry` turns that into a `Registry` that lints clean: every test file registered on
the ``cpu`` tier, est_time from JUnit reports when given (the p90 of the samples plus 10 %, as
``ci durations`` proposes), else `DEFAULT_EST_TIME`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable

from ci.project import ProjectConfig
from ci.regular_file import MAX_CONFIG_BYTES, read_regular
from ci.registry import Registry, Tier, entry_is, link_problem, scan_test_tree
from ci.registry.writer import entry

DEFAULT_EST_TIME = 30
DEFAULT_PATTERNS = ("test_*.py", "*_test.py")
SOURCE_DIRS = ("src", "python", "lib")
RUN_ALL_CANDIDATES = ("registry.yaml", "pyproject.toml", "setup.py", "setup.cfg", "conftest.py", "pytest.ini",
                      "tox.ini")
CPU_TIER = Tier("cpu", "x86-64 Linux, no GPU", ("ubuntu-latest",), 0, "cpu")


@dataclass(frozen=True)
class Starter:
    """The starter registry and what the user should know about it (one sentence per note)."""

    registry: Registry
    notes: tuple[str, ...]


def roots_of_tests(files: Iterable[str]) -> tuple[str, ...]:
    """The top-level directories holding the files (``.`` if one lies at the root). Deliberately
    broad: a test file added next to the others, in a new subdirectory, must still be covered."""
    tops = {path.split("/", 1)[0] if "/" in path else "." for path in files}
    return (".",) if "." in tops else tuple(sorted(tops))


def _packages(directory: Path) -> list[str]:
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return []
    return [e.name for e in entries if entry_is(e, "dir") and e.name.isidentifier() and not e.name.startswith((".", "_"))
            and (Path(e.path) / "__init__.py").is_file()]


def _generated_modules(root: Path, source_roots: tuple[str, ...]) -> tuple[str, ...]:
    try:
        import tomllib
    except ImportError:  # Python 3.10: no TOML reader in the standard library
        return ()
    try:
        data = tomllib.loads(read_regular(root / "pyproject.toml", MAX_CONFIG_BYTES).decode("utf-8"))
    except (OSError, ValueError):
        return ()
    tool = data.get("tool", {})
    scm = tool.get("setuptools_scm", {})
    hatch = tool.get("hatch", {}).get("build", {}).get("hooks", {}).get("vcs", {})
    out = []
    for file in (scm.get("version_file"), scm.get("write_to"), hatch.get("version-file")):
        if not isinstance(file, str) or not file.endswith(".py"):
            continue
        path = PurePosixPath(file.replace("\\", "/")).with_suffix("")
        for source in sorted(source_roots, key=len, reverse=True):
            prefix = () if source == "." else PurePosixPath(source).parts
            if path.parts[:len(prefix)] == prefix:
                module = ".".join(path.parts[len(prefix):])
                if module and module not in out:
                    out.append(module)
                break
    return tuple(out)


def detect_project(root: Path) -> ProjectConfig:
    """The repository's layout, read from its tree (see the module docstring)."""
    found = scan_test_tree(root, ProjectConfig(test_roots=(".",), test_patterns=DEFAULT_PATTERNS)).files
    names = [p.rsplit("/", 1)[-1] for p in found]
    patterns = tuple(p for p in DEFAULT_PATTERNS
                     if any(PurePosixPath(n).match(p) for n in names)) or DEFAULT_PATTERNS[:1]
    test_roots = roots_of_tests(found) if found else ("tests",)
    sources = tuple(d for d in SOURCE_DIRS if _packages(root / d)) or (".",)
    first_party = tuple(dict.fromkeys(p for s in sources for p in _packages(root / s)))
    return ProjectConfig(first_party=first_party, source_roots=sources, test_roots=test_roots,
                         test_patterns=patterns, generated_modules=_generated_modules(root, sources))


def measured_est_times(root: Path, reports: Iterable[Path], files: list[str]) -> tuple[dict[str, int], list[str]]:
    """{file: proposed est_time} from JUnit reports, and a note per report or file worth telling."""
    from ci.results.durations import collect  # deferred: only --durations needs JUnit parsing
    from ci.results.junit import parse_junit

    placeholder = Registry("registry.yaml", {"cpu": CPU_TIER},
                           {f: entry(f, ("cpu",), DEFAULT_EST_TIME, "-") for f in files})
    parsed = [parse_junit(r, root=root, known_files=placeholder.tests) for r in reports]
    result = collect(parsed, placeholder)
    notes = [f"{path}: in the JUnit report(s) but not a test file here; ignored" for path in result.unknown]
    return {path: m.proposed for path, m in result.measurements.items()}, notes


def empty_registry(root: Path) -> Registry:
    """The starter registry without tests: the detected layout, the ``cpu`` tier, run_all_paths."""
    run_all = tuple(p for p in RUN_ALL_CANDIDATES if (root / p).is_file() or p == "registry.yaml")
    return Registry("registry.yaml", {"cpu": CPU_TIER}, {}, run_all, project=detect_project(root))


def starter_registry(root: Path, *, owner: str, reports: Iterable[Path] = ()) -> Starter:
    """The starter registry for the repository at ``root`` (see the module docstring)."""
    base = empty_registry(root)
    tree = scan_test_tree(root, base.project)
    files = tree.files
    measured, notes = measured_est_times(root, list(reports), files) if reports else ({}, [])
    tests = {f: entry(f, ("cpu",), measured.get(f, DEFAULT_EST_TIME), owner) for f in files}
    if reports:
        unmeasured = [f for f in files if f not in measured]
        if unmeasured:
            notes.append(f"{len(unmeasured)} file(s) had no time in the report(s) and got est_time "
                         f"{DEFAULT_EST_TIME}: {', '.join(unmeasured[:5])}{' ...' if len(unmeasured) > 5 else ''}")
    basenames: dict[str, list[str]] = {}
    for f in files:
        basenames.setdefault(f.rsplit("/", 1)[-1], []).append(f)
    for name, paths in sorted(basenames.items()):
        if len(paths) > 1:
            notes.append(f"{len(paths)} test files are named {name} ({', '.join(paths)}); `lint` reports them "
                         f"(L003) because /rerun-test resolves basenames: rename all but one")
    for link in tree.links:
        problem = link_problem(root, link)
        if problem is not None:
            notes.append(f"{link} {problem}; `lint` reports it (L006): fix or remove the link")
    notes += [f"{p.path}: {p.message}; `lint` reports it ({p.code})" for p in tree.unreadable]
    return Starter(base.with_tests(tests), tuple(notes))


__all__ = ["CPU_TIER", "DEFAULT_EST_TIME", "Starter", "detect_project", "empty_registry", "measured_est_times",
           "starter_registry",
           "roots_of_tests"]
