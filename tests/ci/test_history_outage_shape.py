"""An outage told by its shape (`ci.history.outages.timed_outage`, through `ci.history.verdict.judge`),
whatever its error line says, on hand-made histories on SQLite and a real PostgreSQL: one line
failing many tests of several files in everyone's runs for a while, at code that had passed them
(infra), against a shared module's breakage that fails as many tests with one line from a commit
on (main's), and the boundaries between them (one test, one file, a flake now and then, a
breakage during an outage)."""

from __future__ import annotations

from itertools import count
from pathlib import Path

import pytest

from ci.history import outages
from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.run_results import load_run
from ci.history.store import open_store
from ci.history.verdict import BROKEN_ON_MAIN, FLAKY, INFRA, Verdict, judge
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)
from tests.ci.test_history_verdicts import REPO, TIER, sha

LOAD, API, CACHE = "tests/models/test_load.py", "tests/serve/test_api.py", "tests/kv/test_cache.py"
NODES = ((LOAD, "test_1"), (LOAD, "test_2"), (LOAD, "test_3"), (LOAD, "test_4"), (API, "test_5"), (API, "test_6"),
         (CACHE, "test_7"), (CACHE, "test_8"))
EVERY = frozenset(range(1, 9))
# a line no rule knows: the model store's mount lost its lease (an outage's words change every time)
LEASE = ("RuntimeError: model store lease expired for /mnt/models (code 7)",
         "E   RuntimeError: model store lease expired for /mnt/models (code 7)")
RENAMED = ("ImportError: cannot import name 'load_weights' from 'fp4kv.loader'",
           "E   ImportError: cannot import name 'load_weights' from 'fp4kv.loader'")
_RUN_IDS = count(1)


def build(store, directory: Path, commit: str, failing: dict[int, tuple[str, str]] | None = None,
          event: str = "push", pr: int | None = None, base: str = "", runner: str = "r1") -> None:
    """One report of all `NODES` at ``commit``: test_k fails with ``failing[k]``, the others pass."""
    failing = failing or {}
    cases = [Case(file, name, "failed", *failing[k]) if k in failing else Case(file, name)
             for k, (file, name) in enumerate(NODES, 1)]
    identity = RunIdentity(REPO, commit, event, TIER, pr=pr, runner=runner, run_id=str(next(_RUN_IDS)), base_sha=base,
                           scored=event == "push")
    assert ingest(store, prepare(write_report(directory, cases), identity)).added


def head(pr: int, push: int = 0) -> str:
    return f"{pr:04x}{'e' * 35}{push}"


def judged(store, directory: Path, failing: dict[int, tuple[str, str]], base: str) -> dict[str, Verdict]:
    """Pull request 7, based at ``base``, fails ``failing``: its verdicts by test name."""
    build(store, directory, head(7), failing, "pull_request", pr=7, base=base)
    return {v.node.rsplit("::", 1)[-1]: v for v in judge(store, load_run(store, pr=7).failures, merge_base=base)}


def outage(store, directory: Path, tests: frozenset[int] = EVERY, line: tuple[str, str] = LEASE) -> None:
    """Main at 6 and 7 and pull requests 10 and 11 (based at 3 and 5, which passed every test) fail
    ``tests`` with ``line``, every run for a while."""
    fail = dict.fromkeys(tests, line)
    build(store, directory, sha(6), fail)
    build(store, directory, head(10), fail, "pull_request", pr=10, base=sha(3))
    build(store, directory, head(11), fail, "pull_request", pr=11, base=sha(5))
    build(store, directory, sha(7), fail)


@pytest.mark.parametrize("story, tests, expected", [
    ("outage", EVERY, INFRA),  # 8 tests of 3 files, at code that passed them: a window of time
    ("one_test", frozenset({1}), BROKEN_ON_MAIN),  # one test only: no outage, main's streak (rule 3)
    ("one_file", frozenset({1, 2, 3, 4}), BROKEN_ON_MAIN),  # one file's tests only: that file's own trouble
    ("three_tests", frozenset({1, 5, 7}), BROKEN_ON_MAIN),  # three tests are too few to tell a window of time
    ("one_source", EVERY, BROKEN_ON_MAIN),  # only main failed them, from 6 on: a commit's shape
])
def test_an_outage_is_told_by_its_shape_whatever_its_line(store_location: str, tmp_path: Path, story: str,
                                                          tests: frozenset[int], expected: str) -> None:
    """Main passes all 8 tests at 0-5; then a line no rule knows fails ``tests`` in main's runs at 6
    and 7 and in pull requests based at 3 and 5, every run. Pull request 7, based at 4, fails them
    too: infra naming the outage, not main's streak since 6 (nor its change)."""
    with open_store(store_location) as store:
        for i in range(6):
            build(store, tmp_path, sha(i))
        if story == "one_source":
            for i in (6, 7, 8):
                build(store, tmp_path, sha(i), dict.fromkeys(tests, LEASE))
        else:
            outage(store, tmp_path, tests)
        verdicts = judged(store, tmp_path, dict.fromkeys(tests, LEASE), sha(4))
    assert {v.verdict for v in verdicts.values()} == {expected}, verdicts["test_1"].detail
    if expected == INFRA:
        assert {v.infra for v in verdicts.values()} == {"outage"}
        assert verdicts["test_1"].detail.startswith(
            f"infra: outage: {LEASE[0]} failed 8 tests in 5 runs on runner r1 from "), verdicts["test_1"].detail
        assert verdicts["test_1"].detail.endswith(": a window of time, not a commit (in runs of 3 pull requests and "
                                                  "main commits the same code had passed them)")


