"""``bench mutation --flake-runs``: a failing (mutant, file) pair a flake broke is told from one
the mutant broke (`bench._mutation_flakes`), on a tiny tree whose flaky test is driven by a
counter file it reads, so its failures are known in advance; real pytest runs give the counts."""

from __future__ import annotations

import json
import sys
from itertools import combinations
from math import comb
from pathlib import Path

import pytest

from bench._mutation_flakes import ALPHA, FailCounts, flake_check, judge, mutant_broke
from bench._mutation_gen import Mutant, unified_diff
from bench._mutation_quick import commit_files
from bench._mutation_report import score
from bench._mutation_store import MutantResult
from ci.history.runners import fisher_greater

CALC = "LIMIT = 10\n\n\ndef double(x):\n    return 2 * x\n"
# fails on every third run: the counter file is the only source of its flakiness
FLAKY = (
    "import os\nfrom pathlib import Path\n\nimport calc\n\n\n"
    "def test_sometimes():\n"
    "    counter = Path(os.environ['FLAKE_COUNTER'])\n"
    "    n = int(counter.read_text()) + 1\n"
    "    counter.write_text(str(n))\n"
    "    assert calc.LIMIT == 10\n"
    "    assert n % 3 != 0\n\n\n"
    "def test_steady():\n    assert True\n")
FILES = {
    "pyproject.toml": '[tool.pytest.ini_options]\ntestpaths = ["tests"]\npythonpath = ["src"]\n',
    "src/calc.py": CALC,
    "tests/test_calc.py": "import calc\n\n\ndef test_double():\n    assert calc.double(3) == 6\n",
    "tests/test_flaky.py": FLAKY,
}


def _tree(root: Path) -> Path:
    commit_files(root, FILES)
    return root


def _mutant(ident: str, before: str, after: str) -> Mutant:
    source = CALC.replace(before, after)
    line = next(i for i, text in enumerate(CALC.splitlines(), 1) if before in text)
    return Mutant(ident, "src/calc.py", line, "constant", unified_diff("src/calc.py", CALC, source), source)


def _brute_p(mutated: int, runs: int, unmutated: int, other_runs: int) -> float:
    """The one-sided Fisher p by enumerating every way the failures could fall among the runs."""
    total, bad = runs + other_runs, mutated + unmutated
    hits = sum(1 for chosen in combinations(range(total), bad) if sum(1 for i in chosen if i < runs) >= mutated)
    return hits / comb(total, bad)


@pytest.mark.parametrize(("unmutated", "base_runs", "mutated", "runs", "broke"), [
    (0, 6, 0, 6, False),   # failed nowhere in the reruns
    (0, 6, 1, 6, True),    # never fails unmutated: no flake evidence, the mutant broke it
    (2, 6, 2, 6, False),   # the same rate: a flake
    (2, 6, 4, 6, False),   # more often, but not significantly with 6 runs each way
    (2, 6, 6, 6, True),    # every run under the mutant: p = 28/924
    (3, 10, 10, 10, True),
    (3, 10, 1, 3, False),
])
def test_the_rule_against_a_brute_force_fisher(unmutated: int, base_runs: int, mutated: int, runs: int,
                                               broke: bool) -> None:
    assert mutant_broke(unmutated, base_runs, mutated, runs) is broke
    if unmutated and mutated:
        p = _brute_p(mutated, runs, unmutated, base_runs)
        assert fisher_greater(mutated, runs, unmutated, base_runs) == pytest.approx(p)
        assert (p < ALPHA) is broke


def test_judge_needs_every_failing_test_to_fail_unmutated_too() -> None:
    base = FailCounts(6, {"t.py::C::a": 2})
    both = FailCounts(6, {"t.py::C::a": 2, "t.py::C::b": 1})
    assert judge("m", "t.py", base, FailCounts(6, {"t.py::C::a": 2})).flake
    assert not judge("m", "t.py", base, both).flake  # b never failed unmutated
    assert not judge("m", "t.py", FailCounts(6), None).flake  # the file never failed unmutated
    assert judge("m", "t.py", base, FailCounts(6)).flake  # nothing failed in the reruns


def test_flake_pairs_are_counted_apart_from_recall_not_dropped() -> None:
    mutant = _mutant("m1", "2 * x", "3 * x")
    result = MutantResult("m1", mutant.path, mutant.line, "constant", mutant.diff,
                          ("tests/test_calc.py", "tests/test_flaky.py"), 1.0, 1)
    universe = frozenset(FILES) - {"pyproject.toml", "src/calc.py"}
    selectors = {"calc only": lambda m: {"tests/test_calc.py"}}
    plain, = score(selectors, [mutant], {"m1": result}, universe, {})
    apart, = score(selectors, [mutant], {"m1": result}, universe, {}, [("m1", "tests/test_flaky.py")])
    assert (plain.selected_pairs, plain.failing_pairs, len(plain.misses)) == (1, 2, 1)
    assert (apart.selected_pairs, apart.failing_pairs, apart.misses) == (1, 1, [])
    assert (apart.flake_selected, apart.flake_pairs) == (0, 1)


def test_real_reruns_tell_the_mutant_from_the_flake(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "tree")
    counter = tmp_path / "counter"
    counter.write_text("0")
    doubled = _mutant("doubled", "2 * x", "3 * x")  # breaks test_calc; test_flaky failed by its schedule
    limit = _mutant("limit", "LIMIT = 10", "LIMIT = 11")  # breaks test_flaky on every run
    results = {m.id: MutantResult(m.id, m.path, m.line, m.operator, m.diff, failing, 1.0, 1)
               for m, failing in ((doubled, ("tests/test_calc.py", "tests/test_flaky.py")),
                                  (limit, ("tests/test_flaky.py",)))}
    work = tmp_path / "work"
    work.mkdir()
    verdicts = flake_check(sys.executable, tree, [doubled, limit], results, work, runs=6, workers=0, limit=120,
                           env={"FLAKE_COUNTER": str(counter)}, say=lambda _: None)
    by_pair = {(v.mutant, v.file): v for v in verdicts}
    assert set(by_pair) == {("doubled", "tests/test_calc.py"), ("doubled", "tests/test_flaky.py"),
                            ("limit", "tests/test_flaky.py")}
    assert not by_pair["doubled", "tests/test_calc.py"].flake  # never failed unmutated: not rerun
    flake = by_pair["doubled", "tests/test_flaky.py"]
    assert flake.flake
    evidence, = flake.evidence
    assert (evidence.test, evidence.unmutated, evidence.unmutated_runs, evidence.mutated, evidence.mutated_runs) == (
        "tests/test_flaky.py::tests.test_flaky::test_sometimes", 2, 6, 2, 6)
    assert "failed 2/6 unmutated, 2/6 under the mutant" in flake.describe()
    broken = by_pair["limit", "tests/test_flaky.py"]
    assert not broken.flake and broken.evidence[0].mutated == 6
    assert int(counter.read_text()) == 18  # 6 unmutated runs, 6 under each mutant
    kept = json.loads((work / "flakes.json").read_text())["counts"]
    assert set(kept["doubled"]["fails"]) == {"tests/test_flaky.py::tests.test_flaky::test_sometimes"}  # no test_calc rerun
    assert (tree / "src/calc.py").read_text() == CALC  # each mutant restored
    again = flake_check(sys.executable, tree, [doubled, limit], results, work, runs=6, workers=0, limit=120,
                        env={"FLAKE_COUNTER": str(counter)}, say=lambda _: None)
    assert again == verdicts and int(counter.read_text()) == 18  # kept counts reused, nothing rerun
