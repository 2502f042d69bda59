"""`ci quarantine` on histories whose truth is known, on SQLite and a real PostgreSQL.

`KnownHistory`: ``test_flaky`` fails with p = 0.1 whatever the code, ``test_broke`` broke at a known
commit, ``test_fixed`` was broken and fixed later, ``test_import`` raises ImportError on random
commits, ``test_stable`` passes. A second file holds one test failing with p = 0.3. Only the two
flaky ones may be quarantined (the second file whole, the first node alone); releases happen only
after ``release_runs`` clean runs in a row *and* once the interval since rules the threshold out.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.history.classify import quarantined_reason
from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from ci.registry import Status, load_registry
from tests.ci.history_support import Case, KnownHistory, pg_server, store_location, write_report  # noqa: F401

REPO = "acme/gpu"
TIER = "gpu_h100"
SINGLE = "tests/history/test_single.py"
REGISTRY = f"""\
version: 1
tiers:
  cpu: {{description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}}
  gpu_h100: {{description: h100, runner_labels: [gpu-h100], gpu_count: 1, arch: sm_90}}
# the policy: kept as written
quarantine:
  threshold: 0.05
  min_runs: 30
  release_runs: 10
  issue: https://github.com/acme/gpu/issues/20
tests:
  {KnownHistory.FILE}:   # known truth
    tiers: [cpu, gpu_h100]
    est_time: 10
    owner: "@kv-team"
    status: active
    timeout: 120
  {SINGLE}:
    tiers: [gpu_h100]
    est_time: 5
    owner: "@kv-team"
    status: active
    timeout: 120
