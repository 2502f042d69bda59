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

from ci.running import depmap_files, depmap_slipcover
from ci.running.depmap_files import RepoFiles
from tests.ci.depmap_support import clean_env

pytestmark = pytest.mark.skipif(not depmap_slipcover.available(), reason="slipcover is not installed")

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
REAL = ["ci/selection/reach.py", "ci/registry/parse.py", "ci/running/depmap_slipcover.py"]
ROOT = Path(__file__).resolve().parents[2]


def _lines(tmp_path: Path, cache: Path | None):
    return depmap_slipcover.SlipcoverLines(RepoFiles(str(tmp_path)), None, cache)


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
from ci.running import depmap_slipcover
from ci.running.depmap_files import RepoFiles
edits = []
real = bytecode.Editor
bytecode.Editor = lambda *a: edits.append(1) or real(*a)
lines = depmap_slipcover.SlipcoverLines(RepoFiles(sys.argv[1]), None, Path(sys.argv[2]))
held = []
for path in sys.argv[4:]:
    code = compile(Path(path).read_text(), path, "exec")
    if sys.argv[3] == "hold":  # more references to the same constants: what another process has
        held.extend(code.co_consts)
    lines._sci.instrument(code)
print(len(edits))
from ci.running.depmap_blocks import noted
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


def test_the_recorders_own_modules_are_never_repository_files_of_a_map() -> None:
    # found when this repository recorded itself: the cache's functions ran under probes and
    # showed up in every slipcover map, not in the C tracer's
    # the recorder that runs, not necessarily ROOT's: a pytest of a copy of this repository,
    # started by a recorded test (test_selection_safety), imports the recording's `ci`
    running = Path(depmap_files.__file__).resolve().parent
    files = RepoFiles(str(running.parents[1]))
    own = sorted(running.glob("depmap_*.py"))
    assert {p.name for p in own} >= {"depmap_probe_cache.py", "depmap_slipcover.py", "depmap_child.py"}
    assert [files.relative(str(p)) for p in own] == [None] * len(own)
    assert files.relative(str(running / "watchdog.py")) == "ci/running/watchdog.py"


def test_the_folder_is_the_repositorys_cache_unless_given_and_falls_back_to_the_parts(tmp_path: Path,
                                                                                      monkeypatch) -> None:
    from ci.running.depmap_probe_cache import PROBES_ENV, probe_folder

    monkeypatch.delenv(PROBES_ENV, raising=False)
    root, parts = tmp_path / "repo", tmp_path / "parts"
    root.mkdir()
    assert probe_folder(root, parts, make=False) == parts / "probes"  # a child never makes it
    made = probe_folder(root, parts, make=True)
    assert made == root / ".ci-cache" / "depmap-probes" and made.is_dir()
    assert (root / ".ci-cache" / ".gitignore").read_text().endswith("*\n")  # never untracked
    assert probe_folder(root, parts, make=False) == made  # the recording's other processes find it
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / ".ci-cache").write_text("a file where the folder would be")
    assert probe_folder(blocked, parts, make=True) == parts / "probes"
    monkeypatch.setenv(PROBES_ENV, str(tmp_path / "given"))
    assert probe_folder(root, parts, make=True) == tmp_path / "given"


def test_prune_removes_what_nothing_used_for_the_age_limit_and_a_hit_keeps_an_entry(tmp_path: Path) -> None:
    import time

    from ci.running.depmap_probe_cache import MAX_AGE_DAYS, prune

    cache = tmp_path / "probes"
    used = compile("X = 1\n", str(tmp_path / "m.py"), "exec")
    _lines(tmp_path, cache)._sci.instrument(used)
    _lines(tmp_path, cache)._sci.instrument(compile("X = 2\n", str(tmp_path / "m.py"), "exec"))
    (cache / ".tmp-1-2-left.code").write_bytes(b"a write a kill interrupted")
    (cache / "notes.txt").write_text("not an entry")
    now = time.time()
    old = now - (MAX_AGE_DAYS + 1) * 86400
    for entry in cache.iterdir():
        os.utime(entry, (old, old))
    _lines(tmp_path, cache)._sci.instrument(used)  # a hit: in use again
    before = set(cache.glob("*.code"))
    _lines(tmp_path, cache)._sci.instrument(compile("X = 3\n", str(tmp_path / "m.py"), "exec"))
    (recent,) = set(cache.glob("*.code")) - before
    almost = now - (MAX_AGE_DAYS - 0.5) * 86400  # unused for a little less than the limit: kept
    os.utime(recent, (almost, almost))
    assert prune(cache, now=now) == 2  # the other entry and the temporary file
    assert len(list(cache.glob("*.code"))) == 2 and (cache / "notes.txt").exists()
    _same(_lines(tmp_path, None)._sci.instrument(used), _lines(tmp_path, cache)._sci.instrument(used))
    assert prune(tmp_path / "missing") == 0
