"""The slipcover core records the same executed lines per test file as coverage.py's C tracer.

A small project whose code runs in the ways a line recorder can get wrong: loops and branches,
statements over several lines, exceptions caught and finally blocks, generators, decorators,
properties, context managers, closures and lambdas, a coroutine, a thread, a module imported
by conftest.py before recording starts (its functions already exist), a fixture defined in
conftest.py, an empty module, one-line functions and a lambda called from another test file than
the one that imported them, a script run by runpy and source compiled by hand, a subprocess, and a
traceback whose marks come from the code's column positions. pytest records it twice, once per core, keeping
the raw parts (`CI_DEPMAP_KEEP_PARTS`); coverage.py's tracer is the oracle: every (test file,
file, line) it saw must be what the slipcover core saw, no more and no less (no line here runs
after one that raised in its basic block, the one place the probes count more:
`tests/ci/test_depmap_blocks.py`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest
from coverage import CoverageData

from ci.observe import slipcover_core
from ci.observe.options import RecordOptions, record_options
from tests.ci.depmap_support import write_project

pytestmark = pytest.mark.skipif(not slipcover_core.available(), reason="slipcover is not installed")

FLOW = textwrap.dedent("""\
    import asyncio
    import threading


    def loop(n):
        total = 0
        for i in range(n):
            if i % 2:
                total += i
            else:
                total -= 1
        while total > 10:
            total //= 2
        return total


    def multi(a,
              b):
        return max(
            a,
            b,
        )


    def guarded(x):
        try:
            if x < 0:
                raise ValueError(x)
            return 1 / x
        except ZeroDivisionError:
            return None
        finally:
            x = 0


    def gen(n):
        for i in range(n):
            yield i * 2


    def deco(fn):
        def wrapper(*a):
            return fn(*a) + 1
        return wrapper


    @deco
    def decorated(x):
        return x


    class Box:
        def __init__(self, v):
            self.v = v

        @property
        def double(self):
            return self.v * 2

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False


    def closure(k):
        def inner(x):
            return x + k
        return [inner(i) for i in range(3)] + list(map(lambda y: y * k, range(2)))


    async def coro(x):
        await asyncio.sleep(0)
        return x + 1


    def in_thread(n):
        out = []
        worker = threading.Thread(target=lambda: out.append(loop(n)))
        worker.start()
        worker.join()
        return out[0]


    def never():
        return 0


    ONE_LINER = lambda x: x + 1  # noqa: E731
    def tiny(x): return x * 3  # noqa: E704
    def tiny_gen(n): yield from range(n)  # noqa: E704


    def ratio(table, key):
        return table[key]["num"] / table[key]["den"]
    """)

FILES = {
    "pkg/__init__.py": "",
    "pkg/empty.py": "",
    "pkg/flow.py": FLOW,
    "pkg/early.py": "def helper(x):\n    if x:\n        return 'yes'\n    return 'no'\n",
    "pkg/script.py": "import sys\n\nRESULT = len(sys.argv)\nif RESULT < 0:\n    RESULT = 0\n",
    "pkg/recompiled.py": "def twice(x):\n    y = x * 2\n    return y\n",
    "conftest.py": textwrap.dedent("""\
        import pytest
        from pkg.early import helper


        @pytest.fixture
        def early():
            value = helper(1)
            return value
        """),
    "tests/__init__.py": "",
    "tests/test_flow.py": textwrap.dedent("""\
        import asyncio
        from pkg import flow


        def test_branches_and_loops():
            assert flow.loop(30) == 6
            assert flow.multi(1,
                              2) == 2


        def test_exceptions():
            assert flow.guarded(0) is None
            assert flow.guarded(2) == 0.5
            try:
                flow.guarded(-1)
            except ValueError:
                pass
        """),
    "tests/test_shapes.py": textwrap.dedent("""\
        import asyncio
        from pkg import flow


        def test_objects(early):
            assert early == "yes"
            assert list(flow.gen(3)) == [0, 2, 4]
            assert flow.decorated(1) == 2
            with flow.Box(2) as box:
                assert box.double == 4
            assert flow.closure(2) == [2, 3, 4, 0, 2]


        def test_async_and_thread():
            assert asyncio.run(flow.coro(1)) == 2
            assert flow.in_thread(4) < 10


        def test_one_line_code_imported_by_another_test_file():
            assert (flow.ONE_LINER(1), flow.tiny(2), list(flow.tiny_gen(2))) == (2, 6, [0, 1])
        """),
    "tests/test_exec.py": textwrap.dedent("""\
        import runpy
        from pathlib import Path

        import pkg


        def test_runpy_and_recompiled_source():
            assert runpy.run_path(str(Path(pkg.__file__).with_name("script.py")))["RESULT"] >= 1
            path = Path(pkg.__file__).with_name("recompiled.py")
            namespace = {}
            exec(compile(path.read_text(), str(path), "exec"), namespace)
            assert namespace["twice"](2) == 4
            local = 1
            exec("local_seen = local + 1")
            given = {}  # exec's locals given without its globals: the caller's globals, these locals
            exec(compile(path.read_text(), str(path), "exec"), None, given)
            assert given["twice"](3) == 6
            assert eval("local + 1") == 2
        """),
    # recording must not change what a program reads of its own code: 3.11 marks the failing
    # expression of a traceback from the code's column positions (rich's renderer reads them too)
    "tests/test_positions.py": textwrap.dedent("""\
        import traceback
        from pkg import flow


        def test_a_traceback_marks_the_failing_expression():
            try:
                flow.ratio({"k": {"num": 1, "den": 0}}, "k")
            except ZeroDivisionError as exc:
                frame = traceback.format_exception(exc)[-2]
            assert "^" in frame, frame
        """),
    "tests/test_child.py": textwrap.dedent("""\
        import subprocess, sys


        def test_child():
            code = "import pkg.empty, pkg.early; print(pkg.early.helper(0))"
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
            assert out.stdout.strip() == "no"
        """),
}


def _make_project(root: Path) -> None:
    write_project(root, FILES)


def _record(root: Path, core: str) -> set[tuple[str, str, int]]:
    """Every (context, repo-relative file, line) the recording with `core` kept in its parts."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CI_DEPMAP", "COVERAGE_")) and k != "PYTEST_ADDOPTS"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    keep = root / f"parts-{core}"
    env.update(CI_DEPMAP=f"out/{core}.json", CI_DEPMAP_CORE=core, CI_DEPMAP_KEEP_PARTS=str(keep))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "--tier", "cpu", "-n", "0",
                           "-q", "-p", "no:cacheprovider"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen: set[tuple[str, str, int]] = set()
    # slipcover's pytest process writes JSON lines too: the merge needs no coverage.py for it
    assert bool(list(keep.glob("cov.*"))) == (core != "slipcover"), sorted(p.name for p in keep.iterdir())
    for part in keep.glob("cov.*"):
        data = CoverageData(basename=str(part))
        data.read()
        for path in data.measured_files():
            rel = os.path.relpath(path, root)
            for line, contexts in data.contexts_by_lineno(path).items():
                seen.update((context, rel, line) for context in contexts)
    children = list(keep.glob("clines.*.jsonl"))  # subprocesses measured by slipcover's own start-up hook
    assert bool(children) == (core == "slipcover"), children
    for part in children:
        for record in part.read_text().splitlines():
            for context, files in json.loads(record).items():
                seen.update((context, os.path.relpath(path, root), line) for path, lines in files.items()
                            for line in lines)
    return seen


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[tuple[str, str, int]]]:
    root = tmp_path_factory.mktemp("cores")
    _make_project(root)
    return {core: _record(root, core) for core in ("ctrace", "slipcover")}


