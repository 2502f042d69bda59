"""A change inside a special method reached only through a cache another test file filled (issue
#46, docs/depmaps.md "Special methods behind a cache"): rich's `Style.__str__`, called by
`str(cls.parse(style))` inside the `lru_cache`'d `Style.normalize`, which `markup.render` calls
through a local alias. `ci observe --by-test` records a tiny committed project in one real pytest
process; pytest run on each file alone on the changed branch is the oracle: every file that fails
must be selected, the file that never formats a style must not."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ci.selection.depmap_format import parse_depmap
from ci.selection.implicit_calls import IMPLICIT, implicit_dunders
from tests.ci.test_bytest import _plan
from tests.ci.test_bytest_cached import _failing_alone, _observed

STYLE = """\
from functools import lru_cache


class Style:
    def __init__(self, bold=False, color=None):
        self.bold = bold
        self.color = color
        self._definition = None

    def __str__(self):
        if self._definition is None:
            words = []
            if self.bold:
                words.append("bold")
            if self.color is not None:
                words.append(self.color)
            self._definition = " ".join(words) or "none"
        return self._definition

    @classmethod
    @lru_cache(maxsize=None)
    def parse(cls, text):
        words = text.split()
        if any("." in word for word in words):
            raise ValueError(text)  # a theme's name, not a definition
        return cls("bold" in words, next((w for w in words if w != "bold"), None))

    @classmethod
    @lru_cache(maxsize=None)
    def normalize(cls, text):
        try:
            return FORMAT
        except ValueError:
            return text.strip().lower()


class Measure:
    def normalize(self):
        return self


DEFAULT = Style(bold=True)
"""
# `render` keeps the cached method under a local name: no call names `normalize` on an object.
MARKUP_ALIAS = """\
from pkg.style import Style


def render(tags):
    normalize = Style.normalize
    out = []
    for tag in tags:
        out.append(normalize(tag))
    return out
"""
# A cached function of its own, in a file without the word ``__str__``, formatting by an f-string;
# `render` also runs another class's `normalize` (the walk's "entered no function of that name" must
# not count it as the call that was answered).
MARKUP_FSTRING = """\
from functools import lru_cache

from pkg.style import Measure, Style


@lru_cache(maxsize=None)
def normalize(text):
    try:
        return f"{Style.parse(text)}"
    except ValueError:
        return text.strip().lower()


def render(tags):
    Measure().normalize()
    out = []
    for tag in tags:
        out.append(normalize(tag))
    return out
