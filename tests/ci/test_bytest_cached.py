"""A change inside a function that keeps results across calls (issue #46, docs/depmaps.md "A cached
function"): `ci observe --by-test` records a tiny committed project in a real pytest where later
test files are answered from an earlier one's cache; `ci plan` must select every file and id that
ran the function's body or a call of it, checked against pytest run on each file alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ci.selection.depmap_format import parse_depmap
from tests.ci.depmap_support import clean_env, git, write_project
from tests.ci.test_bytest import PYTEST, _plan


LRU_STYLES = """\
from functools import lru_cache


@lru_cache(maxsize=None)
def parse(text):
    words = text.split()
    if "on" in words:
        return ("bg", words[-1])
    return ("fg", words[0])
"""
MEMO_STYLES = """\
_MEMO = {}


def parse(text):
    if text in _MEMO:
        return _MEMO[text]
    words = text.split()
    if "on" in words:
        found = ("bg", words[-1])
    else:
        found = ("fg", words[0])
    _MEMO[text] = found
    return found
"""
TEST_A = """\
from pkg.styles import parse


def test_a_fg():
    assert parse("red") == ("fg", "red")


def test_a_bg():
    assert parse("red on blue") == ("bg", "blue")
"""
TEST_B = TEST_A.replace("test_a_", "test_b_").replace('"red")', '"green")').replace('"fg", "red"', '"fg", "green"')
TEST_C = """\
from pkg.colors import parse as parse_color
from pkg.styles import parse


def test_c_bg():
    assert parse_color(" blue ") == "blue"
    assert parse("red on blue") == ("bg", "blue")
"""


def _observed(tmp_path: Path, files: dict[str, str], tests: dict[str, str], passed: int) -> Path:
    """The committed project ``files`` + ``tests``, recorded with `ci observe --by-test` into
    ``tmp_path/map.json`` (one pytest process, the files in order); its root."""
    root = tmp_path / "project"
    write_project(root, {**files, **tests})
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    proc = subprocess.run([sys.executable, "-m", "ci", "observe", "--by-test", "--tier", "cpu", "--out",
                           str(tmp_path / "map.json"), "--", *PYTEST, *tests],
                          cwd=root, env=clean_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and f"{passed} passed" in proc.stdout, proc.stdout + proc.stderr
    return root


def _failing_alone(root: Path, tests: dict[str, str]) -> set[str]:
    """The ids that fail with each test file run alone (pytest on the checked-out branch: the oracle)."""
    failing = set()
    for test in tests:
        alone = subprocess.run([*PYTEST, "-rf", test], cwd=root, env=clean_env(), capture_output=True, text=True,
                               timeout=120)
        failing |= {line.split()[1] for line in alone.stdout.splitlines() if line.startswith("FAILED ")}
    return failing


@pytest.mark.parametrize("styles, edit", [
    (LRU_STYLES, ('return ("bg", words[-1])', 'return ("bg", words[0])')),
    (MEMO_STYLES, ('found = ("bg", words[-1])', 'found = ("bg", words[0])')),
], ids=["lru_cache", "module-level memo"])
def test_a_change_in_a_cached_function_selects_every_id_that_called_it(tmp_path: Path, styles: str,
                                                                       edit: tuple[str, str]) -> None:
    """One process runs test_a.py, test_b.py, test_c.py: parse("red on blue") of test_b_bg and
    test_c_bg is answered from test_a_bg's cache, test_b_fg runs the body but not the "on" branch,
    and test_c.py only calls it (the lru_cache'd body never runs; another parse() does, so the walk's
    "entered no function of that name" cannot tell). Run alone on the changed branch (pytest,
    the oracle), every "bg" id fails; the plan must select the three files and, of each, every id
    that called parse()."""
    tests = {"tests/test_a.py": TEST_A, "tests/test_b.py": TEST_B, "tests/test_c.py": TEST_C}
    root = _observed(tmp_path, {"pkg/__init__.py": "", "pkg/styles.py": styles,
                                "pkg/colors.py": "def parse(text):\n    return text.strip()\n"}, tests, 5)
    b_lines = parse_depmap((tmp_path / "map.json").read_text(), "m").tests["tests/test_b.py"].lines or {}
    bg_line = next(n for n, line in enumerate(styles.splitlines(), 1) if edit[0] in line)
    assert bg_line not in b_lines.get("pkg/styles.py", frozenset()), b_lines  # test_b.py never ran the "bg" line
    selected, _ = _plan(root, {"pkg/styles.py": styles.replace(*edit)})
    failing = _failing_alone(root, tests)
    assert failing == {f"{test}::test_{test[-4]}_bg" for test in tests}, failing
    assert sorted(selected) == sorted(tests), selected
    for test, chosen in selected.items():
        kinds = ("bg",) if test.endswith("_c.py") else ("fg", "bg")
        assert chosen["node_ids"] == sorted(f"{test}::test_{test[-4]}_{kind}" for kind in kinds), chosen
    assert "kept across calls" in selected["tests/test_b.py"]["why"], selected["tests/test_b.py"]


CLASS_STYLES = """\
from functools import lru_cache

