"""A starter registry for a repository that has none: its layout, its test files, one cpu tier.

`detect_project` reads the layout from the tree. Test roots and patterns come from the
repository's own pytest configuration when it has one (`ci.adopt.pytest_config`: ``testpaths``
and ``python_files`` of every ``pytest.ini`` / ``pyproject.toml`` / ``tox.ini`` / ``setup.cfg``,
at the root or in a subfolder such as ``test/``), since that is what its CI runs. Without one,
test files are what pytest's default patterns (``test_*.py``, ``*_test.py``) find outside hidden,
virtual-env and build directories, and the test roots are the top-level directories holding them
(so a new subdirectory is covered too). Source roots
are ``src``/``python``/``lib`` when they hold a package, else ``.``; first-party packages are the
package directories (``__init__.py``) directly under the source roots; generated modules come
from the build configuration (`ci.adopt.build_config`: setuptools-scm / hatch-vcs version files,
setuptools-rust and maturin extension modules, ``setup.py`` extensions, ``.pyi``-only stubs).

`starter_registry` turns that into a `Registry` that lints clean: every test file registered on
the ``cpu`` tier, est_time from JUnit reports when given (the p90 of the samples plus 10 %, as
``ci durations`` proposes), else `DEFAULT_EST_TIME`. A GPU test (`ci.adopt.gpu_tests`: it registers
a GPU backend in-source, or uses CUDA) is ``status: manual`` there with the reason, never active on
a machine without a GPU; `Starter` says which, and which files register suites in-source (for
``ci import-suites``). A file that only ends in ``_test.py``, outside a test folder, defining no test
(`ci.adopt.test_definitions`) is ``manual`` too; native code and build files (`ci.adopt.native_code`)
join ``run_all_paths``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Iterable

from ci.adopt.build_config import generated_modules
from ci.adopt.gpu_tests import Evidence, read_tree
from ci.adopt.native_code import native_run_all
from ci.adopt.pytest_config import PytestConfig, find_pytest_configs
from ci.adopt.test_definitions import NOT_A_TEST_REASON, not_tests
from ci.project import ProjectConfig
from ci.registry import Registry, Status, Tier, entry_is, link_problem, normalize_path, path_is_under, scan_test_tree
from ci.registry.writer import entry

DEFAULT_EST_TIME = 30
DEFAULT_PATTERNS = ("test_*.py", "*_test.py")
SOURCE_DIRS = ("src", "python", "lib")
RUN_ALL_CANDIDATES = ("registry.yaml", "pyproject.toml", "setup.py", "setup.cfg", "conftest.py", "pytest.ini",
                      "tox.ini")
CPU_TIER = Tier("cpu", "x86-64 Linux, no GPU", ("ubuntu-latest",), 0, "cpu")


@dataclass(frozen=True)
class Starter:
    """The starter registry and what the user should know about it (one sentence per note); the GPU
    tests made manual (path -> why) and the files registering suites in-source (path -> suites)."""

    registry: Registry
    notes: tuple[str, ...]
    gpu: dict[str, Evidence] = field(default_factory=dict)
    registered: dict[str, list[str]] = field(default_factory=dict)
    unregistered: tuple[str, ...] = ()


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


def _configured_tests(root: Path, configs: list[PytestConfig]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(test roots, patterns) from the readable pytest configurations whose roots exist; None if none.
    A root inside another root is dropped (the outer one covers it)."""
    usable = [c for c in configs if c.problem is None and any((root / r).is_dir() for r in c.test_roots)]
    if not usable:
        return None
    roots = list(dict.fromkeys(normalize_path(r) for c in usable for r in c.test_roots if (root / r).is_dir()))
    outer = tuple(r for r in roots if not any(o != r and path_is_under(r, o) for o in roots))
    return outer, tuple(dict.fromkeys(p for c in usable for p in c.python_files))


def detect_project(root: Path, configs: list[PytestConfig] | None = None) -> ProjectConfig:
    """The repository's layout, read from its tree (see the module docstring). ``configs``: its
    pytest configurations, when the caller has found them already."""
    configured = _configured_tests(root, find_pytest_configs(root) if configs is None else configs)
    if configured is not None:
        test_roots, patterns = configured
    else:
        found = scan_test_tree(root, ProjectConfig(test_roots=(".",), test_patterns=DEFAULT_PATTERNS)).files
        names = [p.rsplit("/", 1)[-1] for p in found]
        patterns = tuple(p for p in DEFAULT_PATTERNS
                         if any(PurePosixPath(n).match(p) for n in names)) or DEFAULT_PATTERNS[:1]
        test_roots = roots_of_tests(found) if found else ("tests",)
    sources = tuple(d for d in SOURCE_DIRS if _packages(root / d)) or (".",)
    first_party = tuple(dict.fromkeys(p for s in sources for p in _packages(root / s)))
    return ProjectConfig(first_party=first_party, source_roots=sources, test_roots=test_roots,
                         test_patterns=patterns, generated_modules=generated_modules(root, sources, first_party))


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


