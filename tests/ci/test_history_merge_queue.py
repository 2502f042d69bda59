"""Merge queues in the history, on SQLite and a real PostgreSQL: a merge_group run ingested with its
base, its head and its batch (migration 7), judged against main before the batch, and counted as
main's evidence only at a commit main holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ci.history.store as store_module
from ci.__main__ import main as ci_main
from ci.history.merge_queue import parse_batch, tail_pr
from ci.history.migrations import MIGRATIONS, SCHEMA_VERSION
from ci.history.store import open_store
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)

FILE = "tests/ops/test_rms.py"
HEAD = "c0ffee0" * 5 + "c0ffe"
QUEUE_REF = f"refs/heads/gh-readonly-queue/main/pr-15-{HEAD}"


def fail(name: str, error: str, reruns: int = 0) -> Case:
    return Case(FILE, name, "failed", error, f"E   {error}", reruns=reruns)


def ingest(store: str, tmp_path: Path, cases: list[Case], sha: str, event: str, *extra: str) -> int:
    return ci_main(["history", "ingest", str(write_report(tmp_path, cases)), "--repo", "acme/kernels", "--sha", sha,
                    "--event", event, "--tier", "gpu", "--store", store, *extra])


def verdicts(store: str, capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert ci_main(["history", "verdicts", *argv, "--store", store]) == 0
    return capsys.readouterr().out


def test_a_queue_run_is_stored_with_its_batch_and_judged_against_main_before_it(
        store_location: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Main breaks test_b at 0000002; the batch of #12 and #15 (queued on 0000002) fails test_b the
    same way, main's, and test_a, which main passes: the batch's."""
    b_error = "AssertionError: rms mismatch 0.5"
    assert ingest(store_location, tmp_path, [Case(FILE, "test_a"), Case(FILE, "test_b")], "0000001", "push") == 0
    assert ingest(store_location, tmp_path, [Case(FILE, "test_a"), fail("test_b", b_error, 1)], "0000002", "push") == 0
    queue = [fail("test_a", "AssertionError: bf16 tolerance 0.02"), fail("test_b", b_error, 1)]
    assert ingest(store_location, tmp_path, queue, HEAD, "merge_group", "--base-sha", "0000002", "--batch", "#12",
                  "--head-ref", QUEUE_REF) == 0
    with open_store(store_location, create=False) as store:
        assert store.schema_version() == SCHEMA_VERSION == 8
        assert store.fetchall("SELECT pr, event, base_sha, batch, scored FROM reports WHERE sha = ?", [HEAD]) == [
            (None, "merge_group", "0000002", "12 15", 1)]
    out = verdicts(store_location, capsys, "--sha", HEAD[:9]).splitlines()
    assert out[0] == ("merge queue batch (PRs #12, #15) at c0ffee0 on 0000002 (gpu): 0 passed, 2 failed: "
                      "1 broken on main since 0000002, 1 new (probably this change's)")
    assert out[1].split() == ["new", f"{FILE}::test_a", "[gpu]"]
    assert out[2].strip() == ("new in this batch (PRs #12, #15): probably this change's "
                              "(not failing on the default branch)")
    assert out[4].split() == ["broken_on_main", f"{FILE}::test_b", "[gpu]"]
    data = json.loads(verdicts(store_location, capsys, "--sha", HEAD, "--format", "json"))
    assert (data["pr"], data["events"], data["batch"]) == (None, ["merge_group"], [12, 15])


