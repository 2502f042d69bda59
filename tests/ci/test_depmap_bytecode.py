"""The recorder's own modules cached as checked-hash bytecode by the first recorded child
(`ci.observe.bytecode`): real interpreters with ``PYTHONDONTWRITEBYTECODE`` set, as this
repository's suite runs them, importing a copy of the ``ci`` package. The oracles are the
interpreter's own: its ``-v`` report of where each module's code came from, its
``importlib.util.source_hash``, and what an edited module says when imported."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci.observe import slipcover_core
from ci.observe.bytecode import MARK_NAME, cache_checked, loaded_sources

from tests.ci.depmap_child_support import REPO, WORK, child_argv, child_env, project, recorded_lines
from tests.ci.depmap_support import clean_env, write_project

pytestmark = pytest.mark.skipif(not slipcover_core.available(), reason="slipcover is not installed")

WORK_SOURCE = "def work(n):\n    total = 0\n    for i in range(n):\n        total += i\n    return total\n"
HOOK_MODULES = ("ci/__init__.py", "ci/observe/child.py", "ci/observe/slipcover_core.py",
                "ci/observe/live.py", "ci/running/proctree.py", "ci/observe/exit_save.py")


def _copy_of_ci(root: Path) -> None:
    """A copy of the ``ci`` package without any bytecode, inside the recorded repository as in
    this one (a source of it read as data there would be recorded)."""
    shutil.copytree(REPO / "ci", root / "ci", ignore=shutil.ignore_patterns("__pycache__"))


def _run_child(root: Path, parts: Path, body: str, *flags: str) -> subprocess.CompletedProcess[str]:
    env = child_env(root, parts, CI_DEPMAP_CHILD_CORE="slipcover", PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = str(root)  # the copy, not the checkout, is the recorder
    argv = child_argv(body)
    proc = subprocess.run([argv[0], *flags, *argv[1:]], env=env, cwd=root, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc


def _pyc(source: Path) -> Path:
    return Path(importlib.util.cache_from_source(str(source)))


def test_the_first_child_caches_the_recorders_modules_and_the_next_loads_them(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    _copy_of_ci(root)
    first = _run_child(root, parts, "import ci; print(ci.__file__); from pkg.work import work; work(2)")
    assert first.stdout.strip() == str(root / "ci" / "__init__.py")
    assert (parts / MARK_NAME).is_file()
    for name in HOOK_MODULES:
        source = root / name
        header = _pyc(source).read_bytes()[:16]
        assert header[:4] == importlib.util.MAGIC_NUMBER, name
        assert int.from_bytes(header[4:8], "little") == 0b11, name  # PEP 552: hash-based, checked
        assert header[8:16] == importlib.util.source_hash(source.read_bytes()), name
    assert not _pyc(root / "ci" / "registry.py").exists()  # only what the hook imported
    # the caching read the recorder's sources: no test depends on them for that
    assert recorded_lines(parts) == {"tests/test_x.py": {"__init__.py": [0], "work.py": [1, 2, 3, 4, 5, 8]}}
    assert "ci/" not in "".join(part.read_text() for part in parts.glob("opened.*.log"))

    second = _run_child(root, parts, "pass", "-v")
    for name in HOOK_MODULES:
        assert f"# code object from '{_pyc(root / name)}'" in second.stderr, name


def test_a_module_edited_at_the_same_size_and_time_is_never_run_stale(tmp_path: Path) -> None:
    # a timestamp .pyc is valid while the source's mtime (whole seconds) and size stay: this edit
    # keeps both, so only a check of the source's hash sees it
    root, parts = project(tmp_path)
    _copy_of_ci(root)
    options = root / "ci" / "observe" / "options.py"
    options.write_text(options.read_text() + 'EDIT = "aaaa"\n')
    _run_child(root, parts, "pass")
    assert _pyc(options).is_file()
    stat = options.stat()
    options.write_text(options.read_text().replace('EDIT = "aaaa"', 'EDIT = "bbbb"'))
    os.utime(options, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    (tmp_path / "parts2").mkdir()  # the next recording: its hook imports the module, then caches
    edited = _run_child(root, tmp_path / "parts2", "import ci.observe.options as o; print(o.EDIT)")
    assert edited.stdout.strip() == "bbbb"


def test_once_per_recording_and_a_cache_that_cannot_be_written_is_skipped(tmp_path: Path) -> None:
    root, parts = project(tmp_path)
    _copy_of_ci(root)
    child, live = root / "ci" / "observe" / "child.py", root / "ci" / "observe" / "live.py"
    _pyc(live).mkdir(parents=True)  # not a file: py_compile refuses to replace it
    _run_child(root, parts, "from pkg.work import work; work(1)")
    assert _pyc(child).is_file() and _pyc(live).is_dir()
    _pyc(child).unlink()
    _run_child(root, parts, "pass")  # the same recording: its first child cached already
    assert not _pyc(child).exists()
    (tmp_path / "parts2").mkdir()
    _run_child(root, tmp_path / "parts2", "pass")  # the next recording caches again
    assert _pyc(child).is_file()
    assert recorded_lines(parts)["tests/test_x.py"]["work.py"] == [1, 2, 3, 4, 5, 8]  # recorded all along


def test_cache_checked_rewrites_a_timestamp_or_foreign_pyc_and_keeps_a_valid_one(tmp_path: Path) -> None:
    import py_compile

    source = tmp_path / "mod.py"
    source.write_text("X = 1\n")
    py_compile.compile(str(source), doraise=True, invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    assert cache_checked([str(source)]) == [str(source)]  # a timestamp one goes stale: rewritten
    assert cache_checked([str(source)]) == []  # a checked-hash one of this source: kept
    source.write_text("X = 2\n")
    assert cache_checked([str(source)]) == [str(source)]  # of another source: rewritten
    py_compile.compile(str(source), doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    assert cache_checked([str(source)]) == [str(source)]  # never checked on import: rewritten
    cache_checked([str(source)])
    other_magic = (int.from_bytes(importlib.util.MAGIC_NUMBER[:2], "little") - 1).to_bytes(2, "little")
    _pyc(source).write_bytes(other_magic + _pyc(source).read_bytes()[2:])  # another interpreter's, same hash
    assert cache_checked([str(source)]) == [str(source)]  # this interpreter would not load it: rewritten
    assert _pyc(source).read_bytes()[:4] == importlib.util.MAGIC_NUMBER
    _pyc(source).write_bytes(_pyc(source).read_bytes()[:10])  # torn
    assert cache_checked([str(source)]) == [str(source)]
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    assert cache_checked([str(broken), str(tmp_path / "gone.py")]) == []  # neither compiles: no error


def test_loaded_sources_are_the_packages_own_python_files_only(monkeypatch) -> None:
    import types

    def module(name: str, path: object) -> types.ModuleType:
        made = types.ModuleType(name)
        made.__file__ = path
        return made

    for name, path in {"rec": "/x/rec/__init__.py", "rec.sub": "/x/rec/sub.py", "rec.ext": "/x/rec/ext.so",
                       "rec.ns": None, "recother": "/x/recother.py", "other.rec": "/x/other/rec.py"}.items():
        monkeypatch.setitem(sys.modules, name, module(name, path))
    # never the interpreter's or another package's modules: their .pyc files are not the recorder's to rewrite
    assert loaded_sources("rec") == ["/x/rec/__init__.py", "/x/rec/sub.py"]


def test_the_observer_caches_its_own_modules_for_the_next_observe(tmp_path: Path) -> None:
    # where nothing writes bytecode, each `ci observe` compiled its command and the registry's
    # parser again (0.18 s of CPU against 0.13 s): it now leaves them as checked-hash .pyc
    root = tmp_path / "repo"
    write_project(root, {"pkg/__init__.py": "", "pkg/work.py": WORK_SOURCE,
                         "tests/test_x.py": "from pkg.work import work\n\n\ndef test_x():\n    assert work(3) == 3\n"})
    _copy_of_ci(root)
    env = {**clean_env(), "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}

    def observe(out: str, *flags: str) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([sys.executable, *flags, "-m", "ci", "observe", "--out", out, "--", sys.executable,
                               "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        return proc

    observe("first.json")
    own = ("ci/commands/observe.py", "ci/observe/observed.py", "ci/registry/fast_parse.py")
    for name in own:
        source = root / name
        header = _pyc(source).read_bytes()[:16]
        assert int.from_bytes(header[4:8], "little") == 0b11, name  # PEP 552: hash-based, checked
        assert header[8:16] == importlib.util.source_hash(source.read_bytes()), name
    assert not _pyc(root / "pkg" / "work.py").exists()  # the program's own modules: never
    second = observe("second.json", "-v")  # the observer's -v alone (its pytest child is not verbose)
    # the interpreter's own report: loaded, not compiled; the registry's parser is not imported at
    # all once the layout cache holds the project's roots (ci.observe.layout)
    for name in own[:2]:
        assert f"# code object from '{_pyc(root / name)}'" in second.stderr, name
    first, again = (json.loads((root / f).read_text())["tests"]["tests/test_x.py"] for f in ("first.json", "second.json"))
    assert first["executed"] == again["executed"] and first["executed"]["pkg/work.py"] == "1-5"


PY312 = REPO / ".venv-py312" / "bin" / "python"
# the interpreter's own verdict on each source: a checked-hash .pyc of it that this interpreter loads
_CHECKED = """\
import importlib.util as u, os, sys
for source in sys.argv[1:]:
    cached = u.cache_from_source(source)
    header = open(cached, "rb").read(16) if os.path.isfile(cached) else b""
    data = open(source, "rb").read()
    print(header[:4] == u.MAGIC_NUMBER and header[4:8] == b"\\x03\\0\\0\\0" and header[8:16] == u.source_hash(data))
