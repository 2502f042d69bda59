"""Every writer of registry.yaml takes one lock and never overwrites an edit it did not read
(issue #32: ``ci quarantine --apply`` overwrote a concurrent edit, since only its own runs took the
lock). Real ``python -m ci`` processes: each writer reads the registry, then blocks on the lock the
test holds; a person saves an edit meanwhile (no lock: an editor takes none); once the lock is
released the writer must refuse with one line, exit non-zero and leave the person's edit whole.
The wait is bounded and says who it waits for (issue #49: a ``durations --write`` behind a
``quarantine`` stuck on a slow PostgreSQL waited forever, silently); a killed holder blocks nobody."""

from __future__ import annotations

import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from ci.registry import load_registry
from ci.registry.edit_lock import (RegistryChanged, RegistrySnapshot, read_for_edit, registry_lock,
                                   write_registry)
from tests.ci.history_support import Case, KnownHistory, junit_xml
from tests.ci.tree_testutil import write

REPO = Path(__file__).resolve().parents[2]
REGISTRY = """\
version: 1
run_all_paths: [registry.yaml]
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
  cpu_big: {description: a bigger cpu, runner_labels: [big], gpu_count: 0, arch: cpu}
tests:
  tests/test_a.py:
    tiers: [cpu]
    est_time: 10
    owner: me
    status: active
    depends_on: [tests/test_a.py]
"""
PERSON = REGISTRY.replace("    owner: me\n", "    owner: \"@someone\"  # saved by a person meanwhile\n")
REPORT = junit_xml([Case("tests/test_a.py", "test_a", time=60.0)])  # est_time 10 -> 66

# Each writer as a user runs it, and what it changes when nobody interferes.
WRITERS = {
    "durations --write": (["durations", "--write", "report.xml"], "    est_time: 66\n"),
    "lint --fix": (["lint", "--fix"], None),
    "tiers move": (["tiers", "move", "--to", "cpu_big", "tests/*"], "    tiers: [cpu_big]\n"),  # removes the redundant depends_on line
    "init --force": (["init", "--force"], "# Written by `python -m ci init`"),
    "import-suites --output --force": (["import-suites", "--suites", "tests/run_suite.py", "--tier-map",
                                        "per-commit-cpu=cpu", "--output", "registry.yaml", "--force"],
                                       "# Imported by `python -m ci import-suites`"),
}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    write(tmp_path, {"registry.yaml": REGISTRY, "report.xml": REPORT, "tests/test_a.py": "def test_a():\n    pass\n",
                     "tests/run_suite.py": 'suites = {"per-commit-cpu": [TestFile("test_a.py", 12)]}\n'})
    return tmp_path


def start(root: Path, args: list[str], lock_wait: str = "60") -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "CI_REGISTRY_LOCK_WAIT": lock_wait}
    return subprocess.Popen([sys.executable, "-m", "ci", *args], cwd=root, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_until_blocked(proc: subprocess.Popen[str], seconds: float = 60) -> str:
    """Until ``proc`` says on stderr that it waits for the registry lock (one second into the
    wait; by then every writer here has read the registry); that line. Each line is written
    whole, so a readable pipe holds a whole line."""
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while not seen or "waiting for the registry lock" not in seen[-1]:
        if not select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))[0]:
            proc.kill()
            raise AssertionError(f"{proc.args} never said it waits for the registry lock: {seen} {proc.communicate()}")
        seen.append(proc.stderr.readline())
        assert seen[-1], f"it did not wait for the lock: {seen} {proc.communicate()}"
    return seen[-1].rstrip("\n")


def held_by(pid: int, command: str) -> str:
    """How a holder is named: ``pid N (`command`, since HH:MM:SS)``, the interpreter by its name."""
    return rf"pid {pid} \(`python[0-9.]* {command}`, since \d\d:\d\d:\d\d\)"


needs_proc_locks = pytest.mark.skipif(not Path("/proc/locks").exists(), reason="watches /proc/locks")


