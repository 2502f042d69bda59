"""The probe store (`ci.observe.probe_store`): slipcover's edit of a module kept beside its bytecode
between recordings, trusted as far as a ``.pyc`` there is and no further. Real files, folders,
FIFOs and processes; the oracle for an entry's use is slipcover's own edit, field by field."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.observe import slipcover_core, slipcover_engine
from ci.observe.files import RepoFiles
from ci.observe.probe_cache import PROBE_FORMAT
from ci.observe.probe_store import ProbeStore, entry_path
from tests.ci.depmap_support import clean_env
from tests.ci.test_depmap_probe_cache import SOURCE, _same

pytestmark = pytest.mark.skipif(not slipcover_core.available(), reason="slipcover is not installed")
ROOT = Path(__file__).resolve().parents[2]


def _module(tmp_path: Path, source: str = SOURCE) -> tuple[Path, object]:
    path = tmp_path / "pkg" / "m.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(source)
    return path, compile(source, str(path), "exec")


def _edits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts slipcover's edits (each makes a `bytecode.Editor`)."""
    from slipcover import bytecode

    made: list[int] = []
    real = bytecode.Editor
    monkeypatch.setattr(bytecode, "Editor", lambda *a: made.append(1) or real(*a))
    return made


def _instrument(tmp_path: Path, code, recording: str, keep: bool = True):
    """``code`` instrumented as a new recording (its own, empty parts folder ``recording``) does it."""
    lines = slipcover_core.SlipcoverLines(RepoFiles(str(tmp_path)), None, tmp_path / recording, keep=keep)
    return lines._sci.instrument(code)


def test_the_next_recording_rebuilds_a_module_from_the_entry_beside_its_bytecode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, code = _module(tmp_path)
    plain = _instrument(tmp_path, code, "r0", keep=False)
    _instrument(tmp_path, code, "r1")
    entry = entry_path(str(path))
    assert entry is not None and entry.parent == path.parent / "__pycache__" and entry.is_file()
    assert entry.name == f"m.{sys.implementation.cache_tag}.ci-probes"
    edits = _edits(monkeypatch)
    rebuilt = _instrument(tmp_path, code, "r2")  # another recording: its parts are empty
    assert edits == [] and not (tmp_path / "r2").exists()
    _same(plain, rebuilt)
    namespace: dict = {}
    exec(rebuilt, namespace)  # noqa: S102 (the oracle runs the code)
    assert namespace["RESULT"] == ([1, 3], 4, -1)


def test_without_keep_nothing_outlives_the_recording(tmp_path: Path) -> None:
    path, code = _module(tmp_path)
    _instrument(tmp_path, code, "r1", keep=False)
    assert not (path.parent / "__pycache__").exists()


def test_code_named_after_no_file_makes_no_folder(tmp_path: Path) -> None:
    # exec of code compiled under a repository name that is no file (a generated module)
    code = compile(SOURCE, str(tmp_path / "gen" / "made.py"), "exec")
    _instrument(tmp_path, code, "r1")
    assert not (tmp_path / "gen").exists()


def _damage(entry: Path, code, edited, how: str) -> None:
    data = entry.read_bytes()
    if how == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif how == "one byte flipped":  # in the module's bytecode: still marshal, still its shape
        at = data.index(edited.co_code[-8:]) + 2
        entry.write_bytes(data[:at] + bytes([data[at] ^ 1]) + data[at + 1:])
    elif how == "a FIFO":  # opening it to read would wait for a writer forever
        entry.unlink()
        os.mkfifo(entry, 0o600)
    elif how == "a link":
        aside = entry.with_name("aside")
        entry.rename(aside)
        entry.symlink_to(aside)
    elif how == "writable by others":
        entry.chmod(0o666)
    elif how == "another owner":
        os.chown(entry, 65534, 65534)
    elif how == "another Python":  # the same file, the key that another interpreter's build computes
        other = ProbeStore(b"%d %s" % (PROBE_FORMAT, slipcover_engine.version().encode()))
        other.salt = other.salt.replace(sys.version.encode(), b"3.11.0 (another build)")
        header = len(b"ci-probes 1\n")
        entry.write_bytes(data[:header] + other.key(code) + data[header + 20:])


