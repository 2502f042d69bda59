"""State cached across test files: a test that read a cached result never ran the body that
computed it, yet a change to that body breaks it.

The recording is real (the recorder in a child ``ci run``, files in name order in one process):
``test_a_fill`` fills the caches, ``test_b_read`` reads them. The oracle is pytest itself: with
the change made, ``test_b_read`` run alone fails, so a plan that leaves it out is wrong. The walk
(`ci.selection.reach`) and the store shapes (`ci.selection.state_stores`) are also checked on
hand-written sources, line by line.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ci.selection.edit_scopes import scopes_of
from ci.selection.line_ranges import parse_lines
from ci.selection import reach
from ci.selection.reach import ReferenceIndex, reference_name
from ci.selection.state_stores import FunctionNames, names_in, stores_state
from tests.ci.depmap_support import clean_env, plan_on_branch, recorded_project

TABLES = textwrap.dedent("""\
    import functools

    _TABLES = {}


    def build(key):
        return key * 2


    def table(key):
        found = _TABLES.get(key)
        if found is None:
            found = _TABLES[key] = build(key)
        return found


    def check(key):
        if key < 0:
            raise ValueError(describe(key))
        return key


    def describe(key):
        return f"bad key {key}"


    @functools.lru_cache(maxsize=None)
    def scaled(key):
        return build_scaled(key)


    def build_scaled(key):
        return key * 3


    def use_scaled(key):
        return scaled(key)
    """)
FILES = {
    "pkg/__init__.py": "",
    "pkg/tables.py": TABLES,
    "tests/test_a_fill.py": ("from pkg import tables\n\n\ndef test_fill():\n"
                             "    assert tables.table(1) == 2\n    assert tables.use_scaled(1) == 3\n"),
    "tests/test_b_read.py": ("from pkg import tables\n\n\ndef test_read():\n    assert tables.table(1) == 2\n"
                             "    assert tables.use_scaled(1) == 3\n    assert tables.check(1) == 1\n"),
    "tests/test_c_other.py": "from pkg import tables\n\n\ndef test_other():\n    assert tables.check(2) == 2\n",
}


recorded = recorded_project(FILES, "reach")


def _plan(root: Path, capsys: pytest.CaptureFixture[str], old: str, new: str) -> tuple[dict[str, str], bool]:
    """One edit of pkg/tables.py on a branch, planned against main with the map; and whether
    tests/test_b_read.py run alone fails there: the oracle."""
    text = (root / "pkg/tables.py").read_text()
    assert old in text
    alone: list[subprocess.CompletedProcess[str]] = []
    selected = plan_on_branch(root, capsys, {"pkg/tables.py": text.replace(old, new, 1)}, on_branch=lambda: alone.append(
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_b_read.py"],
                       cwd=root, env=clean_env(), capture_output=True, text=True, timeout=120)))
    return selected, alone[0].returncode != 0


def test_the_recording_shows_the_cache_read_without_its_fill(recorded: Path) -> None:
    tests = json.loads((recorded.parent / f"{recorded.name}.json").read_text())["tests"]
    assert 7 in parse_lines(tests["tests/test_a_fill.py"]["executed"]["pkg/tables.py"])  # build() body ran
    lines = parse_lines(tests["tests/test_b_read.py"]["executed"]["pkg/tables.py"])
    assert 11 in lines and 13 not in lines and 7 not in lines  # the cache hit: no fill, no build()
    assert 29 not in lines and 37 in lines  # scaled() answered from lru_cache; use_scaled() ran


@pytest.mark.parametrize("old, new, expected, why, fails_alone", [
    ("return key * 2", "return key * 5", {"tests/test_a_fill.py", "tests/test_b_read.py"},
     "ran table() in pkg/tables.py, whose line 13 (not run) leads to build() through build", True),
    ("return key * 3", "return key * 4", {"tests/test_a_fill.py", "tests/test_b_read.py"},
     "ran pkg/tables.py:37 in use_scaled(), which names scaled (a decorated function it never entered) on the way "
     "to build_scaled()", True),
    ('return f"bad key {key}"', 'return f"wrong key {key}"', set(), None, False),
    # test_b_read ran table() but not the fill itself: by statement it would be left out, but the
    # statement fills a cache another file filled first
    ("found = _TABLES[key] = build(key)", "found = _TABLES[key] = build(key) + 1",
     {"tests/test_a_fill.py", "tests/test_b_read.py"},
     "ran table() in pkg/tables.py, not its changed line 13, which lies in a branch that stores state", True),
], ids=["dict-cache", "lru-cache", "error-branch", "the-fill-itself"])
def test_a_body_only_an_earlier_file_ran_selects_the_file_that_read_its_result(
        recorded: Path, capsys, old, new, expected, why, fails_alone) -> None:
    selected, failed_alone = _plan(recorded, capsys, old, new)
    assert failed_alone is fails_alone  # the oracle: does the reader break under this change?
    assert set(selected) == expected, selected
    if why is not None:
        assert why in selected["tests/test_b_read.py"], selected


# -- the walk on hand-written sources ------------------------------------------------------------------

def _scope(source: str, line: int):
    (scope,) = scopes_of(source, [line])
    return scope


def _ran(lines: dict[str, set[int]]):
    return lambda path: frozenset(lines.get(path, ()))


CHAIN = textwrap.dedent("""\
    _C = {}
    def leaf(k):
        return k
    def one(k):
        return leaf(k)
    def two(k):
        return one(k)
    def three(k):
        return two(k)
    def top2(k):
        if k not in _C:
            _C[k] = two(k)
    def top3(k):
        if k not in _C:
            _C[k] = three(k)
    """)


def test_a_chain_through_functions_never_entered_reaches_a_cache_fill_two_calls_up() -> None:
    index = ReferenceIndex({"m.py": CHAIN})
    why = index.reason("m.py", _scope(CHAIN, 3), _ran({"m.py": {11}}))
    assert why == "ran top2() in m.py, whose line 12 (not run) leads to leaf() through two"
    assert index.reason("m.py", _scope(CHAIN, 3), _ran({"m.py": {11, 12}})) is None  # filled here: ran it all
    assert index.reason("m.py", _scope(CHAIN, 3), _ran({})) is None  # never entered top()


def test_only_files_that_import_the_function_s_file_count() -> None:
    target = "def build(k):\n    return k\n"
    other = "_C = {}\ndef user(k):\n    if k not in _C:\n        _C[k] = x.build(k)\n    return _C[k]\n"
    index = ReferenceIndex({"a.py": target, "b.py": other})
    ran = _ran({"b.py": {3, 5}})
    assert index.reason("a.py", _scope(target, 2), ran) is not None
    assert index.reason("a.py", _scope(target, 2), ran, imports=lambda path: {"b.py"}) is None
    assert index.reason("a.py", _scope(target, 2), ran, imports=lambda path: {"b.py", "a.py"}) is not None


def test_lazy_parts_of_a_line_and_constructors_are_references() -> None:
    source = textwrap.dedent("""\
        class Table:
            def __init__(self):
                self.rows = 1
        def pick(cached):
            return cached or Table()
        def plain(k):
            return helper(k)
        def helper(k):
            return k
        def either(k, c):
            return k if c else other()
        def other():
            return 0
        class K:
            @staticmethod
            def fixed(k):
                return k
        def use_fixed(k):
            return K.fixed(k)
        """)
    index = ReferenceIndex({"m.py": source})
    assert index.reason("m.py", _scope(source, 13), _ran({"m.py": {11}})) is not None  # the else part
    assert index.reason("m.py", _scope(source, 17), _ran({"m.py": {19}})) is None  # staticmethod never skips
    assert reference_name(index.body_at("m.py", _scope(source, 3))) == "Table"
    why = index.reason("m.py", _scope(source, 3), _ran({"m.py": {5}}))
    assert why is not None and "a part of the line that need not run" in why
    # helper() is neither decorated nor on a lazy part: its call ran, so another helper answered
    assert index.reason("m.py", _scope(source, 9), _ran({"m.py": {7}})) is None


def test_a_call_that_ran_into_another_function_of_the_same_name_is_not_a_cache_hit() -> None:
    cached = ("import functools\nclass C:\n    @functools.cache\n    def load(self, k):\n        return build(k)\n"
              "def build(k):\n    return k\n")
    plain = "class P:\n    def load(self, k):\n        return k\n"
    caller = "def use(store, k):\n    return store.load(k)\n"
    index = ReferenceIndex({"c.py": cached, "p.py": plain, "u.py": caller})
    assert index.reason("c.py", _scope(cached, 7), _ran({"u.py": {2}})) is not None  # no load() ran: cached
    # P.load() answered the call once; C.load()'s cache may have answered it another time: a call of a
    # function that keeps results selects, as for a changed cached function (docs/depmaps.md)
    why = index.reason("c.py", _scope(cached, 7), _ran({"u.py": {2}, "p.py": {3}}))
    assert why is not None and why.startswith("ran u.py:2, a call of C.load() in c.py, whose results are kept"), why
    assert index.reason("c.py", _scope(cached, 7), _ran({"p.py": {3}})) is None  # no call of load() ran


def test_a_module_function_is_not_reached_through_a_local_s_attribute_nor_a_method_by_a_bare_name() -> None:
    source = textwrap.dedent("""\
        import functools
        @functools.cache
        def load(k):
            return k
        class Box:
            @functools.cache
            def fill(self):
                return 1
        def use(path, box):
            path.load(1)
            fill()
            return box.fill()
        """)
    index = ReferenceIndex({"m.py": source})
    assert index.reason("m.py", _scope(source, 4), _ran({"m.py": {10, 11, 12}})) is None  # path.load: another load
    why = index.reason("m.py", _scope(source, 8), _ran({"m.py": {10, 11, 12}}))
    assert why is not None and "m.py:12" in why  # box.fill(), not the bare fill() of line 11



def test_a_method_is_not_called_as_another_class_s_own_method_unless_that_name_may_mean_its_class() -> None:
    styles = ("import functools\nclass Style:\n    @classmethod\n    @functools.cache\n    def parse(cls, t):\n"
              "        return t\nclass Fancy(Style):\n    pass\n")
    colors = "class Color:\n    @classmethod\n    def parse(cls, t):\n        return t.strip()\n"
    calls = ("def use(t):\n    Color.parse(t)\n    Fancy.parse(t)\n    Style.parse(t)\n"
             "    cls = Style\n    return cls.parse(t)\n")
    scope = _scope(styles, 6)
    index = ReferenceIndex({"s.py": styles, "c.py": colors, "u.py": calls})
    found = index.cached_calls("s.py", scope)
    assert found is not None and found.calls == {"u.py": frozenset({3, 4, 6})}  # not Color.parse (line 2)
    # a name bound another way may mean Style: an alias, an assignment, a second class of that name without parse
    for other in ("from s import Style as Color\n", "Color = Style\n", "class Color:\n    pass\n"):
        index = ReferenceIndex({"s.py": styles, "c.py": colors, "u.py": calls, "o.py": other})
        found = index.cached_calls("s.py", scope)
        assert found is not None and 2 in found.calls["u.py"], other
    # the walk matches the same way: a test that ran only a Color.parse call never reached Style.parse
    only = "def paint(t):\n    return Color.parse(t)\n"
    index = ReferenceIndex({"s.py": styles, "c.py": colors, "p.py": only})
    assert index.reason("s.py", scope, _ran({"p.py": {2}})) is None


def test_a_file_too_deep_to_parse_or_walk_is_left_out_never_a_crash() -> None:
    # a long chain of ``+`` nests one BinOp per term: ast.parse takes 2,000, a recursive walk does not
    deep = "def g():\n    return 1\ndef h():\n    return " + "+".join(["g()"] * 2000) + "\n"
    assert scopes_of(deep, [2]) is None  # judged by file, like any source that does not parse
    target = "def g():\n    return 1\n"
    index = ReferenceIndex({"a.py": target, "deep.py": deep})
    assert index.bodies("deep.py") == [] and index.reason("a.py", _scope(target, 2), _ran({"deep.py": {4}})) is None


def test_module_level_references_kernels_and_bad_files_lead_nowhere() -> None:
    source = textwrap.dedent("""\
        import triton
        def build(k):
            return k
        TABLE = build(1)
        @triton.jit
        def kernel(x):
            if x:
                build(x)
        """)
    index = ReferenceIndex({"m.py": source, "bad.py": "def (:\n", "nul.py": "x = 1\0"})
    assert index.reason("m.py", _scope(source, 3), _ran({"m.py": {4, 7}})) is None
    assert index.bodies("bad.py") == [] and index.bodies("nul.py") == [] and index.bodies("absent.py") == []
    assert [b.name for b in index.bodies("m.py")] == ["build"]  # the kernel's body is not a function body here
    assert index.reason("m.py", _scope(source, 4), _ran({})) is None  # module level: not this walk's


@pytest.mark.parametrize("body, stores", [
    ("_C[k] = v", True),
    ("self._t[k] = v", True),
    ("_C.setdefault(k, v)", True),
    ("self._seen.add(k)", True),
    ("G = v", True),  # declared global below
    ("self._table = v", True),  # the guard reads _table
    ("report.outcome = 'failed'", False),  # an attribute the guard does not read
    ("local[k] = v", False),
    ("local.append(v)", False),
    ("raise ValueError(v)", False),
    ("def f():\n            _C[k] = v", False),  # a nested function stores when called, not here
], ids=lambda v: str(v)[:24])
def test_which_blocks_store_state(body: str, stores: bool) -> None:
    source = f"def fn(k, v, self, report):\n    global G\n    local = []\n    if self._table is None:\n        {body}\n"
    fn = ast.parse(source).body[0]
    branch = fn.body[2]
    assert stores_state(branch.body, FunctionNames.of(fn), names_in([branch.test])) is stores


def test_the_walk_stops_after_two_functions_the_test_never_entered_and_at_common_names(monkeypatch) -> None:
    source = CHAIN
    index = ReferenceIndex({"m.py": source})
    assert index.reason("m.py", _scope(source, 3), _ran({"m.py": {11}})) is not None  # via one, two: 2 hops
    assert index.reason("m.py", _scope(source, 3), _ran({"m.py": {14}})) is None  # via one, two, three: 3
    # a name in more files than the bound is not followed, however the rest of the walk would go
    other = {"o.py": "def x():\n    return leaf\n"}
    monkeypatch.setattr(reach, "MAX_FILES_PER_NAME", 1)
    assert ReferenceIndex({"m.py": source}).reason("m.py", _scope(source, 3), _ran({"m.py": {11}})) is not None
    assert ReferenceIndex({"m.py": source, **other}).reason("m.py", _scope(source, 3), _ran({"m.py": {11}})) is None