def empty_registry(root: Path, configs: list[PytestConfig] | None = None) -> Registry:
    """The starter registry without tests: the detected layout, the ``cpu`` tier, run_all_paths
    (with every pytest configuration the layout was read from: a change there changes what runs; and
    the native code and build files, `ci.adopt.native_code`)."""
    configs = find_pytest_configs(root) if configs is None else configs
    project = detect_project(root, configs)
    candidates = (*RUN_ALL_CANDIDATES, *(c.path for c in configs if c.problem is None))
    run_all = [p for p in candidates if (root / p).is_file() or p == "registry.yaml"]
    run_all += native_run_all(root, project)  # the import graph never reaches a kernel or a requirement
    return Registry("registry.yaml", {"cpu": CPU_TIER}, {}, tuple(dict.fromkeys(run_all)), project=project)


def starter_registry(root: Path, *, owner: str, reports: Iterable[Path] = ()) -> Starter:
    """The starter registry for the repository at ``root`` (see the module docstring)."""
    configs = find_pytest_configs(root)
    base = empty_registry(root, configs)
    tree = scan_test_tree(root, base.project)
    files = tree.files
    measured, notes = measured_est_times(root, list(reports), files) if reports else ({}, [])
    notes = [c.problem for c in configs if c.problem is not None] + notes
    used = [c.path for c in configs if c.problem is None]
    if used:
        notes.insert(0, f"test roots and patterns from {', '.join(used)}")
    reading = read_tree(root, files)
    tests = {f: entry(f, ("cpu",), measured.get(f, DEFAULT_EST_TIME), owner) for f in files}
    for f, why in reading.gpu.items():
        tests[f] = entry(f, ("cpu",), measured.get(f, DEFAULT_EST_TIME), owner, status=Status.MANUAL,
                         reason=gpu_reason(why))
    # A tree that registers suites in-source runs only registered files (SGLang: its runner reads
    # test/registered/); a file without a registration there is parked, whatever it imports, so the
    # CUDA reading above (which cannot follow helpers that start a GPU server) is not the last word.
    unregistered: tuple[str, ...] = ()
    if reading.registered:
        # Per test root: a root without any registration (SGLang's sgl-model-gateway tests, run by
        # their own workflow) keeps its files active.
        def root_of(path: str) -> str:
            return max((r for r in base.project.test_roots if r == "." or path.startswith(r.rstrip("/") + "/")),
                       key=len, default="")
        registering = {root_of(f) for f in reading.registered}
        unregistered = tuple(f for f in files if f not in reading.registered and f not in reading.gpu
                             and root_of(f) in registering)
        for f in unregistered:
            tests[f] = entry(f, ("cpu",), measured.get(f, DEFAULT_EST_TIME), owner, status=Status.MANUAL,
                             reason=UNREGISTERED_REASON)
    helpers = not_tests(root, files)
    for f in helpers:
        tests[f] = entry(f, ("cpu",), measured.get(f, DEFAULT_EST_TIME), owner, status=Status.MANUAL,
                         reason=NOT_A_TEST_REASON)
    if helpers:
        notes.append(f"{len(helpers)} file(s) match a test pattern but define no test outside a test folder, kept "
                     f"manual: {', '.join(helpers[:3])}{' ...' if len(helpers) > 3 else ''}")
    if reports:
        unmeasured = [f for f in files if f not in measured]
        if unmeasured:
            notes.append(f"{len(unmeasured)} file(s) had no time in the report(s) and got est_time "
                         f"{DEFAULT_EST_TIME}: {', '.join(unmeasured[:5])}{' ...' if len(unmeasured) > 5 else ''}")
    basenames: dict[str, list[str]] = {}
    for f in files:
        basenames.setdefault(f.rsplit("/", 1)[-1], []).append(f)
    shared = {name: paths for name, paths in sorted(basenames.items()) if len(paths) > 1}
    if shared:
        # A tree with shared basenames renames nothing on day one: allow them, and say what it costs.
        base = replace(base, project=replace(base.project, unique_basenames=False))
        examples = "; ".join(f"{name} ({', '.join(paths)})" for name, paths in list(shared.items())[:3])
        notes.append(f"{len(shared)} basename(s) are shared by several test files, e.g. {examples}; wrote "
                     f"'unique_basenames: false' under project: so lint allows them, and /rerun-test NAME.py asks "
                     f"for a path when NAME is shared (rename them and drop the line to make lint keep names unique)")
    for link in tree.links:
        problem = link_problem(root, link)
        if problem is not None:
            notes.append(f"{link} {problem}; `lint` reports it (L006): fix or remove the link")
    notes += [f"{p.path}: {p.message}; `lint` reports it ({p.code})" for p in tree.unreadable]
    return Starter(base.with_tests(tests), tuple(notes), reading.gpu, reading.registered, unregistered)


UNREGISTERED_REASON = ("registers no suite (no register_*_ci call) in a repository whose CI runs only the files that "
                       "do; `import-suites` places the registered ones")


def gpu_reason(why: Evidence) -> str:
    """The manual reason of a GPU test on the starter's cpu tier."""
    said = "registers with" if why.kind == "registration" else "uses CUDA:"
    return f"a GPU test ({said} {why.what} at {why.where}); give it a GPU tier, the cpu tier cannot run it"


__all__ = ["CPU_TIER", "DEFAULT_EST_TIME", "UNREGISTERED_REASON", "Starter", "detect_project", "empty_registry", "gpu_reason",
           "measured_est_times",
           "starter_registry",
           "roots_of_tests"]
