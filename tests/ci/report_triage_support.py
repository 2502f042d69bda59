"""A history whose triage is known (for tests/ci/test_report_triage*.py): eight nightly commits of
the default branch, ``c0``..``c7`` (`SHAS`, pushed by `AUTHORS`), one run each except ``c5``, which has two (run ids 5
and 55, in that order), and ``c6``'s cpu report names the pull request that made it (`MERGED_PR`);
run links are GitHub-style, ``https://github.example/acme/serve/actions/runs/N``.

cpu tier, in registry order:
- ``tests/test_aa.py``, ``tests/test_ac.py``: pass at every commit.
- ``tests/test_ab.py``: at ``c5`` run 5 fails (``AssertionError: first try``) and run 55 passes,
  so the merged cell is flaky with 2 attempts; passes everywhere else.
- ``tests/test_flip.py``: fails at ``c6`` only (recently flaky, not failing now).
- ``tests/test_new_break.py``: fails at ``c7`` only: failing since ``c7``, one run.

gpu_b200 tier:
- ``tests/test_zz.py``: pass c0, FAIL c1, pass c2, FAIL c3, no gpu_b200 report at c4, FAIL c5 (both
  runs), c6, c7: failing since ``c3`` (the pass at c2 ends the older streak), 4 failing runs. At
  c7 two of its tests fail: ``test_x`` with `HOSTILE`'s two lines, and ``test_y``. The verdict on
  the c7 failure of ``test_x``: broken on main since ``c3``, last passed at ``c2``.

Pull request 42: commit ``pr1`` (everything passes), then ``pr2``, the newest: cpu
``tests/test_ab.py`` fails (``AssertionError: pr broke it``), ``tests/test_aa.py`` passes. The
verdict: new (main never failed that test with that error).
"""

from __future__ import annotations

from pathlib import Path

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from tests.ci.history_support import Case, write_report
from tests.ci.tree_testutil import write

REPO = "acme/serve"
BASE = "https://github.example/acme/serve"
COMMITS = 8
SHAS = [f"c{i}" + "0" * 6 + f"{i:x}" * 4 for i in range(COMMITS)]
PR, PR_SHAS = 42, ("feed0001", "feed0002")
MERGED_PR = 17  # c6's cpu report was ingested with --pr 17: the pull request that made c6
HOSTILE = '<img src=x onerror="window.__pwned=3"> **boom** `x`\nsecond line, never shown'
AUTHORS = [f"dev{i}" for i in range(COMMITS)]
AUTHORS[3] = "<b>mallory</b>"  # who broke it, and a name that is markup
CPU = ["tests/test_aa.py", "tests/test_ab.py", "tests/test_ac.py", "tests/test_flip.py", "tests/test_new_break.py"]

REGISTRY = "version: 1\ntiers:\n" + (
    "  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}\n"
    "  gpu_b200: {description: b200, runner_labels: [gpu-b200], gpu_count: 1, arch: sm_100}\n"
    "tests:\n") + "".join(f'  {p}: {{tiers: [cpu], est_time: 1, owner: "@cpu", status: active}}\n' for p in CPU) + (
    '  tests/test_zz.py: {tiers: [gpu_b200], est_time: 1, owner: "@gpu", status: active}\n')

# (tier, file) -> status per commit, oldest first
EXPECTED = {
    ("cpu", "tests/test_aa.py"): ["pass"] * 8,
    ("cpu", "tests/test_ab.py"): ["pass"] * 5 + ["flaky", "pass", "pass"],
    ("cpu", "tests/test_ac.py"): ["pass"] * 8,
    ("cpu", "tests/test_flip.py"): ["pass"] * 6 + ["fail", "pass"],
    ("cpu", "tests/test_new_break.py"): ["pass"] * 7 + ["fail"],
    ("gpu_b200", "tests/test_zz.py"): ["pass", "fail", "pass", "fail", "not-run", "fail", "fail", "fail"],
}
ORDER = [("cpu", "tests/test_new_break.py"), ("gpu_b200", "tests/test_zz.py"), ("cpu", "tests/test_ab.py"),
         ("cpu", "tests/test_flip.py"), ("cpu", "tests/test_aa.py"), ("cpu", "tests/test_ac.py")]


def write_repo(root: Path) -> Path:
    """The repository (registry and test files) under ``root``; its registry path."""
    write(root, {"registry.yaml": REGISTRY, **{p: "def test_x():\n    pass\n" for p in CPU + ["tests/test_zz.py"]}})
    return root / "registry.yaml"


def _case(file: str, fails: bool, message: str = "AssertionError: wrong answer") -> Case:
    return Case(file, "test_x", "failed", message, "E   detail") if fails else Case(file, "test_x")


def _cpu(commit: int, run_id: int) -> list[Case]:
    return [_case("tests/test_aa.py", False), _case("tests/test_ab.py", run_id == 5, "AssertionError: first try"),
            _case("tests/test_ac.py", False), _case("tests/test_flip.py", commit == 6),
            _case("tests/test_new_break.py", commit == 7)]


def _gpu(commit: int) -> list[Case]:
    if commit == 7:
        return [Case("tests/test_zz.py", "test_x", "failed", HOSTILE, "E   boom"),
                Case("tests/test_zz.py", "test_y", "failed", "AssertionError: also")]
    return [_case("tests/test_zz.py", commit in (1, 3, 5, 6))]


def build_history(store_location: str, directory: Path) -> None:
    """Ingest the history of the module docstring into the store at ``store_location``."""
    with open_store(store_location) as store:
        def add(cases: list[Case], ident: RunIdentity) -> None:
            assert ingest(store, prepare(write_report(directory, cases), ident)).added

        for commit, sha in enumerate(SHAS):
            for run_id in ((5, 55) if commit == 5 else (commit,)):
                url = f"{BASE}/actions/runs/{run_id}"
                add(_cpu(commit, run_id), RunIdentity(REPO, sha, "nightly", "cpu", run_id=str(run_id), run_url=url,
                                                      author=AUTHORS[commit], pr=MERGED_PR if commit == 6 else None))
                if commit != 4:  # the gpu_b200 runner never reported that night
                    add(_gpu(commit), RunIdentity(REPO, sha, "nightly", "gpu_b200", run_id=str(run_id),
                                                  run_url=url, author=AUTHORS[commit]))
        for sha, ab_fails in zip(PR_SHAS, (False, True)):
            add([_case("tests/test_aa.py", False), _case("tests/test_ab.py", ab_fails, "AssertionError: pr broke it")],
                RunIdentity(REPO, sha, "pull_request", "cpu", pr=PR, run_id="9" + sha[-1],
                            run_url=f"{BASE}/actions/runs/9{sha[-1]}"))
