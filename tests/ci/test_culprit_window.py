"""How ``ci culprit`` reads a window from git, checked against git itself on a repository made here:
the window's candidates against a full first-parent walk, each candidate's diff read in one
``git diff-tree --stdin`` process (`diff_parts`) against one ``git diff PARENT SHA`` per commit,
the static prior's touched files against ``git diff --name-only PARENT SHA`` (a first-parent
merge included: a plain ``diff-tree MERGE`` lists nothing), and `carry_lines` against a brute
force that applies the hunks to a file of labelled lines."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from ci.commands.culprit_local import WindowError, diff_parts, touches_executed, window
from ci.commands.culprit_prior import window_diffs
from ci.registry import load_registry
from ci.selection.diff_hunks import Hunk, carry_lines, file_diffs, insertion_point
from tests.ci.culprit_support import REGISTRY
from tests.ci.depmap_support import GIT


def _git(root: Path, *args: str) -> str:
    return subprocess.run([*GIT, "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(root: Path, message: str) -> str:
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "--allow-empty", "-m", message)
    return _git(root, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """main: base, edit, rename, side-merge (the side branch changes calc.py), binary, mode,
    delete, empty, unicode path; a side commit off base that main never has on its first-parent
    line. Returns the root and the named commits."""
    root = tmp_path_factory.mktemp("window") / "repo"
    (root / "tests").mkdir(parents=True)
    _git(root, "init", "-q", "-b", "main")
    (root / "registry.yaml").write_text(REGISTRY)
    (root / "calc.py").write_text("".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(30)))
    (root / "util.py").write_text("VALUE = 1\n")
    (root / "tests" / "test_calc.py").write_text("import calc\n\ndef test_f():\n    assert calc.f1(1) == 2\n")
    (root / "notes.txt").write_text("a\nb\nc\n")
    shas = {"base": _commit(root, "base")}
    (root / "calc.py").write_text((root / "calc.py").read_text().replace("x + 3", "x + 3 + 0")
                                  .replace("x + 20", "x + 20 + 0") + "# end\n")
    shas["edit"] = _commit(root, "edit calc")
    _git(root, "mv", "notes.txt", "renamed notes.txt")
    shas["rename"] = _commit(root, "rename")
    _git(root, "checkout", "-q", "-b", "side", shas["base"])
    (root / "calc.py").write_text("# side\n" + (root / "calc.py").read_text())
    shas["side"] = _commit(root, "side edits calc")
    _git(root, "checkout", "-q", "main")
    _git(root, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    shas["merge"] = _git(root, "rev-parse", "HEAD")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)
    shas["binary"] = _commit(root, "binary")
    (root / "util.py").chmod(0o755)
    shas["mode"] = _commit(root, "mode")
    (root / "util.py").unlink()
    shas["delete"] = _commit(root, "delete util")
    shas["empty"] = _commit(root, "empty")
    (root / "données.py").write_text("X = 1\n")
    shas["unicode"] = _commit(root, "unicode path")
    return root, shas


def _line(root: Path) -> list[str]:
    return _git(root, "rev-list", "--first-parent", "main").split()[::-1]


def test_the_window_is_the_first_parent_line_after_good(repo) -> None:
    root, shas = repo
    line = _line(root)
    for i in range(len(line)):
        for j in range(i + 1, len(line)):
            good, bad, candidates = window(root, line[i][:10], line[j])
            assert (good, bad, candidates) == (line[i], line[j], line[i + 1:j + 1])


@pytest.mark.parametrize("good, bad", [
    ("edit", "edit"),  # no commit after good
    ("merge", "edit"),  # good after bad
    ("side", "unicode"),  # an ancestor of bad, but through the merge's second parent
])
def test_a_good_off_bads_first_parent_line_is_refused(repo, good, bad) -> None:
    root, shas = repo
    with pytest.raises(WindowError, match="is not an ancestor of --bad .* on its first-parent line"):
        window(root, shas[good], shas[bad])


def test_a_window_with_a_root_less_good_is_refused(repo, tmp_path) -> None:
    """A good of another history (an orphan commit in the same clone): the walk reaches bad's root."""
    root, shas = repo
    _git(root, "checkout", "-q", "--orphan", "other")
    orphan = _commit(root, "orphan")
    _git(root, "checkout", "-q", "-f", "main")
    with pytest.raises(WindowError, match="first-parent line"):
        window(root, orphan, shas["unicode"])


@pytest.mark.parametrize("paths", [(), ("calc.py",), ("calc.py", "util.py", "renamed notes.txt", "données.py")])
def test_one_process_reads_the_same_diffs_as_one_per_commit(repo, paths) -> None:
    root, shas = repo
    line = _line(root)
    good, candidates = line[0], line[1:]
    options = ("-U0", "--no-renames", "--no-color", "--no-ext-diff")
    one_each = [_git(root, "-c", "core.quotepath=off", "diff", *options, parent, sha, "--", *paths)
                for parent, sha in zip(line, candidates)]
    together = diff_parts(root, good, candidates, ("-p", *options), paths)
    assert [part.strip() for part in together] == one_each
    assert window_diffs(root, good, candidates, paths) == [file_diffs(text) for text in one_each]
    merge = candidates.index(shas["merge"])
    assert "# side" in one_each[merge]  # the merge's diff is its side branch's
    assert one_each[candidates.index(shas["empty"])] == ""


