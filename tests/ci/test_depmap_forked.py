"""A forked copy of a recording pytest process (a test's ``os.fork``, a fork-started
``multiprocessing`` worker) is one of that test's children, not the recording: real pytest runs,
recorded and plain, over a small project whose tests fork. The oracle for outcomes is the plain
run of the same files; the expected lines are read off the project's source by hand."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.observe import slipcover_core
from ci.observe.files import RepoFiles
from ci.selection.depmap_format import parse_depmap
from tests.ci.depmap_support import clean_env, write_project

NEEDS_SLIPCOVER = pytest.mark.skipif(not slipcover_core.available(), reason="the slipcover core does not run here")
PY312 = Path(__file__).resolve().parents[2] / ".venv-py312" / "bin" / "python"
NEEDS_PY312 = pytest.mark.skipif(not PY312.exists(), reason="no .venv-py312: run python3 ci/bootstrap.py")

WORK = "def both(x):\n    return 2 * x\n\n\ndef only_child():\n    return 1\n"  # line 6: the child's alone
FILES = {
    "pkg/__init__.py": "",
    "pkg/work.py": WORK,
    # the child leaves by sys.exit inside the test: pytest catches it and the copy runs the
    # session on to its end, as it does unrecorded
    "tests/test_exit.py": textwrap.dedent("""\
        import os, sys
        from pkg.work import both, only_child

        def test_fork():
            pid = os.fork()
            if pid == 0:
                only_child()
                sys.exit(0)
            os.waitpid(pid, 0)
            assert both(2) == 4

        def test_after():
            assert both(1) == 2
        """),
    "tests/test_os_exit.py": textwrap.dedent("""\
        import os
        from pkg.work import only_child

        def test_fork():
            pid = os.fork()
            if pid == 0:
                only_child()
                os._exit(0)
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        """),
    "tests/test_killed.py": textwrap.dedent("""\
        import os, signal, time
        from pkg.work import only_child

        def test_fork():
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                only_child()
                os.write(w, b"x")
                time.sleep(60)
                os._exit(0)
            os.read(r, 1)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        """),
    # workers that leave by os._exit once the pool is closed
    "tests/test_pool.py": textwrap.dedent("""\
        import multiprocessing
        from pkg.work import both

        def test_pool():
            pool = multiprocessing.get_context("fork").Pool(2)
            assert pool.map(both, [1, 2, 3]) == [2, 4, 6]
            pool.close()
            pool.join()
        """),
    # Pool.__exit__ terminates its workers by SIGTERM, some of them in the middle of their save
    "tests/test_pool_terminated.py": textwrap.dedent("""\
        import multiprocessing
        from pkg.work import both

        def test_pool():
            for _ in range(5):
                with multiprocessing.get_context("fork").Pool(2) as pool:
                    assert pool.map(both, [1, 2, 3]) == [2, 4, 6]
        """),
    # subprocess forks only to exec; its preexec_fn runs Python (and the fork handlers) first
    "tests/test_preexec.py": textwrap.dedent("""\
        import subprocess

        def test_run():
            assert subprocess.run(["true"], preexec_fn=lambda: None).returncode == 0
        """),
}


def _pytest(root: Path, core: str | None, python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    env = clean_env()
    if core is not None:
        env.update(CI_DEPMAP="out/depmap.json", CI_DEPMAP_CORE=core)
    xdist = ["-n", "0"] if python == sys.executable else []  # .venv-py312 has no pytest-xdist
    return subprocess.run([python, "-m", "pytest", "-p", "ci.pytest_plugin", "--tier", "cpu", *xdist,
                           "-p", "no:cacheprovider", "-rA"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=180)


def _outcomes(out: str) -> list[str]:
    """The short test summary's lines, from the parent process only (its output comes last)."""
    summary = out.rsplit("short test summary info", 1)[-1]
    return sorted(line for line in summary.splitlines() if line.startswith(("PASSED", "FAILED", "ERROR")))


@pytest.mark.parametrize("core", [pytest.param("slipcover", marks=NEEDS_SLIPCOVER), "ctrace",
                                  pytest.param("sysmon", marks=NEEDS_PY312)])
