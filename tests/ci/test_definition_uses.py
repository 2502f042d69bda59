"""A module-level change that only redefines names selects the tests that read them.

Three oracles: CPython itself (both versions of a module executed: every global whose value
differs must be among the names `changed_definitions` reports), git (``git diff -U0`` of random
edits: `apply_hunks` rebuilds the new text exactly) and pytest (a real recording, then the edit
made on a branch and the whole suite run there: every file that fails must be selected, and
the plan selects exactly the files whose run reads the name).
"""

from __future__ import annotations

import ast
import inspect
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.selection.definition_uses import DefinitionUses
from ci.selection.diff_hunks import apply_hunks, file_diffs
from ci.selection.module_definitions import changed_definitions
from ci.selection.reach import MAX_FILES_PER_NAME, ReferenceIndex
from tests.ci.depmap_support import clean_env, plan_on_branch, recorded_project

BASE = "A = 1\nB = A * 2\nC = (1, 2)\n\n\ndef f(x):\n    return x + A\n\n\ndef g(): return 1\n"


@pytest.mark.parametrize("old, new, expected", [
    (BASE, BASE.replace("A = 1", "A = 3"), {"A"}),
    (BASE, BASE.replace("C = (1, 2)", "C = (1, 2, 3)"), {"C"}),
    (BASE, BASE.replace("B = A * 2", "B = A * 2 + 1"), {"B"}),
    (BASE, BASE.replace("C = (1, 2)\n", "C = (1, 2)\nD = -4\n"), {"D"}),  # a new name
    (BASE, BASE.replace("A = 1", "A: int = 1"), None),  # the module's __annotations__ changed
    (BASE.replace("A = 1", "A: int = 1"), BASE.replace("A = 1", "A: int = 2"), {"A"}),
    (BASE, BASE.replace("A = 1", "A = B2 = 1"), {"A", "B2"}),
    (BASE, BASE.replace("    return x + A", "    return x - A"), set()),  # a body: its own scope
    (BASE, BASE.replace("\n\ndef f", "\n\n\n# note\ndef f"), set()),  # blank lines, a comment
    (BASE, BASE.replace("A = 1", "A = int('1')"), None),  # calls code at import
    (BASE, BASE.replace("A = 1", "A = 1 / 1"), None),  # may raise at import
    (BASE, BASE.replace("A = 1", "A = -int('1')"), None),
    (BASE, BASE.replace("A = 1", "A = B"), None),  # reads a name it did not read
    (BASE, BASE.replace("A = 1\n", ""), None),  # removes a name its readers need
    (BASE, BASE.replace("return 1", "return 2"), None),  # a body on its def line: no body scope
    (BASE, BASE.replace("def f(x):", "def f(x=2):"), None),  # a default runs at import
    (BASE, BASE.replace("C = (1, 2)", "C = [n for n in (1, 2)]"), None),
    (BASE, BASE + "print(A)\n", None),
    (BASE, BASE + "class K:\n    size = 1\n", None),
    (BASE, BASE.replace("A = 1", "A = (1"), None),  # does not parse
])
def test_changed_definitions_hand_picked(old: str, new: str, expected: set[str] | None) -> None:
    found = changed_definitions(old, new)
    assert (None if found is None else set(found)) == expected
    if found is not None:  # the oracle: CPython runs both versions; what differs is among the names
        before: dict[str, object] = {}
        after: dict[str, object] = {}
        exec(compile(old, "old", "exec"), before)
        exec(compile(new, "new", "exec"), after)
        differ = {n for n in (before.keys() | after.keys()) - {"__builtins__"}
                  if not callable(before.get(n)) and before.get(n, ...) != after.get(n, ...)}
        assert differ <= _derived(new, found)


KLASS = "import functools\n\n\nclass K:\n    def m(self, y=1, *, z=(1, 2)):\n        return y\n"