"""


def ingest_one(location: str, cases: list[Case], directory: Path, sha: str, event: str = "nightly", **extra) -> None:
    with open_store(location) as store:
        assert ingest(store, prepare(write_report(directory, cases), RunIdentity(REPO, sha, event, TIER, **extra))).added


def build(location: str, directory: Path) -> Path:
    history = KnownHistory().build(directory)
    rng = random.Random(3)
    with open_store(location) as store:
        for i, (path, ident) in enumerate(history.reports):
            identity = RunIdentity(REPO, str(ident["sha"]), str(ident["event"]), TIER, ident.get("pr"),
                                   run_url=str(ident.get("run_url", "")), attempt=int(ident.get("attempt", 1)))
            assert ingest(store, prepare(path, identity)).added
            if ident["event"] == "push":
                failed = rng.random() < 0.3
                single = Case(SINGLE, "test_only", "failed" if failed else "passed", "AssertionError: timing 1.9 > 1.5")
                assert ingest(store, prepare(write_report(directory, [single]), RunIdentity(
                    REPO, str(ident["sha"]), "push", TIER, run_url=f"https://ci.example/single/{i}"))).added
    registry = directory / "registry.yaml"
    registry.write_text(REGISTRY)
    return registry


def quarantine(registry: Path, location: str, *flags: str) -> int:
    return ci_main(["quarantine", "--registry", str(registry), "--store", location, *flags])


def clean_nightly(location: str, directory: Path, sha: str, *, flaky_failed: bool = False) -> None:
    flaky = (Case(KnownHistory.FILE, "test_flaky", "skipped",
                  quarantined_reason("flaky", "AssertionError: accuracy 0.8 below 0.85"))
             if flaky_failed else Case(KnownHistory.FILE, "test_flaky"))
    ingest_one(location, [flaky, Case(KnownHistory.FILE, "test_stable")], directory, sha)


def test_quarantine_and_release_happen_exactly_when_they_should(store_location: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    registry = build(store_location, tmp_path)
    flaky = f"{KnownHistory.FILE}::test_flaky"

    # a dry run says what it would do and writes nothing
    assert quarantine(registry, store_location) == 0
    out = capsys.readouterr().out
    assert f"would quarantine {flaky}:" in out and f"would quarantine {SINGLE} (whole file):" in out
    assert "test_broke" not in out and "test_fixed" not in out and "test_import" not in out
    assert registry.read_text() == REGISTRY

    assert quarantine(registry, store_location, "--apply") == 0
    written = registry.read_text()
    loaded = load_registry(registry)
    known = loaded.tests[KnownHistory.FILE]
    assert known.status is Status.ACTIVE and [q.node for q in known.quarantined_nodes] == [flaky]
    node = known.quarantined_nodes[0]
    assert node.evidence.tier == TIER and node.evidence.interval[0] >= 0.05 and node.evidence.trials >= 30
    assert node.evidence.interval[0] <= 0.1 <= node.evidence.interval[1]
    assert node.evidence.example.startswith("https://ci.example/run/") and len(node.evidence.fingerprint) == 12
    single = loaded.tests[SINGLE]
    assert single.status is Status.QUARANTINED and single.issue == "https://github.com/acme/gpu/issues/20"
    # (one seeded history: its 90 % interval may miss 0.3; coverage is test_history_flaky's to check)
    assert single.evidence.interval[0] >= 0.05 and abs(single.evidence.score - 0.3) < 0.1
    # comments and every other line kept
    assert "# the policy: kept as written\n" in written and f"  {KnownHistory.FILE}:   # known truth\n" in written
    removed = Counter(REGISTRY.splitlines()) - Counter(written.splitlines())
    assert removed == Counter(["    status: active"])  # SINGLE's status, replaced; nothing else lost

    # idempotent: a second --apply changes nothing
    assert quarantine(registry, store_location, "--apply", "--release") == 0
    assert "nothing to change" in capsys.readouterr().out and registry.read_text() == written

    # release: never on one green run, never on a streak too short, never while the interval is wide
    clean_nightly(store_location, tmp_path, "1000000")
    assert quarantine(registry, store_location, "--release") == 0
    assert registry.read_text() == written
    for i in range(20):  # 21 clean runs in a row: the streak is there, the interval is not yet below 5 %
        clean_nightly(store_location, tmp_path, f"{i + 1:07x}f")
    capsys.readouterr()
    assert quarantine(registry, store_location, "--release") == 0
    assert registry.read_text() == written
    held = capsys.readouterr().out
    assert f"held {flaky}: 21 clean runs in a row on {TIER} (release needs 10), interval high since quarantined 8.6 %" \
        in held, held
    clean_nightly(store_location, tmp_path, "2000000", flaky_failed=True)  # a quarantined failure resets the streak
    for i in range(25):
        clean_nightly(store_location, tmp_path, f"{i + 1:07x}e")
    capsys.readouterr()
    assert quarantine(registry, store_location, "--release") == 0
    assert registry.read_text() == written, "the failure since the quarantine keeps the interval above 5 %"
    for i in range(40):
        clean_nightly(store_location, tmp_path, f"{i + 1:07x}d")
    # the interval is below 5 % now; the streak must still reach release_runs: 66 is one too many
    registry.write_text(written.replace("release_runs: 10", "release_runs: 66"))
    assert quarantine(registry, store_location) == 0
    assert "would release" not in capsys.readouterr().out
    registry.write_text(written.replace("release_runs: 10", "release_runs: 65"))
    assert quarantine(registry, store_location) == 0
    assert f"would release {flaky}: 65 clean runs in a row" in capsys.readouterr().out
    assert quarantine(registry, store_location, "--release") == 0
    released = load_registry(registry)
    assert released.tests[KnownHistory.FILE].quarantined_nodes == ()
    assert released.tests[SINGLE].status is Status.QUARANTINED  # its nightly runs never came: still held
    lines = registry.read_text().splitlines()
    assert "    quarantined_nodes:" not in lines and "# the policy: kept as written" in lines


def test_breakage_alone_is_never_quarantined(store_location: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    history = KnownHistory(p=0.0).build(tmp_path)
    with open_store(store_location) as store:
        for path, ident in history.reports:
            ingest(store, prepare(path, RunIdentity(REPO, str(ident["sha"]), str(ident["event"]), TIER, ident.get("pr"),
                                                    attempt=int(ident.get("attempt", 1)))))
    registry = tmp_path / "registry.yaml"
    registry.write_text(REGISTRY.replace("threshold: 0.05", "threshold: 0.001").replace("min_runs: 30", "min_runs: 1"))
    before = registry.read_text()
    assert quarantine(registry, store_location, "--apply") == 0
    assert "nothing to change" in capsys.readouterr().out and registry.read_text() == before


def test_bad_policy_is_refused_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    registry = tmp_path / "registry.yaml"
    registry.write_text(REGISTRY.replace("threshold: 0.05", "threshold: 1.5"))
    store = str(tmp_path / "h.sqlite")
    ingest_one(store, [Case(KnownHistory.FILE, "test_stable")], tmp_path, "abcdef0")
    assert quarantine(registry, store, "--apply") == 2
    err = capsys.readouterr().err
    assert "registry.yaml:7:14: R009 quarantine threshold must be a number strictly between 0 and 1" in err, err
    assert quarantine(tmp_path / "registry.yaml", str(tmp_path / "none.sqlite")) == 2


def test_a_second_editor_waits_for_the_first(tmp_path: Path) -> None:
    """`ci quarantine` edits under an exclusive lock on the registry's directory: while another
    holder has it, an --apply waits, then edits the registry as it is by then."""
    import fcntl
    import os
    import subprocess
    import sys
    import time

    registry = build(str(tmp_path / "h.sqlite"), tmp_path)
    fd = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        child = subprocess.Popen([sys.executable, "-m", "ci", "quarantine", "--apply", "--registry", str(registry),
                                  "--store", str(tmp_path / "h.sqlite")], cwd=Path(__file__).resolve().parents[2],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)
        assert child.poll() is None, "it did not wait for the lock"
        registry.write_text(REGISTRY + "  # an edit made meanwhile\n")
    finally:
        os.close(fd)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    text = registry.read_text()
    assert text.endswith("  # an edit made meanwhile\n") and "quarantined_nodes:" in text


def test_a_registry_that_is_not_utf8_is_refused_and_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "h.sqlite")
    ingest_one(store, [Case(KnownHistory.FILE, "test_stable")], tmp_path, "abcdef0")
    registry = tmp_path / "registry.yaml"
    data = REGISTRY.encode().replace(b"known truth", b"known \xff truth")
    registry.write_bytes(data)
    assert quarantine(registry, store, "--apply") == 2
    assert "UTF-8" in capsys.readouterr().err and registry.read_bytes() == data


def test_a_whole_file_rests_on_its_most_certain_node(tmp_path: Path) -> None:
    from ci.history.quarantine import to_quarantine

    store = str(tmp_path / "h.sqlite")
    rng = random.Random(5)
    with open_store(store) as opened:
        for i in range(150):
            cases = [Case(SINGLE, "test_a", "failed" if rng.random() < 0.1 else "passed", "AssertionError: a"),
                     Case(SINGLE, "test_z", "failed" if rng.random() < 0.4 else "passed", "AssertionError: z")]
            ingest(opened, prepare(write_report(tmp_path, cases), RunIdentity(REPO, f"{i:07x}", "push", TIER)))
    registry = tmp_path / "registry.yaml"
    registry.write_text(REGISTRY)
    with open_store(store, create=False) as opened:
        (decision,) = to_quarantine(opened, load_registry(registry))
    assert decision.whole_file and decision.node == SINGLE
    # (0.4 reads lower than it is: runs of 3 failures in a row count as breakage, not chance)
    assert decision.score.node == f"{SINGLE}::test_z" and decision.evidence.score > 0.15


MANY = 70_000  # test ids in one file: more than PostgreSQL's 65,535 bind parameters per query
BIG = "tests/history/test_many.py"
BIG_REGISTRY = f"""\
version: 1
tiers:
  gpu_h100: {{description: h100, runner_labels: [gpu-h100], gpu_count: 1, arch: sm_90}}
