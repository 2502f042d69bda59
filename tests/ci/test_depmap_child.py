"""Subprocesses of a recorded test measured by slipcover through the recorder's own start-up hook
(`ci.observe.startup`, `ci.observe.child`): real interpreters, real ``site``
processing of the hook file, real signals. coverage.py's own hook is the fallback, never both."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest

from ci.observe import live, slipcover_core
from ci.observe.child import FLUSH_SECONDS
from ci.observe.startup import PTH_NAME, PTH_TEXT, install

from tests.ci.depmap_child_support import WORK, child_argv, child_env, coverage_ini, project, recorded_lines

pytestmark = pytest.mark.skipif(not slipcover_core.available(), reason="slipcover is not installed")


def _signal_when_ready(root: Path, parts: Path, body: str, signum: int, wait: float = 0.0,
                       flushed: bool = False) -> int:
    """Run ``body`` (which prints ``ready`` and sleeps) as a recorded child, send ``signum``
    ``wait`` seconds after it is ready (``flushed``: once its flusher has written a line, however
    long a loaded machine makes that), and return its exit status."""
    child = subprocess.Popen(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(wait)
        deadline = time.monotonic() + 30
        while flushed and not any(p.stat().st_size for p in parts.glob("clines.*.jsonl")):
            assert time.monotonic() < deadline, "the flusher wrote nothing in 30 s"
            time.sleep(FLUSH_SECONDS)
        child.send_signal(signum)
        return child.wait(timeout=30)
    finally:
        child.kill()


def test_install_writes_the_hook_once_and_reports_a_folder_it_cannot_write(tmp_path: Path) -> None:
    assert install(tmp_path) == tmp_path / PTH_NAME and (tmp_path / PTH_NAME).read_text() == PTH_TEXT
    before = (tmp_path / PTH_NAME).stat().st_mtime_ns
    assert install(tmp_path) == tmp_path / PTH_NAME and (tmp_path / PTH_NAME).stat().st_mtime_ns == before
    (tmp_path / PTH_NAME).write_text("import os\n")  # a stale or foreign text is replaced
    assert install(tmp_path) is not None and (tmp_path / PTH_NAME).read_text() == PTH_TEXT
    assert install(tmp_path / "missing") is None
    (tmp_path / "file").write_text("")
    assert install(tmp_path / "file") is None  # not a folder
    assert install().parent == Path(sysconfig.get_paths()["purelib"])  # by default: this interpreter's
    assert PTH_NAME < "a1_coverage.pth"  # site reads .pth files in name order: this one first


def test_the_hook_swallows_any_error_of_the_recorder_and_the_program_runs(tmp_path: Path) -> None:
    # a recorder whose start fails in a way no import does: site would report it on stderr and
    # skip the rest of the .pth file; the hook's contract is that nothing shows
    fake = tmp_path / "fake" / "ci" / "observe"
    fake.mkdir(parents=True)
    for init in (fake.parent / "__init__.py", fake / "__init__.py"):
        init.write_text("")
    (fake / "child.py").write_text("def start():\n    raise RuntimeError('the recorder broke')\n")
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    assert install(site_dir) is not None
    env = {**child_env(tmp_path, tmp_path, CI_DEPMAP_CHILD_CORE="slipcover"), "PYTHONPATH": str(fake.parent.parent)}
    proc = subprocess.run([sys.executable, "-c", "import site, sys; site.addsitedir(sys.argv[1]); print('ran')",
                           str(site_dir)], env=env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ran\n", "")


def test_a_child_records_its_lines_once_and_coverage_hook_is_kept_out(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    body = "import os; from pkg.work import work; work(3); print(os.environ.get('COVERAGE_PROCESS_START'))"
    proc = subprocess.run(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover",
                                                 COVERAGE_PROCESS_START=str(coverage_ini(tmp_path, root, parts))),
                          cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "None" and proc.stderr == "", proc.stderr
    assert len(list(parts.glob("clines.*.jsonl"))) == 1  # one process, one log
    assert list(parts.glob("cov.*")) == []  # coverage.py's hook, read after this one, did not start
    assert recorded_lines(parts) == {"tests/test_x.py": {"__init__.py": [0], "work.py": [1, 2, 3, 4, 5, 8]}}


def test_without_the_variable_the_hook_does_nothing(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    proc = subprocess.run(child_argv("from pkg.work import work; work(3); import sys; "
                                       "print('ci.observe.child' in sys.modules)"),
                          env=child_env(root, parts), cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr
    assert list(parts.iterdir()) == []


def test_a_child_ended_by_sigterm_saves_its_lines_and_still_dies_of_sigterm(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    body = "import sys, time; from pkg.work import work; work(2); print('ready', flush=True); time.sleep(60)"
    assert _signal_when_ready(root, parts, body, signal.SIGTERM) == -signal.SIGTERM
    assert recorded_lines(parts) == {"tests/test_x.py": {"__init__.py": [0], "work.py": [1, 2, 3, 4, 5, 8]}}


def test_a_program_with_its_own_sigterm_handler_keeps_it(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    body = ("import signal, sys, time\nfrom pkg.work import work\nwork(1)\n"
            "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\nprint('ready', flush=True)\ntime.sleep(60)")
    # the program's handler ran; its sys.exit runs the exit handlers: saved
    assert _signal_when_ready(root, parts, body, signal.SIGTERM, wait=0.1) == 7
    assert "work.py" in recorded_lines(parts)["tests/test_x.py"]


def test_where_slipcover_cannot_run_coverage_hook_measures_the_child_instead(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    broken = tmp_path / "broken"
    (broken / "slipcover").mkdir(parents=True)
    (broken / "slipcover" / "__init__.py").write_text("raise ImportError('no slipcover here')\n")
    env = child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover",
               COVERAGE_PROCESS_START=str(coverage_ini(tmp_path, root, parts)))
    env["PYTHONPATH"] = f"{broken}{os.pathsep}{env['PYTHONPATH']}"
    proc = subprocess.run([sys.executable, "-c", "from pkg.work import work; work(3)"], env=env, cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert list(parts.glob("clines.*")) == [] and len(list(parts.glob("cov.*"))) == 1


@pytest.mark.parametrize("how", ["script", "module"])
def test_a_repository_script_run_by_path_is_recorded_whole_and_one_run_by_module_by_line(
        tmp_path: Path, how: str) -> None:
    root, parts = project(tmp_path)
    (root / "pkg" / "tool.py").write_text("import sys\n\n\ndef unused():\n    return 1\n\n\n"
                                          "if __name__ == '__main__':\n    sys.exit(0)\n")
    argv = [sys.executable, "pkg/tool.py"] if how == "script" else [sys.executable, "-m", "pkg.tool"]
    proc = subprocess.run(argv, env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    recorded = recorded_lines(parts)["tests/test_x.py"]["tool.py"]
    # run from C, the script has no probes: every line counts, the body of unused() too
    assert sorted(recorded) == ([1, 2, 3, 4, 5, 6, 7, 8, 9] if how == "script" else [1, 4, 8, 9])


def test_a_child_killed_by_sigkill_keeps_what_it_ran_before_the_last_flush(tmp_path: Path) -> None:
    """SGLang's kill_process_tree ends a server and its workers with SIGKILL: no exit handler runs."""
    root, parts = project(tmp_path)
    body = "import time; from pkg.work import work; work(2); print('ready', flush=True); time.sleep(60)"
    assert _signal_when_ready(root, parts, body, signal.SIGKILL, flushed=True) == -signal.SIGKILL
    assert recorded_lines(parts) == {"tests/test_x.py": {"__init__.py": [0], "work.py": [1, 2, 3, 4, 5, 8]}}


