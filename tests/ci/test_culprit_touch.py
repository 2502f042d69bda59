"""`bench._culprit_touch` (the share of commits touching a test's import closure, which `bench
culprit`'s touched prior simulates) on a small real git repository made here, and the
simulator's draw of touching commits, and `bench culprit --where`'s tally of where runs go."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

from bench._culprit_sim import Breakage
from bench._culprit_touch import closure, observed, touched
from bench.culprit import Calibration, Where
from ci.culprit.model import CulpritResult, NoiseModel, Outcome, StopReason
from ci.selection.depmap_format import StoredTestMap, TestMap

FILES = {
    "src/pkg/__init__.py": "",
    "src/pkg/a.py": "from . import b\n",
    "src/pkg/b.py": "import os\n",
    "src/pkg/c.py": "x = 1\n",  # imported by nothing the test runs
    "tests/conftest.py": "from pkg.sub import d\n",
    "src/pkg/sub/__init__.py": "",
    "src/pkg/sub/d.py": "",
    "tests/test_a.py": "import pkg.a\n",
}
# Each later commit changes one path: touched or not.
CHANGES = [("src/pkg/b.py", True), ("README", False), ("src/pkg/c.py", False), ("src/pkg/sub/d.py", True),
           ("tests/test_a.py", True), ("docs/x.md", False)]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, message: str) -> None:
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message)


def test_closure_and_touched_commits(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for path, text in FILES.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _commit(repo, "base")
    for i, (path, _) in enumerate(CHANGES):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(f"# change {i}\n" + FILES.get(path, ""))
        _commit(repo, f"change {i}")
    git_dir = str(repo / ".git")
    executed = closure(git_dir, "HEAD", "src", "tests/test_a.py")
    assert executed == {"tests/test_a.py", "tests/conftest.py", "src/pkg/__init__.py", "src/pkg/a.py",
                        "src/pkg/b.py", "src/pkg/sub/__init__.py", "src/pkg/sub/d.py"}
    assert touched(git_dir, "HEAD", len(CHANGES), executed) == [t for _, t in CHANGES]
    # a map at HEAD: line 2 of b.py and of the test, each line 1 before its file's comment was
    # prepended; the changes that prepended them touch those lines, the rest nothing executed
    head = _git(repo, "rev-parse", "HEAD")
    stored = StoredTestMap(TestMap(frozenset({"src/pkg/b.py", "tests/test_a.py"}), ran=1,
                                   lines={"src/pkg/b.py": frozenset({2}), "tests/test_a.py": frozenset({2})}),
                           "map", "2026-12-07T00:00:00+00:00", sha=head)
    assert [int(t) for t in observed(git_dir, "HEAD", len(CHANGES), stored, set())] == [2, 0, 0, 0, 2, 0]


def test_the_culprit_always_touches() -> None:
    rng = random.Random(5)
    draws = [Breakage.draw(rng, 40, rng.randrange(40), 0.0, 0.3) for _ in range(50)]
    assert all(b.touches[b.culprit] for b in draws)
    others = [t for b in draws for i, t in enumerate(b.touches) if i != b.culprit]
    assert 0.25 < sum(others) / len(others) < 0.35


def test_observed_levels_follow_the_measured_shares() -> None:
    """Each other commit changes executed lines with the first share, only the test's files with
    the second; a commit changing executed lines is in the closure too; the culprit's level is
    the one asked."""
    rng = random.Random(7)
    draws = [Breakage.draw(rng, 40, rng.randrange(40), 0.0, 0.3, (0.2, 0.1), culprit_level=1) for _ in range(80)]
    assert all(b.levels[b.culprit] == 1 and b.touches[b.culprit] for b in draws)
    others = [(lv, t) for b in draws for i, (lv, t) in enumerate(zip(b.levels, b.touches)) if i != b.culprit]
    assert 0.17 < sum(lv == 2 for lv, _ in others) / len(others) < 0.23
    assert 0.08 < sum(lv == 1 for lv, _ in others) / len(others) < 0.12
    assert all(t for lv, t in others if lv == 2)


def test_culprit_where_splits_runs_at_the_mark_and_counts_reruns_by_place() -> None:
    """bench culprit --where: a fail at c_2 leaves c_1/c_2 at 1/2 each; the pass at c_1 (near noiseless)
    puts c_2 over the mark at run 2; the two runs after re-run the answer and its parent."""
    runs = (Outcome(1, True), Outcome(0, False), Outcome(1, True), Outcome(0, False), Outcome(3, True))
    where = Where()
    where.add([1.0] * 4, NoiseModel(0.0, 0.0), CulpritResult(1, 0.999, runs, StopReason.CONFIDENT))
    assert (where.runs, where.before_mark) == (5, 2)
    assert (where.again_answer, where.again_parent, where.again_other) == (1, 1, 0)
    assert where.stops == {"confident": 1}
    assert where.row("x")[1:4] == ["5.00", "2.00", "3.00"]


def test_culprit_calibration_buckets_each_state_by_its_top_and_counts_it_against_the_truth() -> None:
    """bench culprit --calibration: near-noiseless runs over 4 commits (c_0 of twice the prior
    weight), culprit c_1: the fail at c_1 leaves c_0 at 2/3 and c_1 at 1/3 (the top, c_0, wrong),
    the pass at c_0 puts c_1 at 1 (right); the stop is counted alone, at the search's probability."""
    runs = (Outcome(1, True), Outcome(0, False))
    calibration = Calibration()
    calibration.add([2.0, 1.0, 1.0, 1.0], NoiseModel(0.0, 0.0), CulpritResult(1, 0.999, runs, StopReason.CONFIDENT), 1)
    rows = {(kind, bucket): rest for _, kind, bucket, *rest in calibration.rows("b")}
    assert rows[("every step", "0.5-0.9")] == ["1", "0.6667", "0.0000", "1 / 0.3"]
    assert rows[("every step", "0.999-1")][:3] == ["1", "1.0000", "1.0000"]
    assert rows[("at the stop", "0.999-1")] == ["1", "0.9990", "1.0000", "0 / 0.0"]



def test_the_simulated_past_of_found_culprits() -> None:
    """`past_culprits`: windows of 2-128 with the culprit on executed lines, or off them (file only)
    at the asked share, the other commits at the observed shares; drawn from its own stream only
    (the same stream gives the same past; the measured breakages' stream is not read)."""
    from bench._culprit_sim import OBSERVED_SHARES, past_culprits

    past = past_culprits(random.Random(3), 2000)
    assert len(past) == 2000 and all(2 <= b.n <= 128 and b.levels[b.culprit] == 2 for b in past)
    others = [level for b in past for i, level in enumerate(b.levels) if i != b.culprit]
    assert abs(others.count(2) / len(others) - OBSERVED_SHARES[0]) < 0.01
    assert abs(others.count(1) / len(others) - OBSERVED_SHARES[1]) < 0.01
    off = past_culprits(random.Random(3), 2000, off_lines=0.1)
    share = sum(b.levels[b.culprit] == 1 for b in off) / len(off)
    assert 0.08 < share < 0.12 and {b.levels[b.culprit] for b in off} == {1, 2}
    assert past_culprits(random.Random(5), 7) == past_culprits(random.Random(5), 7)
