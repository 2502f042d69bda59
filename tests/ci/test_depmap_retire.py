"""Probes retired once their line is in the current context (`ci.observe.retire`): a
retired probe stops firing, the next context records the same lines again (Python's own line
tracer is the oracle for what ran), a byte that is not what it must be is never written, and
threads running probed code while probes are retired and rearmed see no crash and lose no line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.observe import retire, slipcover_core
from ci.observe.files import Rearm, collect_context, fixture_context
from tests.ci.depmap_support import clean_env, write_project
from tests.ci.test_depmap_record import _recorded_map
from tests.ci.test_depmap_blocks import CALLS, ORACLE, SHAPES

pytestmark = pytest.mark.skipif(not slipcover_core.available(), reason="slipcover is not installed")
REPO = Path(__file__).resolve().parents[2]

DRIVER = ORACLE + textwrap.dedent("""\
    import threading
    out = {"oracle": sorted(oracle)}
    lines = slipcover_core.SlipcoverLines(RepoFiles(sys.argv[1]), None)
    sites = lines._sites
    lines.switch_context("first")
    lines.start()
    run()
    lines.settle()
    out["retired"] = len(sites.retired)
    run()  # again in the same context: every probe it reaches is retired
    out["fired again"] = {f: sorted(v) for f, v in lines._sci.newly_seen.items() if v}
    g = shapes.gen(3)
    next(g)
    lines.settle()  # the generator's probes so far are retired while it is suspended
    lines.switch_context("second")
    out["rearmed"] = len(sites.retired)
    g.send(0)  # resumed after the rearm: the line after the yield fires for "second"
    run()
    lines.settle()
    if sys.argv[3] == "threads":
        stop = []
        def spin():
            while not stop:
                run()
        workers = [threading.Thread(target=spin) for _ in range(2)]
        for w in workers:
            w.start()
        for n in range(200):
            lines.switch_context(f"churn {n}")
            lines.settle()
        lines.switch_context("last")
        stop.append(True)
        for w in workers:
            w.join()
        run()
    lines.switch_context("timed")
    lines.settle_every(0.02)
    run()
    import time
    deadline = time.monotonic() + 60
    while not sites.retired and time.monotonic() < deadline:
        time.sleep(0.01)
    out["retired by the timer"] = len(sites.retired)
    lines.stop()
    out["sites"] = sum(len(s) for per_file in sites.sites.values() for s in per_file.values())
    out["broken"] = len(sites.broken)
    out["contexts"] = {c: sorted(v for files in lines.lines[c].values() for v in files) for c in list(lines.lines)}
    print(json.dumps(out))
    """)


def _drive(tmp_path: Path, mode: str) -> dict:
    (tmp_path / "shapes.py").write_text(SHAPES)
    env = {**clean_env(), "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path), json.dumps(CALLS), mode], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def driven(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _drive(tmp_path_factory.mktemp("retire"), "once")


def test_a_retired_probe_stops_firing_in_its_context(driven) -> None:
    assert driven["retired"] > 20 and driven["broken"] == 0
    assert driven["fired again"] == {}


def test_the_next_context_records_every_line_again(driven) -> None:
    oracle = set(driven["oracle"])
    first, second = set(driven["contexts"]["first"]), set(driven["contexts"]["second"])
    assert oracle <= first
    assert oracle <= second  # the same calls, after every probe they reach was retired and rearmed
    assert driven["rearmed"] == 0


def test_a_timer_retires_what_a_long_test_ran_without_waiting_for_its_end(driven) -> None:
    assert driven["retired by the timer"] > 20
    assert set(driven["oracle"]) <= set(driven["contexts"]["timed"])


def test_a_generator_suspended_while_retired_records_its_resumption_in_the_next_context(driven) -> None:
    lines = SHAPES.splitlines()
    if_line = next(n for n, text in enumerate(lines, 1) if "if got:" in text)
    assert if_line not in set(driven["contexts"]["first"])
    assert if_line in set(driven["contexts"]["second"])


def test_threads_running_probed_code_while_probes_churn(tmp_path: Path) -> None:
    driven = _drive(tmp_path, "threads")
    assert driven["broken"] == 0
    assert set(driven["oracle"]) <= set(driven["contexts"]["last"])


def _instrumented(tmp_path: Path, source: str, name: str):
    """``source``'s first function's code with the recorder's probes (not run), and the recorder."""
    from ci.observe.files import RepoFiles

    lines = slipcover_core.SlipcoverLines(RepoFiles(tmp_path), None)
    code = compile(source, str(tmp_path / name), "exec").co_consts[0]
    return lines, code, lines._sci.instrument(code)