def test_a_landed_batchs_run_is_mains_evidence_and_a_dequeued_ones_is_not(
        store_location: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """test_c fails once on main's push of 0000002 and once in the queue run of that same commit
    (GitHub fast-forwards main to the batch's merge commit): two failing runs of main's commit,
    so a pull request on it failing test_c otherwise is broken on main. test_d failed only in the
    run of a later batch that never landed (00000dd): a pull request failing it is not main's."""
    assert ingest(store_location, tmp_path, [Case(FILE, "test_c"), Case(FILE, "test_d")], "0000001", "push") == 0
    assert ingest(store_location, tmp_path, [fail("test_c", "AssertionError: nan in grad"), Case(FILE, "test_d")],
                  "0000002", "merge_group", "--base-sha", "0000001", "--batch", "8") == 0
    assert ingest(store_location, tmp_path, [fail("test_c", "AssertionError: nan in grad"), Case(FILE, "test_d")],
                  "0000002", "push") == 0
    assert ingest(store_location, tmp_path, [Case(FILE, "test_c"), fail("test_d", "KeyError: 'x'")],
                  "00000dd", "merge_group", "--base-sha", "0000002", "--batch", "7") == 0
    pr = [fail("test_c", "ValueError: loss diverged to 3.1e4"), fail("test_d", "KeyError: 'x'")]
    assert ingest(store_location, tmp_path, pr, "00000ff", "pull_request", "--pr", "20", "--base-sha", "0000002",
                  "--unscored") == 0
    out = verdicts(store_location, capsys, "--pr", "20")
    assert f"broken_on_main  {FILE}::test_c" in out and "broken on main since 0000002" in out
    assert f"new             {FILE}::test_d" in out


def test_verdicts_of_a_pull_request_find_the_batch_it_was_queued_in(
        store_location: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """#15 fails test_a on its commit, then is queued with #12 (HEAD); ``--pr 15`` and ``--pr 12``
    (no run of its own) show the batch's run, ``--pr 5`` and ``--pr 1`` (digits of 15 and 12) none,
    and a commit #15 pushes after leaving the queue is its run again."""
    a_error = "AssertionError: bf16 tolerance 0.02"
    assert ingest(store_location, tmp_path, [Case(FILE, "test_a")], "0000002", "push") == 0
    assert ingest(store_location, tmp_path, [fail("test_a", a_error)], "00000f1", "pull_request", "--pr", "15",
                  "--base-sha", "0000002") == 0
    assert verdicts(store_location, capsys, "--pr", "15").startswith("PR #15 at 00000f1 (gpu): ")
    assert ingest(store_location, tmp_path, [fail("test_a", a_error)], HEAD, "merge_group", "--base-sha", "0000002",
                  "--batch", "12", "--head-ref", QUEUE_REF) == 0
    batch_line = ("merge queue batch (PRs #12, #15) at c0ffee0 on 0000002 (gpu): 0 passed, 1 failed: "
                  "new (probably this change's)")
    for pr in ("15", "12"):
        out = verdicts(store_location, capsys, "--pr", pr).splitlines()
        assert out[0] == batch_line and out[2].strip().startswith("new in this batch (PRs #12, #15)"), out
        data = json.loads(verdicts(store_location, capsys, "--pr", pr, "--format", "json"))
        assert (data["sha"], data["events"], data["batch"]) == (HEAD, ["merge_group"], [12, 15])
    for pr in ("5", "1"):
        assert ci_main(["history", "verdicts", "--pr", pr, "--store", store_location]) == 2
        assert capsys.readouterr().err.strip() == (f"python -m ci history verdicts: no report of pull request #{pr} "
                                                   "in the history")
    assert ingest(store_location, tmp_path, [Case(FILE, "test_a")], "00000f2", "pull_request", "--pr", "15",
                  "--base-sha", "0000002") == 0
    assert verdicts(store_location, capsys, "--pr", "15").startswith("PR #15 at 00000f2 (gpu): 1 passed")
    assert verdicts(store_location, capsys, "--pr", "12").splitlines()[0] == batch_line


@pytest.mark.parametrize("extra, message", [
    (["--event", "merge_group"], "--base-sha is required for a merge_group run"),
    (["--event", "merge_group", "--base-sha", "0000001", "--pr", "3"], "a merge_group run tests a batch"),
    (["--event", "merge_group", "--base-sha", "0000001", "--head-ref", "refs/heads/main"],
     "--head-ref 'refs/heads/main' is not a merge queue's ref"),
    (["--event", "merge_group", "--base-sha", "0000001", "--batch", "12,abc"], "--batch 'abc' is not a pull request"),
    (["--event", "push", "--batch", "12"], "--batch is a merge_group run's pull requests, not a push run's"),
])
def test_bad_queue_input_is_one_line_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        extra: list[str], message: str) -> None:
    store = tmp_path / "h.sqlite"
    argv = ["history", "ingest", str(write_report(tmp_path, [Case(FILE, "test_a")])), "--repo", "acme/kernels",
            "--sha", "00000aa", "--tier", "gpu", "--store", str(store), *extra]
    assert ci_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not store.exists()


def test_queue_refs_and_batches() -> None:
    assert tail_pr(f"gh-readonly-queue/release/v1.2/pr-4021-{HEAD}") == 4021
    assert parse_batch("#12, 15 12") == (12, 15) and parse_batch("") == ()
    for ref in ("refs/heads/gh-readonly-queue/main/pr-0-abc1234", "refs/heads/gh-readonly-queue/main/pr-12",
                "refs/heads/feature/pr-12-abc1234"):
        with pytest.raises(ValueError, match="is not a merge queue's ref"):
            tail_pr(ref)


def test_migration_7_over_a_version_6_store(store_location: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as old:
        old.setattr(store_module, "MIGRATIONS", MIGRATIONS[:6])
        old.setattr(store_module, "SCHEMA_VERSION", 6)
        with open_store(store_location) as store:
            assert store.schema_version() == 6
            store.execute("INSERT INTO reports (report_key, content_hash, source, repo, sha, pr, event, tier, runner, "
                          "shard, run_id, attempt, run_url, cases, attempts, ingested_at) VALUES ('k', 'h', 's', "
                          "'acme/kernels', '0000001', NULL, 'push', 'gpu', '', '', '', 1, '', 1, 1, 'then')").close()
    with open_store(store_location) as store:
        assert store.schema_version() == SCHEMA_VERSION == 8
        assert store.fetchall("SELECT event, batch FROM reports") == [("push", "")]
