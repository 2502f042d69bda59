"""pytest plugin: registry.yaml drives markers, skips, timeouts and reruns.

Loaded for every run by the root ``conftest.py`` (``pytest_plugins = ["ci.pytest_plugin"]``), or
explicitly with ``-p ci.pytest_plugin``. For each collected test file under ``<rootdir>/tests/``:

* unregistered -> a collection error naming the file and printing the YAML entry to add;
* every registered tier becomes a marker (``pytest -m gpu_b200``; markers are declared, so
  ``--strict-markers`` accepts them);
* the item runs if at least one of its tiers' hardware is present (see `ci.hardware`), otherwise
  it is skipped with the missing hardware as the reason; with ``--tier T`` only T's items are
  selected and they run only where T's hardware is present;
* ``manual`` / ``quarantined`` files are skipped with the registry's reason and issue, unless the
  file was named on the command line (without ``--tier``) or ``--include-inactive`` is given;
* ``timeout: S`` becomes ``pytest.mark.timeout(S)`` (pytest-timeout, per test) and ``reruns: N``
  ``pytest.mark.flaky(reruns=N)`` (pytest-rerunfailures), unless the test sets its own.

Files outside ``<rootdir>/tests/`` are left alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ci.hardware import LazyHardware
from ci.registry import REGISTRY_FILENAME, Registry, RegistryError, Status, TestEntry, load_registry

TESTS_DIR = "tests"


@dataclass
class _State:
    registry: Registry
    rootdir: Path
    tier: str | None
    include_inactive: bool
    named_files: set[Path]
    hardware: LazyHardware = field(default_factory=LazyHardware)


_STATE = pytest.StashKey[_State]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ci", "registry.yaml (ci.pytest_plugin)")
    group.addoption("--registry", metavar="PATH", default=None,
                    help=f"registry file (default: <rootdir>/{REGISTRY_FILENAME})")
    group.addoption("--tier", metavar="TIER", default=None,
                    help="select only the tests registered for TIER; skip them unless TIER's hardware is here")
    group.addoption("--include-inactive", action="store_true", default=False,
                    help="also run tests whose registry status is manual or quarantined")


def pytest_configure(config: pytest.Config) -> None:
    option = config.getoption("registry")
    path = Path(option) if option else config.rootpath / REGISTRY_FILENAME
    if not option and not path.is_file():
        return  # not a registry-driven tree (e.g. a pytester sandbox without one)
    try:
        registry = load_registry(path)
    except RegistryError as exc:
        raise pytest.UsageError(
            f"{path}: registry has problems:\n" + "\n".join(f"  {p}" for p in exc.problems)) from None
    tier = config.getoption("tier")
    if tier is not None and tier not in registry.tiers:
        raise pytest.UsageError(f"--tier {tier!r}: unknown tier; known tiers: {', '.join(registry.tiers)}")
    for t in registry.tiers.values():
        config.addinivalue_line("markers", f"{t.name}: registry tier - {t.description}")
    config.stash[_STATE] = _State(
        registry=registry,
        rootdir=config.rootpath,
        tier=tier,
        include_inactive=config.getoption("include_inactive"),
        # CI (`--tier`, e.g. from `python -m ci run`) passes shard file lists: naming a file there
        # is not a developer asking for it, so only --include-inactive runs inactive files.
        named_files=_named_files(config) if tier is None else set(),
    )


def _named_files(config: pytest.Config) -> set[Path]:
    """Files named on the command line (``tests/a/test_x.py`` or ``tests/a/test_x.py::test_y``)."""
    base = config.invocation_params.dir
    out: set[Path] = set()
    for arg in config.args:
        candidate = (base / arg.split("::", 1)[0]).resolve()
        if candidate.is_file():
            out.add(candidate)
    return out


def _relative_test_path(state: _State, path: Path) -> str | None:
    """Repo-relative POSIX path if ``path`` lies in ``<rootdir>/tests/``, else None."""
    try:
        rel = path.resolve().relative_to(state.rootdir.resolve())
    except ValueError:
        return None
    return rel.as_posix() if rel.parts and rel.parts[0] == TESTS_DIR else None


class UnregisteredTestFile(pytest.File):
    """Stands in for a test module missing from the registry; collecting it is an error."""

    def collect(self):  # type: ignore[override]
        from ci.lint import suggested_entry  # deferred: only the error path needs it

        state = self.config.stash[_STATE]
        rel = _relative_test_path(state, self.path) or self.path.as_posix()
        raise self.CollectError(
            f"{rel} is not registered in {state.registry.path}; every test file under {TESTS_DIR}/ "
            f"needs an entry. Add this under 'tests:' (measure est_time, in seconds):\n\n"
            + suggested_entry(rel, state.registry))


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    state = parent.config.stash.get(_STATE, None)
    if state is None:
        return None
    rel = _relative_test_path(state, module_path)
    if rel is None or state.registry.entry(rel) is not None:
        return None
    return UnregisteredTestFile.from_parent(parent, path=module_path)


# tryfirst: tier markers must be on the items before pytest's own -m/-k deselection runs.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = config.stash.get(_STATE, None)
    if state is None:
        return
    entries: dict[Path, TestEntry | None] = {}
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        if item.path not in entries:
            rel = _relative_test_path(state, item.path)
            entries[item.path] = state.registry.entry(rel) if rel is not None else None
        entry = entries[item.path]
        if entry is None:
            kept.append(item)
            continue
        if state.tier is not None and state.tier not in entry.tiers:
            deselected.append(item)
            continue
        _apply(state, item, entry)
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def _apply(state: _State, item: pytest.Item, entry: TestEntry) -> None:
    for tier in entry.tiers:
        item.add_marker(tier)
    if entry.timeout is not None and item.get_closest_marker("timeout") is None:
        item.add_marker(pytest.mark.timeout(entry.timeout))
    if entry.reruns and item.get_closest_marker("flaky") is None:
        item.add_marker(pytest.mark.flaky(reruns=entry.reruns))

    if (entry.status is not Status.ACTIVE and not state.include_inactive
            and item.path.resolve() not in state.named_files):
        issue = f" ({entry.issue})" if entry.issue else ""
        item.add_marker(pytest.mark.skip(
            reason=f"{entry.path} is {entry.status.value} in the registry: {entry.reason}{issue}; "
                   f"run it by naming the file or with --include-inactive"))
        return

    considered = [state.tier] if state.tier is not None else list(entry.tiers)
    reasons: list[str] = []
    for name in considered:
        gap = state.hardware.missing(state.registry.tiers[name])
        if gap is None:
            return
        reasons.append(gap)
    item.add_marker(pytest.mark.skip(reason="; ".join(reasons)))