def test_each_inserted_probe_call_is_a_site_and_nothing_else_is(tmp_path: Path) -> None:
    source = "def f(a):\n    if a:\n        pass\n    return print(a)\n"
    lines, code, new = _instrumented(tmp_path, source, "f.py")
    sites = lines._sites
    assert sites.enabled  # CPython 3.11, which `slipcover_core.available` requires
    probes = [c for c in new.co_consts if type(c).__name__ == "PyCapsule"]
    found = sites.sites[code.co_filename]
    assert sorted(found) == [2, 3, 4]  # one block each
    assert sum(len(s) for s in found.values()) == len(probes)
    plain = retire.ProbeSites(sites.signal)
    plain.lines = sites.lines
    plain.add(code)  # the same function without probes: a NOP and PUSH_NULL of its own are no site
    assert not plain.sites


def test_a_byte_that_is_not_the_probes_opening_is_never_written(tmp_path: Path) -> None:
    import ctypes

    lines, code, new = _instrumented(tmp_path, "def g(a):\n    b = a + 1\n    return b\n", "g.py")
    sites = lines._sites
    [(live, offset)] = sites.sites[code.co_filename][2]
    assert live.code is new
    assert not sites._write((live, offset + 2), retire._NOP, retire._JUMP_FORWARD)  # PUSH_NULL there
    assert id(new) in sites.broken
    sites.retire(code.co_filename, {2})  # the code object is left alone from now on
    assert sites.retired == []
    live = ctypes.string_at(id(new) + type(new).__basicsize__, len(new.co_code))
    assert live[offset] == retire._NOP and live[offset + 2] == retire._PUSH_NULL


@pytest.mark.parametrize("at", [0, 1], ids=["opcode", "argument"])
def test_an_opening_byte_changed_behind_the_recorders_back_is_left_alone(tmp_path: Path, at: int) -> None:
    import ctypes

    lines, code, new = _instrumented(tmp_path, "def h(a):\n    b = a + 1\n    return b\n", "h.py")
    sites = lines._sites
    [(_, offset)] = sites.sites[code.co_filename][2]
    byte = ctypes.c_ubyte.from_address(id(new) + type(new).__basicsize__ + offset + at)
    was = byte.value
    # the opcode neither the NOP nor the jump, or the NOP's length not the probe's: not what slipcover wrote
    byte.value = retire._POP_TOP if at == 0 else was + 2
    try:
        sites.retire(code.co_filename, {2})
        assert byte.value != was and sites.retired == [] and id(new) in sites.broken
        assert ctypes.c_ubyte.from_address(id(new) + type(new).__basicsize__ + offset).value != \
            retire._JUMP_FORWARD
    finally:
        byte.value = was


AUDITED = textwrap.dedent("""\
    import collections, sys
    from ci.observe import slipcover_core
    from ci.observe.files import RepoFiles
    lines = slipcover_core.SlipcoverLines(RepoFiles(sys.argv[1]), None)
    code = compile("def f(a):\\n    if a:\\n        a += 1\\n    return a\\n", sys.argv[1] + "/f.py", "exec")
    lines._sci.instrument(code.co_consts[0])
    sites = lines._sites
    events = collections.Counter()
    sys.addaudithook(lambda event, args: events.update([event]))
    for _ in range(100):
        sites.retire(code.co_filename, {2, 3, 4})
        sites.rearm()
    print(len(sites.broken), events["builtins.id"] + events["ctypes.cdata"])
    """)