def test_a_forked_copy_records_its_lines_and_never_acts_as_the_recording(tmp_path: Path, core: str) -> None:
    write_project(tmp_path, FILES)
    python = str(PY312) if core == "sysmon" else sys.executable  # the recorder's own sys.monitoring core
    plain, recorded = _pytest(tmp_path, None, python), _pytest(tmp_path, core, python)
    assert recorded.returncode == plain.returncode == 0, recorded.stdout + recorded.stderr
    assert _outcomes(recorded.stdout) == _outcomes(plain.stdout) and len(_outcomes(plain.stdout)) == 7
    assert "Traceback" not in recorded.stdout + recorded.stderr  # the parent's save failed in the copy's wake
    assert recorded.stdout.count("depmap: wrote") == 1  # the parent's alone
    tests = parse_depmap((tmp_path / "out" / "depmap.json").read_text(), "depmap.json").tests
    assert (tests["tests/test_exit.py"].items, tests["tests/test_exit.py"].ran) == (2, 2)  # not the copy's again
    for name in ("test_exit", "test_os_exit"):
        entry = tests[f"tests/{name}.py"]
        assert entry.complete and entry.lines is not None, name
        assert 6 in entry.lines["pkg/work.py"], name  # only the forked copy ran it
    if core != "ctrace":  # coverage.py's core saves a fork's lines only at its exit (and the pool's)
        assert tests["tests/test_pool.py"].complete and 2 in tests["tests/test_pool.py"].lines["pkg/work.py"]  # run by the workers alone
    terminated = tests["tests/test_pool_terminated.py"]  # complete or not by the race, never torn or lost
    assert not terminated.complete or 2 in terminated.lines["pkg/work.py"]
    # killed before it saved: not trusted line for line
    assert not tests["tests/test_killed.py"].complete
    # a fork that execs `true` is no copy: no live mark of it is left behind
    assert tests["tests/test_preexec.py"].complete


def _parts_with_two_tests(tmp_path: Path) -> tuple[Path, "RepoFiles"]:
    """A parts directory as two processes leave it: each test file collected, finished and
    measured (pkg/work.py line 2 for one, line 6 for the other)."""
    import json

    from coverage import CoverageData

    from ci.observe.files import RepoFiles

    write_project(tmp_path, FILES)
    parts = tmp_path / "parts"
    parts.mkdir()
    for pid, (test, line) in enumerate((("tests/test_exit.py", 2), ("tests/test_pool.py", 6)), start=100):
        data = CoverageData(basename=str(parts / "cov"), suffix=f"vm.pid{pid}.Xabcx")
        data.set_context(test)
        data.add_lines({str(tmp_path / "pkg" / "work.py"): [line]})
        data.write()
        (parts / f"items.{pid}.json").write_text(json.dumps({"items": {test: 1}, "done": {test: 1}, "ran": {test: 1}}))
    return parts, RepoFiles(str(tmp_path))


@pytest.mark.parametrize("live_mark", [True, False])
def test_a_torn_coverage_part_is_skipped_and_never_leaves_an_entry_complete(tmp_path: Path, live_mark: bool) -> None:
    from ci.observe.merge import build_map

    parts, files = _parts_with_two_tests(tmp_path)
    whole = build_map(parts, files, "cpu").tests
    assert whole["tests/test_exit.py"].complete and whole["tests/test_pool.py"].lines == {"pkg/work.py": {6}}
    # a third process (pid 102) killed in the middle of its write: coverage.py's core writes in place
    (parts / "cov.vm.pid102.Xdefx").write_bytes(b"SQLite format 3\x00" + b"\x00" * 84)
    if live_mark:  # it ran for test_pool and never saved: that entry alone is not complete
        (parts / "live.102").write_text("tests/test_pool.py")
    tests = build_map(parts, files, "cpu").tests
    assert tests["tests/test_exit.py"].complete is live_mark  # no mark: whose lines were lost is unknown
    assert not tests["tests/test_pool.py"].complete
    assert tests["tests/test_exit.py"].lines == {"pkg/work.py": {2}}  # the readable parts still count