@pytest.mark.parametrize("old, new, expected", [
    (BASE.replace("def f(x)", "def f(x=2)"), BASE.replace("def f(x)", "def f(x=3)"), {"f"}),
    (KLASS, KLASS.replace("z=(1, 2)", "z=(1, A)").replace("import functools", "import functools\nA = 1"), None),
    (KLASS, KLASS.replace("z=(1, 2)", "z=(1, 3)"), {"K.m"}),
    (KLASS.replace("    def", "    @staticmethod\n    def").replace("self, ", ""),
     KLASS.replace("    def", "    @staticmethod\n    def").replace("self, ", "").replace("y=1", "y=2"), {"K.m"}),
    (KLASS.replace("    def", "    @functools.cache\n    def"),  # a decorator may read the defaults at import
     KLASS.replace("    def", "    @functools.cache\n    def").replace("y=1", "y=2"), None),
    (KLASS.replace("class K:", "class K(metaclass=type):"),
     KLASS.replace("class K:", "class K(metaclass=type):").replace("y=1", "y=2"), None),
    (KLASS, KLASS.replace("y=1", "y=int('2')"), None),  # calls code at import
    (BASE.replace("def g()", "def g(a=1)"), BASE.replace("def g()", "def g(a=2)"), None),  # body on its def line
    (KLASS + KLASS[KLASS.index("class"):],  # K defined twice: the name does not tell which m changed
     KLASS + KLASS[KLASS.index("class"):].replace("y=1", "y=2"), None),
])
def test_changed_default_values_name_the_function_when_asked(old: str, new: str, expected: set[str] | None) -> None:
    functions: set[str] = set()
    found = changed_definitions(old, new, functions)
    assert (None if found is None else functions) == expected
    assert changed_definitions(old, new) is None  # unasked, a default is module level
    if found is not None:  # the oracle: CPython runs both; only the named functions' defaults differ
        before: dict[str, object] = {}
        after: dict[str, object] = {}
        exec(compile(old, "old", "exec"), before)
        exec(compile(new, "new", "exec"), after)

        def defaults(space: dict[str, object]) -> dict[str, object]:
            found_fns = {n: v for n, v in space.items() if inspect.isfunction(v)}
            found_fns |= {f"{n}.{m}": f for n, c in space.items() if inspect.isclass(c)
                          for m, f in vars(c).items() if inspect.isfunction(getattr(f, "__func__", f))}
            return {n: (getattr(f, "__func__", f).__defaults__, getattr(f, "__func__", f).__kwdefaults__)
                    for n, f in found_fns.items()}

        old_defaults, new_defaults = defaults(before), defaults(after)
        assert {n for n in old_defaults if old_defaults[n] != new_defaults.get(n)} == functions


def _derived(source: str, names: frozenset[str]) -> set[str]:
    """``names`` and every module-level name assigned from them, directly or not (the uses
    `DefinitionUses` follows as derived names)."""
    out = set(names)
    for stmt in ast.parse(source).body:
        if isinstance(stmt, ast.Assign) and {n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name)} & out:
            out |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return out


KERNELS = textwrap.dedent("""\
    import triton


    @triton.jit
    def kern(x_ptr, N: tl.constexpr):
        \"\"\"doc\"\"\"
        x = tl.load(x_ptr)
        tl.store(x_ptr, x + 1)


    def launch(x):
        kern[(1,)](x, 4)
    """)


@pytest.mark.parametrize("new, expected", [
    (KERNELS.replace("x + 1", "x + 2"), {"kern"}),
    (KERNELS.replace('"""doc"""', '"""other doc"""'), None),  # a docstring is read without running anything
    (KERNELS.replace("@triton.jit", "@triton.jit(debug=True)"), None),  # the decorator runs at import
    (KERNELS.replace("N: tl.constexpr", "N: tl.constexpr = 2"), None),
    (KERNELS + "\n\n@triton.jit\ndef other(x):\n    pass\n", None),  # a new kernel: decorated at import
])
def test_a_kernel_whose_body_changed_is_a_redefined_name(new: str, expected: set[str] | None) -> None:
    found = changed_definitions(KERNELS, new)
    assert (None if found is None else set(found)) == expected


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