def _by_context(seen: set[tuple[str, str, int]]) -> dict[str, dict[str, list[int]]]:
    out: dict[str, dict[str, list[int]]] = defaultdict(dict)
    for context, rel, line in sorted(seen):
        out[context].setdefault(rel, []).append(line)
    return out


def test_slipcover_sees_exactly_the_lines_the_tracer_sees_per_test_file(recorded) -> None:
    tracer, probes = recorded["ctrace"], recorded["slipcover"]
    assert len(tracer) > 60  # the oracle saw the project run at all
    assert dict(_by_context(probes - tracer)) == {}, "lines only slipcover saw"
    assert dict(_by_context(tracer - probes)) == {}, "lines only the tracer saw"


def test_the_oracle_saw_what_the_project_layout_says(recorded) -> None:
    """Hand-checked points, so that two cores agreeing on nothing cannot pass the test above."""
    flow = FLOW.splitlines()
    line = {text.strip(): n for n, text in enumerate(flow, 1)}
    for core, seen in recorded.items():
        assert ("tests/test_flow.py", "pkg/flow.py", line["total //= 2"]) in seen, core
        assert ("tests/test_flow.py", "pkg/flow.py", line["return None"]) in seen, core
        assert ("tests/test_flow.py", "pkg/flow.py", line["x = 0"]) in seen, core
        # the thread's work, and the fixture in conftest.py that existed before recording began
        assert ("tests/test_shapes.py", "pkg/flow.py", line["total -= 1"]) in seen, core
        assert ("tests/test_shapes.py", "conftest.py", 7) in seen, core
        assert ("tests/test_shapes.py", "pkg/early.py", 3) in seen, core
        assert ("tests/test_child.py", "pkg/early.py", 4) in seen, core  # in the subprocess
        assert ("tests/test_child.py", "pkg/empty.py", 0) in seen, core
        assert ("tests/test_exec.py", "pkg/script.py", 3) in seen, core  # runpy, in this process
        for one_liner in ("ONE_LINER", "def tiny(", "def tiny_gen("):  # bodies on their def's line
            number = next(n for n, text in enumerate(flow, 1) if text.startswith(one_liner))
            assert ("tests/test_shapes.py", "pkg/flow.py", number) in seen, (core, one_liner)
        assert ("tests/test_exec.py", "pkg/recompiled.py", 3) in seen, core  # exec of compiled source
        assert not any(rel == "pkg/flow.py" and n == line["return 0"] for _, rel, n in seen), core


