"""A dependency's release breaking the default branch (`ci.history.dependency_break`, through
`ci.history.verdict.judge`), told apart from a remote service's outage, on hand-made histories on
SQLite and a real PostgreSQL: an API mismatch with an installed package failing many tests in
everyone's runs, main's at two commits, at code that had passed them (main's, naming the
dependency), against the same shape with a service's line or with one main commit (infra), and
the error lines read as CPython words them; and main's merge queue runs as that evidence for a failure
the other rules call new."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.history.dependency_break import MIN_MAIN_COMMITS, api_mismatch, package_of
from ci.history.ingest import ingest, prepare
from ci.history.model import MERGE_GROUP, RunIdentity
from ci.history.store import open_store
from ci.history.verdict import BROKEN_ON_MAIN, INFRA, NEW
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)
from tests.ci.test_history_outage_shape import EVERY, LEASE, NODES, build, head, judged
from tests.ci.test_history_verdicts import REPO, TIER, sha

RELEASE = ("ImportError: cannot import name 'is_torch_greater_or_equal_than_1_13' from 'transformers.pytorch_utils' "
           "(/opt/venv/lib/python3.10/site-packages/transformers/pytorch_utils.py)",
           "E   ImportError: cannot import name 'is_torch_greater_or_equal_than_1_13' from "
           "'transformers.pytorch_utils' (/opt/venv/lib/python3.10/site-packages/transformers/pytorch_utils.py)")
KWARG = ("TypeError: LlamaAttention.forward() got an unexpected keyword argument 'position_embeddings'",
         "E   TypeError: LlamaAttention.forward() got an unexpected keyword argument 'position_embeddings'")


@pytest.mark.parametrize("line, expected", [
    (RELEASE[0], "transformers.pytorch_utils"),
    ("ImportError: cannot import name 'x' from 'transformers'", "transformers"),  # no file on the line
    ("ImportError: cannot import name 'x' from 'accelerate' (unknown location)", "accelerate"),
    ("ImportError: cannot import name 'Lease' from 'modelstore' (/mnt/models/modelstore/__init__.py)", ""),  # a mount
    ("ImportError: cannot import name 'load' from 'fp4kv.loader' (/home/runner/repo/fp4kv/loader.py)", ""),  # the project's
    ("ImportError: cannot import name 'x' from 'y' (/usr/lib/python3/dist-packages/y/__init__.py)", "y"),
    (KWARG[0], "LlamaAttention.forward"),
    ("TypeError: flash_attn_func() missing 1 required positional argument: 'v'", "flash_attn_func"),
    ("TypeError: Linear.__init__() takes from 3 to 4 positional arguments but 5 were given", "Linear.__init__"),
    ("AttributeError: module 'torch.library' has no attribute 'custom_op'", "torch.library"),
    ("AttributeError: 'LlamaConfig' object has no attribute 'rope_scaling'", "LlamaConfig"),
    ("ModuleNotFoundError: No module named 'transformers.models.llama.modeling_llama'",
     "transformers.models.llama.modeling_llama"),
    ("ModuleNotFoundError: No module named 'transformers'", ""),  # not installed: an install step's failure
    ("AssertionError: TypeError: f() got an unexpected keyword argument 'x'", ""),  # the test's own check quoting it
    ("TypeError: unsupported operand type(s) for +: 'int' and 'str'", ""),  # a bug, not an API mismatch
    ("RuntimeError: CUDA error: an illegal memory access was encountered", ""),
])
def test_an_api_mismatch_is_read_from_python_s_own_words(line: str, expected: str) -> None:
    assert api_mismatch(line) == expected
    assert package_of("transformers.pytorch_utils") == "transformers"


def spell(store, directory: Path, line: tuple[str, str], main_commits: int) -> None:
    """Main passes the 8 tests of 3 files at 0-5; then ``line`` fails them all at main 6 (and 7
    when ``main_commits`` is 2) and in pull requests 10 and 11, based at 3 and 5, which passed them."""
    fail = dict.fromkeys(EVERY, line)
    for i in range(6):
        build(store, directory, sha(i))
    build(store, directory, sha(6), fail)
    build(store, directory, head(10), fail, "pull_request", pr=10, base=sha(3))
    build(store, directory, head(11), fail, "pull_request", pr=11, base=sha(5))
    if main_commits == 2:
        build(store, directory, sha(7), fail)


@pytest.mark.parametrize("line, main_commits, expected", [
    (RELEASE, 2, BROKEN_ON_MAIN),  # the release fails main at 6 and 7: main's, naming the dependency
    (KWARG, 2, BROKEN_ON_MAIN),
    (RELEASE, 1, INFRA),  # one main commit: not yet shown to persist across main's commits
    (LEASE, 2, INFRA),  # a line that is no API mismatch: the outage it was
])
def test_a_release_that_breaks_main_is_main_s_not_an_outage(store_location: str, tmp_path: Path,
                                                            line: tuple[str, str], main_commits: int,
                                                            expected: str) -> None:
    """Pull request 7, based at 4, fails the 8 tests with the spell's line. By its shape (many tests
    of several files, at code that passed them) the spell is a window of time; with an API mismatch
    that main's own runs failed at `MIN_MAIN_COMMITS` commits it is main's, not infra."""
    assert MIN_MAIN_COMMITS == 2
    with open_store(store_location) as store:
        spell(store, tmp_path, line, main_commits)
        verdicts = judged(store, tmp_path, dict.fromkeys(EVERY, line), sha(4))
    assert {v.verdict for v in verdicts.values()} == {expected}, verdicts["test_1"].detail
    if expected == BROKEN_ON_MAIN:
        v = verdicts["test_1"]
        assert v.since == sha(6) and v.infra == "" and v.candidates == ()
        what = "the installed transformers" if line is RELEASE else "LlamaAttention.forward() as installed"
        assert v.detail.startswith(f"broken on main since {sha(6)[:7]} by a dependency, not a commit: {what} no "
                                   f"longer has the API the tests call ({line[0][:120]}); main's own runs (pushes, nightlies, its "
                                   "merge queue) failed so "
                                   "at 2 commits since "), v.detail
        assert v.detail.endswith("a new release of something CI installs unpinned. Not this change's and no outage "
                                 "(a rerun will not pass): pin the dependency or adapt to it on main"), v.detail
    else:
        assert verdicts["test_1"].detail.startswith("infra: outage: "), verdicts["test_1"].detail


def test_main_passing_again_says_merge_the_default_branch(store_location: str, tmp_path: Path) -> None:
    """Main pinned the dependency at 8 (its run passes the 8 tests); pull request 7, still based at
    4, fails them with the release's error: main's, and main no longer fails so."""
    with open_store(store_location) as store:
        spell(store, tmp_path, RELEASE, 2)
        build(store, tmp_path, sha(8))
        verdicts = judged(store, tmp_path, dict.fromkeys(EVERY, RELEASE), sha(4))
    v = verdicts["test_1"]
    assert v.verdict == BROKEN_ON_MAIN and v.since == sha(6), v.detail
    assert v.detail.endswith("main passes it again since, so merge the default branch"), v.detail


def queue_run(store, directory: Path, commit: str, base: str, batch: tuple[int, ...], line: tuple[str, str]) -> None:
    """A merge queue run of ``batch`` on main's ``base``: test_1 fails with ``line``, the others pass."""
    cases = [Case(file, name, "failed", *line) if k == 1 else Case(file, name)
             for k, (file, name) in enumerate(NODES, 1)]
    identity = RunIdentity(REPO, commit, MERGE_GROUP, TIER, runner="r1", base_sha=base, batch=batch, scored=True)
    assert ingest(store, prepare(write_report(directory, cases), identity)).added


