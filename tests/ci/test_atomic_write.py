"""`ci.atomic_write` and the files written through it: content, mode and owner kept, symlinks kept,
no temporary file left on error; a real child process killed with SIGKILL while it rewrites a large
registry; `ci durations --write` under a file-size limit (a full disk) in a real child process."""

from __future__ import annotations

import os
import random
import resource
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ci.atomic_write import atomic_write_bytes, atomic_write_text

REPO = Path(__file__).resolve().parents[2]
HEAD = ("version: 1\ntiers:\n  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}\n"
        "tests:\n")


def big_registry(entries: int, est_time: int) -> str:
    return HEAD + "".join(f"  tests/area_{i % 97}/test_file_{i}.py: {{tiers: [cpu], est_time: {est_time}, "
                          f"owner: team, status: active}}\n" for i in range(entries))


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


# -- the function ----------------------------------------------------------------------------------

def test_replaces_content_keeps_mode_and_leaves_nothing_behind(tmp_path):
    target = tmp_path / "registry.yaml"
    target.write_text("old\n")
    target.chmod(0o640)
    atomic_write_text(target, "new ünïcode\r\nline\n")
    assert target.read_bytes() == "new ünïcode\r\nline\n".encode()  # newlines written as given
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    target.chmod(0o755)
    atomic_write_bytes(target, b"\x00\xff")
    assert target.read_bytes() == b"\x00\xff" and stat.S_IMODE(target.stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["registry.yaml"]


def test_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "fresh.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "fresh.json").stat().st_mode) == 0o640  # 0o666 & ~0o027


def test_a_symlink_stays_a_link_and_its_target_is_rewritten(tmp_path):
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "registry.yaml"
    real.write_text("old\n")
    link = tmp_path / "registry.yaml"
    link.symlink_to(real)
    atomic_write_text(link, "new\n")
    assert link.is_symlink() and real.read_text() == "new\n"
    assert leftovers(tmp_path) == [] and leftovers(tmp_path / "real") == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root can give a file away")
def test_owner_is_kept(tmp_path):
    target = tmp_path / "registry.yaml"
    target.write_text("old\n")
    os.chown(target, 4321, 4322)
    atomic_write_text(target, "new\n")
    assert (target.stat().st_uid, target.stat().st_gid) == (4321, 4322)


def _other_group() -> int | None:
    """A group this process may give its file (root: any; else a supplementary one), or None."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return 4322 if os.getgid() != 4322 else 4323
    return next((g for g in os.getgroups() if g != os.getgid()), None)


def test_a_group_that_differs_with_the_same_owner_is_kept(tmp_path):
    gid = _other_group()
    if gid is None:
        pytest.skip("this user belongs to no second group")
    target = tmp_path / "registry.yaml"
    target.write_text("old\n")
    os.chown(target, os.getuid(), gid)  # the owner is this process's user: only the group differs
    atomic_write_text(target, "new\n")
    assert (target.stat().st_uid, target.stat().st_gid) == (os.getuid(), gid)


def test_the_new_file_and_its_directory_are_fsynced(tmp_path, monkeypatch):
    """Durability, not only atomicity: the data before the rename, the rename itself after it."""
    synced: list[tuple[str, int]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        synced.append(("dir" if stat.S_ISDIR(info.st_mode) else "file", info.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    target = tmp_path / "registry.yaml"
    target.write_text("old\n")
    atomic_write_text(target, "new\n")
    # the temporary file, which the rename made the target (same inode), then the directory
    assert synced == [("file", target.stat().st_ino), ("dir", tmp_path.stat().st_ino)]


def test_errors_leave_the_target_and_no_temporary_file(tmp_path):
    (tmp_path / "adir").mkdir()
    with pytest.raises(IsADirectoryError):
        atomic_write_text(tmp_path / "adir", "x")
    assert (tmp_path / "adir").is_dir() and leftovers(tmp_path) == []
    with pytest.raises(FileNotFoundError):
        atomic_write_text(tmp_path / "missing" / "f.txt", "x")
    with pytest.raises(UnicodeEncodeError):  # encoding fails before anything is created
        atomic_write_text(tmp_path / "f.txt", "\udcff")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]


# -- kill -9 in the middle of rewriting a large registry -------------------------------------------

WRITER = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from ci.atomic_write import atomic_write_text
    target, first, second, how = sys.argv[1:5]
    texts = [Path(first).read_text(), Path(second).read_text()]
    write = atomic_write_text if how == "atomic" else (lambda path, text: Path(path).write_text(text))
    print("ready", flush=True)
    i = 0
    while True:  # rewrite the registry, alternately with each text, until killed
        write(target, texts[i % 2])
        i += 1
    """)


