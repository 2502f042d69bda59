"""The ``sysmon`` core (the recorder's own ``sys.monitoring`` line recorder) on a real CPython 3.12.

A tiny project is recorded under ``.venv-py312`` (`ci.bootstrap` provisions it) with
``CI_DEPMAP_CORE=auto``, which picks sysmon there, and under this suite's 3.11 with coverage.py's C
tracer, the oracle: every test file's executed lines must be the same. ``pkg/work.py``'s
``common`` runs in two test files (sysmon disables a line's event after its first call; each
context must see it again); a Python server child is stopped by SIGTERM (saved: a complete entry)
and another by SIGKILL, as SGLang's ``kill_process_tree`` stops its servers (the killing test
asks it to flush first: a complete entry with the server's lines), and a third by a SIGKILL
sent by a process outside the recording (nothing asked it: never a complete entry). Recording
must not change the project's outcomes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ci.observe import sysmon_core
from ci.observe.options import record_options
from tests.ci.depmap_support import clean_env, write_project
from tests.ci.test_depmap_retire import SKIPPED_REARMS

REPO = Path(__file__).resolve().parents[2]
PY312 = REPO / ".venv-py312" / "bin" / "python"

pytestmark = pytest.mark.skipif(not PY312.exists(), reason="no .venv-py312: run python3 ci/bootstrap.py")

WORK = """\
def common(n):
    total = 0
    for i in range(n):
        total += i
    return total


def only_a():
    return common(3) + 1


def only_b():
    return common(4) * 2
"""
SERVER = """\
import time

from pkg.work import common


def main():
    common(2)
    print("ready", flush=True); time.sleep(60)  # one line: the signal finds every line before it run


if __name__ == "__main__":
    main()
"""
STOPPED = """\
import signal
import subprocess
import sys