@pytest.mark.parametrize("during_outage", [False, True])
def test_a_shared_module_s_breakage_stays_main_s(store_location: str, tmp_path: Path, during_outage: bool) -> None:
    """Commit 6 renames a shared module's function: tests 1, 2, 5 and 7 (three files) fail with one
    ImportError in every run holding 6, whenever it ran (main at 6, again later, and at 7; pull
    request 11 based at 6), its own pull request 10 (based at 5) included; pull request 12, based
    at 4 and run after, passes them. The code, not the time: pull request 7 based at 7 is told
    main's. ``during_outage``: the other four tests meanwhile fail with an outage's line in
    everyone's runs, and stay infra beside the breakage."""
    broken = dict.fromkeys((1, 2, 5, 7), RENAMED)
    down = dict.fromkeys((3, 4, 6, 8), LEASE) if during_outage else {}
    with open_store(store_location) as store:
        for i in range(6):
            build(store, tmp_path, sha(i))
        build(store, tmp_path, head(10), broken | down, "pull_request", pr=10, base=sha(5))
        build(store, tmp_path, sha(6), broken | down)
        build(store, tmp_path, head(11), broken | down, "pull_request", pr=11, base=sha(6))
        build(store, tmp_path, head(12), down, "pull_request", pr=12, base=sha(4))
        build(store, tmp_path, sha(6), broken | down)
        build(store, tmp_path, sha(7), broken | down)
        verdicts = judged(store, tmp_path, broken | down, sha(7))
    assert {name: v.verdict for name, v in verdicts.items()} == (
        {f"test_{k}": BROKEN_ON_MAIN for k in broken} | {f"test_{k}": INFRA for k in down}), verdicts["test_1"].detail
    assert verdicts["test_1"].since == sha(6)


PORT = ("OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000): address already in use",
        "E   OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 8000)")


def test_a_flake_that_fails_many_tests_now_and_then_is_no_outage(store_location: str, tmp_path: Path) -> None:
    """Over 20 main commits and pull requests 10-12, tests of three files fail now and then with
    one line (a port in use), at code that passed them, each beside passing runs: a flake's
    scatter, not a window that fails them all. Pull request 7's one failure of it is no outage."""
    with open_store(store_location) as store:
        for i in range(20):
            build(store, tmp_path, sha(i), {1 + i % 8: PORT} if i % 4 == 3 else {})
        for pr in (10, 11, 12):
            build(store, tmp_path, head(pr), {pr - 5: PORT}, "pull_request", pr=pr, base=sha(pr))
        verdicts = judged(store, tmp_path, {1: PORT}, sha(19))
    assert verdicts["test_1"].verdict == FLAKY, verdicts["test_1"].detail


@pytest.mark.parametrize("later, expected", [
    ("main_retry", INFRA),  # main's retry of 7 passed them all: the same code fails and passes by the hour
    ("", BROKEN_ON_MAIN),  # every run at 6 or 7 failed them: a commit's shape, so far
    ("pr_passed", BROKEN_ON_MAIN),  # a pull request based at 7 passed them: it may be the fix, not the hour
    ("pr_retries", INFRA),  # pull requests 10 and 11 retried the same heads and passed: the hour, not the code
])
def test_the_same_commit_passing_later_tells_an_outage(store_location: str, tmp_path: Path, later: str,
                                                       expected: str) -> None:
    """The outage began as commit 6 landed, so every failing run holds 6 or 7: main at 6 and 7 and
    pull requests 10, 11 and 7 based at 7. Then main's retry of commit 7 passes all 8 tests (the
    mount is back), or retries of pull requests 10 and 11 at the same heads do, or pull request 12
    based at 7 does. Asked again at the end, pull request 7's failures are the outage's only when
    the same code passed: main's own, or the same heads."""
    fail = dict.fromkeys(EVERY, LEASE)
    with open_store(store_location) as store:
        for i in range(6):
            build(store, tmp_path, sha(i))
        build(store, tmp_path, sha(6), fail)
        build(store, tmp_path, sha(7), fail)
        for pr in (10, 11, 7):
            build(store, tmp_path, head(pr), fail, "pull_request", pr=pr, base=sha(7))
        if later == "main_retry":
            build(store, tmp_path, sha(7))
        elif later == "pr_passed":
            build(store, tmp_path, head(12), None, "pull_request", pr=12, base=sha(7))
        elif later == "pr_retries":
            for pr in (10, 11):
                build(store, tmp_path, head(pr), None, "pull_request", pr=pr, base=sha(7))
        verdicts = judge(store, load_run(store, pr=7).failures, merge_base=sha(7))
    assert {v.verdict for v in verdicts} == {expected}, verdicts[0].detail