quarantine:
  threshold: 0.5
  min_runs: 30
  release_runs: 3
tests:
  {BIG}:
    tiers: [gpu_h100]
    est_time: 5
    owner: "@kv-team"
    status: quarantined
    reason: flaky (ci quarantine)
    issue: https://ci.example/run/1
    evidence:
      tier: gpu_h100
      score: 0.6
      interval: [0.55, 0.65]
      runs: 40
      failures: 24
      trials: 40
      fingerprint: 0123456789ab
      example: https://ci.example/run/1
      since: "2000-01-01T00:00:00.000000+00:00"
  {SINGLE}:
    tiers: [gpu_h100]
    est_time: 5
    owner: "@kv-team"
    status: active
"""


def test_a_whole_file_with_more_ids_than_bind_parameters(store_location: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Releasing a quarantined file reads the runs of every test id it has; 70,000 of them is one
    query too many parameters for PostgreSQL (65,535) and for SQLite's default build (32,766), and
    it must not block the other quarantines of the registry."""
    import sqlite3

    from ci.history.quarantine import to_release

    big = write_report(tmp_path, [Case(BIG, f"test_{n}") for n in range(MANY)])
    with open_store(store_location) as store:  # 3 clean nightly runs of every test of the big file
        for i in range(3):
            assert ingest(store, prepare(big, RunIdentity(REPO, f"{i:07x}b", "nightly", TIER))).added
    for i in range(40):  # a test failing two attempts in three on every commit: flaky for certain
        ingest_one(store_location, [Case(SINGLE, "test_only", reruns=2)], tmp_path, f"{i:07x}c", event="push")
    registry = tmp_path / "registry.yaml"
    registry.write_text(BIG_REGISTRY)
    with open_store(store_location, create=False) as store:
        if store.dialect.name == "sqlite":  # this build allows 250,000; SQLite's own default is lower
            store.conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 32_766)
        (release,) = to_release(store, load_registry(registry))
    assert (release.node, release.whole_file, release.clean_runs, release.failures, release.trials) == (BIG, True, 3, 0, 3)
    assert release.ready and release.interval.high < 0.5

    assert quarantine(registry, store_location, "--apply", "--release") == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"quarantine {SINGLE} (whole file): 67 % [59 %, 73 %] over 120 runs on {TIER}" in out, out
    assert f"release {BIG} (whole file): 3 clean runs in a row on {TIER}" in out, out
    after = load_registry(registry)
    assert after.tests[BIG].status is Status.ACTIVE and after.tests[BIG].evidence is None
    assert after.tests[SINGLE].status is Status.QUARANTINED