@pytest.mark.parametrize("garbled", [b"CREATE TABLE tracer", b"/pkg/other.py"])
def test_a_part_garbled_inside_its_tables_is_skipped_like_a_torn_one(tmp_path: Path, garbled: bytes) -> None:
    # one byte wrong inside a table's schema text or a measured path: sqlite3 itself reports
    # the first as undecodable text (UnicodeDecodeError), the second as an OperationalError
    from coverage import CoverageData

    from ci.observe.merge import build_map

    parts, files = _parts_with_two_tests(tmp_path)
    data = CoverageData(basename=str(parts / "cov"), suffix="vm.pid102.Xdefx")
    data.set_context("tests/test_pool.py")
    data.add_lines({str(tmp_path / "pkg" / "other.py"): [1]})
    data.write()
    part = parts / "cov.vm.pid102.Xdefx"
    raw = part.read_bytes()
    assert garbled in raw
    part.write_bytes(raw.replace(garbled, garbled[:2] + b"\xff" + garbled[3:]))
    tests = build_map(parts, files, "cpu").tests
    assert tests["tests/test_exit.py"].lines == {"pkg/work.py": {2}}  # the readable parts still count
    assert not tests["tests/test_exit.py"].complete and not tests["tests/test_pool.py"].complete


def test_a_test_file_split_over_workers_is_complete_when_their_finished_counts_add_up(tmp_path: Path) -> None:
    # under xdist every worker collects every test and runs some: collected is the largest
    # count any process saw, finished the sum
    import json

    from ci.observe.merge import build_map

    parts, files = _parts_with_two_tests(tmp_path)
    for pid, done in ((100, {"tests/test_exit.py": 1}), (101, {"tests/test_exit.py": 1, "tests/test_pool.py": 1})):
        (parts / f"items.{pid}.json").write_text(json.dumps(
            {"items": {"tests/test_exit.py": 2, "tests/test_pool.py": 1}, "done": done, "ran": done}))
    tests = build_map(parts, files, "cpu").tests
    assert (tests["tests/test_exit.py"].complete, tests["tests/test_exit.py"].items) == (True, 2)
    assert (tests["tests/test_pool.py"].complete, tests["tests/test_pool.py"].items) == (True, 1)
    (parts / "items.101.json").write_text(json.dumps(
        {"items": {"tests/test_exit.py": 2, "tests/test_pool.py": 1}, "done": {}, "ran": {}}))
    assert not build_map(parts, files, "cpu").tests["tests/test_exit.py"].complete  # one of two finished


@NEEDS_SLIPCOVER
def test_slipcovers_save_appears_under_its_final_name_only_when_whole(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # the pytest process's lines are a JSON ``clines`` part, which the merge reads without
    # coverage.py (a coverage.py data file before: its import, SQLite writes and reads cost CPU)
    import json
    import os
    import re

    from ci.observe.merge import build_map

    write_project(tmp_path, FILES)
    parts = tmp_path / "parts"
    parts.mkdir()
    during: list[list[str]] = []
    replace = os.replace

    def watched(src: str, dst: str) -> None:  # what the merge could see while the part is being written
        during.append(sorted(p.name for p in parts.iterdir()))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", watched)
    files = RepoFiles(str(tmp_path))
    lines = slipcover_core.SlipcoverLines(files, parts / "clines.slipcover")
    lines.lines["tests/test_exit.py"][str(tmp_path / "pkg" / "work.py")].update({1, 2})
    lines.lines["tests/test_pool.py"][str(tmp_path / "pkg" / "__init__.py")].add(0)  # an empty module ran
    lines.save()
    slipcover_core.SlipcoverLines(files, parts / "clines.slipcover").save()  # nothing measured: no part
    monkeypatch.undo()

    names = sorted(p.name for p in parts.iterdir())
    assert during == [[n.replace("clines.", ".partial-clines.", 1) for n in names]]
    assert len(names) == 1 and re.fullmatch(rf"clines\.slipcover\.{os.getpid()}\.[0-9a-f]{{8}}\.jsonl", names[0])
    for pid, test in enumerate(("tests/test_exit.py", "tests/test_pool.py"), start=100):
        (parts / f"items.{pid}.json").write_text(json.dumps({"items": {test: 1}, "done": {test: 1}, "ran": {}}))
    tests = build_map(parts, files, "cpu").tests
    assert tests["tests/test_exit.py"].lines == {"pkg/work.py": {1, 2}} and tests["tests/test_exit.py"].complete
    assert tests["tests/test_pool.py"].lines == {"pkg/__init__.py": set()}  # executed, no line: as coverage.py's part