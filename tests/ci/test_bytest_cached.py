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
    root = tmp_path / "project"
    tests = {"tests/test_a.py": TEST_A, "tests/test_b.py": TEST_B, "tests/test_c.py": TEST_C}
    write_project(root, {"pkg/__init__.py": "", "pkg/styles.py": styles,
                         "pkg/colors.py": "def parse(text):\n    return text.strip()\n", **tests})
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    proc = subprocess.run([sys.executable, "-m", "ci", "observe", "--by-test", "--tier", "cpu", "--out",
                           str(tmp_path / "map.json"), "--", *PYTEST, *tests],
                          cwd=root, env=clean_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0 and "5 passed" in proc.stdout, proc.stdout + proc.stderr
    b_lines = parse_depmap((tmp_path / "map.json").read_text(), "m").tests["tests/test_b.py"].lines or {}
    bg_line = next(n for n, line in enumerate(styles.splitlines(), 1) if edit[0] in line)
    assert bg_line not in b_lines.get("pkg/styles.py", frozenset()), b_lines  # test_b.py never ran the "bg" line
    selected, _ = _plan(root, {"pkg/styles.py": styles.replace(*edit)})
    failing = set()
    for test in tests:
        alone = subprocess.run([*PYTEST, "-rf", test], cwd=root, env=clean_env(), capture_output=True, text=True,
                               timeout=120)
        failing |= {line.split()[1] for line in alone.stdout.splitlines() if line.startswith("FAILED ")}
    assert failing == {f"{test}::test_{test[-4]}_bg" for test in tests}, failing
    assert sorted(selected) == sorted(tests), selected
    for test, chosen in selected.items():
        kinds = ("bg",) if test.endswith("_c.py") else ("fg", "bg")
        assert chosen["node_ids"] == sorted(f"{test}::test_{test[-4]}_{kind}" for kind in kinds), chosen
    assert "kept across calls" in selected["tests/test_b.py"]["why"], selected["tests/test_b.py"]
