"""``python -m tools.rerun culprit --runner dispatch`` with error signatures: each failed run's
JUnit is read from the artifact the run publishes (the fake GitHub's "list workflow run
artifacts" and "download an artifact", over real HTTP), journalled with its conclusion, and
weighed as the local runner's signatures are. The window and the runners are
tests/rerun/test_rerun_culprit.py's: commit 6 of 9 breaks the test."""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ci.commands.culprit_local import junit_signature
from tests.ci.test_culprit_cli import CULPRIT, repo  # noqa: F401 - ci culprit's own window, reused
from tests.rerun.test_rerun_culprit import Runners, _argv, _env, _names, runners  # noqa: F401 - fixtures too
from tools.rerun.fake_actions import BLOB_PATH, zipped
from tools.rerun import culprit_junit
from tools.rerun.culprit_junit import Signature, failed_signature
from tools.rerun.fake_github import FakeGitHub, FakeRun, Scripted
from rerun_support import HEAD_SHA, REPO

BROKEN, FLAKED = "AssertionError: add(2, 3) == -1, expected 5", "ConnectionError: the GPU server did not start"


def junit(message: str) -> str:
    """A failed test_add as pytest's JUnit writes it (xunit1)."""
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="1" failures="1">'
            '<testcase classname="tests.test_calc" name="test_add" file="tests/test_calc.py" time="0.1">'
            f'<failure message="{message}">E   {message}</failure></testcase></testsuite></testsuites>')


def publish(fake: FakeGitHub, run: FakeRun, message: str) -> None:
    """The run's artifact as rerun-test-dispatch.yml uploads reports/: its JUnit and runner.txt."""
    fake.add_artifact(run, f"rerun-test-pr0-cpu-{run.id}-1", zipped({"junit-rerun.xml": junit(message),
                                                                     "runner.txt": "gpu-7\n"}))


def flaky(fake: FakeGitHub, shas: list[str], seed: int, rate: float, artifacts: bool,
          published: dict[str, str] | None = None):
    """Seeded outcomes: the n-th run of a commit flakes (fails with `FLAKED`) with ``rate`` drawn from
    (seed, commit, n), the same draws whatever the search asks; else it fails with `BROKEN` at
    the culprit and after. The verification's runs do not flake (a failing --good is bad input).
    With ``artifacts`` each failed run publishes its JUnit (its message kept in ``published`` by the
    run's URL path when given)."""
    seen: dict[str, int] = {}

    def complete(run: FakeRun, sha: str) -> None:
        n = seen[sha] = seen.get(sha, 0) + 1
        flaked = random.Random(f"{seed} {sha} {n}").random() < rate and (n > 1 or sha not in (shas[0], shas[-1]))
        run.conclusion = "failure" if flaked or shas.index(sha) >= CULPRIT else "success"
        if artifacts and run.conclusion == "failure":
            publish(fake, run, FLAKED if flaked else BROKEN)
            if published is not None:
                published[f"/actions/runs/{run.id}"] = FLAKED if flaked else BROKEN
    return complete


