"""``python -m tools.rerun culprit --runner dispatch`` with error signatures: each failed run's
JUnit is read from the artifact the run publishes (the fake GitHub's "list workflow run
artifacts" and "download an artifact", over real HTTP), journalled with its conclusion, and
weighed as the local runner's signatures are. The window and the runners are
tests/rerun/test_rerun_culprit.py's: commit 6 of 9 breaks the test."""

from __future__ import annotations

import io
import json
import random
import re
import signal
import struct
import subprocess
import time
import zipfile
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


LIST_ARTIFACTS = r"/actions/runs/\d+/artifacts$"
UNAVAILABLE = Scripted(503, {"Retry-After": "0"}, {"message": "unavailable"})  # retried at once


def test_an_artifact_cut_short_mid_download_is_downloaded_again(repo, fake, api_url, runners, tmp_path) -> None:
    """A connection reset while --bad's archive comes in (the body cut short): the client downloads it
    again and the run is weighed with its signature, not journalled as pass/fail evidence only."""
    root, shas = repo
    runners.on_complete = lambda run, sha: publish(fake, run, BROKEN) if run.conclusion == "failure" else None
    fake.fail("GET", re.escape(BLOB_PATH), Scripted(route=True, cut=True))
    done = _search(root, api_url, tmp_path / "s.json", tmp_path, "--good", shas[0], "--bad", shas[9])
    assert done.returncode == 0 and f"culprit {shas[CULPRIT]} " in done.stdout, done.stdout + done.stderr
    assert "breakage signature " in done.stdout and "pass/fail evidence only" not in done.stdout, done.stdout
    blobs = _downloads(fake)
    assert blobs[0] == blobs[1], blobs  # the cut archive, then the same one again


@pytest.mark.parametrize("call, path, words", [
    ("list", LIST_ARTIFACTS, "its artifacts could not be listed"),
    ("download", r"/actions/artifacts/\d+/zip$", r"artifact rerun-test-pr0-cpu-\d+-1 could not be downloaded"),
])
def test_artifacts_github_does_not_answer_for_are_read_again_by_the_resumed_search(repo, fake, api_url, runners,
                                                                                 tmp_path, call, path, words) -> None:
    """--bad's artifacts cannot be listed, or its archive downloaded (503 on every one of the
    client's attempts): nothing is
    known of its signature, so the search stops (exit 1, naming the run) with that run unfinished in
    the journal, not weighed as pass/fail evidence for good. The same command, GitHub answering
    again, finds the run by its run-name (no dispatch twice), reads its artifact, learns the
    breakage's signature and gives the answer of a search that never met the outage."""
    root, shas = repo
    runners.on_complete = lambda run, sha: publish(fake, run, BROKEN) if run.conclusion == "failure" else None
    reference = _search(root, api_url, tmp_path / "ref.json", tmp_path, "--good", shas[0], "--bad", shas[9],
                        "--workflow", "reference.yml")
    assert reference.returncode == 0, reference.stdout + reference.stderr
    names = set(_names(fake))
    fake.fail("GET", path, *[UNAVAILABLE] * 5)  # the client's RetryPolicy: 5 attempts
    stopped = _search(root, api_url, tmp_path / "s.json", tmp_path, "--good", shas[0], "--bad", shas[9])
    assert stopped.returncode == 1 and "Traceback" not in stopped.stderr, stopped.stdout + stopped.stderr
    last = stopped.stderr.strip().splitlines()[-1]
    assert re.search(rf"run https://\S+/actions/runs/\d+ \(.*\) failed, and {words} "
                     r"\(.*HTTP 503.*\): rerun the same command to read it again", last), last
    journal = json.loads((tmp_path / "s.dispatches.json").read_text())["dispatches"]
    bad = [d for d in journal if d["sha"] == shas[9]]
    assert [(d["conclusion"], d["signature"]) for d in bad] == [(None, None)]  # unfinished, to be read again
    done = _search(root, api_url, tmp_path / "s.json", tmp_path, "--good", shas[0], "--bad", shas[9])
    assert done.returncode == 0 and "breakage signature " in done.stdout, done.stdout + done.stderr
    assert _answer(done.stdout) == _answer(reference.stdout) and "pass/fail evidence only" not in done.stdout
    mine = [n for n in _names(fake) if n not in names]
    assert sorted(mine) == sorted(set(mine)) and len(mine) == len(names), "a run was dispatched twice"
    journal = json.loads((tmp_path / "s.dispatches.json").read_text())["dispatches"]
    assert all(d["signature"] for d in journal if d["conclusion"] == "failure")