@pytest.mark.parametrize("seed", range(12))
def test_apply_hunks_rebuilds_what_git_diff_describes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    old = [f"line {i}\n" for i in range(rng.randint(0, 12))]
    new = list(old)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(new))
        kind = rng.choice(("insert", "delete", "replace"))
        if kind == "insert" or not new or at == len(new):
            new[at:at] = [f"new {rng.random():.6f}\n" for _ in range(rng.randint(1, 3))]
        elif kind == "delete":
            del new[at:at + rng.randint(1, 2)]
        else:
            new[at] = f"changed {rng.random():.6f}\n"
    old_text, new_text = "".join(old), "".join(new)
    if seed % 3 == 0 and new_text:
        new_text = new_text.rstrip("\n")  # "\ No newline at end of file"
    (tmp_path / "a.py").write_text(old_text)
    (tmp_path / "b.py").write_text(new_text)
    diff = _git(tmp_path, "diff", "--no-index", "-U0", "--no-color", "a.py", "b.py").stdout
    parts = file_diffs(diff)
    if old_text == new_text:
        assert parts == []
        return
    (part,) = parts
    assert part.hunks is not None
    rebuilt = apply_hunks(old_text, part.hunks)
    assert rebuilt is not None and rebuilt.rstrip("\n") == new_text.rstrip("\n")
    assert rebuilt == new_text or not new_text.endswith("\n")


def test_apply_hunks_refuses_hunks_of_another_text() -> None:
    (part,) = file_diffs("--- a/m.py\n+++ b/m.py\n@@ -7 +7 @@\n-x = 1\n+x = 2\n")
    assert apply_hunks("x = 1\n", part.hunks or ()) is None  # line 7 is not there
    (cut,) = file_diffs("--- a/m.py\n+++ b/m.py\n@@ -1 +1,2 @@\n-x = 1\n+x = 2\n")  # a line short
    assert apply_hunks("x = 1\n", cut.hunks or ()) is None


USES = {
    "pkg/consts.py": textwrap.dedent("""\
        LIMIT = 4
        DOUBLE = LIMIT * 2
        \"\"\"Twice `LIMIT`.\"\"\"
        __all__ = ["LIMIT", "DOUBLE"]


        def limited(x):
            return min(x, LIMIT)


        def shadowed(LIMIT):
            return LIMIT
        """),
    "pkg/user.py": textwrap.dedent("""\
        from pkg.consts import DOUBLE as TWICE


        def twice(x):
            return x * TWICE


        def by_name(mod):
            return getattr(mod, "LIMIT")
        """),
    "pkg/unrelated.py": "def limited_too(n=LIMIT):\n    return n\n",
}
IMPORTS = {"pkg/user.py": {"pkg/consts.py"}, "pkg/consts.py": set(), "pkg/unrelated.py": set()}


def _uses(files: dict[str, str], names: set[str], imports=IMPORTS.get) -> list[tuple[str, int, str]] | None:
    found = DefinitionUses(ReferenceIndex(files), imports).of("pkg/consts.py", frozenset(names))
    return None if found is None else sorted((u.path, u.line, u.name) for u in found)


def test_uses_follow_derived_names_aliases_and_strings_in_bodies() -> None:
    assert _uses(USES, {"LIMIT"}) == [
        ("pkg/consts.py", 8, "LIMIT"),  # limited(); shadowed()'s parameter is another LIMIT
        ("pkg/user.py", 5, "TWICE"),    # DOUBLE = LIMIT * 2, imported as TWICE
        ("pkg/user.py", 9, "LIMIT"),    # getattr by string, in a body: a use where it runs
    ]
    # the same without the import graph: pkg/unrelated.py's default names another LIMIT, yet
    # counts, and a default runs at import: no narrowing
    assert _uses(USES, {"LIMIT"}, imports=None) is None


@pytest.mark.parametrize("extra, why", [
    ("X = LIMIT\nprint(X)\n", "a derived name read at import"),
    ("import pkg.consts as c\nNAMES = ['LIMIT']\n", "the name in a module-level string"),
    ("import pkg.consts as c\ndef f(n=c.LIMIT):\n    return n\n", "a default value"),
    ("import pkg.consts as c\nclass K:\n    size = c.LIMIT\n", "a class body"),
    ("import pkg.consts as c\n@triton.jit(n=c.LIMIT)\ndef k(x):\n    pass\n", "a kernel's decorator"),
    ("from pkg.consts import LIMIT\nif LIMIT > 2:\n    pass\n", "a module-level condition"),
    ("LIMIT is not python(\n", "a file that does not parse"),
])
def test_a_use_that_runs_at_import_or_cannot_be_seen_means_module_level(extra: str, why: str) -> None:
    files = {**USES, "pkg/more.py": extra}
    imports = {**IMPORTS, "pkg/more.py": {"pkg/consts.py"}}.get
    assert _uses(files, {"LIMIT"}, imports) is None, why