"""


@pytest.mark.skipif(not PY312.exists(), reason="no .venv-py312: run python3 ci/bootstrap.py")
def test_an_observation_caches_the_observers_and_the_pytest_processs_own_modules(tmp_path: Path) -> None:
    # with PYTHONDONTWRITEBYTECODE and the recorder on PYTHONPATH, each observation compiled the
    # observer's and the recording pytest process's modules anew (about 0.1 s of CPU on rich, 3.12)
    root = tmp_path / "repo"
    write_project(root, {"pkg/__init__.py": "", "pkg/work.py": WORK,
                         # a module of the package that only a test imports: the test's, left alone
                         "tests/test_x.py": "import ci.culprit.prior\nfrom pkg.work import work\n\n\n"
                                            "def test_x():\n    assert work(3) == 3\n"})
    _copy_of_ci(root)
    env = {**clean_env(), "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([str(PY312), "-m", "ci", "observe", "--out", str(tmp_path / "facts.json"), "--",
                           str(PY312), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "tests/test_x.py"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    observer = ["ci/commands/observe.py", "ci/observe/observed.py", "ci/observe/merge.py", "ci/registry/fast_parse.py"]
    pytest_process = ["ci/pytest_plugin.py", "ci/observe/record.py", "ci/observe/sysmon_core.py", "ci/observe/child.py"]
    names = [*observer, *pytest_process, "ci/culprit/prior.py", "pkg/work.py"]
    checked = subprocess.run([str(PY312), "-c", _CHECKED, *(str(root / name) for name in names)], env=env,
                             capture_output=True, text=True, timeout=60)
    assert dict(zip(names, checked.stdout.split())) == {
        **{name: "True" for name in observer + pytest_process}, "ci/culprit/prior.py": "False", "pkg/work.py": "False"}
    assert json.loads((tmp_path / "facts.json").read_text())["tests"]["tests/test_x.py"]["executed"]["pkg/work.py"] == "1-5,8"


_IMPORTED = ("import json, sys\n"
             "from ci.observe.bytecode import cache_checked\n"
             "written = cache_checked(sys.argv[1:])\n"
             "print(json.dumps([written, 'py_compile' in sys.modules]))\n")


def test_cache_checked_imports_py_compile_only_when_a_pyc_is_stale(tmp_path: Path) -> None:
    """In a fresh interpreter (its own ``sys.modules`` the oracle): nothing stale, nothing to
    compile, so py_compile (with traceback and textwrap) is never imported; one stale source is."""
    source = tmp_path / "mod.py"
    source.write_text("X = 1\n")

    def run() -> list:
        proc = subprocess.run([sys.executable, "-c", _IMPORTED, str(source)], cwd=REPO, env=clean_env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    assert run() == [[str(source)], True]  # no .pyc yet: compiled
    assert run() == [[], False]  # current: py_compile left unimported
    source.write_text("X = 22\n")
    assert run() == [[str(source)], True]  # edited: compiled again
    assert importlib.util.source_hash(source.read_bytes()) == _pyc(source).read_bytes()[8:16]


def test_an_observed_pytest_and_the_merge_import_neither_sysconfig_nor_sqlite3() -> None:
    """What the observed pytest process imports of the recorder (`ci.observe.record`), and the
    observer's merge of JSON parts (`ci.observe.merge`): sysconfig is the owner's start-up hook's
    (an observed pytest is no owner), sqlite3 coverage.py's parts'; a fresh interpreter's
    ``sys.modules`` says which were imported."""
    body = ("import sys\nimport ci.observe.record, ci.observe.merge\n"
            "print(sorted(m for m in ('sysconfig', 'sqlite3', 'py_compile') if m in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", body], cwd=REPO, env=clean_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