@pytest.mark.parametrize("how", ["truncated", "one byte flipped", "a FIFO", "a link", "writable by others",
                                 "another owner", "another Python"])
def test_a_bad_or_untrusted_entry_is_never_used_and_is_rewritten(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 how: str) -> None:
    if how == "another owner" and os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    path, code = _module(tmp_path)
    plain = _instrument(tmp_path, code, "r0", keep=False)
    _instrument(tmp_path, code, "r1")
    entry = entry_path(str(path))
    good = entry.read_bytes()
    _damage(entry, code, plain, how)
    edits = _edits(monkeypatch)
    again = _instrument(tmp_path, code, "r2")
    assert len(edits) > 0  # edited again: the entry was not used
    _same(plain, again)
    assert not entry.is_symlink() and entry.read_bytes() == good  # a whole, trusted entry replaced it
    assert os.stat(entry).st_uid == os.geteuid() and not os.stat(entry).st_mode & 0o022


def test_a_stale_source_misses_and_its_entry_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, old = _module(tmp_path, "def f():\n    return 1\n")
    _instrument(tmp_path, old, "r1")
    before = entry_path(str(path)).read_bytes()
    path, new = _module(tmp_path, "def f():\n    return 2\n")  # same name, same size, same lines
    edits = _edits(monkeypatch)
    namespace: dict = {}
    exec(_instrument(tmp_path, new, "r2"), namespace)  # noqa: S102
    assert namespace["f"]() == 2 and len(edits) > 0
    assert entry_path(str(path)).read_bytes() != before


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_folder_others_can_write_is_neither_read_nor_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               mode: int) -> None:
    # a .pyc there could be anyone's too; group-writable is allowed only where the source's folder is
    path, code = _module(tmp_path)
    path.parent.chmod(0o755)
    _instrument(tmp_path, code, "r1")
    entry = entry_path(str(path))
    entry.parent.chmod(mode)
    edits = _edits(monkeypatch)
    _instrument(tmp_path, code, "r2")
    assert len(edits) > 0
    entry.unlink()
    _instrument(tmp_path, code, "r3")
    assert not entry.exists()
    path.parent.chmod(mode)  # whoever may write the source may write its cache: as for a .pyc
    _instrument(tmp_path, code, "r4")
    assert entry.exists() == (mode == 0o775)


RACE = textwrap.dedent("""\
    import sys
    from ci.observe.probe_store import ProbeStore
    role, source, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    code = compile(open(source).read(), source, "exec")
    store, data = ProbeStore(b"race"), bytes(range(256)) * 64
    seen = 0
    for i in range(rounds):
        if role == "write":
            store.save(source, code, data)
        else:
            got = store.load(source, code)
            assert got in (None, data), "a wrong entry"
            assert got is not None or not seen, "a reader saw a half-written entry"
            seen += got is not None
    print(seen)
    """)


