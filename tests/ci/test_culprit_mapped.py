"""``ci culprit`` with the prior from a real observed map, end to end: a small git repository made
here, its test observed by ``ci observe`` running pytest at the good commit (the map a nightly's
last pass leaves), then a real ``--runner local`` search over seven later commits.

The oracle is the construction, checked against the map itself: the test calls ``calc.add`` only,
so the map must name add's body and neither sub's nor mul's (asserted before the search); the
commits change, in turn, an unexecuted file, sub's body, two comment lines between two blank
lines above add (every later line moves: without carrying the map's lines to each commit's
parent, the culprit's change would miss add's body), add's body (the culprit: the test fails from
there on), an unexecuted file, mul's body and a note. Every run the search made is checked
against the truth: it failed exactly at the culprit and after."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ci.culprit_support import REGISTRY
from tests.ci.depmap_support import GIT, clean_env

CALC = '''\
"""Arithmetic."""

LIMIT = 100


def add(a, b):
    return a + b


# helpers below

# (kept apart)


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b
'''
TEST = "import calc\n\n\ndef test_add():\n    assert calc.add(2, 3) == 5\n"
# each later commit's edit: (file, old text, new text); None old: write the new text
EDITS = [
    ("other.py", None, "X = 2\n"),  # 1: nothing the test executed
    ("calc.py", "return a - b", "return -(b - a)"),  # 2: sub's body, only a file it executed
    ("calc.py", "LIMIT = 100\n\n", "LIMIT = 100\n\n# one\n# two\n"),  # 3: between two blank lines, above add
    ("calc.py", "return a + b", "return a + b + 1"),  # 4: the culprit, add's body
    ("other.py", None, "X = 3\n"),  # 5: nothing executed
    ("calc.py", "return a * b", "return b * a"),  # 6: mul's body, moved by 3's insertion
    ("notes.txt", None, "bad\n"),  # 7 (--bad): nothing executed
]
CULPRIT = 4


def _git(root: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], Path]:
    """The repository, its commits 0 (good) to 7 (bad), and the map ``ci observe`` wrote at 0."""
    root = tmp_path_factory.mktemp("mapped") / "repo"
    (root / "tests").mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    (root / "registry.yaml").write_text(REGISTRY)
    (root / "calc.py").write_text(CALC)
    (root / "tests" / "test_calc.py").write_text(TEST)
    (root / "other.py").write_text("X = 1\n")
    (root / "notes.txt").write_text("good\n")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "commit 0")
    shas = [_git(root, "rev-parse", "HEAD")]
    depmap = root.parent / "map.json"
    env = {**clean_env(), "CI_HISTORY_STORE": str(root.parent / "none.sqlite")}
    done = subprocess.run([sys.executable, "-m", "ci", "observe", "--tier", "cpu", "--out", str(depmap), "--",
                           sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "tests"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    for i, (name, old, new) in enumerate(EDITS, 1):
        path = root / name
        if old is None:
            path.write_text(new)
        else:
            text = path.read_text()
            assert text.count(old) == 1, (name, old)
            path.write_text(text.replace(old, new))
        _git(root, "add", "-A")
        _git(root, "commit", "-q", "-m", f"commit {i}")
        shas.append(_git(root, "rev-parse", "HEAD"))
    return root, shas, depmap


def _line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_the_observed_map_names_what_the_test_ran(observed) -> None:
    root, shas, depmap = observed
    recorded = json.loads(depmap.read_text())
    assert recorded["sha"] == shas[0]
    entry = recorded["tests"]["tests/test_calc.py"]
    assert entry["complete"] and entry["ran"] == 1
    ran = {int(n) for part in entry["executed"]["calc.py"].split(",")
           for n in (range(int(part.split("-")[0]), int(part.split("-")[-1]) + 1))}
    assert _line_of(CALC, "return a + b") in ran  # add's body
    assert _line_of(CALC, "return a - b") not in ran and _line_of(CALC, "return a * b") not in ran
    assert not {_line_of(CALC, "LIMIT") + 1, _line_of(CALC, "LIMIT") + 2} & ran  # where 3 inserts
    assert "other.py" not in entry["executed"] and "notes.txt" not in entry["executed"]


def test_a_local_search_with_the_observed_prior_finds_the_culprit(observed, tmp_path) -> None:
    root, shas, depmap = observed
    state = tmp_path / "state.json"
    env = {**clean_env(), "CI_HISTORY_STORE": str(tmp_path / "none.sqlite")}
    done = subprocess.run([sys.executable, "-m", "ci", "culprit", "--tier", "cpu", "--test", "tests/test_calc.py",
                           "--good", shas[0], "--bad", shas[-1], "--flake-rate", "0.01", "--depmap", str(depmap),
                           "--state", str(state), "--runner", "local"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"prior from the observed map (map {depmap}): 1 candidate(s) change lines the test executed (weight 1), " \
           "3 only files it executed (0.1), 3 nothing it executed (0.02); the default weights (no found culprit " \
           "in the history)" in done.stdout
    assert f"culprit {shas[CULPRIT]} (commit {CULPRIT})" in done.stdout
    runs = json.loads(state.read_text())["runs"]
    assert runs, "no run recorded"
    for run in runs:
        index = shas.index(run["sha"])
        assert run["failed"] == (index >= CULPRIT), run  # the runner ran the real test at that commit
    # the verification, then both sides of the answer: no prior here reaches 0.99 without a failure
    # at the culprit and a pass at its parent (3 and 4 weigh 0.1 and 1, and 0.14 is left after 4)
    assert {0, len(EDITS), CULPRIT - 1, CULPRIT} <= {shas.index(run["sha"]) for run in runs}