def _deflated(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return out.getvalue()


def _under_declared(name: str, text: str, declared: int) -> bytes:
    """A deflated zip of one member whose local and central headers declare ``declared`` bytes,
    fewer than it unpacks to (a lying header)."""
    data = bytearray(_deflated({name: text}))
    local, central = data.index(b"PK\x03\x04"), data.index(b"PK\x01\x02")
    struct.pack_into("<I", data, local + 22, declared)  # uncompressed size, local file header
    struct.pack_into("<I", data, central + 24, declared)  # uncompressed size, central directory
    return bytes(data)


def _artifact_run(fake: FakeGitHub, data: bytes) -> int:
    run = fake.add_run("a" * 40, "a failed run")
    fake.add_artifact(run, f"rerun-test-pr0-cpu-{run.id}-1", data)
    return run.id


def test_a_member_is_read_only_up_to_the_limit_whatever_its_header_declares(fake, make_client, tmp_path) -> None:
    """A report whose headers declare 100 bytes but unpack to 200 KB, and an archive of honest
    members that together unpack to more than the limit (a zip bomb split in parts): neither
    writes past the limit, each is pass/fail evidence saying why; an honest report under it is read."""
    padding = "<system-out>" + "x" * 200_000 + "</system-out>"
    lying = _under_declared("junit-rerun.xml", junit(BROKEN).replace("</testcase>", padding + "</testcase>"), 100)
    read = failed_signature(make_client(), "acme/llm-serving", _artifact_run(fake, lying), limit=4096)
    assert read.signature == "" and "is not a readable zip" in read.problem, read
    parts = _deflated({f"part-{i}.xml": '<?xml version="1.0"?><testsuites>' + " " * 3000 + "</testsuites>"
                    for i in range(3)} | {"z.xml": junit(BROKEN)})
    read = failed_signature(make_client(), "acme/llm-serving", _artifact_run(fake, parts), limit=4096)
    assert read == Signature("", f"artifact rerun-test-pr0-cpu-{fake.runs[-1].id}-1 unpacks to over 4096 bytes")
    honest = failed_signature(make_client(), "acme/llm-serving", _artifact_run(fake, zipped({"j.xml": junit(BROKEN)})),
                              limit=4096)
    assert honest.signature and not honest.problem, honest


def test_the_artifact_reads_take_the_pacers_turn(fake, make_client) -> None:
    """Listing a run's artifacts and downloading one each wait for the pacer, as writes do: the
    search's request budget counts them (tools/rerun/budget.py)."""
    turns: list[str] = []
    client = make_client(pace=lambda: turns.append("turn"))
    read = failed_signature(client, "acme/llm-serving", _artifact_run(fake, zipped({"j.xml": junit(BROKEN)})))
    assert read.signature and turns == ["turn", "turn"]


@pytest.mark.parametrize("story", ["expired_only", "at_the_size_cap", "over_the_cap_then_a_report", "two_problems"])
def test_failed_signature_at_its_boundaries(fake, make_client, tmp_path, story: str) -> None:
    """`failed_signature` over the fake's real HTTP: an expired artifact is not listed as one; an
    archive of exactly the size cap is read, one over it is skipped for the next; every problem is
    named when no artifact gives a signature."""
    run = fake.add_run(HEAD_SHA, "rerun-test")
    over = zipped({"junit-rerun.xml": junit(FLAKED), "runner.txt": "gpu-7\n"})
    read = zipped({"junit-rerun.xml": junit(BROKEN)})
    report = tmp_path / "junit.xml"
    report.write_text(junit(BROKEN), encoding="utf-8")
    expected = Signature(junit_signature(report))
    limit = culprit_junit.MAX_REPORT_BYTES
    if story == "expired_only":
        fake.add_artifact(run, "old", read, expired=True)
        expected = Signature("", "it published no JUnit artifact (none, or expired)")
    elif story == "at_the_size_cap":
        limit = len(read)
        fake.add_artifact(run, "reports", read)
    elif story == "over_the_cap_then_a_report":
        limit = len(over) - 1
        fake.add_artifact(run, "reports", read)
        fake.add_artifact(run, "big", over)  # listed first: GitHub lists the newest first
    else:
        limit = len(over) - 1
        fake.add_artifact(run, "runner", zipped({"runner.txt": "gpu-7\n"}))
        fake.add_artifact(run, "big", over)
        expected = Signature("", f"artifact big is over {limit} bytes; artifact runner holds no JUnit report naming a "
                                 "failed test")
    assert expected.signature or expected.problem
    assert failed_signature(make_client(), REPO, run.id, limit) == expected
