"""The probe cache: a code object rebuilt from a stored edit is slipcover's own edit, byte for
byte, with probes of its own; a bad or foreign entry is ignored, never trusted.

The oracle is slipcover itself: the same code instrumented by slipcover's editor in a process
without the cache, compared field by field, and the lines each version records when it runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import CodeType

import pytest

from ci.observe import files, slipcover_core
from ci.observe.files import RepoFiles
from tests.ci.depmap_support import clean_env

pytestmark = pytest.mark.skipif(not slipcover_core.available(), reason="slipcover is not installed")

SOURCE = textwrap.dedent("""\
    import functools

    def gen(n):
        for i in range(n):
            if i % 2:
                yield i
        try:
            raise KeyError(n)
        except KeyError as exc:
            return [x * 2 for x in range(n) if x] + [len(str(exc))]
        finally:
            pass

    class Box:
        @functools.cache
        def fill(self, k):
            return (lambda y: y + 1)(k) if k else -1

    def run():
        return list(gen(5)), Box().fill(3), Box().fill(0)

    RESULT = run()
    """)
REAL = ["ci/selection/reach.py", "ci/registry/parse.py", "ci/observe/slipcover_core.py"]
ROOT = Path(__file__).resolve().parents[2]


def _lines(tmp_path: Path, cache: Path | None):
    return slipcover_core.SlipcoverLines(RepoFiles(str(tmp_path)), None, cache)


def _same(a: CodeType, b: CodeType) -> None:
    for field in ("co_code", "co_linetable", "co_exceptiontable", "co_stacksize", "co_names", "co_varnames"):
        assert getattr(a, field) == getattr(b, field), (a.co_name, field)
    assert len(a.co_consts) == len(b.co_consts)
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, CodeType):
            _same(x, y)
        elif type(x).__name__ == "PyCapsule":  # a probe: slipcover's C object, one per line and process
            assert type(y) is type(x) and x is not y
        else:
            assert x is y or x == y


@pytest.mark.parametrize("path", ["<hand-made>", *REAL])
def test_a_rebuilt_code_object_is_slipcovers_edit_with_probes_of_its_own(tmp_path: Path, path: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    source = SOURCE if path == "<hand-made>" else (ROOT / path).read_text()
    code = compile(source, str(tmp_path / "m.py"), "exec")
    plain = _lines(tmp_path, None)._sci.instrument(code)
    first = _lines(tmp_path, tmp_path / "probes")._sci.instrument(code)
    assert len(list((tmp_path / "probes").iterdir())) == 1
    _same(plain, first)
    from slipcover import bytecode

    def no_edit(*args, **kwargs):
        raise AssertionError("a cached edit must not run slipcover's editor")

    monkeypatch.setattr(bytecode, "Editor", no_edit)
    second = _lines(tmp_path, tmp_path / "probes")._sci.instrument(code)
    _same(plain, second)


@pytest.mark.parametrize("path", ["<hand-made>", *REAL])
def test_storing_an_edit_plans_each_code_object_once(tmp_path: Path, path: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # the entry's probe lines come from the plan the edit made, not from planning every code
    # object again; and the entry is the same as when it was planned again
    source = SOURCE if path == "<hand-made>" else (ROOT / path).read_text()
    code = compile(source, str(tmp_path / "m.py"), "exec")
    real, planned = slipcover_core.blocks.plan, []
    monkeypatch.setattr(slipcover_core.blocks, "plan", lambda co, starts: planned.append(co) or real(co, starts))
    _lines(tmp_path, tmp_path / "probes")._sci.instrument(code)
    (entry,) = (tmp_path / "probes").iterdir()

    def nested(co: CodeType) -> list[CodeType]:
        return [co, *(n for c in co.co_consts if isinstance(c, CodeType) for n in nested(c))]

    assert sorted(map(id, planned)) == sorted(map(id, nested(code)))
    assert not slipcover_core._PLANNED
    monkeypatch.setattr(slipcover_core, "_PLANNED", {})  # forgets each plan: the entry plans again
    monkeypatch.setattr(slipcover_core, "_probe_points", lambda co: real(co, slipcover_core._line_starts(co)).points)
    again = tmp_path / "again"
    lines = _lines(tmp_path, again)
    lines._sci.instrument(code)
    assert next(again.iterdir()).read_bytes() == entry.read_bytes()


def test_rebuilt_code_records_the_lines_slipcovers_own_edit_records(tmp_path: Path) -> None:
    code = compile(SOURCE, str(tmp_path / "m.py"), "exec")
    seen = []
    for cache in (None, tmp_path / "probes", tmp_path / "probes"):  # plain, stored, rebuilt
        lines = _lines(tmp_path, cache)
        namespace: dict = {"__name__": "m"}
        exec(lines._sci.instrument(code), namespace)  # noqa: S102 (the oracle runs the code)
        assert namespace["RESULT"] == ([1, 3], 4, -1)
        seen.append(lines.take_fresh())
    assert seen[0] == seen[1] == seen[2] and seen[0][str(tmp_path / "m.py")] >= {4, 5, 6, 10, 17, 20, 22}


@pytest.mark.parametrize("damage", ["garbage", "truncated", "another code's entry", "empty", "one byte flipped",
                                    "a FIFO"])
def test_a_bad_entry_is_ignored_and_the_code_edited_again(tmp_path: Path, damage: str) -> None:
    code = compile(SOURCE, str(tmp_path / "m.py"), "exec")
    plain = _lines(tmp_path, None)._sci.instrument(code)
    _lines(tmp_path, tmp_path / "probes")._sci.instrument(code)
    (entry,) = (tmp_path / "probes").iterdir()
    data = entry.read_bytes()
    if damage == "garbage":
        entry.write_bytes(b"\x00\xffnot marshal" * 3)
    elif damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "one byte flipped":  # still marshal, still the right shape: only the digest tells
        at = data.index(plain.co_code[-8:]) + 2
        entry.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1:])
    elif damage == "a FIFO":  # opening it to read would wait for a writer forever
        entry.unlink()
        os.mkfifo(entry)
    else:
        other = compile("def f():\n    return 1\n", str(tmp_path / "m.py"), "exec")
        _lines(tmp_path, tmp_path / "other")._sci.instrument(other)
        entry.write_bytes(next((tmp_path / "other").iterdir()).read_bytes())
    again = _lines(tmp_path, tmp_path / "probes")._sci.instrument(code)
    _same(plain, again)
    if damage != "a FIFO":
        assert (tmp_path / "probes" / entry.name).read_bytes() == data  # edited again, and stored again


def test_other_source_under_the_same_name_has_its_own_entry_and_an_unwritable_folder_stores_nothing(
        tmp_path: Path) -> None:
    one = compile("X = 1\n", str(tmp_path / "m.py"), "exec")
    two = compile("X = 2\n", str(tmp_path / "m.py"), "exec")
    cache = tmp_path / "probes"
    _lines(tmp_path, cache)._sci.instrument(one)
    _lines(tmp_path, cache)._sci.instrument(two)
    assert len(list(cache.iterdir())) == 2
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would be")
    edited = _lines(tmp_path, blocked)._sci.instrument(one)
    _same(_lines(tmp_path, None)._sci.instrument(one), edited)
    assert blocked.read_text() == "a file where the folder would be"


CHILD = """\
import json, sys
from pathlib import Path
from slipcover import bytecode
from ci.observe import slipcover_core
from ci.observe.files import RepoFiles
edits = []
real = bytecode.Editor
bytecode.Editor = lambda *a: edits.append(1) or real(*a)
lines = slipcover_core.SlipcoverLines(RepoFiles(sys.argv[1]), None, Path(sys.argv[2]))
held = []
for path in sys.argv[4:]:
    code = compile(Path(path).read_text(), path, "exec")
    if sys.argv[3] == "hold":  # more references to the same constants: what another process has
        held.extend(code.co_consts)
    lines._sci.instrument(code)