def test_server_{name}():
    child = subprocess.Popen([sys.executable, "-m", "pkg.server"], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "ready\\n"
    child.send_signal(signal.{signal})
    assert child.wait(timeout=30) == -signal.{signal}
"""
FILES = {
    "pkg/__init__.py": "",
    "pkg/work.py": WORK,
    "pkg/server.py": SERVER,
    "tests/test_a.py": "from pkg.work import only_a\n\n\ndef test_a():\n    assert only_a() == 4\n",
    "tests/test_b.py": "from pkg.work import common, only_b\n\n\ndef test_b():\n    assert only_b() == 12\n"
                       "    assert common(1) == 0\n",
    "tests/test_term.py": STOPPED.format(name="term", signal="SIGTERM"),
    "tests/test_zkill.py": STOPPED.format(name="kill", signal="SIGKILL"),
    # the kill comes from `kill`, a program outside the recording: no one asks the server to flush
    "tests/test_zzoutside.py": STOPPED.format(name="outside", signal="SIGKILL").replace(
        "child.send_signal(signal.SIGKILL)", "subprocess.run(['kill', '-KILL', str(child.pid)], check=True)"),
}


def _pytest(python: Path | str, root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), "-m", "pytest", "-p", "ci.pytest_plugin", "--tier", "cpu", "-p",
                           "no:cacheprovider", "-p", "no:randomly", "-q"], cwd=root, env={**clean_env(), **env},
                          capture_output=True, text=True, timeout=180)


def _record(python: Path | str, root: Path, core: str) -> tuple[dict, str]:
    out = root.parent / f"{root.name}-{core}.json"
    proc = _pytest(python, root, CI_DEPMAP=str(out), CI_DEPMAP_CORE=core)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text())["tests"], proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, str]]:
    found = {}
    for name, python, core in (("sysmon", PY312, "auto"), ("ctrace", sys.executable, "ctrace")):
        root = tmp_path_factory.mktemp(name) / "project"
        write_project(root, FILES)
        found[name] = _record(python, root, core)
    plain = tmp_path_factory.mktemp("plain") / "project"
    write_project(plain, FILES)
    proc = _pytest(PY312, plain)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found["plain"] = ({}, proc.stdout.strip().splitlines()[-1])
    return found


def test_auto_picks_sysmon_on_312_and_it_runs_there() -> None:
    proc = subprocess.run([str(PY312), "-c", "from ci.observe.options import record_options as r; print(r({}).core)"],
                          cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "sysmon\n", "")


def test_sysmon_records_each_test_files_lines_as_the_c_tracer_does(recorded) -> None:
    sysmon, ctrace = recorded["sysmon"][0], recorded["ctrace"][0]
    assert sorted(sysmon) == sorted(ctrace) == ["tests/test_a.py", "tests/test_b.py", "tests/test_term.py",
                                                  "tests/test_zkill.py", "tests/test_zzoutside.py"]
    for test in sysmon:
        assert sysmon[test]["executed"] == ctrace[test]["executed"], test
    # by construction: common's body in both test files, though test_a's context saw it first
    # (test_a's collection imported the module: its def lines are test_a's and shared)
    assert sysmon["tests/test_b.py"]["executed"]["pkg/work.py"] == "2-5,13"
    assert sysmon["tests/test_a.py"]["executed"]["pkg/work.py"] == "1-5,8-9,12"


def test_a_server_stopped_by_sigterm_or_sigkill_from_its_test_saves_its_lines(recorded) -> None:
    tests = recorded["sysmon"][0]
    for stopped in ("tests/test_term.py", "tests/test_zkill.py"):
        assert tests[stopped]["complete"] is True, stopped
        assert tests[stopped]["executed"]["pkg/server.py"] == "1,3,6-8,11-12", stopped  # the child's lines
    assert tests["tests/test_zzoutside.py"]["complete"] is False  # killed unasked: its lines are lost
    assert tests["tests/test_a.py"]["complete"] is tests["tests/test_b.py"]["complete"] is True


def test_recording_does_not_change_the_outcomes(recorded) -> None:
    assert recorded["sysmon"][1].split(" in ")[0] == recorded["plain"][1].split(" in ")[0] == "5 passed"


def test_sysmon_by_name_is_refused_where_it_cannot_run() -> None:
    assert sysmon_core.unavailable_reason() is not None  # this suite's CPython 3.11
    with pytest.raises(ValueError, match=r"^\$CI_DEPMAP_CORE=sysmon, but it cannot run here \(the sysmon core "
                                         r"needs CPython 3.12 or later"):
        record_options({"CI_DEPMAP_CORE": "sysmon"})


def _maps_by_core(tmp_path: Path, files: dict[str, str]) -> dict[str, tuple[dict, dict]]:
    """``files`` recorded by sysmon (3.12) and by the C tracer (3.11): (executed by test, shared) each."""
    found = {}
    for name, python, core in (("sysmon", PY312, "auto"), ("ctrace", sys.executable, "ctrace")):
        write_project(tmp_path / name, files)
        out = tmp_path / f"{name}.json"
        proc = _pytest(python, tmp_path / name, CI_DEPMAP=str(out), CI_DEPMAP_CORE=core)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data = json.loads(out.read_text())
        found[name] = ({test: entry["executed"] for test, entry in data["tests"].items()}, data["shared"])
    return found


def test_switches_without_a_restart_leave_the_map_the_tracer_records(tmp_path: Path) -> None:
    # collect(test_a) -> "" and fixture -> test file skip sys.monitoring.restart_events (`files.Rearm`)
    found = _maps_by_core(tmp_path, SKIPPED_REARMS)
    assert found["sysmon"] == found["ctrace"]
    assert found["ctrace"][0]["tests/test_b.py"]["pkg/work.py"] == "2-5"


OWN_TOOL = """\
import sys

SEEN = []
M = sys.monitoring


def counted():
    return 1


def _started(code, offset):
    if code is counted.__code__:
        SEEN.append(code.co_name)
    return M.DISABLE  # the program's own tool hears each function start once


M.use_tool_id(M.PROFILER_ID, "the program's own")
M.register_callback(M.PROFILER_ID, M.events.PY_START, _started)
M.set_events(M.PROFILER_ID, M.events.PY_START)
"""
OWN_TOOL_TEST = "from pkg.tool import SEEN, counted\n\n\ndef test_{name}():\n    counted()\n    assert SEEN == ['counted']\n"


def test_a_context_switch_leaves_the_programs_own_monitoring_tool_alone_and_coverage_unimported(tmp_path: Path) -> None:
    # coverage.py's core re-armed by sys.monitoring.restart_events(), which enables every tool's
    # disabled events: the program's own tool heard `counted` start again in test_b's context
    files = {"pkg/__init__.py": "", "pkg/tool.py": OWN_TOOL, "conftest.py": "import pkg.tool  # noqa: F401\n",
             "tests/test_a.py": OWN_TOOL_TEST.format(name="a"), "tests/test_b.py": OWN_TOOL_TEST.format(name="b"),
             # and the pytest process records without importing coverage.py (about 0.15 s of CPU on 3.12)
             "tests/test_c.py": "import sys\n\n\ndef test_c():\n    assert 'coverage' not in sys.modules\n"}
    outcomes = {}
    for name, env in (("plain", {}), ("recorded", {"CI_DEPMAP": str(tmp_path / "map.json")})):
        write_project(tmp_path / name, files)
        proc = _pytest(PY312, tmp_path / name, **env)
        outcomes[name] = (proc.returncode, proc.stdout.strip().splitlines()[-1].split(" in ")[0])
    assert outcomes == {"plain": (0, "3 passed"), "recorded": (0, "3 passed")}
    tests = json.loads((tmp_path / "map.json").read_text())["tests"]
    assert tests["tests/test_b.py"]["executed"]["pkg/tool.py"] == "8"  # counted's body, in test_b's context too


# a module body and a function whose lines lie beyond CPython's one-byte delta from their first
# line: measured by INSTRUCTION events (`sysmon_core._far_lines`), branches and loops at the far end
FAR = ("TABLE = {\n" + "".join(f"    {i}: {i * i},\n" for i in range(400)) + "}\n" + """\
try:
    import not_a_module_anywhere  # noqa: F401
except ImportError:
    MISSING = True
else:
    MISSING = False
ODD = [v for v in TABLE.values() if v % 2]
n = 0
while n < 3: n += 1
if not MISSING:
    FLAG = 1


def far(x):
""" + "    x += 1\n" * 300 + """\
    if x > 1000:
        return -1
    with open(__file__) as f:
        f.read(1)
    return [i for i in range(x) if i % 7 == 0][-1]
""")
FAR_FILES = {"pkg/__init__.py": "", "pkg/far.py": FAR,
             "tests/test_a.py": "from pkg.far import far\n\n\ndef test_a():\n    assert far(1) == 294\n",
             "tests/test_b.py": "from pkg.far import far\n\n\ndef test_b():\n    assert far(2000) == -1\n"}


def test_code_far_from_its_first_line_records_the_lines_the_tracer_records(tmp_path: Path) -> None:
    found = _maps_by_core(tmp_path, FAR_FILES)
    assert found["sysmon"] == found["ctrace"]
    # far's body in both contexts, each its own branch
    assert found["ctrace"][0]["tests/test_b.py"]["pkg/far.py"] == "417-718"
    assert found["ctrace"][0]["tests/test_a.py"]["pkg/far.py"] == "1-401,403-406,409-412,416-717,719-721"


# far code objects without a jump (by INSTRUCTION): a dict module body, a class body, a module
# body that raises half way (imported in both test files: a failed import runs it again), a
# function that raises in test_a and returns in test_b, and a body with a handler but no jump.
# Measuring such code by PY_RETURN and a global PY_UNWIND instead was tried and passed this test,
# but the PY_UNWIND callback changed what rich's test_traceback.py ran (docs/depmaps.md, overhead3)
STRAIGHT = ("TABLE = {\n" + "".join(f"    {i}: {i * i},\n" for i in range(300)) + "}\n\n\nclass Names:\n"
            + "".join(f"    name_{i} = {i}\n" for i in range(200)) + """\

    def total(self):
        return self.name_1 + self.name_199


def steps(a):
""" + "    x = 1\n" * 200 + "    y = 1 / a\n" + "    x = 2\n" * 20 + "    return x + y\n")
# raises at the first instruction of its line 201 (a NameError): that line is the unwind's own
HALF = "".join(f"A{i} = {i}\n" for i in range(200)) + "not_a_name_anywhere  # noqa: F821\n" + "B = 1\n" * 30
# no jump, but a handler: its finally runs after the raise, C's line never (not straight-line)
GUARDED = "".join(f"A{i} = {i}\n" for i in range(200)) + "try:\n    import not_a_module_anywhere\n    C = 1\nfinally:\n    D = 2\n"
STRAIGHT_TEST = """\
import pytest

from pkg.straight import TABLE, Names, steps


def test_{name}():
    with pytest.raises(NameError):
        import pkg.half  # noqa: F401
    with pytest.raises(ImportError):
        import pkg.guarded  # noqa: F401
    assert TABLE[3] == 9 and Names().total() == 200
    {call}
"""
STRAIGHT_FILES = {"pkg/__init__.py": "", "pkg/straight.py": STRAIGHT, "pkg/half.py": HALF, "pkg/guarded.py": GUARDED,
                  "tests/test_a.py": STRAIGHT_TEST.format(name="a", call="with pytest.raises(ZeroDivisionError):\n"
                                                                          "        steps(0)"),
                  "tests/test_b.py": STRAIGHT_TEST.format(name="b", call="assert steps(1) == 3")}


def test_far_code_without_jumps_records_the_lines_the_tracer_records(tmp_path: Path) -> None:
    found = _maps_by_core(tmp_path, STRAIGHT_FILES)
    assert found["sysmon"] == found["ctrace"]
    a, b = found["ctrace"][0]["tests/test_a.py"], found["ctrace"][0]["tests/test_b.py"]
    assert a["pkg/half.py"] == b["pkg/half.py"] == "1-201"  # up to the line that raised
    assert a["pkg/guarded.py"] == b["pkg/guarded.py"] == "1-202,205"
    # test_a collected first: the module and class bodies are its; steps up to its division
    assert a["pkg/straight.py"] == "1-301,305-505,507-508,511-712"
    assert b["pkg/straight.py"].endswith(",512-733")  # steps to its return


FAR_COST = """\
import sys
from pathlib import Path
from ci.observe.files import RepoFiles
from ci.observe.sysmon_core import SysmonLines

root = Path(sys.argv[1])
source = root / "big.py"
source.write_text("TABLE = {\\n" + "".join(f"    {i}: {i},\\n" for i in range(8000)) + "}\\n")
code = compile(source.read_text(), str(source), "exec")
lines = SysmonLines(RepoFiles(root), root)
lines.start()
small = root / "small.py"
small.write_text("A = 1\\nB = A + 1\\n")
near = compile(small.read_text(), str(small), "exec")
exec(code, {})
exec(near, {})
events = sys.monitoring.events
measured = [sys.monitoring.get_local_events(lines._tool, c) for c in (code, near)]
lines.stop()
print(measured == [events.INSTRUCTION, events.LINE], lines.contexts()[""][str(source.resolve())] == set(range(1, 8002)))
"""


def test_a_long_module_body_is_measured_by_instruction_not_line(tmp_path: Path) -> None:
    # CPython 3.12 finds a far line by scanning the line table from its start at each LINE event:
    # 8,000 lines under LINE took about 4 s of CPU here (quadratic), under INSTRUCTION 0.05 s.
    # The cost is the bench's to measure; this pins the choice of event that avoids it.
    proc = subprocess.run([str(PY312), "-c", FAR_COST, str(tmp_path)], cwd=REPO, env=clean_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    by_instruction, same = proc.stdout.split()
    assert by_instruction == "True"  # the far module by INSTRUCTION, the two-line one by LINE
    assert same == "True"  # every line of the dict but its closing brace (no instruction there)


def test_an_observed_pytest_process_never_imports_slipcovers_core(tmp_path: Path) -> None:
    # the start-up hook asked slipcover's core whether it runs before resolving the core: a dozen
    # modules imported for nothing in every observed 3.12+ pytest process
    files = {"pkg/__init__.py": "", "pkg/work.py": WORK,
             "tests/test_a.py": "import sys\n\n\ndef test_a():\n    assert 'ci.observe.child' in sys.modules  # the hook ran\n"
                                "    assert 'ci.observe.slipcover_core' not in sys.modules\n"}
    write_project(tmp_path / "project", files)
    proc = subprocess.run([str(PY312), "-m", "ci", "observe", "--out", str(tmp_path / "facts.json"), "--", str(PY312),
                           "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "tests/test_a.py"],
                          cwd=tmp_path / "project", env=clean_env(), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(json.loads((tmp_path / "facts.json").read_text())["tests"]) == ["tests/test_a.py"]


NO_COVERAGE = """\
import sys
import unittest

from pkg.work import common


class Child(unittest.TestCase):
    def test_child(self):
        self.assertEqual(common(3), 3)
        self.assertNotIn("coverage", sys.modules)


if __name__ == "__main__":
    unittest.main()
"""


def test_an_observed_child_is_measured_by_this_core_without_coverage_py(tmp_path: Path) -> None:
    # coverage.py's start-up hook measured such a child before: `python -c pass` observed took
    # 699 million instructions, against 95 on 3.11 (the slipcover hook); its lines are the same
    write_project(tmp_path / "project", {"pkg/__init__.py": "", "pkg/work.py": WORK, "tests/test_c.py": NO_COVERAGE})
    proc = subprocess.run([str(PY312), "-m", "ci", "observe", "--out", str(tmp_path / "facts.json"), "--", str(PY312),
                           "tests/test_c.py"], cwd=tmp_path / "project", capture_output=True, text=True, timeout=180,
                          env={**clean_env(), "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path / 'project'}"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    entry = json.loads((tmp_path / "facts.json").read_text())["tests"]["tests/test_c.py"]
    assert (entry["complete"], entry["outcome"]) == (True, "passed")
    assert entry["executed"] == {"pkg/__init__.py": "", "pkg/work.py": "1-5,8,12",
                                 "tests/test_c.py": "1-2,4,7-10,13-14"}  # by line, as coverage.py's core did


# a script under 3.12 that records the module ``m`` (its text the script's first argument's) by the sysmon core
MEASURED_M = """\
import gc, sys
from pathlib import Path
from ci.observe.files import RepoFiles
from ci.observe.sysmon_core import SysmonLines

root = Path(sys.argv[1])
(root / "m.py").write_text(sys.argv[2])
sys.path.insert(0, str(root))
lines = SysmonLines(RepoFiles(root), root)
lines.start()
import m
"""
GC_WALK = MEASURED_M + """\
m.f(1)
lines.switch_context("b")
m.f(0)
lines.stop()
gc.collect()
print([gc.is_tracked(found) for _, found in lines._visits], sorted(lines.contexts()["b"][str(root / "m.py")]))
"""


def test_the_recorded_lines_are_nothing_the_garbage_collector_walks(tmp_path: Path) -> None:
    # a set of lines per code object and visit: rich's suite left 16,000 more objects and its
    # full collections took 28 % longer; ints in a dict are untracked once the keys are
    proc = subprocess.run([str(PY312), "-c", GC_WALK, str(tmp_path.resolve()),
                           "def f(x):\n    y = x\n    if y:\n        return 1\n    return 2\n"],
                          cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(" ", 2)[:2] == ["[False,", "False]"], proc.stdout
    assert proc.stdout.strip().endswith("[2, 3, 5]")  # the second context: the branch not taken before


TAKE_NEW = MEASURED_M + """\
m.f()
first = lines.take_new()
late = lines._visits[-1][1]  # a thread that read the current visit before the next take
m.g()
second = lines.take_new()
late[(str(root / "m.py"), 99, "late")] = 1 << 99  # ... writes its line after that take
third, idle = lines.take_new(), lines.take_new()
lines.stop()
print([sorted(found.get(str(root / "m.py"), ())) for found in (first, second, third, idle, lines.take_new(final=True))])
"""


def test_a_childs_batches_hold_each_line_once_and_a_late_line_of_another_thread_too(tmp_path: Path) -> None:
    # a recorded 3.12 child's flusher takes its lines in batches (`SysmonLines.take_new`)
    proc = subprocess.run([str(PY312), "-c", TAKE_NEW, str(tmp_path.resolve()),
                           "def f():\n    return 1\n\n\ndef g():\n    return 2\n"],
                          cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[[1, 2, 5], [6], [99], [], []]"