def kill_while_rewriting(tmp_path: Path, how: str, kills: int) -> dict[str, int]:
    """Start a child that rewrites a 1.9 MB registry in a loop, SIGKILL it at a random moment,
    classify what is on disk; ``kills`` times. Returns counts of "old", "new", "torn" and
    "temp_left" (a kill that landed between creating and renaming the temporary file)."""
    old, new = big_registry(20_000, 10), big_registry(20_000, 11)  # same length: a mix is detectable
    target = tmp_path / "registry.yaml"
    (tmp_path / "a").write_text(old)
    (tmp_path / "b").write_text(new)
    target.write_text(old)
    target.chmod(0o640)
    counts = {"old": 0, "new": 0, "torn": 0, "temp_left": 0}
    rng = random.Random(13)
    for _ in range(kills):
        child = subprocess.Popen([sys.executable, "-c", WRITER, str(target), str(tmp_path / "a"),
                                  str(tmp_path / "b"), how], stdout=subprocess.PIPE, env=child_env())
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.005, 0.08))
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
        child.stdout.close()
        on_disk = target.read_text()
        counts["old" if on_disk == old else "new" if on_disk == new else "torn"] += 1
        assert stat.S_IMODE(target.stat().st_mode) == 0o640
        for name in leftovers(tmp_path):
            counts["temp_left"] += 1
            (tmp_path / name).unlink()
    return counts


def test_sigkill_mid_rewrite_leaves_the_old_or_the_new_registry_whole(tmp_path):
    counts = kill_while_rewriting(tmp_path, "atomic", kills=15)
    assert counts["torn"] == 0, counts
    # The kills really landed mid-write: some left the temporary file of an unfinished rewrite.
    assert counts["temp_left"] >= 1, counts


def test_the_kill_harness_detects_a_plain_in_place_rewrite(tmp_path):
    # The same harness against `Path.write_text` (what `ci durations --write` used to do): it
    # finds torn registries, so the test above would fail if the write were not atomic.
    counts = kill_while_rewriting(tmp_path, "plain", kills=4)
    assert counts["torn"] >= 1, counts


# -- a full disk: the file-size limit of a child process --------------------------------------------

def test_durations_write_over_the_file_size_limit_fails_clearly_and_keeps_the_registry(tmp_path):
    registry = big_registry(300, 10)
    reg_file = tmp_path / "registry.yaml"
    reg_file.write_text(registry)
    reg_file.chmod(0o604)
    assert len(registry) > 6 * 4096
    (tmp_path / "r.xml").write_text(
        '<testsuites><testsuite time="1"><testcase classname="x" name="t" file="tests/area_5/test_file_5.py" '
        'time="60"/></testsuite></testsuites>')
    limit = 4096

    def limit_file_size() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run([sys.executable, "-m", "ci", "durations", "--registry", str(reg_file), "--write",
                           str(tmp_path / "r.xml")], cwd=tmp_path, env=child_env(), capture_output=True,
                          text=True, preexec_fn=limit_file_size, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert f"cannot write {reg_file}: File too large; it is unchanged" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "drift: tests/area_5/test_file_5.py: measured 60.0s vs est_time 10s" in proc.stdout
    assert reg_file.read_text() == registry  # byte-identical
    assert stat.S_IMODE(reg_file.stat().st_mode) == 0o604
    # nothing left beside it but the lock's ignored cache folder, whose holder file went with the lock
    assert sorted(p.name for p in tmp_path.iterdir()) == [".ci-cache", "r.xml", "registry.yaml"]
    assert sorted(p.name for p in (tmp_path / ".ci-cache").iterdir()) == [".gitignore"]
    # Without the limit the same command writes the new est_time (ceil(60 * 1.1) = 66).
    proc = subprocess.run([sys.executable, "-m", "ci", "durations", "--registry", str(reg_file), "--write",
                           str(tmp_path / "r.xml")], cwd=tmp_path, env=child_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert reg_file.read_text() == registry.replace(
        "test_file_5.py: {tiers: [cpu], est_time: 10,", "test_file_5.py: {tiers: [cpu], est_time: 66,")
    assert stat.S_IMODE(reg_file.stat().st_mode) == 0o604
