"""A repository and a history whose every HUD cell, rank and bar is known (for tests/ci/test_report*.py).

Six pushes of the default branch (runs 0..5, run ids "100".."105", links https://ci.example/run/N):

- ``tests/test_a.py`` (cpu, @alpha, est_time 10, timeout 60): pass, pass, FAIL, pass, flaky (failed,
  passed on its rerun), pass; 10 s a run, 40 s in run 4 (p90 40: drift).
- ``tests/test_b.py`` (cpu and gpu_h100, @beta, est_time 2): on cpu ``test_wobble`` fails and passes
  on its rerun in runs 1, 3 and 5 (flaky), ``test_ok`` always passes; on gpu_h100 every test skips
  (no hardware).
- ``tests/test_c.py`` (cpu, quarantined) and ``tests/test_d.py`` (gpu_h100, manual): never run.
- ``tests/test_e.py`` (cpu, @alpha, est_time 7): passes in every run.
- `EVIL_FILE` (unregistered, a name full of markup): fails in run 5 only.

Pull request 7 (sha `PR_SHA`) changed tests/test_a.py and tests/test_b.py; its cpu run holds
only tests/test_a.py, which passed.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from tests.ci.history_support import Case, write_report
from tests.ci.tree_testutil import write

if TYPE_CHECKING:
    from ci.report.browser import Browser, Tab
    from ci.report.model import Report

REPO = "acme/gpu"
RUNS = 6
PR = 7
PR_SHA = "beef00017"
EVIL_FILE = 'tests/evil_<script>window.__pwned=1</script>"q\'&.py'
EVIL_NAME = 'test_<img src=x onerror="window.__pwned=2">**md**'

REGISTRY = """\
version: 1
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  gpu_h100: {description: h100, runner_labels: [gpu-h100], gpu_count: 1, arch: sm_90}
tests:
  tests/test_a.py: {tiers: [cpu], est_time: 10, timeout: 60, owner: "@alpha", status: active}
  tests/test_b.py: {tiers: [cpu, gpu_h100], est_time: 2, owner: "@beta", status: active}
  tests/test_c.py: {tiers: [cpu], est_time: 3, owner: "@beta", status: quarantined, reason: "wrong scale", issue: "https://example.com/i/1"}
  tests/test_d.py: {tiers: [gpu_h100], est_time: 4, owner: "@gamma", status: manual, reason: "needs a person"}
  tests/test_e.py: {tiers: [cpu], est_time: 7, owner: "@alpha", status: active}