from pkg.colors import Color


class Style:
    @classmethod
    @lru_cache(maxsize=None)
    def parse(cls, text):
        words = text.split()
        if "on" in words:
            return ("bg", words[-1])
        return ("fg", words[0])


class Fancy(Style):
    pass


def make_color(text):
    return Color.parse(text)


DEFAULT = make_color(" red ")
"""
CLASS_COLORS = """\
from functools import lru_cache


class Color:
    @classmethod
    @lru_cache(maxsize=None)
    def parse(cls, text):
        return text.strip()
"""
CLASS_TEST_A = """\
from pkg.styles import Fancy, Style


def test_a_fg():
    assert Style.parse("red") == ("fg", "red")


def test_a_bg():
    assert Fancy.parse("red on blue") == ("bg", "blue")
"""
CLASS_TEST_B = """\
from pkg.styles import Fancy, make_color


def test_b_bg():
    assert Fancy.parse("red on blue") == ("bg", "blue")


def test_b_color():
    assert make_color(" blue ") == "blue"
"""


def test_a_cached_method_is_matched_by_its_class_not_by_every_method_of_its_name(tmp_path: Path) -> None:
    """`Style.parse` is cached; `Color.parse` (another class's own method) runs at import through
    `make_color`. test_b_bg is answered from test_a_bg's cache through `Fancy`, a subclass that
    does not define `parse`: run alone on the changed branch (the oracle), both bg ids fail. The plan
    must keep them (a match by class that drops `Fancy.parse` loses test_b_bg), and must not take
    `Color.parse`, run outside any id, for a call of `Style.parse` (that ran both files whole)."""
    tests = {"tests/test_a.py": CLASS_TEST_A, "tests/test_b.py": CLASS_TEST_B}
    root = _observed(tmp_path, {"pkg/__init__.py": "", "pkg/styles.py": CLASS_STYLES, "pkg/colors.py": CLASS_COLORS},
                     tests, 4)
    selected, _ = _plan(root, {"pkg/styles.py": CLASS_STYLES.replace('("bg", words[-1])', '("bg", words[0])')})
    failing = _failing_alone(root, tests)
    assert failing == {"tests/test_a.py::test_a_bg", "tests/test_b.py::test_b_bg"}, failing
    chosen = {n for test, s in selected.items() for n in (s["node_ids"] or [test])}
    assert all(n in chosen or n.split("::")[0] in chosen for n in failing), selected  # recall
    assert selected["tests/test_b.py"]["node_ids"] == ["tests/test_b.py::test_b_bg"], selected["tests/test_b.py"]
    assert selected["tests/test_a.py"]["node_ids"] == sorted(f"tests/test_a.py::test_a_{k}" for k in ("bg", "fg"))


IMPORT_STYLES = LRU_STYLES + """

RAW = {RAW}
DEFAULTS = {{name: value if isinstance(value, tuple) else parse(value) for name, value in RAW.items()}}
"""
IMPORT_TEST_B = """\
from pkg.styles import DEFAULTS, parse


def test_b_bg():
    assert parse("red on blue") == ("bg", "blue")


def test_b_banner():
    assert DEFAULTS.get("banner", ("bg", "blue")) == ("bg", "blue")


def test_b_plain():
    assert DEFAULTS["plain"] == ("fg", "red")
"""


@pytest.mark.parametrize("raw, failing, b_ids", [
    ('{"plain": ("fg", "red")}', {"test_a_bg", "test_b_bg"}, ["tests/test_b.py::test_b_bg"]),
    ('{"plain": ("fg", "red"), "banner": "red on blue"}', {"test_a_bg", "test_b_bg", "test_b_banner"}, None),
], ids=["lazy call not made at import", "lazy call made at import"])
def test_a_lazy_call_at_import_counts_only_when_the_cached_body_ran_there(tmp_path: Path, raw: str,
                                                                          failing: set[str], b_ids) -> None:
    """``DEFAULTS`` is built at import, calling the cached parse() only for a value that is no
    tuple. Without one, no call was made before any test: the file is narrowed to the ids that
    called parse() (test_b_bg, answered from test_a_bg's cache). With one (the body ran at import),
    test_b_banner reads its import-time result without calling parse(): run alone on the changed
    branch it fails, so test_b.py runs whole."""
    tests = {"tests/test_a.py": TEST_A, "tests/test_b.py": IMPORT_TEST_B}
    styles = IMPORT_STYLES.format(RAW=raw)
    root = _observed(tmp_path, {"pkg/__init__.py": "", "pkg/styles.py": styles}, tests, 5)
    selected, _ = _plan(root, {"pkg/styles.py": styles.replace('("bg", words[-1])', '("bg", words[0])')})
    found = _failing_alone(root, tests)
    assert {n.split("::")[1] for n in found} == failing, found
    chosen = {n for test, s in selected.items() for n in (s["node_ids"] or [test])}
    assert all(n in chosen or n.split("::")[0] in chosen for n in found), selected  # recall
    assert selected["tests/test_b.py"]["node_ids"] == b_ids, selected["tests/test_b.py"]