"""
TESTS = {
    # fills normalize's cache and DEFAULT's memo
    "tests/test_a.py": ("from pkg.markup import render\nfrom pkg.style import DEFAULT\n\n\n"
                        "def test_a_render():\n    assert render(['bold red', 'blue']) == ['bold red', 'blue']\n\n\n"
                        "def test_a_default():\n    assert str(DEFAULT) == 'bold'\n"),
    # answered from normalize's cache: never enters Style.__str__ nor Style.normalize
    "tests/test_b.py": ("from pkg.markup import render\n\n\n"
                        "def test_b_render():\n    assert render(['bold red']) == ['bold red']\n"),
    # enters normalize, for a theme's name only (the definition is answered from the cache)
    "tests/test_p.py": ("from pkg.markup import render\n\n\n"
                        "def test_p_render():\n    assert render(['bold red', 'bar.done']) == ['bold red', 'bar.done']\n"),
    # reads DEFAULT's memo: runs the guard of __str__, not its branch
    "tests/test_m.py": ("from pkg.style import DEFAULT\n\n\n"
                        "def test_m_default():\n    assert str(DEFAULT) == 'bold'\n"),
    # never formats a style
    "tests/test_c.py": ("from pkg.style import Style\n\n\n"
                        "def test_c_plain():\n    assert Style(color='red').color == 'red'\n"),
}


@pytest.mark.parametrize("markup, cached", [(MARKUP_ALIAS, "Style.normalize()"), (MARKUP_FSTRING, " normalize()")],
                         ids=["str-through-an-alias", "f-string-in-another-file"])
def test_a_special_method_behind_a_cache_selects_every_file_that_fails_alone(tmp_path: Path, markup: str,
                                                                              cached: str) -> None:
    style = STYLE.replace("FORMAT", "str(cls.parse(text))")
    pkg_file = "pkg/style.py" if markup is MARKUP_ALIAS else "pkg/markup.py"
    root = _observed(tmp_path, {"pkg/__init__.py": "", "pkg/style.py": style, "pkg/markup.py": markup}, TESTS, 6)
    lines = {test: entry.lines or {} for test, entry in parse_depmap((tmp_path / "map.json").read_text(), "m").tests.items()}
    str_body = range(style.splitlines().index("    def __str__(self):") + 2, style.splitlines().index(
        "        return self._definition") + 2)
    source = style if markup is MARKUP_ALIAS else markup
    normalize_line = next(n for n, line in enumerate(source.splitlines(), 1) if "def normalize(" in line) + 2
    for test in ("tests/test_b.py", "tests/test_p.py"):  # the pattern itself, as recorded
        assert not set(str_body) & lines[test].get("pkg/style.py", set()), (test, lines[test])
    assert normalize_line not in lines["tests/test_b.py"].get(pkg_file, ())  # answered from the cache
    assert normalize_line in lines["tests/test_p.py"][pkg_file]  # entered, for the theme's name only
    selected, _ = _plan(root, {"pkg/style.py": style.replace('words.append("bold")', 'words.append("strong")')})
    failing = _failing_alone(root, TESTS)
    assert failing == {"tests/test_a.py::test_a_render", "tests/test_a.py::test_a_default",
                       "tests/test_b.py::test_b_render", "tests/test_p.py::test_p_render",
                       "tests/test_m.py::test_m_default"}, failing
    assert sorted(selected) == ["tests/test_a.py", "tests/test_b.py", "tests/test_m.py", "tests/test_p.py"], selected
    for test in ("tests/test_b.py", "tests/test_p.py"):
        why = selected[test]["why"]
        assert "normalize" in why and "Style.__str__()" in why, why
    why = selected["tests/test_p.py"]["why"]  # it entered normalize: only its cache explains the rest
    assert cached in why and "kept across calls" in why, why
    chosen = {n for test, s in selected.items() for n in (s["node_ids"] or [test])}
    assert all(n in chosen or n.split("::")[0] in chosen for n in failing), selected


class _Recorder:
    """Records each special method Python calls on it (the oracle for `implicit_dunders`)."""

    def __init__(self, calls: list[str]):
        self.calls = calls

    def _note(name):  # noqa: N805: a factory run in the class body
        def method(self, *args):
            self.calls.append(name)
            return {"__str__": "s", "__repr__": "r", "__format__": "f", "__hash__": 1, "__len__": 1,
                    "__bool__": True, "__iter__": iter(()), "__index__": 1, "__int__": 1, "__float__": 1.0,
                    "__enter__": self, "__exit__": False, "__contains__": True, "__eq__": True,
                    "__lt__": True}.get(name, self)
        return method

    for _name in ("__str__", "__repr__", "__format__", "__hash__", "__len__", "__bool__", "__iter__", "__getitem__",
                  "__setitem__", "__delitem__", "__add__", "__radd__", "__iadd__", "__sub__", "__mod__", "__neg__",
                  "__invert__", "__enter__", "__exit__", "__contains__", "__eq__", "__lt__", "__index__",
                  "__int__", "__float__", "__abs__"):
        locals()[_name] = _note(_name)
    del _name


@pytest.mark.parametrize("code", [
    "str(x)", "repr(x)", "format(x, '')", "f'{x}'", "f'{x!r}'", "f'{x!s}'", "'%s' % (x,)", "'{}'.format(x)",
    "hash(x)", "len(x)", "bool(x)", "not x", "x + 1", "1 + x", "y = x; y += 1", "x - 1", "-x", "~x", "x[0]",
    "x[0] = 1", "del x[0]", "1 in x", "x == 1", "x < 1", "abs(x)", "int(x)", "float(x)",
    "with x: pass", "for _ in x: pass", "[_ for _ in x]", "list(x)",
])
def test_each_special_method_python_calls_is_one_the_table_names(code: str) -> None:
    """Python itself is the oracle: every special method it calls on ``x`` while running ``code``
    is among those `implicit_dunders` gives for the snippet's nodes."""
    calls: list[str] = []
    exec(code, {"x": _Recorder(calls)})
    assert calls, code  # the snippet must call something, or it checks nothing
    named = {name for node in ast.walk(ast.parse(code)) for name in implicit_dunders(node)}
    assert set(calls) <= named, (code, calls, named)
    assert named <= IMPLICIT


def test_plain_syntax_calls_no_special_method() -> None:
    for code in ("x", "x.attr", "f(x)", "x.method()", "lambda: 0"):
        assert not {n for node in ast.walk(ast.parse(code)) for n in implicit_dunders(node)}, code