def test_two_processes_writing_one_entry_leave_it_whole(tmp_path: Path) -> None:
    path, _ = _module(tmp_path, "X = 1\n")
    env = {**clean_env(), "PYTHONPATH": str(ROOT)}
    first = subprocess.run([sys.executable, "-c", RACE, "write", str(path), "1"], env=env, check=True, timeout=60)
    assert first.returncode == 0
    procs = [subprocess.Popen([sys.executable, "-c", RACE, role, str(path), "300"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for role in ("write", "write", "read")]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    assert int(outs[2][0]) == 300  # every read found the whole entry
    assert sorted(p.name for p in entry_path(str(path)).parent.iterdir()) == [entry_path(str(path)).name]


CALC = "def sub(a, b):\n    if a > b:\n        return a - b\n    return b - a\n"
CALC_TEST = "from pkg.calc import sub\n\n\ndef test_sub():\n    assert sub(3, 1) == 2\n"


def test_a_second_recording_rebuilds_from_the_store_and_records_the_same_map(tmp_path: Path) -> None:
    # `ci run --record-depmap` keeps its modules' edits (record.py passes keep): the next recording
    # reads them, and what it records is what the first one, which edited, recorded
    import json

    from tests.ci.depmap_support import GIT, write_project

    root = tmp_path / "proj"
    write_project(root, {"pkg/__init__.py": "", "pkg/calc.py": CALC, "tests/test_calc.py": CALC_TEST})
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base"]):
        subprocess.run([*GIT, *args], cwd=root, check=True, capture_output=True)
    entry = entry_path(str(root / "pkg" / "calc.py"))
    maps, stamps = [], []
    for i in range(2):
        proc = subprocess.run([sys.executable, "-m", "ci", "run", "--registry", str(root / "registry.yaml"),
                               "--tier", "cpu", "--workers", "0", "--record-depmap", str(tmp_path / f"map{i}.json")],
                              cwd=root, env={**clean_env(), "CI_DEPMAP_CORE": "slipcover"}, capture_output=True,
                              text=True, timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        stamps.append(entry.stat().st_mtime_ns)  # written by the first, only read by the second
        entries = json.loads((tmp_path / f"map{i}.json").read_text())["tests"]
        maps.append({test: {k: v for k, v in e.items() if k != "duration_s"} for test, e in entries.items()})
    assert stamps[0] == stamps[1]
    assert maps[0] == maps[1] and maps[0]["tests/test_calc.py"]["executed"]["pkg/calc.py"] == "1-3"


def test_a_recorded_subprocess_keeps_its_modules_edits_for_the_next_recording(tmp_path: Path) -> None:
    # A test's subprocess is measured from its start-up hook (`ci.observe.child`), never by a
    # recorder that adopts it: the hook's own keep is what stores its modules' edits
    from tests.ci.depmap_child_support import child_argv, child_env, project, recorded_lines

    root, _ = project(tmp_path)
    entry = entry_path(str(root / "pkg" / "work.py"))
    lines, stamps = [], []
    for i in range(2):
        parts = tmp_path / f"parts{i}"  # a recording of its own, with an empty parts folder
        parts.mkdir()
        proc = subprocess.run(child_argv("from pkg.work import work; work(2)"), cwd=root, capture_output=True,
                              text=True, env=child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover"), timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert entry is not None and entry.is_file(), "the child kept no edit of pkg/work.py"
        stamps.append(entry.stat().st_mtime_ns)  # written by the first child, only read by the second
        lines.append(recorded_lines(parts))
    assert stamps[0] == stamps[1]
    assert lines[0] == lines[1] and lines[0]["tests/test_x.py"]["work.py"] == [1, 2, 3, 4, 5, 8]


def test_a_pytest_run_from_a_script_keeps_its_modules_edits_for_the_next_recording(tmp_path: Path) -> None:
    # `pytest.main` called by a script is no pytest command line to the start-up hook, so no
    # measurement is under way when the plugin's recorder starts: it starts its own, with keep
    from tests.ci.depmap_support import write_project

    root = tmp_path / "proj"
    write_project(root, {"pkg/__init__.py": "", "pkg/calc.py": CALC, "tests/test_calc.py": CALC_TEST})
    entry = entry_path(str(root / "pkg" / "calc.py"))
    script = "import sys, pytest\nsys.exit(pytest.main(['-p', 'ci.pytest_plugin', '--tier', 'cpu', '-q']))"
    maps, stamps = [], []
    for i in range(2):
        env = {**clean_env(), "CI_DEPMAP": str(tmp_path / f"map{i}.json"), "CI_DEPMAP_CORE": "slipcover"}
        proc = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True,
                              timeout=180)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert entry is not None and entry.is_file(), "the recording kept no edit of pkg/calc.py"
        stamps.append(entry.stat().st_mtime_ns)  # written by the first, only read by the second
        maps.append(json.loads((tmp_path / f"map{i}.json").read_text())["tests"]["tests/test_calc.py"]["executed"])
    assert stamps[0] == stamps[1]
    assert maps[0] == maps[1] and maps[0]["pkg/calc.py"] == "1-3"