"""

# The expected matrix (tier, file) -> status per run, as the module docstring tells it.
EXPECTED = {
    ("cpu", "tests/test_a.py"): ["pass", "pass", "fail", "pass", "flaky", "pass"],
    ("cpu", "tests/test_b.py"): ["pass", "flaky", "pass", "flaky", "pass", "flaky"],
    ("cpu", "tests/test_c.py"): ["quarantined"] * RUNS,
    ("cpu", "tests/test_e.py"): ["pass"] * RUNS,
    ("gpu_h100", "tests/test_b.py"): ["skipped"] * RUNS,
    ("gpu_h100", "tests/test_d.py"): ["manual"] * RUNS,
    ("cpu", EVIL_FILE): ["not-run"] * 5 + ["fail"],
}


def write_repo(root: Path) -> Path:
    """The repository (registry and test files) under ``root``; its registry path."""
    write(root, {"registry.yaml": REGISTRY, **{f"tests/test_{x}.py": "def test_x():\n    pass\n" for x in "abcde"}})
    return root / "registry.yaml"


def _cpu_cases(run: int) -> list[Case]:
    a_time = 40.0 if run == 4 else 10.0
    if run == 2:
        a = Case("tests/test_a.py", "test_one", "failed", "AssertionError: off by one", "E   AssertionError", time=a_time)
    else:
        a = Case("tests/test_a.py", "test_one", reruns=1 if run == 4 else 0, time=a_time / (2 if run == 4 else 1))
    cases = [a, Case("tests/test_b.py", "test_ok", time=0.5),
             Case("tests/test_b.py", "test_wobble", reruns=1 if run % 2 else 0, time=0.5),
             Case("tests/test_e.py", "test_e", time=7.0)]
    if run == RUNS - 1:
        cases.append(Case(EVIL_FILE, EVIL_NAME, "failed", "AssertionError: <b>bold</b>", "E   x"))
    return cases


def build_history(store_location: str, directory: Path) -> None:
    """Ingest the history of the module docstring into the store at ``store_location``."""
    with open_store(store_location) as store:
        for run in range(RUNS):
            sha = f"{run:07x}abc"
            for tier, cases in (("cpu", _cpu_cases(run)),
                                ("gpu_h100", [Case("tests/test_b.py", "test_ok", "skipped", "no GPU")])):
                ident = RunIdentity(REPO, sha, "push", tier, run_id=str(100 + run),
                                    run_url=f"https://ci.example/run/{run}")
                assert ingest(store, prepare(write_report(directory, cases), ident)).added
        ident = RunIdentity(REPO, PR_SHA, "pull_request", "cpu", pr=PR, run_id="900", run_url="https://ci.example/run/pr")
        assert ingest(store, prepare(write_report(directory, [Case("tests/test_a.py", "test_one")]), ident)).added


def hud_page(base: Path, write: Callable[[Path], Path], history: Callable[[str, Path], None], pr: int,
             changed: list[str], *options: str) -> Path:
    """Under ``base``: the repository ``write`` makes, the SQLite history ``history`` ingests, and
    `ci report`'s page of them with pull request ``pr``'s view (``changed``) and ``options``; the page."""
    from ci.__main__ import main as ci_main

    registry = write(base / "repo")
    (base / "xml").mkdir()
    store = str(base / "history.sqlite")
    history(store, base / "xml")
    listed = base / "changed.txt"
    listed.write_text("".join(f"{c}\n" for c in changed))
    assert ci_main(["report", "--html", str(base / "out"), "--store", store, "--registry", str(registry),
                    "--pr", str(pr), "--changed-files", str(listed), "--min-runs", "1", *options]) == 0
    return base / "out" / "index.html"


@contextmanager
def chromium(width: int = 1400, height: int = 900) -> Iterator["Browser"]:
    """A headless Chromium whose tabs are ``width`` x ``height``; a missing one FAILS the test (a
    browser test that skipped would check nothing)."""
    from ci.report.browser import Browser, find_chromium

    assert find_chromium(), "no chromium: run `python3 ci/bootstrap.py`, which finds or installs one"
    with Browser(width=width, height=height) as b:
        yield b


@contextmanager
def clean_tab(browser: "Browser", page: Path) -> Iterator["Tab"]:
    """A tab showing ``page``; on leaving, asserts that nothing went wrong in it: no console error,
    uncaught exception or CSP violation, no injected script (``window.__pwned``) and no dialog
    (an injected ``alert``)."""
    tab = browser.open(page)
    yield tab
    assert tab.errors == [] and tab.eval("window.__pwned === undefined") is True
    assert not [e for e in browser.events if e["method"] == "Page.javascriptDialogOpening"]
    tab.close()


def known_store(location: str, base: Path, write: Callable[[Path], Path],
                history: Callable[[str, Path], None]) -> tuple[str, Path]:
    """The repository ``write`` makes under ``base`` and the history ``history`` ingests at
    ``location``: (the store's location, the registry's path)."""
    registry = write(base / "repo")
    (base / "xml").mkdir()
    history(location, base / "xml")
    return location, registry


def built_report(location: str, registry_path: Path, shards: int | None = 2, **kw: object) -> "Report":
    """`build_report` of the store at ``location`` (flaky scores from one trial on), with every
    tier planned on ``shards`` shards (None: no plans)."""
    from ci.registry import load_registry
    from ci.report.build import build_report
    from ci.selection.plan import plan

    registry = load_registry(registry_path)
    plans = [plan(registry, t, shards=shards) for t in registry.tiers] if shards else []
    with open_store(location, create=False) as store:
        return build_report(store, registry, plans, min_trials=1, **kw)  # type: ignore[arg-type]