@pytest.mark.parametrize("batches, expected", [
    (((20,), (21,)), BROKEN_ON_MAIN),  # two other batches, at main's 5 and 6: main's, across commits
    (((20,),), NEW),  # one: not shown to persist across main's commits
    (((20,), (7,)), NEW),  # the second batch holds the judged pull request: its own change, no evidence
])
def test_main_s_queue_runs_failing_so_make_a_new_failure_main_s(store_location: str, tmp_path: Path,
                                                                batches: tuple[tuple[int, ...], ...],
                                                                expected: str) -> None:
    """Main passes the 8 tests at 0-6. Then merge queue batches on main's 5 and 6 fail test_1 with
    the release's ImportError (batches that fail never land, so rule 3 reads no streak), and pull
    request 7, based at 6, fails it too: one test, no outage's shape, so the other rules say
    ``new``; main's own queue runs at two commits make it main's, worded with them as the evidence."""
    with open_store(store_location) as store:
        for i in range(7):
            build(store, tmp_path, sha(i))
        for k, batch in enumerate(batches):
            queue_run(store, tmp_path, sha(20 + k, "b"), sha(5 + k), batch, RELEASE)
        v = judged(store, tmp_path, {1: RELEASE}, sha(6))["test_1"]
    assert v.verdict == expected, v.detail
    if expected == BROKEN_ON_MAIN:
        assert v.since == sha(5), v.detail
        assert v.detail.startswith(f"broken on main since {sha(5)[:7]}: main's own runs (pushes, nightlies, its merge "
                                   "queue) failed it so at 2 commits since "), v.detail
        assert v.detail.endswith("with an API mismatch: the installed transformers lacks what the tests call "
                                 f"({RELEASE[0][:120]}); if a new release of it is the cause, pin it or adapt to it "
                                 "on main"), v.detail
