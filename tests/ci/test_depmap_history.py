"""``bench depmap``'s replay of past commits on the map's commit (`bench._depmap_history`): the
lines a commit touched, carried through later commits' hunks to the map's line numbers.

The oracle is git and a hand-built history: a file whose lines are named after their numbers in
the commit under test, edited later in known ways, so the answer at the last commit is known by
hand; and, for every line no later hunk touched, git's own text of both commits (the line must
read the same at its carried number).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench._depmap_history import carry_lines, commit_change, function_scopes, new_side_lines, with_commit_names
from ci.selection.diff_hunks import FileDiff, Hunk, file_diffs, touched_old_lines
from ci.selection.edit_scopes import Scope

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", "-c", "core.quotepath=off"]


def _git(root: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=root, check=True, capture_output=True, text=True).stdout


def _commit(root: Path, files: dict[str, str | None], message: str) -> str:
    for rel, text in files.items():
        if text is None:
            (root / rel).unlink()
        else:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "--allow-empty", "-m", message)
    return _git(root, "rev-parse", "HEAD").strip()


def _numbered(n: int, tag: str = "c") -> list[str]:
    return [f"{tag}{i}\n" for i in range(1, n + 1)]


@pytest.fixture
def history(tmp_path: Path) -> tuple[Path, str, str]:
    """base -> C (edits a.txt: replaces 4, deletes 8, inserts after 12; adds new.txt, deletes
    old.txt, edits kept.txt, gone.txt) -> later commits -> HEAD. Returns (root, C, HEAD)."""
    root = tmp_path
    _git(root, "init", "-q", "-b", "main")
    base = _numbered(20, "b")
    _commit(root, {"a.txt": "".join(base), "old.txt": "x\n", "kept.txt": "k1\nk2\nk3\n", "gone.txt": "g1\ng2\n"},
             "base")
    at_c = base[:3] + ["C4\n"] + base[4:7] + base[8:12] + ["Cnew1\n", "Cnew2\n"] + base[12:]
    c = _commit(root, {"a.txt": "".join(at_c), "new.txt": "n1\nn2\n", "old.txt": None, "kept.txt": "k1\nK2\nk3\n",
                       "gone.txt": "g1\nG2\n"}, "C")
    # C's new side of a.txt: 4 (replaced), 7 and 8 (deletion of b8 after C-line 7), 12 and 13 (inserted)
    head = list(at_c)
    head[0:0] = ["h0a\n", "h0b\n"]      # two lines inserted at the top: everything shifts by 2
    head[2 + 12:2 + 13] = ["H13a\n", "H13b\n"]  # C-line 13 (Cnew2) replaced later by two lines
    del head[2 + 16 + 1:2 + 18 + 1]     # C-lines 17, 18 deleted later (untouched by C)
    _commit(root, {"a.txt": "".join(head), "gone.txt": None}, "later 1")
    head2 = head[:4] + ["h5 inserted\n"] + head[4:]  # after HEAD1-line 4 (C-line 2)
    h = _commit(root, {"a.txt": "".join(head2)}, "later 2")
    return root, c, h


def test_a_commits_lines_land_where_git_puts_them_at_head(history: tuple[Path, str, str]) -> None:
    root, c, head = history
    change = commit_change(root, c, head)
    assert change is not None
    assert change.changed == ("a.txt", "gone.txt", "kept.txt", "new.txt", "old.txt")
    # by hand: C-line 4 -> +2 (top) +1 (h5 inserted after C-line 2) = 7; the deletion point 7, 8
    # -> 10, 11; inserted 12 -> 15; inserted 13 was replaced later: that hunk's new range, 16 and 17
    assert change.lines["a.txt"] == {7, 10, 11, 15, 16, 17}
    head_lines = (root / "a.txt").read_text().splitlines()
    assert [head_lines[n - 1] for n in (7, 15, 16, 17)] == ["C4", "Cnew1", "H13a", "H13b"]
    assert change.lines["kept.txt"] == {2}       # untouched since C: C's own numbers
    assert change.lines["new.txt"] == {1, 2}     # added by C: all its lines
    assert change.lines["old.txt"] is None       # deleted by C: judged by file
    assert change.lines["gone.txt"] is None      # deleted since C: judged by file


def test_every_line_outside_later_hunks_reads_the_same_at_its_carried_number(history: tuple[Path, str, str]) -> None:
    root, c, head = history
    at_c = _git(root, "show", f"{c}:a.txt").splitlines()
    at_head = _git(root, "show", f"{head}:a.txt").splitlines()
    parts = file_diffs(_git(root, "diff", "-U0", "--no-renames", c, head, "--", "a.txt"))
    (part,) = parts
    assert part.hunks is not None
    later = {n for h in part.hunks for n in range(h.old_start, h.old_start + h.old_count)}
    assert later == {13, 17, 18}
    for line in range(1, len(at_c) + 1):
        (carried,) = carry_lines([line], part.hunks) if line not in later else (None,)
        if carried is not None:
            assert at_head[carried - 1] == at_c[line - 1], line
    assert carry_lines([17], part.hunks) == {20, 21}  # removed later: its insertion point at HEAD
    assert carry_lines([], part.hunks) == frozenset()


@pytest.mark.parametrize("hunks, lines, expected", [
    ((), [1, 5], {1, 5}),                                   # no later change: same numbers
    ((Hunk(3, 0, 4, 2),), [3, 4], {3, 6}),                  # insertion after line 3: 3 stays, 4 moves
    ((Hunk(2, 2, 1, 0),), [1, 2, 3, 4], {1, 2}),            # lines 2-3 deleted: insertion point 1, 2; 4 -> 2
    ((Hunk(1, 1, 0, 0),), [1, 2], {1}),                     # the top line deleted: insertion point 1 only
    ((Hunk(2, 1, 2, 3), Hunk(6, 0, 9, 1)), [2, 5, 7], {2, 3, 4, 7, 10}),  # a hunk grows; one inserts
])
def test_carry_lines_hand_picked(hunks: tuple[Hunk, ...], lines: list[int], expected: set[int]) -> None:
    assert carry_lines(lines, hunks) == expected


def test_new_side_of_a_pure_deletion_is_its_insertion_point(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    first = _commit(tmp_path, {"f.txt": "".join(_numbered(6))}, "one")
    second = _commit(tmp_path, {"f.txt": "".join(_numbered(6)[1:3] + _numbered(6)[4:])}, "two")  # drop 1, 4
    (part,) = file_diffs(_git(tmp_path, "diff", "-U0", first, second))
    assert new_side_lines(part) == {1, 2, 3}  # deletion at the top: 1; of old line 4 after new line 2: 2, 3
    assert new_side_lines(FileDiff("f.txt", None, ())) is None       # deleted
    assert new_side_lines(FileDiff("f.bin", "f.bin", None)) is None  # binary


def test_a_removed_line_reading_like_a_header_stays_content(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q")
    first = _commit(tmp_path, {"q.sql": "select 1;\n-- a/x comment\n", "z.txt": "a\n"}, "one")
    second = _commit(tmp_path, {"q.sql": "select 1;\n++ b/y\n", "z.txt": "b\n"}, "two")
    diff = _git(tmp_path, "diff", "-U0", first, second)
    assert "\n--- a/x comment\n" in diff and "\n+++ b/y\n" in diff  # the trap: content that reads as headers
    assert [(p.old_path, p.new_path, p.hunks) for p in file_diffs(diff)] == [
        ("q.sql", "q.sql", (Hunk(2, 1, 2, 1),)), ("z.txt", "z.txt", (Hunk(1, 1, 1, 1),))]
    assert touched_old_lines(diff) == {"q.sql": {2}, "z.txt": {1}}


def test_a_root_commit_or_unknown_commit_is_left_out(history: tuple[Path, str, str]) -> None:
    root, _, head = history
    first = _git(root, "rev-list", "--max-parents=0", "HEAD").strip()
    assert commit_change(root, first, head) is None
    assert commit_change(root, "f" * 40, head) is None


def test_a_replayed_commit_keeps_the_names_it_redefined(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q", "-b", "main")
    _commit(tmp_path, {"m.py": "X = 1\nY = 2\n\n\ndef f():\n    return X\n"}, "base")
    constant = _commit(tmp_path, {"m.py": "X = 3\nY = 2\n\n\ndef f():\n    return X\n"}, "a constant")
    call = _commit(tmp_path, {"m.py": "X = int(3)\nY = 2\n\n\ndef f():\n    return X\n"}, "a call")
    module, body = Scope("<module>", None, None, 1), Scope("f", 6, 6, 6)
    found = with_commit_names(tmp_path, constant, {"m.py": (module, body), "data.txt": None})
    assert found == {"m.py": (Scope("<module>", None, None, 1, names=frozenset({"X"})), body), "data.txt": None}
    assert with_commit_names(tmp_path, call, {"m.py": (module,)}) == {"m.py": (module,)}  # runs code at import


def test_function_scopes_are_each_body_once() -> None:
    source = textwrap.dedent("""\
        X = 1

        def f(a=X):
            def g():
                return 2
            return g()

        class C:
            def m(self):
                return 3

        @triton.jit
        def kern(p):
            p = 1
        """)
    assert [(s.name, s.first, s.last) for s in function_scopes(source)] == [("f", 4, 6), ("f.g", 5, 5), ("C.m", 10, 10)]
    assert function_scopes("def f(:\n") == ()


ROOT = Path(__file__).resolve().parents[2]


def _bench_depmap(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", "depmap", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_depmap_selection_alone_reads_a_given_map_and_names_a_bad_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "ci-depmap", "version": 2, "tests": {"t.py": {"executed": 3}}}')
    result = _bench_depmap(f"--map={bad}")
    assert result.returncode == 1 and f"bench depmap: --map={bad}: {bad}: not a ci-depmap" in result.stdout, result
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    good = tmp_path / "good.json"
    # a copy of the tracked files without .git (the selection safety test's) has no commit to name
    sha = f', "sha": "{head.stdout.strip()}"' if head.returncode == 0 else ', "sha": null'
    good.write_text('{"format": "ci-depmap", "version": 2, "tier": "cpu", "recorded_at": "2026-12-04T00:00:00+00:00"'
                    + sha + ', "shared": {}, "tests": {"tests/ci/test_shard.py": {"complete": true, "items": 1, "ran": 1, '
                    '"executed": {"ci/selection/shard.py": "1-40"}, "opened": []}}}')
    result = _bench_depmap(f"--map={good}")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("commit "))
    assert lines[header].split() == ["commit", "changed", "graph", "map", "graph,", "no", "run-all", "map,", "no",
                                     "run-all", "x", "graph", "est", "(no", "run-all)"]
    assert any(line.startswith("all ") for line in lines[header:])