@pytest.mark.parametrize("env, expected", [
    ({}, RecordOptions(core="slipcover")),  # auto: slipcover imports here
    ({"CI_DEPMAP_MEASURE": " ", "CI_DEPMAP_CORE": " "}, RecordOptions(core="slipcover")),
    ({"CI_DEPMAP_CORE": "ctrace"}, RecordOptions(core="ctrace")),
    ({"CI_DEPMAP_MEASURE": "lines", "CI_DEPMAP_CORE": "ctrace"},
     RecordOptions(lines=True, opened=False, subprocesses=False, core="ctrace")),
    ({"CI_DEPMAP_MEASURE": "opened, subprocesses,", "CI_DEPMAP_CORE": "auto"},
     RecordOptions(lines=False, opened=True, subprocesses=True, core="slipcover")),
    ({"CI_DEPMAP_CORE": "slipcover", "CI_DEPMAP_MEASURE": "lines,opened"},
     RecordOptions(lines=True, opened=True, subprocesses=False, core="slipcover")),
])
def test_options_read_from_the_environment(env: dict[str, str], expected: RecordOptions) -> None:
    assert record_options(env) == expected


def test_auto_falls_back_to_the_tracer_where_slipcover_cannot_run_and_a_named_slipcover_is_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slipcover_core, "unavailable_reason", lambda: "slipcover is not installed: gone")
    assert record_options({}).core == "ctrace"
    assert record_options({"CI_DEPMAP_CORE": "slipcover"}, resolve_core=False).core == "slipcover"
    with pytest.raises(ValueError, match=r"^\$CI_DEPMAP_CORE=slipcover, but slipcover does not import here "
                                         r"\(slipcover is not installed: gone\)$"):
        record_options({"CI_DEPMAP_CORE": "slipcover"})


def test_the_slipcover_core_runs_only_on_the_interpreter_it_is_tested_with(monkeypatch: pytest.MonkeyPatch) -> None:
    assert slipcover_core.unavailable_reason() is None  # this suite's interpreter: CPython 3.11
    monkeypatch.setattr(sys, "version_info", (3, 12, 0, "final", 0))
    assert "tested on CPython 3.11 only, this is cpython 3.12" in slipcover_core.unavailable_reason()


@pytest.mark.parametrize("env, message", [
    ({"CI_DEPMAP_CORE": "pytrace"}, "$CI_DEPMAP_CORE='pytrace': unknown core (known: auto, ctrace, slipcover, sysmon)"),
    ({"CI_DEPMAP_MEASURE": "lines,files"}, "$CI_DEPMAP_MEASURE='lines,files': unknown part 'files' (known: "),
])
def test_a_bad_option_is_refused_naming_it(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as info:
        record_options(env)
    assert str(info.value).startswith(message)
    write_project(tmp_path, {"tests/test_a.py": "def test_a():\n    pass\n"})
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CI_DEPMAP", "COVERAGE_"))}
    clean.update(env, CI_DEPMAP="m.json", PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci.pytest_plugin", "-n", "0", "-q",
                           "-p", "no:cacheprovider"], cwd=tmp_path, env=clean, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 4 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "m.json").exists()


def test_a_slipcover_release_other_than_the_tested_one_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    import slipcover.version

    monkeypatch.setattr(slipcover.version, "__version__", "1.2.0")
    assert slipcover_core.unavailable_reason() == "slipcover 1.2.0 is installed, and this core is tested with 1.1 only"
    assert record_options({}).core == "ctrace"


def test_the_overhead_goal_is_judged_only_when_pytest_passed_in_every_run() -> None:
    from bench._depmap_overhead import BASELINE, FULL_SLIPCOVER, Measured
    from bench.depmap import verdict

    def pair(base_cpu: float, rec_cpu: float, codes: frozenset[int] = frozenset({0})) -> list[Measured]:
        return [Measured(BASELINE, 1.0, base_cpu, frozenset({0})), Measured(FULL_SLIPCOVER, 1.0, rec_cpu, codes)]

    assert verdict(pair(10.0, 11.0)) == "MET"  # exactly 10 % more
    assert verdict(pair(10.0, 11.01)) == "MISSED"
    # a recording run that failed did less work: cheaper, and meaningless
    assert verdict(pair(10.0, 7.0, frozenset({1}))) == "UNJUDGED (pytest did not pass in every run)"
    assert verdict(pair(10.0, 7.0, frozenset({0, 1}))).startswith("UNJUDGED")


def test_bench_depmap_keeps_each_runs_pytest_output_when_asked(tmp_path: Path) -> None:
    """``--logs=DIR``: a failing run of the overhead table says which test failed."""
    from bench._depmap_overhead import BASELINE, compare

    root, logs = tmp_path / "project", tmp_path / "logs"
    write_project(root, {"tests/test_one.py": "def test_one():\n    assert 1\n"})  # no test of this repository:
    logs.mkdir()  # running one would hide its imports from selection (a subprocess)
    measured = compare(root, ["tests/test_one.py"], (BASELINE,), 1, tmp_path / "m.json", logs=logs)
    assert measured[0].codes == {0}
    assert re.search(r"^1 passed", (logs / "0.0.log").read_text(), re.M)