def test_retiring_and_rearming_raise_no_audit_event_per_write(tmp_path: Path) -> None:
    # every audit hook of the process, the recorder's open log among them, is a Python call per
    # event: a write that took its code object's address anew (id, from_address) made 320,000
    # of them on rich's suite; one view per code object makes them one
    env = {**clean_env(), "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", AUDITED, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    broken, events = map(int, proc.stdout.split())
    assert broken == 0 and events <= 5, proc.stdout  # 600 writes: the layout check and one view


def test_retiring_lines_of_a_file_without_sites_does_nothing() -> None:
    sites = retire.ProbeSites(object())
    sites.retire("/nowhere/never_instrumented.py", {1, 2})
    assert sites.retired == [] and not sites.broken


def test_every_probe_of_a_real_module_is_found_once(tmp_path: Path) -> None:
    """The scanner against the probes slipcover made, over a module of this repository."""
    from ci.observe.files import RepoFiles

    lines = slipcover_core.SlipcoverLines(RepoFiles(tmp_path), None)
    source = (REPO / "ci" / "selection" / "plan.py").read_text(encoding="utf-8")
    new = lines._sci.instrument(compile(source, str(tmp_path / "plan.py"), "exec"))

    def probes(code) -> int:
        nested = sum(probes(c) for c in code.co_consts if type(c) is type(code))
        return nested + sum(type(c).__name__ == "PyCapsule" for c in code.co_consts)

    made = probes(new)
    found = sum(len(s) for s in lines._sites.sites[str(tmp_path / "plan.py")].values())
    assert made > 100 and found == made


@pytest.mark.parametrize("constants", [300, 70_000])
def test_probes_whose_constants_need_extended_arguments_are_found(tmp_path: Path, constants: int) -> None:
    # slipcover appends its signal and probe objects after the function's own constants: past 255
    # a LOAD_CONST of them carries one EXTENDED_ARG prefix, past 65535 two
    body = "".join(f"    v = {n}.5\n" for n in range(constants))
    source = f"def big(a):\n{body}    if a:\n        return 1\n    return 2\n"
    lines, code, new = _instrumented(tmp_path, source, "big.py")
    probes = [c for c in new.co_consts if type(c).__name__ == "PyCapsule"]
    found = lines._sites.sites[code.co_filename]
    assert len(new.co_consts) > constants and len(probes) == 3
    assert sorted(found) == [2, constants + 3, constants + 4]  # the `if` is in the first block
    assert sum(len(s) for s in found.values()) == len(probes)


def test_a_switch_rearms_only_where_the_new_context_could_miss_a_line() -> None:
    # a line stopped in collect(a) is a's and shared: "" (shared only) needs no re-arm, nor a after
    # fixture(a); "" after a test file's own context does (a's lines are not shared)
    rearm = Rearm()
    steps = [(collect_context("t/a.py"), True), ("", False), (collect_context("t/b.py"), True), ("", False),
             ("t/a.py", True), (fixture_context("t/a.py"), True), ("t/a.py", False), ("t/b.py", True),
             (fixture_context("t/b.py"), True), ("", False), ("t/b.py", True), ("", True), ("", False)]
    assert [(context, rearm.needed(context)) for context, _ in steps] == steps


SKIPPED_REARMS = {  # lines that run in collect(test_a), then in "" and in a session fixture, then in test_b
    "pkg/__init__.py": "",
    "pkg/work.py": "def build(n):\n    total = 0\n    for i in range(n):\n        total += i\n    return total\n",
    "conftest.py": textwrap.dedent("""\
        import pytest
        from pkg import work

        def pytest_collection_finish(session):
            work.build(3)

        @pytest.fixture(scope="session")
        def built():
            return work.build(4)
        """),
    "tests/__init__.py": "",
    "tests/test_a.py": "from pkg import work\n\nTABLE = work.build(2)\n\ndef test_a(built):\n    assert built == 6\n",
    "tests/test_b.py": "from pkg import work\n\ndef test_b(built):\n    assert work.build(5) == 10\n",
}


def test_skipped_rearms_leave_the_map_the_tracer_records(tmp_path: Path) -> None:
    maps = {}
    for core in ("ctrace", "slipcover"):
        write_project(tmp_path / core, SKIPPED_REARMS)
        maps[core] = _recorded_map(tmp_path / core, CI_DEPMAP_CORE=core)
    lines = {core: {test: entry.lines for test, entry in found.tests.items()} for core, found in maps.items()}
    assert lines["slipcover"] == lines["ctrace"]
    assert maps["slipcover"].shared == maps["ctrace"].shared
    assert maps["ctrace"].tests["tests/test_b.py"].lines["pkg/work.py"] == {2, 3, 4, 5}