def _search(root: Path, api_url: str, state: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = _argv(api_url, state, "--tier", "cpu", "--test", "tests/test_calc.py", *args)
    return subprocess.run(argv, cwd=root, env=_env(tmp), capture_output=True, text=True, timeout=300)


def _answer(stdout: str) -> str:
    return next(line.split(": ", 1)[1] for line in stdout.splitlines() if ": culprit " in line)


def _downloads(fake: FakeGitHub) -> list[str]:
    with fake.lock:
        return [r.path for r in fake.requests if r.path.startswith(BLOB_PATH)]


def test_each_dispatched_failure_is_weighed_with_the_signature_of_the_junit_it_published(repo, fake, api_url, runners,
                                                                                       tmp_path) -> None:
    """A test that flakes (30 % of runs) with a message other than the breakage's: the search that
    reads each failed run's JUnit artifact learns the breakage's signature from --bad's run, and
    every failed run it weighed carries the signature of the message that run published (runs of
    one message share one, the two messages differ); the same outcomes with no artifacts are
    pass/fail only. Both find the culprit. Which probes the search picks depends on the runs' times
    (its cost per probe), so how many runs each spends is the bench's measure (`python -m bench
    culprit`; here seed 7 read 10 with signatures against 18 without), not this test's."""
    root, shas = repo
    for artifacts in (True, False):
        published: dict[str, str] = {}
        runners.on_complete = flaky(fake, shas, seed=7, rate=0.3, artifacts=artifacts, published=published)
        done = _search(root, api_url, tmp_path / f"{artifacts}.json", tmp_path, "--good", shas[0], "--bad", shas[9],
                       "--flake-rate", "0.3", "--w-low", "1", "--budget", "30", "--workflow", f"w{artifacts}.yml")
        assert done.returncode == 0 and f"culprit {shas[CULPRIT]} " in done.stdout, done.stdout + done.stderr
        state = json.loads((tmp_path / f"{artifacts}.json").read_text())
        failed = [r for r in state["runs"] if r["failed"]]
        if artifacts:
            assert "breakage signature " in done.stdout and all(len(r["signatures"]) == 1 and r["signatures"][0]
                                                                for r in failed), done.stdout
            by_message: dict[str, set[str]] = {}
            for r in failed:
                by_message.setdefault(published["/actions/runs/" + r["link"].rsplit("/actions/runs/", 1)[1]], set()).add(r["signatures"][0])
            assert all(len(signatures) == 1 for signatures in by_message.values()), by_message
            assert len(set.union(*by_message.values())) == len(by_message), by_message
        else:
            assert "no breakage signature" in done.stdout and all(r["signatures"] == [""] for r in failed)
            assert "(pass/fail evidence only: https://" in done.stdout and "it published no JUnit artifact" in done.stdout


@pytest.mark.parametrize("kind, words", [
    ("missing", "it published no JUnit artifact (none, or expired)"),
    ("expired", "it published no JUnit artifact (none, or expired)"),
    ("not a zip", "is not a readable zip"),
    ("no report", "holds no JUnit report naming a failed test"),
])
def test_a_run_without_a_readable_artifact_is_pass_fail_evidence_named_in_the_answer(repo, fake, api_url, runners,
                                                                                      tmp_path, kind, words) -> None:
    """--bad's run publishes no readable JUnit: its failure counts, its signature is unknown (so no
    breakage signature is learned), and the answer's line for that run says why; the other failed
    runs' signatures are read."""
    root, shas = repo

    def complete(run: FakeRun, sha: str) -> None:
        if run.conclusion != "failure":
            return
        if sha != shas[9]:
            publish(fake, run, BROKEN)
        elif kind != "missing":
            data = {"expired": zipped({"junit-rerun.xml": junit(BROKEN)}), "not a zip": b"PK\x03\x04 cut short",
                    "no report": zipped({"runner.txt": "gpu-7\n"})}[kind]
            fake.add_artifact(run, f"rerun-test-pr0-cpu-{run.id}-1", data, expired=kind == "expired")
    runners.on_complete = complete
    done = _search(root, api_url, tmp_path / "s.json", tmp_path, "--good", shas[0], "--bad", shas[9])
    assert done.returncode == 0 and f"culprit {shas[CULPRIT]} " in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "no breakage signature" in done.stdout
    line = next(x for x in done.stdout.splitlines() if f"run {shas[9][:12]} failed: " in x)
    assert re.search(r"failed: (\S+) \(pass/fail evidence only: \1: ", line) and words in line, line
    runs = json.loads((tmp_path / "s.json").read_text())["runs"]
    assert [r["signatures"] for r in runs if r["sha"] == shas[9]] == [[""]]
    assert all(r["signatures"][0] for r in runs if r["failed"] and r["sha"] != shas[9])


def test_killed_between_download_and_journal_write(repo, fake, api_url, runners, tmp_path) -> None:
    """A kill -9 while a failed run's artifact is being downloaded (the run completed, its
    conclusion and signature not journalled yet): the resumed search finds that run by its
    run-name (no dispatch twice), reads its artifact again, downloads no artifact it had
    journalled, and gives the same answer as a search never killed."""
    root, shas = repo
    runners.on_complete = lambda run, sha: publish(fake, run, BROKEN) if run.conclusion == "failure" else None
    reference = _search(root, api_url, tmp_path / "ref.json", tmp_path, "--good", shas[0], "--bad", shas[9],
                        "--workflow", "reference.yml")
    assert reference.returncode == 0, reference.stdout + reference.stderr
    downloads, names = len(_downloads(fake)), set(_names(fake))
    fake.fail("GET", re.escape(BLOB_PATH), Scripted(route=True), Scripted(delay=60, route=True))  # the 2nd is held
    argv = _argv(api_url, tmp_path / "s.json", "--tier", "cpu", "--test", "tests/test_calc.py", "--good", shas[0],
                 "--bad", shas[9])
    child = subprocess.Popen(argv, cwd=root, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(_downloads(fake)) < downloads + 2 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)  # the second failed run's archive is on its way, not journalled
    child.wait()
    first, held = _downloads(fake)[downloads:downloads + 2]
    journal = json.loads((tmp_path / "s.dispatches.json").read_text())["dispatches"]
    assert [d["signature"] is not None for d in journal if d["conclusion"] == "failure"] == [True]  # bad's only
    assert any(d["conclusion"] is None for d in journal)  # the held run's entry: dispatched, no conclusion
    done = subprocess.run(argv, cwd=root, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _answer(done.stdout) == _answer(reference.stdout)
    mine = [n for n in _names(fake) if n not in names]
    assert sorted(mine) == sorted(set(mine)) and len(mine) == len(names), "a run was dispatched twice"
    again = _downloads(fake)[downloads + 2:]
    assert held in again and first not in again, (first, held, again)  # the journalled one is not read again
    journal = json.loads((tmp_path / "s.dispatches.json").read_text())["dispatches"]
    assert all(d["signature"] for d in journal if d["conclusion"] == "failure")


@pytest.mark.parametrize("story", ["expired_only", "at_the_size_cap", "over_the_cap_then_a_report", "two_problems"])
def test_failed_signature_at_its_boundaries(fake, make_client, monkeypatch, tmp_path, story: str) -> None:
    """`failed_signature` over the fake's real HTTP: an expired artifact is not listed as one; an
    archive of exactly the size cap is read, one over it is skipped for the next; every problem is
    named when no artifact gives a signature."""
    run = fake.add_run(HEAD_SHA, "rerun-test")
    over = zipped({"junit-rerun.xml": junit(FLAKED), "runner.txt": "gpu-7\n"})
    read = zipped({"junit-rerun.xml": junit(BROKEN)})
    report = tmp_path / "junit.xml"
    report.write_text(junit(BROKEN), encoding="utf-8")
    expected = Signature(junit_signature(report))
    if story == "expired_only":
        fake.add_artifact(run, "old", read, expired=True)
        expected = Signature("", "it published no JUnit artifact (none, or expired)")
    elif story == "at_the_size_cap":
        monkeypatch.setattr(culprit_junit, "MAX_REPORT_BYTES", len(read))
        fake.add_artifact(run, "reports", read)
    elif story == "over_the_cap_then_a_report":
        monkeypatch.setattr(culprit_junit, "MAX_REPORT_BYTES", len(over) - 1)
        fake.add_artifact(run, "reports", read)
        fake.add_artifact(run, "big", over)  # listed first: GitHub lists the newest first
    else:
        monkeypatch.setattr(culprit_junit, "MAX_REPORT_BYTES", len(over) - 1)
        fake.add_artifact(run, "runner", zipped({"runner.txt": "gpu-7\n"}))
        fake.add_artifact(run, "big", over)
        expected = Signature("", "artifact big is over 0 MiB; artifact runner holds no JUnit report naming a failed test")
    assert expected.signature or expected.problem
    assert failed_signature(make_client(), REPO, run.id) == expected
