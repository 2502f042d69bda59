"""`ci.lint_gate` (which problems a change adds) and `ci.lint_baseline` (the baseline file's one
parser and writer), on hand-written problems whose answers are worked out here by hand."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from ci.lint_baseline import HEADER, BaselineError, format_baseline, parse_baseline, read_baseline, write_baseline
from ci.lint_gate import ProblemKey, gate, problem_key
from ci.registry import Problem

SEED = "'pkg.mod' has no name 'KVFP4QuantizeUtil'"


def i001(path: str, line: int, hint: str = "", name: str = "KVFP4QuantizeUtil") -> Problem:
    return Problem(path, line, 5, "I001", f"'pkg.mod' has no name '{name}'{hint}")


def keys(*problems: Problem) -> list[ProblemKey]:
    return [problem_key(p) for p in problems]


def test_a_problem_that_moved_lines_or_changed_its_hint_is_not_new() -> None:
    base = keys(i001("a.py", 10, " (did you mean 'NVFP4KVQuantizeUtil'?)"))
    result = gate([i001("a.py", 14, " (renamed to BlockFP4KVQuantizeUtil in 73e93be (#21954))")], base)
    assert (result.new, len(result.known), result.fixed) == ([], 1, [])


def test_a_second_copy_of_an_old_problem_is_new_and_it_is_the_later_one() -> None:
    base = keys(i001("a.py", 10))
    later, earlier = i001("a.py", 30), i001("a.py", 12)
    result = gate([later, earlier], base)
    assert (result.new, result.known, result.fixed) == ([later], [earlier], [])


def test_the_same_name_missing_from_another_module_or_file_is_new() -> None:
    base = keys(i001("a.py", 10))
    other_name = i001("a.py", 10, name="Other")
    other_file = i001("b.py", 10)
    other_module = Problem("a.py", 10, 5, "I001", "'pkg.other' has no name 'KVFP4QuantizeUtil'")
    result = gate([other_name, other_file, other_module], base)
    assert result.new == sorted([other_name, other_file, other_module],
                                key=lambda p: (p.path, p.line, p.col, p.code, p.message))
    assert result.fixed == [ProblemKey("I001", "a.py", SEED)]


def test_copies_fixed_are_counted_one_by_one() -> None:
    base = keys(i001("a.py", 3), i001("a.py", 9), i001("b.py", 1))
    result = gate([i001("a.py", 4)], base)
    assert result.known == [i001("a.py", 4)]
    assert result.fixed == [ProblemKey("I001", "a.py", SEED), ProblemKey("I001", "b.py", SEED)]


def test_a_file_the_change_renamed_keeps_its_old_problems_old() -> None:
    base = keys(i001("old/a.py", 10))
    moved = i001("new/a.py", 11)
    assert gate([moved], base, {"old/a.py": "new/a.py"}).new == []
    assert gate([moved], base).new == [moved]


def test_line_numbers_inside_a_message_are_not_part_of_the_key() -> None:
    before = Problem("registry.yaml", 40, 3, "R002", "duplicate key 'owner' in entry (first defined on line 38)")
    after = Problem("registry.yaml", 52, 3, "R002", "duplicate key 'owner' in entry (first defined on line 50)")
    assert problem_key(before) == problem_key(after)
    assert problem_key(before).subject == "duplicate key 'owner' in entry (first defined on line N)"


def test_a_third_copy_of_a_basename_is_the_only_new_l003() -> None:
    message = ("basename 'test_x.py' is also used by {}; /rerun-test resolves files by basename: rename one, "
               "or set 'unique_basenames: false' under 'project:' (/rerun-test then asks for a path)")
    base = [Problem("a/test_x.py", 1, 1, "L003", message.format("b/test_x.py")),
            Problem("b/test_x.py", 1, 1, "L003", message.format("a/test_x.py"))]
    head = [Problem("a/test_x.py", 1, 1, "L003", message.format("b/test_x.py, c/test_x.py")),
            Problem("b/test_x.py", 1, 1, "L003", message.format("a/test_x.py, c/test_x.py")),
            Problem("c/test_x.py", 1, 1, "L003", message.format("a/test_x.py, b/test_x.py"))]
    assert gate(head, keys(*base)).new == [head[2]]


def test_an_unregistered_file_is_keyed_by_its_first_line_not_the_entry_it_suggests() -> None:
    one = Problem("t/test_a.py", 1, 1, "L002", "test file is not registered in registry.yaml; add under 'tests:'\n"
                  "  t/test_a.py:\n    est_time: 1")
    two = Problem("t/test_a.py", 1, 1, "L002", "test file is not registered in registry.yaml; add under 'tests:'\n"
                  "  t/test_a.py:\n    est_time: 30")
    assert problem_key(one) == problem_key(two)


# --- the baseline file ---


def test_the_baseline_round_trips_sorted_with_copies_and_escapes(tmp_path: Path) -> None:
    odd = ProblemKey("L002", "t/a\tb\\c\nd.py", "test file is not registered")
    written = [ProblemKey("I001", "z.py", SEED), ProblemKey("I001", "a.py", SEED), odd,
               ProblemKey("I001", "a.py", SEED)]
    target = tmp_path / "lint-baseline.txt"
    write_baseline(target, written)
    text = target.read_text()
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert text.splitlines()[0] == HEADER
    assert body == [f"I001\ta.py\t{SEED}", f"I001\ta.py\t{SEED}", f"I001\tz.py\t{SEED}",
                    "L002\tt/a\\tb\\\\c\\nd.py\ttest file is not registered"]
    assert read_baseline(target) == sorted(written)


def test_a_header_only_baseline_is_empty_and_crlf_is_read() -> None:
    assert parse_baseline(HEADER + "\n", "b") == []
    assert parse_baseline(f"{HEADER}\r\nI001\ta.py\tx\r\n", "b") == [ProblemKey("I001", "a.py", "x")]


@pytest.mark.parametrize("text, error", [
    ("", "b.txt:1: not a lint baseline: the first line is ''"),
    ("version: 1\ntiers: {}\n", "b.txt:1: not a lint baseline: the first line is 'version: 1'"),
    (f"{HEADER}\nI001\ta.py\tx\nI001 a.py x\n", "b.txt:3: expected 3 tab-separated fields (code, file, problem), found 1"),
    (f"{HEADER}\nI001\ta.py\tx\textra\n", "b.txt:2: expected 3 tab-separated fields (code, file, problem), found 4"),
    (f"{HEADER}\n\n# note\ni001\ta.py\tx\n", "b.txt:4: 'i001' is not a lint code"),
    (f"{HEADER}\nI0012\ta.py\tx\n", "b.txt:2: 'I0012' is not a lint code"),
    (f"{HEADER}\nI001\t\tx\n", "b.txt:2: empty file field"),
    (f"{HEADER}\nI001\ta.py\t\n", "b.txt:2: empty problem field"),
    (f"{HEADER}\nI001\ta\\q.py\tx\n", "b.txt:2: unknown escape '\\\\q'"),
    (f"{HEADER}\nI001\ta.py\tx\\\n", "b.txt:2: unknown escape '\\\\'"),
])
def test_a_bad_baseline_names_its_file_and_line(text: str, error: str) -> None:
    with pytest.raises(BaselineError) as exc:
        parse_baseline(text, "b.txt")
    assert str(exc.value).startswith(error)


def test_an_unreadable_baseline_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match=r"baseline .*missing.txt: cannot read it \(No such file"):
        read_baseline(tmp_path / "missing.txt")
    (tmp_path / "dir.txt").mkdir()
    with pytest.raises(BaselineError, match=r"dir.txt: cannot read it \(is a directory"):
        read_baseline(tmp_path / "dir.txt")
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(HEADER.encode() + b"\nI001\tcaf\xe9.py\tx\n")  # 26 + 1 + 8 bytes before the \xe9
    with pytest.raises(BaselineError, match=r"latin1.txt:2: not UTF-8 \(byte offset 35\)"):
        read_baseline(bad)


def _collections_while_parsing(n: int) -> int:
    """How many passes the cyclic GC makes while `parse_baseline` reads ``n`` keys (escaped ones)."""
    text = format_baseline(ProblemKey("I001", f"pkg/m{i}.py", f"'x\\{i}' has no name 'Old'") for i in range(n))
    passes: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            passes.append(info["generation"])
    gc.collect()
    gc.callbacks.append(count)
    try:
        assert len(parse_baseline(text, "b")) == n
    finally:
        gc.callbacks.remove(count)
    return len(passes)


def test_parsing_a_baseline_makes_no_gc_pass_per_batch_of_keys() -> None:
    """Issue 49 item 8: 1.5 M keys took 7.8 s, a quarter of it the cyclic GC passing again and
    again over every key built so far (1,970 passes, 9 of them over the whole heap). The work is
    counted, not timed: at most the one pass after the GC is turned back on, at n and at 4n keys."""
    assert gc.isenabled()
    passes = [_collections_while_parsing(n) for n in (5_000, 20_000)]
    assert max(passes) <= 1, f"GC passes at 5,000 and 20,000 keys: {passes}"
    with pytest.raises(BaselineError):
        parse_baseline(f"{HEADER}\n" + "I001\ta.py\tx\n" * 1_000 + "I001 a.py x\n", "b")
    assert gc.isenabled()  # an error mid-parse turns the GC back on


def test_format_baseline_of_nothing_is_the_header_and_comments() -> None:
    assert parse_baseline(format_baseline([]), "b") == []