GENERIC = ("AssertionError", "E   AssertionError")
# torch.testing's tolerance check, one line shared by many tests: the test's own comparison, no service's
CLOSE = ("AssertionError: Tensor-likes are not close!",
         "E   AssertionError: Tensor-likes are not close!\nE   Mismatched elements: 2 / 65536 (0.0%)")
CLOSE_SETUP = ('failed on setup with "AssertionError: Tensor-likes are not close!"',
               "E   AssertionError: Tensor-likes are not close!")
EQUAL = ("assert 'lease expired' == 'ok'", "E   assert 'lease expired' == 'ok'")
MOUNT_IMPORT = ("ImportError: cannot import name 'Lease' from 'modelstore' (/mnt/models/modelstore/__init__.py)",
                "E   ImportError: cannot import name 'Lease' from 'modelstore' (/mnt/models/modelstore/__init__.py)")


@pytest.mark.parametrize("story, window, line, expected", [
    ("spell", 4, LEASE, (8, 3, 4, 3)),  # main at 7, pull requests 10, 11, 7 (based at 3, 5, 4, which passed them)
    ("spell", 3, LEASE, (8, 3, 3, 2)),  # the report at newest - 3 (pull request 10) left out
    ("spell", 2, LEASE, None),  # main at 7 and pull request 7: one source's evidence
    ("spell", 20, GENERIC, None),  # a line that names no cause is no outage, whatever its shape
    ("spell", 20, CLOSE, None),  # the same shape with a tolerance check's line: the tests' own, never an outage
    ("spell", 20, CLOSE_SETUP, None),  # so inside pytest's setup wrapper
    ("spell", 20, EQUAL, None),  # a bare assert, even one quoting a service's words
    ("spell", 20, MOUNT_IMPORT, (8, 3, 5, 3)),  # an ImportError's runs (kind "broken") count as failing so
    ("two_runners", 20, LEASE, (8, 3, 5, 3)),  # pull request 11 ran on r2: the spell names no runner
    ("two_files", 20, LEASE, (4, 2, 5, 3)),  # tests 1, 2, 5, 6: `MIN_TESTS` tests of `SHAPE_MIN_FILES` files
    ("passes", 20, LEASE, (8, 3, 5, 3)),  # then 5 passing runs of main: 5 of 10 runs since failed so, `DENSE`
    ("6_passes", 20, LEASE, None),  # 5 of 11: a flake's scatter
    ("other_line", 20, LEASE, None),  # 6 runs failing with another line do not fail so
    ("queue", 20, LEASE, None),  # for 6 and 10: batches based at 5, the batch's code: pull request 11's evidence alone
])
def test_timed_outage_boundaries(store_location: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, story: str,
                                 window: int, line: tuple[str, str], expected: tuple[int, ...] | None) -> None:
    """`timed_outage` asked directly, as of pull request 7's run (the newest report): main passes the
    8 tests at 0-5, then ``line`` fails them all at main 6, pull requests 10 and 11 (based at 3 and
    5) and main 7; then the ``story``; then pull request 7, based at 4. ``expected``: the outage's
    tests, files, runs and evidence, or None. The spell is the newest `SHAPE_WINDOW` reports'."""
    monkeypatch.setattr(outages, "SHAPE_WINDOW", window)
    fail = dict.fromkeys(frozenset({1, 2, 5, 6}) if story == "two_files" else EVERY, line)
    with open_store(store_location) as store:
        for i in range(6):
            build(store, tmp_path, sha(i))
        if story == "queue":
            for b in (1, 2):
                build(store, tmp_path, head(20 + b), fail, "merge_group", base=sha(5))
        else:
            build(store, tmp_path, sha(6), fail)
            build(store, tmp_path, head(10), fail, "pull_request", pr=10, base=sha(3))
        build(store, tmp_path, head(11), fail, "pull_request", pr=11, base=sha(5),
              runner="r2" if story == "two_runners" else "r1")
        build(store, tmp_path, sha(7), fail)
        for i in range({"passes": 5, "6_passes": 6, "other_line": 6}.get(story, 0)):
            build(store, tmp_path, sha(8 + i), dict.fromkeys(EVERY, RENAMED) if story == "other_line" else None)
        if story != "queue":
            build(store, tmp_path, head(7), fail, "pull_request", pr=7, base=sha(4))
        (f, *_) = load_run(store, sha=sha(7) if story == "queue" else head(7)).failures
        found = outages.timed_outage(store, f.error, f.fingerprint, repo=REPO)
    if expected is None:
        assert found is None, found
        return
    assert found is not None and (found.tests, found.files, found.runs, found.evidence) == expected, found
    assert found.runner == ("" if story == "two_runners" else "r1") and found.first < found.last