print(len(edits))
from ci.observe.blocks import noted
print(json.dumps({p: sorted((k, sorted(v)) for k, v in noted(p).items()) for p in sys.argv[4:]}))
"""


def test_another_process_finds_the_entries_for_the_same_code(tmp_path: Path) -> None:
    # the key must not depend on the process: marshal's version 3+ output does (reference counts)
    env = {**clean_env(), "PYTHONHASHSEED": "random"}  # clean: not recorded itself inside a recording
    args = [sys.executable, "-c", CHILD, str(ROOT), str(tmp_path / "probes")]
    first = subprocess.run([*args, "-", *(str(ROOT / p) for p in REAL)], env=env, capture_output=True, text=True,
                           timeout=120, check=True)
    stored = sorted(p.name for p in (tmp_path / "probes").iterdir())
    second = subprocess.run([*args, "hold", *(str(ROOT / p) for p in REAL)], env=env, capture_output=True, text=True,
                            timeout=120, check=True)
    (edited, implied), (rebuilt, implied_again) = (out.stdout.splitlines() for out in (first, second))
    assert int(edited) > 0 and len(stored) == len(REAL)
    assert int(rebuilt) == 0, second.stderr  # every module rebuilt, none edited
    # and each rebuilt probe stands for the same lines of its block as the edited one did
    assert implied == implied_again and all(json.loads(implied).values())
    assert sorted(p.name for p in (tmp_path / "probes").iterdir()) == stored


def test_the_recorders_own_modules_are_never_repository_files_of_a_map(tmp_path: Path) -> None:
    # found when this repository recorded itself: the cache's functions ran under probes and
    # showed up in every slipcover map, not in the C tracer's
    # the recorder that runs, not necessarily ROOT's: a pytest of a copy of this repository,
    # started by a recorded test (test_selection_safety), imports the recording's `ci`
    observe = Path(files.__file__).resolve().parent
    repo = RepoFiles(str(observe.parents[1]))
    own = sorted(observe.glob("*.py"))
    assert {p.name for p in own} >= {"probe_cache.py", "slipcover_core.py", "child.py"}
    assert [repo.relative(str(p)) for p in own] == [None] * len(own)
    assert repo.relative(str(observe.parent / "running" / "watchdog.py")) == "ci/running/watchdog.py"
    # the name alone is not the recorder's: another repository's own observe/record.py is its code
    assert RepoFiles(str(tmp_path)).relative(str(tmp_path / "observe" / "record.py")) == "observe/record.py"


CALC = "def sub(a, b):\n    return a - b\n"
CALC_TEST = "from pkg.calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 4  # true only if the code adds\n"


def _poisoned_entry(tmp_path: Path, module: Path) -> bytes:
    """A valid cache entry for ``module``'s code whose nested function adds where the source
    subtracts: slipcover's own edit, one opcode argument changed, its digest recomputed."""
    import dis
    import marshal

    from ci.observe.probe_cache import _digest

    code = compile(module.read_text(), str(module), "exec", dont_inherit=True)  # as the import system does
    made = tmp_path / "made"
    _lines(tmp_path, made)._sci.instrument(code)
    (stored,) = made.iterdir()
    entry = marshal.loads(stored.read_bytes()[16:])
    (index, sub), = entry[5]  # the one nested code object: ``sub``
    ops = bytearray(sub[0])
    subtract = dis._nb_ops.index(("NB_SUBTRACT", "-"))
    at = next(i for i in range(0, len(ops), 2) if ops[i] == dis.opmap["BINARY_OP"] and ops[i + 1] == subtract)
    ops[at + 1] = dis._nb_ops.index(("NB_ADD", "+"))
    entry = (*entry[:5], ((index, (bytes(ops), *sub[1:])),), entry[6])
    data = marshal.dumps(entry, 2)
    # the poison works where it is read: the rebuilt code adds
    (made / stored.name).write_bytes(_digest(data) + data)
    namespace: dict = {}
    exec(_lines(tmp_path, made)._sci.instrument(code), namespace)  # noqa: S102 (the oracle runs the code)
    assert namespace["sub"](3, 1) == 4
    return stored.name.encode() + b"\0" + _digest(data) + data