@pytest.mark.parametrize("writer", WRITERS)
def test_a_writer_waits_for_the_lock_then_keeps_an_edit_saved_meanwhile(repo: Path, writer: str) -> None:
    args, _ = WRITERS[writer]
    with registry_lock(repo / "registry.yaml"):
        proc = start(repo, args)
        assert re.fullmatch(rf"python -m ci {writer.split()[0]}( --fix)?: waiting for the registry lock held by "
                            rf"{held_by(os.getpid(), '.*')}", wait_until_blocked(proc))
        (repo / "registry.yaml").write_text(PERSON)  # an editor saving the file
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, out + err
    lines = err.strip().splitlines()
    assert lines[-1].endswith("registry.yaml was changed by someone else after this command read it; nothing "
                              "written, so that edit stands: look at it, then run the command again"), err
    assert "Traceback" not in err
    assert (repo / "registry.yaml").read_text() == PERSON
    assert not list(repo.glob(".registry.yaml.*.tmp"))


@pytest.mark.parametrize("writer", WRITERS)
def test_without_interference_each_writer_writes(repo: Path, writer: str) -> None:
    """The same commands, undisturbed, do change the registry (so the refusals above are theirs)."""
    args, marker = WRITERS[writer]
    proc = start(repo, args)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    text = (repo / "registry.yaml").read_text()
    assert text != REGISTRY and (marker in text if marker else "depends_on" not in text), text


# A registry using every tier key the writers must carry over (issue #50's review: the whole-file
# writer dropped `env:`, `buildkite:`, `buildkite_queue`, `backend` and `quarantine:`; issue 51 added `culprit:`).
RICH = REGISTRY.replace("tiers:\n", """\
quarantine: {threshold: 0.04, min_runs: 12}
tiers:
  npu: {description: an npu, runner_labels: [npu], gpu_count: 1, arch: ascend910, backend: npu}
""").replace("  cpu_big: {description: a bigger cpu, runner_labels: [big], gpu_count: 0, arch: cpu}\n", """\
  cpu_big:
    description: a bigger cpu
    runner_labels: [big]
    gpu_count: 0
    arch: cpu
    buildkite_queue: big_queue
    buildkite:
      plugins: [{docker#v5.2.0: {image: "ci:$BUILDKITE_COMMIT", environment: [HF_TOKEN]}}]
      depends_on: image-build
      retry: {automatic: [{exit_status: -1, limit: 2}]}
      priority: 5
      command_prefix: cd /workspace
      interpolate: [plugins]
    env: {IMPL: cutedsl, N: "1"}
    pytest_args: [-m, not slow]
    culprit: {auto: true, budget: 20, runners: 3}
""").replace("    depends_on: [tests/test_a.py]\n", "    depends_on: [tests/test_a.py]\n    env: {A: \"x y\"}\n    pytest_args: [-k, fast]\n")
RICH_WRITERS = {**{w: WRITERS[w] for w in ("durations --write", "lint --fix", "tiers move")},
                "import-suites --output --force": (["import-suites", "--suites", "tests/run_suite.py", "--tier-map",
                                                    "per-commit-cpu=cpu_big", "--output", "registry.yaml", "--force"], "")}


def _kept(registry) -> tuple:
    """What a writer must not lose: the tiers' keys (positions aside) and the quarantine policy."""
    tiers = {name: (t.backend, t.buildkite_queue, dict(t.env), t.pytest_args, t.culprit, t.buildkite and
                    (t.buildkite.keys, t.buildkite.command_prefix, t.buildkite.interpolate))
             for name, t in registry.tiers.items()}
    return tiers, (registry.quarantine.threshold, registry.quarantine.min_runs)


@pytest.mark.parametrize("writer", RICH_WRITERS)
def test_each_writer_keeps_env_pytest_args_and_buildkite(repo: Path, writer: str) -> None:
    (repo / "registry.yaml").write_text(RICH)
    before = load_registry(repo / "registry.yaml")
    proc = start(repo, RICH_WRITERS[writer][0])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    assert (repo / "registry.yaml").read_text() != RICH, "the writer wrote nothing"
    after = load_registry(repo / "registry.yaml")
    assert _kept(after) == _kept(before)
    if writer != "import-suites --output --force":  # which rebuilds the entries from the suites
        entry = after.tests["tests/test_a.py"]
        assert (dict(entry.env), entry.pytest_args) == ({"A": "x y"}, ("-k", "fast"))


