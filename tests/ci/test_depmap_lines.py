"""Line-level selection by runtime maps: a map recorded by the real recorder in a child pytest,
then `ci plan --base` on real git branches that change one thing each.

The oracle is the project's layout, written out by hand: which test runs which function body,
which module each test loads, what runs at import time. The static graph would select every test
that imports a changed module; the map narrows a function-body change to the tests that ran it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.__main__ import main as ci_main
from bench._mutation_gen import unified_diff
from ci.selection.diff_hunks import comment_only_lines, file_diffs, touched_old_lines
from ci.selection.edit_scopes import diff_scopes, scopes_of
from tests.ci.depmap_support import git as _git, plan_on_branch, record_committed_project, recorded_project
from tests.ci.history_support import pg_server, store_location  # noqa: F401 (fixtures)

OPS = textwrap.dedent("""\
    LIMIT = 3


    def double(x, by=2):
        return x * 2


    def clamp(x):
        if x > LIMIT:
            return LIMIT
        return x
    """)
FILES = {
    "pkg/__init__.py": "",
    "pkg/ops.py": OPS,
    "pkg/built.py": "def build(kind='k'):\n    if kind != 'k':\n        return {kind: 0}\n    return {'k': 1}\n\n\nTABLE = build()\n",
    "tests/test_double.py": "from pkg import ops\n\n\ndef test_double():\n    assert ops.double(2) == 4\n",
    "tests/test_clamp.py": "from pkg import ops\n\n\ndef test_clamp():\n    assert ops.clamp(5) == 3\n",
    "tests/test_table.py": "from pkg import built\n\n\ndef test_table():\n    assert built.TABLE == {'k': 1}\n",
    # imports built inside the test, after test_table's collection ran build(): the body of
    # build() is never in test_other's own lines, only in the map's shared lines
    "tests/test_zother.py": "def test_other():\n    from pkg import built\n    assert built.TABLE['k'] == 1\n",
}


recorded = recorded_project(FILES, "lines")


def _plan(root: Path, capsys: pytest.CaptureFixture[str], edits: dict[str, str], *extra: str) -> dict[str, str]:
    return plan_on_branch(root, capsys, edits, *extra)


@pytest.mark.parametrize("edit, expected, why", [
    (("pkg/ops.py", "return x * 2", "return x * 3"), {"tests/test_double.py"}, "executed pkg/ops.py:5 in double()"),
    (("pkg/ops.py", "if x > LIMIT", "if x >= LIMIT"), {"tests/test_clamp.py"}, "executed pkg/ops.py:9 in clamp()"),
    # a constant's new value reaches only the code that reads it (`ci.selection.definition_uses`)
    (("pkg/ops.py", "LIMIT = 3", "LIMIT = 4"), {"tests/test_clamp.py"},
     "executed pkg/ops.py:9 in clamp(), which reads LIMIT, redefined by the change at pkg/ops.py:1"),
    # ... but a value that calls code runs that code at import, for every importer
    (("pkg/ops.py", "LIMIT = 3", "LIMIT = int('3')"), {"tests/test_double.py", "tests/test_clamp.py"},
     "executed pkg/ops.py, changed at module level (line 1)"),
    (("pkg/ops.py", "    return x\n", "    return x\n\n\ndef new():\n    return 0\n"),
     {"tests/test_double.py", "tests/test_clamp.py"}, "changed at module level"),
    (("pkg/built.py", "return {'k': 1}", "return {'k': 2}"), {"tests/test_table.py", "tests/test_zother.py"},
     "built.py, whose build() ran outside a test"),
    # a new default value is read by a call alone, which runs the body: the tests that ran it
    (("pkg/ops.py", "by=2", "by=3"), {"tests/test_double.py"}, "executed pkg/ops.py:5 in double()"),
    # build() ran at import, but not this branch: the import ran the same, and no test ran it
    (("pkg/built.py", "return {kind: 0}", "return {kind: 1}"), set(), None),
    # no test runs clamp()'s last line (test_clamp returns at LIMIT): selection by statement leaves it out
    (("pkg/ops.py", "    return x\n", "    return x + 0\n"), set(), None),
], ids=["double-body", "clamp-body", "module-constant", "module-call", "new-function", "import-time-function",
        "default-value", "import-time-function-unrun-branch", "unrun-statement"])
def test_a_change_selects_the_tests_its_scope_reaches(recorded: Path, capsys, edit, expected, why) -> None:
    path, old, new = edit
    text = (recorded / path).read_text()
    assert old in text
    selected = _plan(recorded, capsys, {path: text.replace(old, new, 1)})
    assert set(selected) == expected, selected
    # the last test of each case shows the rule (test_table collected built.py: it ran build() itself)
    assert why is None or why in selected[max(expected)], selected


def test_without_lines_or_with_a_list_of_paths_the_map_judges_by_file(recorded: Path, capsys, tmp_path) -> None:
    changed = tmp_path / "changed.txt"
    changed.write_text("pkg/ops.py\n")
    capsys.readouterr()
    assert ci_main(["plan", "--registry", str(recorded / "registry.yaml"), "--tier", "cpu", "--changed-files",
                    str(changed), "--depmap", str(recorded.parent / f"{recorded.name}.json"), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)["plans"][0]
    assert {t["path"] for t in out["selected"]} == {"tests/test_double.py", "tests/test_clamp.py"}


def test_a_change_on_main_since_the_map_is_part_of_the_change(recorded: Path, capsys) -> None:
    # main moves on after the map: an import at the top of ops.py shifts every line. Lines are
    # read against the map's commit, so main's import is part of the change: module level
    _git(recorded, "checkout", "-q", "-B", "moved", "main")
    (recorded / "pkg/ops.py").write_text("import os\n" + OPS)
    _git(recorded, "commit", "-q", "-am", "shift")
    try:
        _git(recorded, "branch", "-f", "main-old", "main")
        _git(recorded, "branch", "-f", "main", "moved")
        text = (recorded / "pkg/ops.py").read_text()
        selected = _plan(recorded, capsys, {"pkg/ops.py": text.replace("return x * 2", "return x * 3")})
    finally:
        _git(recorded, "checkout", "-q", "main-old")
        _git(recorded, "branch", "-f", "main", "main-old")
        _git(recorded, "checkout", "-q", "main")
    assert set(selected) == {"tests/test_double.py", "tests/test_clamp.py"}
    assert "changed at module level (line 1)" in selected["tests/test_clamp.py"]


def test_comments_and_blank_lines_select_nothing_but_a_hash_inside_a_string_is_code(recorded: Path, capsys) -> None:
    text = (recorded / "pkg/ops.py").read_text()
    edited = text.replace("def double(x):\n", "# doubles\n\ndef double(x):\n").replace("LIMIT = 3\n", "LIMIT = 3  # cap\n")
    selected = _plan(recorded, capsys, {"pkg/ops.py": edited.replace("LIMIT = 3  # cap\n", "# the cap\nLIMIT = 3\n")})
    assert selected == {}  # a comment line and a blank line inserted: nothing that runs changed
    # a trailing comment on a code line is a code line's hunk, but the module's statements compare
    # equal before and after (`ci.selection.module_definitions`): nothing that runs changed
    assert _plan(recorded, capsys, {"pkg/ops.py": edited}) == {}
    # the same hunk with a changed value: its reader only
    assert set(_plan(recorded, capsys, {"pkg/ops.py": edited.replace("LIMIT = 3  # cap", "LIMIT = 2  # cap")})) == {
        "tests/test_clamp.py"}


def test_a_comment_only_hunk_inside_a_multi_line_string_is_code() -> None:
    old = 'def f():\n    return """\nusage\n"""\n\n\ndef g():\n    return 1\n'
    diff = ("--- a/m.py\n+++ b/m.py\n@@ -3 +3 @@\n-usage\n+# usage\n"   # inside the string: code
            "@@ -6,0 +7 @@\n+# between\n")                              # between defs: a comment
    touched = touched_old_lines(diff)
    assert touched == {"m.py": {3, 6, 7}}
    assert comment_only_lines(diff) == {"m.py": {6, 7}}
    scopes = diff_scopes(touched, lambda path: old, comment_only_lines(diff))
    assert [s.name for s in scopes["m.py"]] == ["f"]  # line 3 is in f's body; 6 and 7 dropped
    # "usage" -> "# usage" is textually a comment on both sides, yet it is string content
    diff_in_string = "--- a/m.py\n+++ b/m.py\n@@ -3 +3 @@\n-# usage\n+# use\n"
    old_hash = old.replace("usage", "# usage")
    scopes = diff_scopes(touched_old_lines(diff_in_string), lambda path: old_hash, comment_only_lines(diff_in_string))
    assert [s.name for s in scopes["m.py"]] == ["f"]
    assert diff_scopes({"m.py": frozenset({6})}, lambda path: old, {"m.py": frozenset({6})}) == {"m.py": ()}


def test_a_map_whose_commit_is_not_in_the_checkout_judges_by_file(recorded: Path, capsys, tmp_path) -> None:
    data = json.loads((recorded.parent / f"{recorded.name}.json").read_text())
    data["sha"] = "f" * 40  # a shallow clone without the map's commit
    moved = tmp_path / "m.json"
    moved.write_text(json.dumps(data))
    text = (recorded / "pkg/ops.py").read_text()
    selected = _plan(recorded, capsys, {"pkg/ops.py": text.replace("return x * 2", "return x * 3")},
                     "--depmap", str(moved))
    assert set(selected) == {"tests/test_double.py", "tests/test_clamp.py"}
    assert selected["tests/test_double.py"].startswith("executed pkg/ops.py in map ")


DIRTY_FILES = {
    "pkg/__init__.py": "",
    "pkg/m.py": "def f(x):\n    if x > 0:\n        return 1\n    return 2\n",
    "pkg/gen.py": "def g():\n    return 5\n",
    "pkg/other.py": "def h():\n    return 7\n",
    # runs first (name order) and rewrites a tracked file with its own text: only its stat changes
    # (it opened gen.py too, so its own entry is partial as well)
    "tests/test_a_rewrites.py": "from pathlib import Path\n\n\ndef test_rewrite():\n"
                                "    p = Path(__file__).parents[1] / 'pkg' / 'gen.py'\n    p.write_text(p.read_text())\n",
    "tests/test_f.py": "from pkg import m\n\n\ndef test_f():\n    assert m.f(1) == 1\n",
    "tests/test_gen.py": "from pkg import gen\n\n\ndef test_gen():\n    assert gen.g() == 5\n",
    "tests/test_other.py": "from pkg import other\n\n\ndef test_other():\n    assert other.h() == 7\n",
}


def test_a_map_recorded_in_a_dirty_tree_does_not_vouch_for_the_dirty_files(tmp_path: Path, capsys) -> None:
    """Recorded with 10 lines added to the top of pkg/m.py (uncommitted), the map held f()'s lines
    at 11-14 under the commit's name: a committed change to f()'s line 3 selected nothing, and
    test_f failed. An entry that ran a file differing from the commit (at the start, at the end,
    or rewritten in between) is partial: the static graph decides it."""
    root = tmp_path / "dirty"
    padded = "# pad\n" * 10 + DIRTY_FILES["pkg/m.py"]
    path = record_committed_project(root, DIRTY_FILES, {"pkg/m.py": padded})
    data = json.loads(path.read_text())
    assert data["dirty"] == ["pkg/gen.py", "pkg/m.py"]
    assert {t: e["complete"] for t, e in data["tests"].items()} == {
        "tests/test_a_rewrites.py": False, "tests/test_f.py": False, "tests/test_gen.py": False,
        "tests/test_other.py": True}
    _git(root, "checkout", "-q", "--", "pkg/m.py")  # the edit is dropped; a real change to f() is committed
    text = (root / "pkg/m.py").read_text()
    selected = _plan(root, capsys, {"pkg/m.py": text.replace("return 1", "return 3")})
    assert set(selected) == {"tests/test_f.py"}, selected
    assert "ran pkg/m.py, which differed from its commit while recorded" in selected["tests/test_f.py"]
    assert set(_plan(root, capsys, {"pkg/gen.py": "def g():\n    return 6\n"})) == {"tests/test_gen.py"}
    # a clean entry still narrows: other.py's body change selects its one runner, by its line
    assert _plan(root, capsys, {"pkg/other.py": "def h():\n    return 8\n"}) == {
        "tests/test_other.py": f"executed pkg/other.py:2 in h() in map {path}"}


def test_a_source_rewritten_while_the_conftests_load_is_dirty(tmp_path: Path) -> None:
    """The recording starts before the initial conftests load: a conftest that rewrites a tracked
    source at import time (the same text, a new mtime) made the recording run a rewritten file."""
    files = {
        "pkg/__init__.py": "",
        "pkg/m.py": "def f():\n    return 1\n",
        "tests/__init__.py": "",
        "tests/conftest.py": "import pathlib\n\n_M = pathlib.Path(__file__).resolve().parents[1] / 'pkg' / 'm.py'\n"
                             "_M.write_text(_M.read_text())\n",
        "tests/test_f.py": "from pkg.m import f\n\n\ndef test_f():\n    assert f() == 1\n",
    }
    data = json.loads(record_committed_project(tmp_path / "early", files).read_text())
    assert data["dirty"] == ["pkg/m.py"] and data["tests"]["tests/test_f.py"]["complete"] is False


DRIFT_FILES = {
    "pkg/__init__.py": "",
    "pkg/core.py": "def helper():\n    return 1\n",
    "pkg/api.py": "from pkg import core\n\n\ndef run():\n    return 0\n",
    "pkg/other.py": "def h():\n    return 7\n\n\ndef unused():\n    return 8\n",
    "tests/test_api.py": "from pkg import api\n\n\ndef test_run():\n    assert api.run() < 2\n",
    "tests/test_core.py": "from pkg import core\n\n\ndef test_helper():\n    assert core.helper() >= 1\n",
    "tests/test_other.py": "from pkg import other\n\n\ndef test_h():\n    assert other.h() == 7\n",
}


def test_a_map_of_an_older_commit_is_stale_for_the_tests_whose_code_changed_since(tmp_path: Path, capsys) -> None:
    """The map is recorded at Y; main then makes api.run() call core.helper() (X). A branch off X
    changes helper(): test_api now runs it and fails, but its map (Y) never ran core.py, and the
    walk read Y's api.py, where nothing calls helper(): nothing selected it. A test whose map ran
    what changed between its commit and the tree planned is judged by the static graph; one
    whose run the drift does not reach is still decided by its lines."""
    root = tmp_path / "drift"
    path = record_committed_project(root, DRIFT_FILES)
    (root / "pkg/api.py").write_text(DRIFT_FILES["pkg/api.py"].replace("return 0", "return core.helper()"))
    (root / "pkg/other.py").write_text(DRIFT_FILES["pkg/other.py"].replace("return 8", "return 9"))
    _git(root, "commit", "-q", "-am", "main moves on: run() calls helper(); a body no test runs changes")
    not_run: dict[str, str] = {}
    selected = plan_on_branch(root, capsys, {"pkg/core.py": "def helper():\n    return 2\n"}, not_run=not_run)
    assert set(selected) == {"tests/test_api.py", "tests/test_core.py"}, selected
    assert selected["tests/test_api.py"].startswith("imports pkg/core.py")
    assert "is stale: since its commit the tree changed what it ran (executed pkg/api.py:5 in run())" in (
        selected["tests/test_api.py"])
    assert selected["tests/test_core.py"] == f"executed pkg/core.py:2 in helper() in map {path}"
    # other.py's drift is in a body test_other never ran: its map still decides, and says so
    assert not_run["tests/test_other.py"].startswith(f"not affected by the change: the map of map {path}")
    assert set(plan_on_branch(root, capsys, {"pkg/other.py": "def h():\n    return 70\n\n\ndef unused():\n"
                                                             "    return 9\n"})) == {"tests/test_other.py"}


def test_line_maps_round_trip_through_the_store_on_both_databases(recorded: Path, capsys, store_location: str) -> None:
    path = recorded.parent / f"{recorded.name}.json"
    sha = json.loads(path.read_text())["sha"]
    identity = ["--repo", "o/r", "--event", "nightly", "--tier", "cpu", "--store", store_location]
    capsys.readouterr()
    assert ci_main(["history", "ingest", str(path), *identity, "--sha", "0" * 40]) == 2
    assert f"recorded at commit {sha}, not --sha {'0' * 40}" in capsys.readouterr().err
    assert ci_main(["history", "ingest", str(path), *identity, "--sha", sha, "--run-id", "7"]) == 0
    text = (recorded / "pkg/built.py").read_text()
    selected = _plan(recorded, capsys, {"pkg/built.py": text.replace("{'k': 1}", "{'k': 2}")},
                     "--depmaps-from-store", "--store", store_location)
    assert set(selected) == {"tests/test_table.py", "tests/test_zother.py"}
    assert selected["tests/test_zother.py"].endswith(f"whose build() ran outside a test (at import or in the session) "
                                                     f"in run 7 at {sha[:12]}")
    text = (recorded / "pkg/ops.py").read_text()
    selected = _plan(recorded, capsys, {"pkg/ops.py": text.replace("return x * 2", "return x * 3")},
                     "--depmaps-from-store", "--store", store_location)
    assert selected == {"tests/test_double.py": f"executed pkg/ops.py:5 in double() in run 7 at {sha[:12]}"}


def test_the_diff_reader_agrees_with_git(tmp_path: Path) -> None:
    root = tmp_path
    (root / "a.py").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    (root / "gone.py").write_text("x = 1\ny = 2\n")
    (root / "blob.bin").write_bytes(b"\x00\x01")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "base")
    lines = (root / "a.py").read_text().splitlines(keepends=True)
    lines[2] = "changed3\n"               # replace old line 3
    del lines[6]                          # delete old line 7
    lines.insert(8, "inserted\n")         # insert after old line 9 (8 lines before it now)
    (root / "a.py").write_text("".join(lines))
    (root / "gone.py").unlink()
    (root / "new.py").write_text("z = 3\n")
    (root / "blob.bin").write_bytes(b"\x00\x02")
    _git(root, "add", "-A")
    touched = touched_old_lines(_git(root, "-c", "core.quotepath=off", "diff", "-U0", "--cached", "--no-renames"))
    assert touched["a.py"] == {3, 7, 9, 10}
    assert touched["gone.py"] == {1, 2}
    assert touched["new.py"] is None  # no old side: judged by file
    assert touched["blob.bin"] is None  # a binary file: judged by file
    assert set(touched) == {"a.py", "gone.py", "new.py", "blob.bin"}


SCOPED = textwrap.dedent("""\
    import x
    A = 1

    @deco
    def f(a=1):
        \"\"\"doc\"\"\"
        y = a
        def g():
            return 2
        return y

    class C:
        k = 3
        def m(self):
            return self.k

    @triton.jit
    def kern(X):
        x = 1
    def one(): return 5
    """)


@pytest.mark.parametrize("line, name", [
    (1, "<module>"), (4, "<module>"), (5, "<module>"),  # import, decorator, def header (defaults)
    (6, "<module>"), (7, "f"), (8, "f"),  # docstring (read by tools), body, a nested def's header is f's body
    (9, "f.g"), (13, "<module>"), (15, "C.m"), (11, "<module>"),  # class body outside methods
    (19, "<module>"), (20, "<module>"),  # a kernel's body; a one-line def
])
def test_scopes_of_hand_picked_lines(line: int, name: str) -> None:
    (scope,) = scopes_of(SCOPED, [line])
    assert scope.name == name and scope.line == line


def test_scopes_of_unparseable_source_is_none_and_scopes_are_deduplicated() -> None:
    assert scopes_of("def f(:\n", [1]) is None
    assert scopes_of(b"x = 1\x00\n", [1]) is None
    assert [s.name for s in scopes_of(SCOPED, [7, 10, 2, 1])] == ["<module>", "f"]
    assert [s.name for s in scopes_of('def f():\n    """only a docstring"""\n', [2])] == ["<module>"]


TWICE = ("import sys\n\nif sys.platform == 'win32':\n    def h():\n        return 1\nelse:\n    def h():\n"
         "        return 2\n\n\ndef f(x=1):\n    return x\n")


@pytest.mark.parametrize("base, changed, scope", [
    # another function defined twice (one per platform, as click's _compat.py does) does not matter
    (TWICE, TWICE.replace("x=1", "x=2"), ("f", 12, 12, 11)),
    # f defined twice at the top level: the name does not tell which body reads the default
    (TWICE + "\n\ndef f(x=5):\n    return x\n", TWICE + "\n\ndef f(x=6):\n    return x\n", None),
])
def test_a_changed_default_value_is_its_functions_body(base: str, changed: str, scope: tuple | None) -> None:
    parts = file_diffs(unified_diff("m.py", base, changed))
    module, *bodies = diff_scopes(touched_old_lines(parts), lambda path: base,
                                  hunks={p.path: [p.hunks] for p in parts})["m.py"]
    if scope is None:
        assert module.is_module and module.names is None and not bodies
    else:  # the module level redefines no name; the body is the unit, every line of it
        assert module.is_module and module.names == frozenset()
        assert [(b.name, b.first, b.last, b.line, b.statements.whole) for b in bodies] == [(*scope, True)]


def test_the_open_log_keeps_regular_files_of_the_repository_only(tmp_path: Path) -> None:
    from ci.observe.files import OpenedLog, RepoFiles

    root, parts = tmp_path / "repo", tmp_path / "parts"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "table.json").write_text("{}")
    parts.mkdir()
    log = OpenedLog(RepoFiles(root), parts)
    log.context, log.active = "tests/test_a.py", True
    for path, mode in ((root / "pkg", "r"), (root / "pkg" / "table.json", "r"), (root / "05", "r"),
                       (root / "pkg" / "out.json", "w"), (tmp_path / "elsewhere.json", "r")):
        log._hook("open", (str(path), mode, 0))
    log.stop()
    # a directory (shutil.rmtree opens each by dir_fd-relative name), a name that is no file,
    # a write and a path outside the repository are not dependencies
    assert (parts / f"opened.{os.getpid()}.log").read_text() == "tests/test_a.py\tpkg/table.json\n"


READER = """\
import linecache, os, sys, tokenize
from ci.observe.files import OpenedLog, RepoFiles
root, parts = sys.argv[1], sys.argv[2]
log = OpenedLog(RepoFiles(root), parts)
log.context = "tests/test_a.py"
log.start()
sys.path.insert(0, root)
import pkg.ran  # the import system reads it to run it: the lines say what ran
linecache.getlines(os.path.join(root, "pkg", "shown.py"))  # a traceback's source line
open(os.path.join(root, "pkg", "read.py")).read()  # read as data: a lint, a hash
tokenize.open(os.path.join(root, "pkg", "tokens.py")).read()  # tokenized as data, not by linecache
rewrite = {}  # pytest's assertion rewriting reads a test module through pathlib: three frames up
exec(compile("import pathlib\\ndef read(p):\\n    return pathlib.Path(p).read_bytes()\\n",
             os.path.join(root, "_pytest", "assertion", "rewrite.py"), "exec"), rewrite)