@pytest.mark.parametrize("planted_in", ["the repository's .ci-cache", "$CI_DEPMAP_PROBES"])
def test_an_entry_planted_before_the_recording_never_decides_what_runs(tmp_path: Path, planted_in: str) -> None:
    # #49: an entry restored from a cache that approved pull-request code could write made the
    # recording pass on source that subtracts; the recorded outcome must be the plain one
    from tests.ci.depmap_support import GIT, write_project

    root = tmp_path / "proj"
    write_project(root, {"pkg/__init__.py": "", "pkg/calc.py": CALC, "tests/test_calc.py": CALC_TEST})
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run([*GIT, *args], cwd=root, check=True, capture_output=True)
    name, _, blob = _poisoned_entry(tmp_path, root / "pkg" / "calc.py").partition(b"\0")
    folder = root / ".ci-cache" / "depmap-probes" if planted_in.startswith("the") else tmp_path / "given"
    folder.mkdir(parents=True)
    (folder / name.decode()).write_bytes(blob)
    env = clean_env() if planted_in.startswith("the") else {**clean_env(), "CI_DEPMAP_PROBES": str(folder)}
    outcomes = []
    for record in ([], ["--record-depmap", str(tmp_path / "map.json")]):
        proc = subprocess.run([sys.executable, "-m", "ci", "run", "--registry", str(root / "registry.yaml"),
                               "--tier", "cpu", "--workers", "0", *record], cwd=root, env=env,
                              capture_output=True, text=True, timeout=180)
        outcomes.append((proc.returncode, "1 failed" in proc.stdout))
    assert outcomes == [(1, True), (1, True)], proc.stdout + proc.stderr
    assert (tmp_path / "map.json").is_file()  # it did record