def test_a_forked_child_logs_its_own_lines_before_it_leaves_by_os_exit(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    body = ("import os, time\nfrom pkg import work\npid = os.fork()\nif pid == 0:\n    work.idle()\n"
            "    time.sleep(10 * %r)\n    os._exit(0)\nos.waitpid(pid, 0)\nprint(pid)" % FLUSH_SECONDS)
    proc = subprocess.run(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    forked = parts / f"clines.{proc.stdout.strip()}.jsonl"
    assert forked.is_file()
    idle_body = WORK.splitlines().index("    return 0") + 1
    assert any(idle_body in lines for record in forked.read_text().splitlines()
               for files in json.loads(record).values() for path, lines in files.items() if path.endswith("work.py"))


def test_a_child_that_leaves_by_os_exit_at_once_saves_its_lines_first(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    body = "import os\nfrom pkg.work import work\nwork(2)\nos._exit(3)"  # no atexit, no time for the flusher
    proc = subprocess.run(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 3, proc.stderr  # the status it asked for
    assert recorded_lines(parts) == {"tests/test_x.py": {"__init__.py": [0], "work.py": [1, 2, 3, 4, 5, 8]}}
    assert not list(parts.glob("live.*"))  # saved: the entry stays complete


def test_the_merge_skips_a_torn_last_line_and_refuses_a_bad_one_before_it(tmp_path: Path) -> None:
    from ci.observe.merge import _child_records

    part = tmp_path / "clines.1.jsonl"
    part.write_text('{"t.py": {"/r/a.py": [1, 2]}}\n{"t.py": {"/r/b.py": [3]}}\n{"t.py": {"/r/c')
    assert list(_child_records(part)) == [("t.py", {"/r/a.py": [1, 2]}), ("t.py", {"/r/b.py": [3]})]
    part.write_text('{"t.py": {"/r/a.py": [1]}}\nnot json\n{"t.py": {}}\n')
    with pytest.raises(ValueError, match=r"^clines\.1\.jsonl: line 2 is not JSON$"):
        list(_child_records(part))
    part.write_text('{"t.py": {}}\nnot json\n')  # ended by its newline: written whole, so not torn
    with pytest.raises(ValueError, match=r"^clines\.1\.jsonl: line 2 is not JSON$"):
        list(_child_records(part))
    part.write_text('[1, 2]\n')
    with pytest.raises(ValueError, match=r"line 1 is not a JSON object"):
        list(_child_records(part))


def test_a_child_outliving_its_recording_exits_quietly(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    body = "import shutil, sys\nfrom pkg.work import work\nwork(1)\nshutil.rmtree(sys.argv[1])"
    argv = child_argv(body) + [str(parts)]
    proc = subprocess.run(argv, env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")


def test_a_fork_while_another_thread_holds_the_recorders_locks_does_not_hang_the_child(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    body = ("import os, sys, threading, time\nimport ci.observe.child as dc\nfrom pkg import work\n"
            "held = threading.Event()\n"
            "def hold():\n    with dc._active[0].lines._sci.lock:\n        held.set()\n        time.sleep(1)\n"
            "threading.Thread(target=hold, daemon=True).start()\nheld.wait()\n"
            "pid = os.fork()\nif pid == 0:\n    work.idle()\n    sys.exit(0)\n"
            "print(os.waitpid(pid, 0)[1], pid)")
    proc = subprocess.run(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    status, pid = proc.stdout.split()
    assert status == "0"  # the forked child exited through its exit handlers instead of hanging in them
    assert (parts / f"clines.{pid}.jsonl").is_file()


def test_a_child_s_flushes_add_up_and_a_failed_write_leaves_it_unsaved(tmp_path: Path) -> None:
    """Each flush appends what is new (an earlier one's lines stay); a write that fails keeps the
    live mark, so the entry is not complete."""
    root, parts = project(tmp_path)
    body = textwrap.dedent("""\
        import glob, os, sys, time
        from pkg import work
        work.work(2)
        deadline = time.monotonic() + 30
        while not any(os.path.getsize(p) for p in glob.glob(os.environ["CI_DEPMAP_PARTS"] + "/clines.*")):
            time.sleep(0.01)  # the flusher wrote work's lines
        if sys.argv[1:] == ["break"]:  # the log's name taken by a folder: every later write fails
            log = os.path.join(os.environ["CI_DEPMAP_PARTS"], f"clines.{os.getpid()}.jsonl")
            os.rename(log, log + ".kept")
            os.mkdir(log)
        work.idle()  # new lines: one more write to come
        """)
    env = child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover")
    proc = subprocess.run(child_argv(body), env=env, cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert recorded_lines(parts) == {"tests/test_x.py": {"__init__.py": [0], "work.py": [1, 2, 3, 4, 5, 8, 9]}}
    assert not list(parts.glob("live.*"))

    broken = tmp_path / "broken"
    root, parts = project(broken)
    proc = subprocess.run(child_argv(body) + ["break"], env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"),
                          cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert live.unsaved_tests(parts) == {"tests/test_x.py"}  # the live mark stays: not complete


def test_a_forked_child_flushes_on_its_own_while_it_runs(tmp_path: Path) -> None:
    """A fork worker ended by SIGKILL keeps what its own flusher wrote (no exit handler runs)."""
    root, parts = project(tmp_path)
    body = textwrap.dedent("""\
        import os, signal, time
        from pkg import work
        pid = os.fork()
        if pid == 0:
            work.idle()
            log = os.path.join(os.environ["CI_DEPMAP_PARTS"], f"clines.{os.getpid()}.jsonl")
            deadline = time.monotonic() + 5
            while not (os.path.exists(log) and os.path.getsize(log)) and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        os.waitpid(pid, 0)
        print(pid)
        """)
    proc = subprocess.run(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    forked = parts / f"clines.{proc.stdout.strip()}.jsonl"
    assert forked.is_file() and forked.stat().st_size
    assert not (parts / f"live.{proc.stdout.strip()}").exists()  # asked to flush before its SIGKILL: killed whole


def test_a_child_s_periodic_flush_retires_the_probes_of_what_it_wrote(tmp_path: Path) -> None:
    """Retirement is cost, not content: only the probe sites can show it (`ci.observe.retire`)."""
    root, parts = project(tmp_path)
    body = textwrap.dedent("""\
        import glob, os, time
        from pkg import work
        work.work(2)
        deadline = time.monotonic() + 30
        # work.py's lines written, not just any: a flush before `work` ran can hold pkg/__init__.py's
        # lines alone (it printed 0 retired so, at load 14)
        while not any("work.py" in open(p).read() for p in glob.glob(os.environ["CI_DEPMAP_PARTS"] + "/clines.*")):
            time.sleep(0.01)
        import ci.observe.child as child  # the recorder's own module, shared (`ci.observe.aside`)
        print(len(child._active[0].lines._sites.retired))
        """)
    proc = subprocess.run(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) > 0


def test_a_child_logs_the_repository_files_it_opens(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    (root / "pkg" / "table.txt").write_text("k 1\n")
    body = "from pathlib import Path; Path('pkg/table.txt').read_text()"
    proc = subprocess.run(child_argv(body), env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), cwd=root,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    logged = {line for log in parts.glob("opened.*.log") for line in log.read_text().splitlines()}
    assert "tests/test_x.py\tpkg/table.txt" in logged


def test_a_script_that_probes_measured_by_line_is_not_recorded_whole(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    (root / "pkg" / "tool.py").write_text("import sys\n\n\ndef unused():\n    return 1\n\n\n"
                                          "if __name__ == '__main__':\n    import pkg.tool\n")
    proc = subprocess.run([sys.executable, "pkg/tool.py"], env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"),
                          cwd=root, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    # it imports itself: its probes saw which lines ran, so those, not every line, are its record
    assert sorted(recorded_lines(parts)["tests/test_x.py"]["tool.py"]) == [1, 4, 8]
