"""Hostile repository trees (issue #22): every command reports one clear problem at the path and
goes on; none prints a traceback, hangs, or reads without bound."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from ci.regular_file import MAX_SOURCE_BYTES, UnreadableFile, read_regular

from tree_testutil import CPU_REGISTRY_HEAD as HEAD, write



def entry(path: str) -> str:
    return f"  {path}:\n    tiers: [cpu]\n    est_time: 1\n    owner: me\n    status: active\n"


def run_ci(capsys, root: Path, *args: str) -> tuple[int, str, str]:
    rc = ci_main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


# -- item 1: an expression too deep for Python's parser --------------------------------------------

@pytest.mark.parametrize("body", ["X = " + "+".join(["1"] * 200_000), "X = " + "-" * 300_000 + "1"],
                         ids=["200k-terms", "300k-unary-minus"])
def test_an_expression_too_deep_to_parse_is_i003_at_that_file(tmp_path, capsys, body):
    write(tmp_path, {"ci/__init__.py": "", "lib/__init__.py": "", "lib/core.py": "",
                     "registry.yaml": HEAD + entry("tests/test_deep.py") + entry("tests/test_ok.py"),
                     "tests/test_ok.py": "import lib.core\n"})
    (tmp_path / "tests/test_deep.py").write_text("import lib.core\n" + body + "\n")
    rc, out, _ = run_ci(capsys, tmp_path, "lint")
    assert rc == 1
    assert [line for line in out.splitlines() if " I003 " in line] == [
        "tests/test_deep.py:0:0: I003 cannot parse: an expression is nested too deeply for Python's parser"]
    (tmp_path / "changed.txt").write_text("lib/core.py\n")
    rc, out, _ = run_ci(capsys, tmp_path, "plan", "--tier", "cpu", "--changed-files",
                        str(tmp_path / "changed.txt"), "--format", "json")
    assert rc == 0
    assert [t["path"] for t in json.loads(out)["plans"][0]["selected"]] == ["tests/test_ok.py"]  # it goes on
    rc, out, _ = run_ci(capsys, tmp_path, "deps", "tests/test_deep.py")
    assert rc == 0 and out.splitlines()[0] == "tests/test_deep.py"


# -- item 2: only regular files are read, each with a size bound -------------------------------------

def hostile_files(root: Path, where: str) -> None:
    """A FIFO named like a test, a test-named symlink to /dev/zero, in ``where``."""
    (root / where).mkdir(parents=True, exist_ok=True)
    os.mkfifo(root / where / "test_fifo.py")
    (root / where / "test_zero.py").symlink_to("/dev/zero")


@pytest.mark.timeout(60)
def test_read_regular_refuses_what_is_not_a_regular_file_or_too_big(tmp_path):
    hostile_files(tmp_path, "t")
    with pytest.raises(UnreadableFile, match="is a FIFO, not a regular file"):
        read_regular(tmp_path / "t/test_fifo.py", 100)
    with pytest.raises(UnreadableFile, match="is a character device, not a regular file"):
        read_regular(tmp_path / "t/test_zero.py", 100)
    with pytest.raises(UnreadableFile, match="is a directory, not a regular file"):
        read_regular(tmp_path / "t", 100)
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(UnreadableFile, match="is 101 bytes, over the limit of 100 bytes"):
        read_regular(tmp_path / "big", 100)
    assert read_regular(tmp_path / "big", 101) == b"x" * 101
    (tmp_path / "empty").write_bytes(b"")
    assert read_regular(tmp_path / "empty", 0) == b""
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing", 100)


SUITE_REPO = {
    "registry.yaml": HEAD.replace("tests:\n", "project:\n  test_roots: [test]\ntests: {}\n"),
    "test/srt/test_real.py": "register_cpu_ci(est_time=3, suite='unit')\n",
}


@pytest.mark.timeout(60)
def test_import_suites_skips_fifos_devices_and_huge_files_with_a_note(tmp_path, capsys):
    write(tmp_path, SUITE_REPO)
    hostile_files(tmp_path, "test/srt")
    suite = tmp_path / "test/srt/run_suite.py"
    suite.write_text("suites = {'unit': []}\n# " + "x" * MAX_SOURCE_BYTES + "\n")
    rc, out, err = run_ci(capsys, tmp_path, "import-suites", "--suites", str(suite), "--tier-map", "unit=cpu")
    assert rc == 0
    assert "test/srt/test_real.py:" in out
    notes = [line for line in err.splitlines() if "cannot read it" in line]
    assert notes == [
        f"note: test/srt/run_suite.py: cannot read it (is {suite.stat().st_size:,} bytes, over the limit of "
        f"{MAX_SOURCE_BYTES:,} bytes (4 MiB) for this kind of file); skipped",
        "note: test/srt/test_fifo.py: cannot read it (is a FIFO, not a regular file); skipped",
        "note: test/srt/test_zero.py: cannot read it (is a character device, not a regular file); skipped"]


@pytest.mark.timeout(60)
def test_a_fifo_or_device_given_as_registry_report_or_list_is_one_clear_error(tmp_path, capsys):
    write(tmp_path, {"ci/__init__.py": "", "registry.yaml": HEAD + entry("tests/test_ok.py"), "tests/test_ok.py": ""})
    hostile_files(tmp_path, "in")
    fifo, zero = tmp_path / "in/test_fifo.py", tmp_path / "in/test_zero.py"
    rc, out, err = run_ci(capsys, tmp_path, "lint", "--registry", str(fifo))
    assert rc == 2 and f"registry {fifo}: not a regular file" in err
    rc, out, err = run_ci(capsys, tmp_path, "plan", "--tier", "cpu", "--changed-files", str(zero))
    assert rc == 2 and "cannot read changed-files list" in err and "is a character device" in err
    rc, out, err = run_ci(capsys, tmp_path, "plan", "--tier", "cpu", "--durations", str(fifo))
    assert rc == 2 and f"cannot read durations file {fifo}: is a FIFO, not a regular file" in err
    rc, out, err = run_ci(capsys, tmp_path, "durations", str(zero))
    assert rc == 2 and f"{zero}: cannot read JUnit XML: is a character device, not a regular file" in err


@pytest.mark.timeout(60)
def test_the_import_index_never_opens_a_fifo_or_device(tmp_path, capsys, monkeypatch):
    write(tmp_path, {"ci/__init__.py": "", "lib/__init__.py": "", "registry.yaml": HEAD + entry("tests/test_ok.py"),
                     "tests/test_ok.py": "import lib\n"})
    hostile_files(tmp_path, "lib")
    hostile_files(tmp_path, "tests/helpers")
    rc, out, err = run_ci(capsys, tmp_path, "lint")
    assert rc == 1  # the test-named links are L006; the FIFO is no file at all
    assert all(" I003 " not in line for line in out.splitlines())


# -- item 3: symlink loops and unreadable directories ---------------------------------------------

LOOP = "is a symlink loop (following it leads back to a link on the way), so it names no file"


def test_symlink_loops_are_one_l006_each_in_lint_and_init(tmp_path, capsys):
    write(tmp_path, {"ci/__init__.py": "", "lib/__init__.py": "", "tests/test_ok.py": "import lib\n"})
    (tmp_path / "tests/test_self.py").symlink_to("test_self.py")
    (tmp_path / "tests/test_a.py").symlink_to("test_b.py")
    (tmp_path / "tests/test_b.py").symlink_to("test_a.py")
    (tmp_path / "tests/loopdir").symlink_to("loopdir")
    (tmp_path / "lib/mod.py").symlink_to("mod.py")
    rc, out, _ = run_ci(capsys, tmp_path, "init")
    assert rc == 0 and (tmp_path / "registry.yaml").is_file()
    assert [line for line in out.splitlines() if line.startswith("note:")] == [
        f"note: tests/{name} {LOOP}; `lint` reports it (L006): fix or remove the link"
        for name in ("loopdir", "test_a.py", "test_b.py", "test_self.py")]
    rc, out, _ = run_ci(capsys, tmp_path, "lint")
    assert rc == 1
    assert out.splitlines() == [f"tests/{name}:1:1: L006 {LOOP}; fix or remove the link"
                                     for name in ("loopdir", "test_a.py", "test_b.py", "test_self.py")]


def deny(monkeypatch, tmp_path: Path, rel: str) -> None:
    """``os.scandir`` of ``tmp_path/rel`` raises PermissionError, as for a mode-000 directory. The
    tests run as root (in CI too), which ignores directory modes, so chmod cannot show it."""
    real, denied = os.scandir, os.path.join(str(tmp_path), rel)

    def scandir(path=".", *args):
        if os.path.normpath(os.fspath(path)) == denied:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path, *args)

    monkeypatch.setattr(os, "scandir", scandir)


def test_an_unreadable_test_directory_is_one_l008_in_lint_and_a_note_in_init(tmp_path, capsys, monkeypatch):
    write(tmp_path, {"ci/__init__.py": "", "lib/__init__.py": "", "lib/hidden/__init__.py": "",
                     "tests/test_ok.py": "import lib\n", "tests/locked/test_secret.py": ""})
    deny(monkeypatch, tmp_path, "tests/locked")
    deny_message = ("cannot list this directory (Permission denied): the files in it are neither checked nor run; "
                    "fix its permissions or remove it")
    rc, out, _ = run_ci(capsys, tmp_path, "init")
    assert rc == 0
    assert f"note: tests/locked: {deny_message}; `lint` reports it (L008)" in out.splitlines()
    rc, out, _ = run_ci(capsys, tmp_path, "lint")
    assert (rc, out.splitlines()) == (1, [f"tests/locked:0:0: L008 {deny_message}"])
    deny(monkeypatch, tmp_path, "lib/hidden")  # a first-party package: the import index says it
    rc, out, _ = run_ci(capsys, tmp_path, "lint")
    assert rc == 1 and f"lib/hidden:0:0: L008 {deny_message}" in out.splitlines()