ODD = ("\t", "\u2028", "\x85", "\ufeff")  # tab, line separator, NEL, byte order mark


def test_an_id_the_registry_cannot_hold_is_refused_alone(store_location: str, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """registry.yaml cannot hold a test id with a tab, a line break YAML sees (U+2028, NEL) or a
    BOM; such an id is left out, named escaped, and every other quarantine is written."""
    names = [f"test_p[a{c}b]" for c in ODD] + ["test_good"]
    for i in range(45):
        cases = [Case(KnownHistory.FILE, name, reruns=int(i % 3 == 0)) for name in names]
        ingest_one(store_location, cases + [Case(KnownHistory.FILE, "test_stable")], tmp_path, f"{i:07x}d",
                   event="push")
    registry = tmp_path / "registry.yaml"
    registry.write_text(REGISTRY)
    refused = [f"{KnownHistory.FILE}::{name}" for name in names[:-1]]

    assert quarantine(registry, store_location) == 0
    out, err = capsys.readouterr()
    assert f"would quarantine {KnownHistory.FILE}::test_good: " in out and registry.read_text() == REGISTRY
    assert quarantine(registry, store_location, "--apply") == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert f"quarantine {KnownHistory.FILE}::test_good: " in out
    assert sorted(err.splitlines()) == sorted(
        f"python -m ci quarantine: cannot quarantine {node!r}: registry.yaml cannot hold a test id with "
        f"unprintable characters; the others go ahead" for node in refused), err
    assert [q.node for q in load_registry(registry).tests[KnownHistory.FILE].quarantined_nodes] == [
        f"{KnownHistory.FILE}::test_good"]