rewrite["read"](os.path.join(root, "pkg", "rewritten.py"))
log.stop()
"""


def test_the_open_log_keeps_a_python_source_read_as_data_not_one_read_to_run_it(tmp_path: Path) -> None:
    root, parts = tmp_path / "repo", tmp_path / "parts"
    (root / "pkg").mkdir(parents=True)
    parts.mkdir()
    for name in ("__init__", "ran", "shown", "read", "tokens", "rewritten"):
        (root / "pkg" / f"{name}.py").write_text("X = 1\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", READER, str(root), str(parts)], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (log,) = parts.glob("opened.*.log")
    assert log.read_text().splitlines() == ["tests/test_a.py\tpkg/read.py", "tests/test_a.py\tpkg/tokens.py"]


COUNTER = """\
import sys
from ci.observe.files import OpenedLog, RepoFiles
heard, real = [], OpenedLog._hook
OpenedLog._hook = lambda self, event, args, *rest: (heard.append(event), real(self, event, args, *rest))[1]
log = OpenedLog(RepoFiles(sys.argv[1]), sys.argv[2])
log.context = "tests/test_a.py"
log.start()
for _ in range(1000):
    id(log)  # an audit event ("builtins.id"), as sys._getframe, object.__getattr__ and os.putenv are
open(sys.argv[3]).close()
log.stop()
print(sorted(set(heard)))
"""


def test_the_open_log_hears_only_opens_and_process_starts_in_python(tmp_path: Path) -> None:
    # every audit event of a process reaches the hook; calling the log's method for each one cost
    # rich's recorded suite about 0.3 s (133,000 events on 3.12): a plain function filters first
    root, parts = tmp_path / "repo", tmp_path / "parts"
    (root / "pkg").mkdir(parents=True)
    parts.mkdir()
    (root / "pkg" / "table.json").write_text("{}")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", COUNTER, str(root), str(parts), str(root / "pkg" / "table.json")],
                          env=env, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "['open']\n", "")
    (log,) = parts.glob("opened.*.log")
    assert log.read_text() == "tests/test_a.py\tpkg/table.json\n"