def test_the_static_prior_reads_a_merge_against_its_first_parent(repo) -> None:
    root, shas = repo
    line = _line(root)
    registry = load_registry(root / "registry.yaml")
    touched = touches_executed(root, registry, "tests/test_calc.py", line[1:])
    expected = [bool({"calc.py", "tests/test_calc.py"}
                     & set(_git(root, "-c", "core.quotepath=off", "diff", "--name-only", parent, sha).splitlines()))
                for parent, sha in zip(line, line[1:])]
    assert touched == expected
    assert touched[line[1:].index(shas["merge"])]  # the side branch changed calc.py
    assert touched.count(True) == 2  # edit and the merge


def test_git_failing_is_a_window_error(repo, tmp_path) -> None:
    root, _ = repo
    with pytest.raises(WindowError, match="git diff-tree --stdin"):
        diff_parts(root, "0" * 40, ["1" * 40], ("-p",))
    with pytest.raises(WindowError, match="git diff-tree --stdin"):
        diff_parts(tmp_path, "0" * 40, ["1" * 40], ("-p",))  # not a repository


def _brute_carry(n: int, hunks: list[Hunk], line: int) -> set[int]:
    """Where old line ``line`` of an ``n``-line file lands: the new file built by applying the
    hunks to labelled lines; a replaced line is its hunk's new lines, a removed one the insertion
    point."""
    new: list[tuple[str, int]] = []  # (kind, old line or hunk index)
    at = 1
    for k, h in enumerate(hunks):
        keep_to = h.old_start if h.old_count == 0 else h.old_start - 1
        new += [("old", i) for i in range(at, keep_to + 1)]
        new += [("hunk", k)] * h.new_count
        at = keep_to + h.old_count + 1
    new += [("old", i) for i in range(at, n + 1)]
    for k, h in enumerate(hunks):
        if h.old_count and h.old_start <= line < h.old_start + h.old_count:
            if h.new_count:
                return {i for i, kind in enumerate(new, 1) if kind == ("hunk", k)}
            return set(insertion_point(h.new_start))
    return {new.index(("old", line)) + 1}


def _random_hunks(rng: random.Random, n: int) -> list[Hunk]:
    """Hunks of an ``n``-line file numbered as ``git diff -U0`` numbers them: a pure insertion
    after old line s is ``-s,0 +t,a`` with t its first new line; a pure deletion's new start is
    the new line before it; at least one unchanged line between two hunks (else git joins them)."""
    hunks, pos, shift = [], 0, 0  # pos: the last old line a hunk reached
    while True:
        start = pos + rng.randint(1 if not hunks else 2, 6)
        removed = rng.choice([0, 0, 1, 2, 4])
        if start + removed - 1 > n or (not removed and start - 1 > n):
            return hunks
        if removed:
            added = rng.choice([0, 1, 3])
            hunks.append(Hunk(start, removed, start + shift if added else start - 1 + shift, added))
            pos = start + removed - 1
        else:
            added = rng.choice([1, 2, 5])
            hunks.append(Hunk(start - 1, 0, start + shift, added))  # after old line start - 1
            pos = start - 1
        shift += added - removed


def test_carry_lines_against_applying_the_hunks() -> None:
    rng = random.Random(7)
    checked = 0
    for _ in range(400):
        n = rng.randint(1, 60)
        hunks = _random_hunks(rng, n)
        for line in range(1, n + 1):
            assert carry_lines({line}, hunks) == _brute_carry(n, hunks, line), (n, hunks, line)
            checked += 1
        everything = set().union(*(_brute_carry(n, hunks, line) for line in range(1, n + 1)))
        assert carry_lines(range(1, n + 1), hunks) == everything
    assert checked > 5000


def test_carry_lines_by_hand() -> None:
    """Hunks given out of git's order are read in it (the same lines)."""
    hunks = [Hunk(3, 2, 3, 1), Hunk(10, 0, 10, 2), Hunk(20, 1, 20, 0)]  # as git numbers them
    lines = set(range(1, 30))
    assert carry_lines(lines, hunks) == carry_lines(lines, hunks[::-1])
    assert carry_lines({2}, hunks) == {2}
    assert carry_lines({3}, hunks) == carry_lines({4}, hunks) == {3}  # replaced: the hunk's one new line
    assert carry_lines({10}, hunks) == {9}  # before the insertion after it, after the 1-line loss
    assert carry_lines({11}, hunks) == {12}  # after the 1-line loss and the 2-line insertion
    assert carry_lines({20}, hunks) == {20, 21}  # removed: the new lines around where it was
    assert carry_lines({25}, hunks) == {25}