def test_init_does_not_overwrite_a_registry_created_while_it_ran(tmp_path: Path) -> None:
    write(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    with registry_lock(tmp_path / "registry.yaml"):
        proc = start(tmp_path, ["--root", str(tmp_path), "init"])
        wait_until_blocked(proc)
        (tmp_path / "registry.yaml").write_text(PERSON)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, out + err
    assert err.strip().splitlines()[-1].startswith("python -m ci init: registry.yaml was created by someone else "
                                                   "after this command looked; nothing written"), err
    assert (tmp_path / "registry.yaml").read_text() == PERSON


def ingest_flaky_history(location: str, directory: Path) -> None:
    """KnownHistory's file: its test_flaky fails 10 % of the time, enough for a quarantine."""
    with open_store(location) as store:
        for path, ident in KnownHistory().build(directory).reports:
            identity = RunIdentity("acme/gpu", str(ident["sha"]), str(ident["event"]), "cpu", ident.get("pr"),
                                   run_url=str(ident.get("run_url", "")), attempt=int(ident.get("attempt", 1)))
            assert ingest(store, prepare(path, identity)).added


def wait_until(condition: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def flock_holders(directory: Path) -> set[int]:
    """The pids holding (not waiting for) a flock on ``directory``, from /proc/locks."""
    inode = str(os.stat(directory).st_ino)
    return {int(f[4]) for f in (line.split() for line in Path("/proc/locks").read_text().splitlines())
            if f[1:2] == ["FLOCK"] and f[5].rsplit(":", 1)[-1] == inode}


def opened(pid: int, path: str) -> bool:
    """Whether process ``pid`` has ``path`` open (its /proc/PID/fd links)."""
    fds = Path(f"/proc/{pid}/fd")
    try:
        return any(os.path.realpath(fd) == os.path.realpath(path) for fd in fds.iterdir())
    except OSError:  # it exited, or a descriptor closed while listed
        return False


KNOWN = KnownHistory.FILE


@contextmanager
def quarantine_stuck_reading_the_history(root: Path) -> Iterator[subprocess.Popen[str]]:
    """A ``ci quarantine --apply`` that has read the registry (KnownHistory's file, whose
    test_flaky it will quarantine) and is stuck reading the history: the test holds the store's
    database exclusively until the block ends."""
    registry = REGISTRY.replace("tests/test_a.py", KNOWN).replace(f"    depends_on: [{KNOWN}]\n", "")
    write(root, {"registry.yaml": registry,
                 "report.xml": junit_xml([Case(KNOWN, "test_stable", time=60.0)]),
                 KNOWN: "def test_stable():\n    pass\n"})
    store = str(root / "h.sqlite")
    ingest_flaky_history(store, root)
    hold = sqlite3.connect(store, isolation_level=None)
    hold.execute("PRAGMA locking_mode = EXCLUSIVE")
    hold.execute("BEGIN EXCLUSIVE")  # no other connection may read the store until the rollback
    try:
        quarantine = start(root, ["quarantine", "--apply", "--store", store])
        wait_until(lambda: quarantine.pid in flock_holders(root), "quarantine holds the registry lock")
        # It reads the registry, then opens the store: with the store open, the registry was read.
        wait_until(lambda: opened(quarantine.pid, store), "quarantine opened the history store")
        yield quarantine
    finally:
        hold.execute("ROLLBACK")
        hold.close()


def test_quarantine_apply_keeps_env_pytest_args_and_buildkite(tmp_path: Path) -> None:
    """The fifth writer of the rich registry: ``quarantine --apply`` quarantines KnownHistory's
    flaky test and loses none of the keys beside it."""
    write(tmp_path, {"registry.yaml": RICH.replace("tests/test_a.py", KNOWN), KNOWN: "def test_stable():\n    pass\n"})
    before = load_registry(tmp_path / "registry.yaml")
    ingest_flaky_history(str(tmp_path / "h.sqlite"), tmp_path)
    out, err = start(tmp_path, ["quarantine", "--apply", "--store", str(tmp_path / "h.sqlite")]).communicate(timeout=60)
    after = load_registry(tmp_path / "registry.yaml")
    assert after.tests[KNOWN].quarantined_nodes, out + err  # it did write
    assert _kept(after) == _kept(before)
    assert (dict(after.tests[KNOWN].env), after.tests[KNOWN].pytest_args) == ({"A": "x y"}, ("-k", "fast"))


@needs_proc_locks
def test_quarantine_keeps_an_edit_saved_while_it_reads_the_history(tmp_path: Path) -> None:
    with quarantine_stuck_reading_the_history(tmp_path) as quarantine:
        person = (tmp_path / "registry.yaml").read_text() + "# saved by a person meanwhile\n"
        (tmp_path / "registry.yaml").write_text(person)
    out, err = quarantine.communicate(timeout=60)
    assert quarantine.returncode == 3, out + err
    assert err.strip().splitlines() == [
        "python -m ci quarantine: registry.yaml was changed by someone else after this command read it; nothing "
        "written, so that edit stands: look at it, then run the command again"], err
    assert (tmp_path / "registry.yaml").read_text() == person


@needs_proc_locks
def test_durations_writing_while_quarantine_reads_the_history_loses_nothing(tmp_path: Path) -> None:
    """The issue's race, made certain: ``durations --write`` rewrites an est_time while
    ``quarantine --apply`` reads the history. It used to land and then be overwritten by the
    quarantine, unseen. Now durations waits for the lock, finds the file changed by the
    quarantine, and refuses: the quarantine stands, and durations says its edit did not land."""
    with quarantine_stuck_reading_the_history(tmp_path) as quarantine:
        durations = start(tmp_path, ["durations", "--write", "report.xml"])
        wait_until_blocked(durations)
    q_out, q_err = quarantine.communicate(timeout=60)
    d_out, d_err = durations.communicate(timeout=60)
    assert quarantine.returncode == 0, q_out + q_err
    entry = load_registry(tmp_path / "registry.yaml").tests[KNOWN]
    assert [q.node for q in entry.quarantined_nodes] == [f"{KNOWN}::test_flaky"]
    assert entry.est_time == 66 or durations.returncode == 3, (
        f"durations' edit was silently undone: it exited {durations.returncode} and est_time is {entry.est_time}")
    assert durations.returncode == 3 and d_err.strip().splitlines() == [
        "python -m ci durations: registry.yaml was changed by someone else after this command read it; nothing "
        "written, so that edit stands: look at it, then run the command again"], d_out + d_err


@needs_proc_locks
def test_a_writer_behind_a_stuck_quarantine_gives_up_naming_it(tmp_path: Path) -> None:
    """The issue's case: ``durations --write`` behind a ``quarantine --apply`` stuck reading the
    history says once whom it waits for, then gives up at the bound (exit 3, nothing written),
    naming the quarantine's pid and command without the values of its arguments (a store URL
    may hold a password). The quarantine, let go, still writes."""
    with quarantine_stuck_reading_the_history(tmp_path) as quarantine:
        began = time.monotonic()
        durations = start(tmp_path, ["durations", "--write", "report.xml"], lock_wait="2")
        out, err = durations.communicate(timeout=60)
        took = time.monotonic() - began
    holder = held_by(quarantine.pid, r"-m ci quarantine --apply --store \.\.\.")
    assert durations.returncode == 3, out + err
    assert 2 <= took < 30, took
    waiting, gave_up = err.strip().splitlines()
    assert re.fullmatch(rf"python -m ci durations: waiting for the registry lock held by {holder}", waiting), err
    assert re.fullmatch(rf"python -m ci durations: registry.yaml: the registry lock is still held by {holder} after "
                        r"2 s; nothing written \(\$CI_REGISTRY_LOCK_WAIT sets how long to wait\)", gave_up), err
    assert "h.sqlite" not in err
    q_out, q_err = quarantine.communicate(timeout=60)
    assert quarantine.returncode == 0, q_out + q_err
    entry = load_registry(tmp_path / "registry.yaml").tests[KNOWN]
    assert entry.est_time == 10 and [q.node for q in entry.quarantined_nodes] == [f"{KNOWN}::test_flaky"]


def test_a_holder_killed_with_sigkill_blocks_nobody(repo: Path) -> None:
    """A holder that dies holding the lock (kill -9: no cleanup runs) releases it with its life:
    the waiter, having named it, goes on and writes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom ci.registry.edit_lock import registry_lock\n"
         "with registry_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(600)\n",
         str(repo / "registry.yaml")], env={**os.environ, "PYTHONPATH": str(REPO)}, text=True, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == "held\n"
        durations = start(repo, ["durations", "--write", "report.xml"])
        assert re.fullmatch(rf"python -m ci durations: waiting for the registry lock held by "
                            rf"{held_by(holder.pid, '-c ...')}", wait_until_blocked(durations))
        os.kill(holder.pid, signal.SIGKILL)
        out, err = durations.communicate(timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert durations.returncode == 0, out + err
    assert load_registry(repo / "registry.yaml").tests["tests/test_a.py"].est_time == 66


@pytest.mark.parametrize("value", ["0", "1.5", "٣", "86401"])
def test_a_bad_lock_wait_is_bad_input(repo: Path, value: str) -> None:
    proc = start(repo, ["durations", "--write", "report.xml"], lock_wait=value)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, out + err
    assert err.strip().splitlines() == [
        f"python -m ci durations: $CI_REGISTRY_LOCK_WAIT must be a whole number from 1 to 86400 in ASCII digits, got "
        f"{value!r} (seconds to wait for the registry lock); nothing written"], err
    assert (repo / "registry.yaml").read_text() == REGISTRY


def test_two_durations_writes_released_together_one_wins_one_refuses(repo: Path) -> None:
    """Both read the same registry; the one the lock lets in second finds it changed."""
    (repo / "other.xml").write_text(junit_xml([Case("tests/test_a.py", "test_a", time=90.0)]))  # -> 99
    with registry_lock(repo / "registry.yaml"):
        first = start(repo, ["durations", "--write", "report.xml"])
        second = start(repo, ["durations", "--write", "other.xml"])
        wait_until_blocked(first)
        wait_until_blocked(second)
    results = [p.communicate(timeout=60) + (p.returncode,) for p in (first, second)]
    assert sorted(rc for _, _, rc in results) == [0, 3], results
    (out, _, _), = [r for r in results if r[2] == 0]
    (_, err, _), = [r for r in results if r[2] == 3]
    assert "was changed by someone else" in err and len(err.strip().splitlines()) == 1, err
    winner = 66 if "p90 60.0s" in out else 99
    assert load_registry(repo / "registry.yaml").tests["tests/test_a.py"].est_time == winner


def test_the_check_runs_after_the_new_text_is_on_disk_just_before_the_rename(repo: Path, monkeypatch) -> None:
    """In-process, with the edit landing inside atomic_write (after the temporary file is written
    and synced): still refused, the temporary file removed."""
    import ci.atomic_write as atomic_write

    path = repo / "registry.yaml"
    text, snapshot = read_for_edit(path)
    real_chmod = atomic_write.os.chmod

    def chmod_then_person_saves(target, mode):  # the last step before the check and the rename
        real_chmod(target, mode)
        path.write_text(PERSON)

    monkeypatch.setattr(atomic_write.os, "chmod", chmod_then_person_saves)
    with pytest.raises(RegistryChanged, match="was changed by someone else"):
        write_registry(snapshot, text.replace("est_time: 10", "est_time: 11"))
    assert path.read_text() == PERSON
    assert not list(repo.glob(".registry.yaml.*.tmp"))


def test_the_lock_is_reentrant_within_a_process(repo: Path) -> None:
    """``ci quarantine`` holds the lock around its run and writes inside it: no self-deadlock."""
    path = repo / "registry.yaml"
    text, snapshot = read_for_edit(path)
    with registry_lock(path):
        write_registry(snapshot, text + "# more\n")
    assert path.read_text() == REGISTRY + "# more\n"
    assert RegistrySnapshot.take(path) == RegistrySnapshot.of_text(path, REGISTRY + "# more\n")