def test_a_kernel_that_reads_the_name_is_redefined_with_it() -> None:
    files = {**USES, "pkg/kernels.py": textwrap.dedent("""\
        from pkg.consts import LIMIT


        @triton.jit
        def kern(x):
            tl.store(x, LIMIT)


        def launch(x):
            kern[(1,)](x)
        """)}
    imports = {**IMPORTS, "pkg/kernels.py": {"pkg/consts.py"}}.get
    assert ("pkg/kernels.py", 10, "kern") in (_uses(files, {"LIMIT"}, imports) or [])


def test_a_name_in_too_many_files_is_not_followed() -> None:
    files = {f"pkg/m{i}.py": "def f():\n    return LIMIT\n" for i in range(MAX_FILES_PER_NAME)}
    files["pkg/consts.py"] = "LIMIT = 1\n"
    assert _uses(files, {"LIMIT"}, imports=None) is None
    del files["pkg/m0.py"]
    assert _uses(files, {"LIMIT"}, imports=None) is not None


# -- end to end: a real recording, the edit on a branch, the suite run there -------------------------

FILES = {
    "pkg/__init__.py": "",
    "pkg/fakejit.py": "def fake_jit(fn):\n    return fn\n",
    "pkg/consts.py": "LIMIT = 4\nSCALE = LIMIT * 10\nLABEL = 'x'\n",
    "pkg/ops.py": textwrap.dedent("""\
        from pkg.consts import LIMIT, SCALE
        from pkg.fakejit import fake_jit


        @fake_jit
        def kern(x):
            return x + 1


        def launch(x):
            return kern(x)


        def clamp(x):
            return min(x, LIMIT)


        def scale(x):
            return x * SCALE
        """),
    "tests/test_clamp.py": "from pkg import ops\n\n\ndef test_clamp():\n    assert ops.clamp(9) == 4\n",
    "tests/test_kern.py": "from pkg import ops\n\n\ndef test_kern():\n    assert ops.launch(1) == 2\n",
    "tests/test_label.py": "from pkg import consts, ops\n\n\ndef test_label():\n    assert consts.LABEL == 'x'\n",
    "tests/test_scale.py": "from pkg import ops\n\n\ndef test_scale():\n    assert ops.scale(1) == 40\n",
}
recorded = recorded_project(FILES, "definitions")


@pytest.mark.parametrize("path, old, new, expected", [
    ("pkg/consts.py", "LIMIT = 4", "LIMIT = 5", {"tests/test_clamp.py", "tests/test_scale.py"}),
    ("pkg/consts.py", "LABEL = 'x'", "LABEL = 'y'", {"tests/test_label.py"}),
    ("pkg/ops.py", "return x + 1", "return x + 2", {"tests/test_kern.py"}),
    # a value computed by a call: every importer, whatever it reads
    ("pkg/consts.py", "LABEL = 'x'", "LABEL = str(1 / 0)", {f"tests/test_{n}.py" for n in ("clamp", "kern", "label", "scale")}),
], ids=["constant", "unread-elsewhere", "kernel-body", "call"])
def test_plan_selects_the_readers_and_every_file_that_fails(recorded: Path, capsys, path, old, new, expected) -> None:
    text = (recorded / path).read_text()
    assert old in text
    runs: list[subprocess.CompletedProcess[str]] = []
    left: dict[str, str] = {}
    selected = plan_on_branch(recorded, capsys, {path: text.replace(old, new, 1)}, on_branch=lambda: runs.append(
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", "tests"],
                       cwd=recorded, env=clean_env(), capture_output=True, text=True, timeout=120)), not_run=left)
    failing = {line.split()[1].split("::")[0] for line in runs[0].stdout.splitlines()
               if line.startswith(("FAILED", "ERROR"))}
    assert failing, runs[0].stdout  # each edit breaks something: the oracle has a verdict
    assert failing <= set(selected), (failing, selected)
    assert set(selected) == expected, selected
    ran_file_not_use = f"it ran none of the changed statements of {path}, no use of a name they redefine"
    for test, why in left.items():
        assert ran_file_not_use in why or why.endswith("holds none of the changed files"), (test, why)
    if path == "pkg/ops.py":  # test_clamp ran ops.py, never a launch of the kernel: the plan says so
        assert ran_file_not_use in left["tests/test_clamp.py"], left
