"""One probe per basic block (`ci.observe.blocks`): what the slipcover core records
against Python's own line tracer (``sys.settrace``), the oracle, on code written to stress block
boundaries; and hand-checked plans. Lines after one that raised, in its block, are the one
documented difference: the probes count them as run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.observe import blocks, slipcover_core
from tests.ci.depmap_support import clean_env

pytestmark = pytest.mark.skipif(not slipcover_core.available(), reason="slipcover is not installed")
REPO = Path(__file__).resolve().parents[2]
# a name in no repository: inside a recording, `exec` of a repository file's code puts probes in it
OUTSIDE = "/nonexistent-ci-depmap-blocks/shapes.py"

SHAPES = textwrap.dedent("""\
    import contextlib


    def ternary(c):
        x = (1
             if c
             else 2)
        y = x + 1
        return y


    def chain(a, b, c):
        ok = (a
              and b
              or c)
        if ok:
            return 1
        return 0


    def loops(n):
        total = 0
        for i in range(n):
            if i == 3:
                break
            total += i
        else:
            total = -1
        while n > 0:
            n -= 1
            if n == 1:
                continue
            total += 1
        else:
            total += 100
        return total


    def handled(x):
        try:
            y = 10 // x
            z = y + 1  # extra: after the line that raised, in its block
        except ZeroDivisionError:
            z = -1
        else:
            z += 1
        finally:
            w = 0
        return z + w


    def matcher(v):
        match v:
            case [a, b]:
                return a + b
            case {"k": k}:
                return k
            case _:
                return None


    def suppressed():
        with contextlib.suppress(KeyError):
            d = {}
            d["missing"]
            never = 1  # extra: after the line that raised, in its block
        return 0


    def gen(n):
        for i in range(n):
            got = yield i
            if got:
                return


    def comprehension(n):
        return {k: [j for j in range(k)
                    if j % 2]
                for k in range(n)}


    def asserted(x):
        assert (x >
                0), "positive"
        return x


    def walrus(xs):
        if (n := len(xs)) > 2:
            return n
        return -n


    def spin(n):
        spun = 0
        while True:
            spun += 1
            if spun > n:
                return spun


    def fallthrough(c):
        if c:
            c = 0
        after = c  # reached from the `if` by its jump alone when c is false
        return after


    def straight(a):
        b = a + 1
        c = b * 2
        d = c - 3
        return d
    """)

CALLS = [("ternary", (True,)), ("chain", (0, 1, 0)), ("loops", (2,)), ("loops", (5,)), ("handled", (0,)),
         ("matcher", ({"k": 3},)), ("suppressed", ()), ("comprehension", (4,)), ("asserted", (2,)),
         ("walrus", ([1],)), ("fallthrough", (False,)), ("straight", (1,))]

# runs CALLS of `shapes` (argv[1]: its folder, argv[2]: CALLS as JSON) under sys.settrace: ``oracle``
# is the set of lines the tracer saw; ``run()`` runs them again
ORACLE = textwrap.dedent("""\
    import json, sys
    import shapes
    from ci.observe import slipcover_core
    from ci.observe.files import RepoFiles

    calls = json.loads(sys.argv[2])

    def run():
        for name, args in calls:
            getattr(shapes, name)(*args)

    oracle = set()
    def tracer(frame, event, arg):
        if frame.f_code.co_filename != shapes.__file__:
            return None
        if event == "line":
            oracle.add(frame.f_lineno)
        return tracer

    sys.settrace(tracer)
    run()
    sys.settrace(None)
    """)

DRIVER = ORACLE + textwrap.dedent("""\
    lines = slipcover_core.SlipcoverLines(RepoFiles(sys.argv[1]), None)
    lines.switch_context("calls")
    lines.start()
    run()
    g = shapes.gen(3)
    lines.switch_context("gen started")
    next(g)
    lines.switch_context("gen resumed")
    g.send(0)
    lines.stop()
    seen = {c: sorted(v for files in lines.lines[c].values() for v in files) for c in list(lines.lines)}
    print(json.dumps({"oracle": sorted(oracle), **seen}))
    """)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[int]]:
    root = tmp_path_factory.mktemp("blocks")
    (root / "shapes.py").write_text(SHAPES)
    env = {**clean_env(), "PYTHONPATH": f"{root}{os.pathsep}{REPO}"}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(root), json.dumps(CALLS)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _marked(mark: str) -> set[int]:
    return {n for n, text in enumerate(SHAPES.splitlines(), 1) if mark in text}


def test_the_probes_see_what_the_line_tracer_sees_plus_the_lines_after_a_raise(recorded) -> None:
    oracle, probes = set(recorded["oracle"]), set(recorded["calls"])
    assert len(oracle) > 40  # the oracle saw the calls run at all
    assert oracle - probes == set(), "lines the probes missed"
    assert probes - oracle == _marked("# extra"), "lines the probes counted that did not run"
    assert _marked("else 2") | _marked("return None") <= set(range(1, 200)) - probes  # branches not taken


def test_a_generator_resumed_in_another_test_files_time_records_there(recorded) -> None:
    started, resumed = set(recorded["gen started"]), set(recorded["gen resumed"])
    yield_line, if_line = min(_marked("got = yield i")), min(_marked("if got:"))
    assert yield_line in started and if_line not in started
    assert if_line in resumed  # the line after the yield, run when the generator resumed


def test_straight_line_code_gets_one_probe_that_stands_for_the_rest() -> None:
    namespace: dict[str, object] = {}
    exec(compile(SHAPES, OUTSIDE, "exec"), namespace)
    code = namespace["straight"].__code__
    first = min(_marked("b = a + 1"))
    plan = blocks.plan(code, slipcover_core._line_starts(code))
    assert [line for _, line in plan.points] == [first]
    assert plan.implied == {first: frozenset({first + 1, first + 2, first + 3})}


def test_every_branch_target_and_handler_starts_a_block() -> None:
    namespace: dict[str, object] = {}
    exec(compile(SHAPES, OUTSIDE, "exec"), namespace)
    code = namespace["handled"].__code__
    plan = blocks.plan(code, slipcover_core._line_starts(code))
    probed = {line for _, line in plan.points}
    handler, orelse, final = (min(_marked(text)) for text in ("z = -1", "z += 1", "w = 0"))
    assert {handler, orelse, final} <= probed  # each is reached by a jump or the exception table
    assert min(_marked("z = y + 1")) not in probed  # inside the try's first block


def test_a_loop_body_that_a_jump_back_reaches_has_its_own_probe() -> None:
    namespace: dict[str, object] = {}
    exec(compile(SHAPES, OUTSIDE, "exec"), namespace)
    code = namespace["spin"].__code__
    plan = blocks.plan(code, slipcover_core._line_starts(code))
    assert min(_marked("spun += 1")) in {line for _, line in plan.points}  # not implied by the line before


def test_handlers_begin_blocks_by_dis_own_reading_of_the_exception_table() -> None:
    import dis

    namespace: dict[str, object] = {}
    exec(compile(SHAPES, OUTSIDE, "exec"), namespace)
    for name in ("handled", "suppressed"):
        code = namespace[name].__code__
        targets = {entry.target for entry in dis.Bytecode(code).exception_entries}
        assert targets and targets <= set(blocks.leaders(code)), name


def test_expand_adds_only_what_a_file_noted() -> None:
    blocks.note("/nowhere/a.py", {3: frozenset({4, 5})})
    assert blocks.expand("/nowhere/a.py", {3, 9}) == {3, 4, 5, 9}
    assert blocks.expand("/nowhere/a.py", {4}) == {4}
    assert blocks.expand("/nowhere/b.py", {3}) == {3}
