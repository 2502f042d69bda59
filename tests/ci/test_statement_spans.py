"""Selection by statement: which lines of a function body a changed line stands for, and which
lines make the whole body the unit. Hand-picked lines of one hand-written function; the oracle
for what a map can see run is CPython's own line table (`co_lines`) of the compiled function."""

from __future__ import annotations

import ast
import textwrap

import pytest

from ci.selection.edit_scopes import scopes_of
from ci.selection.statement_spans import statements_of

SOURCE = textwrap.dedent("""\
    _CACHE = {}
    def f(x, items):
        global _SEEN
        total = (x +
                 1)
        if x > 3:
            total += 1
        else:
            pass
        while True:
            break
        for item in items:
            continue
        try:
            total = int(total)
        except ValueError as exc:
            raise
        except:
            raise
        finally:
            total -= 0
        if x not in _CACHE:
            _CACHE[x] = build(x)
        def inner(y=1):
            return y
        class Local:
            size = 2

        ...
        return (total if
                x > (3 if
                     x else 4) else 0)
    """)
IF_SOURCE = "def g(x):\n    if (x >\n            3):\n        return 1\n    return 0\n"
FUNCTION = ast.parse(SOURCE).body[1]


@pytest.mark.parametrize("line, spans", [
    (4, ((4, 5),)),  # a multi-line statement: all its lines
    (5, ((4, 5),)),
    (6, ((6, 6),)),  # an if's condition
    (7, ((7, 7),)),
    (12, ((12, 12),)),  # a for's iterable
    (15, ((15, 15),)),
    (16, ((16, 16),)),  # except E: the exception type
    (17, ((17, 17),)),
    (21, ((21, 21),)),
    (23, ((23, 23),)),
    (24, ((24, 24),)),  # a nested def's header (its defaults)
    (26, ((26, 27),)),  # a class in the body: all of it
    (30, ((30, 32),)),
    (31, ((30, 32),)),
])
def test_a_changed_line_stands_for_its_statement(line: int, spans: tuple[tuple[int, int], ...]) -> None:
    found = statements_of(FUNCTION, [line])
    assert (found.spans, found.whole) == (spans, False)


@pytest.mark.parametrize("line", [3, 8, 9, 10, 11, 13, 14, 18, 20, 28, 29],
                         ids=["global", "else", "pass", "while-True", "break", "continue", "try", "bare-except",
                              "finally", "blank", "constant"])
def test_a_line_with_no_code_the_map_sees_makes_the_whole_body_the_unit(line: int) -> None:
    assert statements_of(FUNCTION, [line]).whole


def test_what_a_map_sees_run_is_within_the_spans() -> None:
    # CPython's line table: every line with code in f's own code object, outside nested ones
    code = next(c for c in compile(SOURCE, "m.py", "exec").co_consts if getattr(c, "co_name", "") == "f")
    with_code = {line for _, _, line in code.co_lines() if line}
    for line in range(3, 33):
        found = statements_of(FUNCTION, [line])
        if not found.whole:  # the statement's lines hold code the map can see run
            assert any(first <= n <= last for first, last in found.spans for n in with_code), line


def test_a_statement_in_a_cache_fill_is_guarded_and_scopes_carry_the_statements() -> None:
    assert statements_of(FUNCTION, [23]).guarded and not statements_of(FUNCTION, [7]).guarded
    (scope,) = scopes_of(SOURCE, [7, 23])
    assert scope.name == "f" and scope.statements.spans == ((7, 7), (23, 23)) and scope.statements.guarded
    (scope,) = scopes_of(SOURCE, [7, 8])
    assert scope.statements.whole


def test_a_condition_over_several_lines_is_one_header() -> None:
    function = ast.parse(IF_SOURCE).body[0]
    assert statements_of(function, [3]).spans == ((2, 3),) == statements_of(function, [2]).spans
    assert statements_of(function, [4]).spans == ((4, 4),)


def test_a_decorator_line_of_a_nested_def_or_class_is_part_of_its_statement() -> None:
    source = "def h():\n    @wraps(h)\n    def inner():\n        return 1\n    @dataclass\n    class K:\n        x = 1\n    return inner\n"
    function = ast.parse(source).body[0]
    # the decorators run where the def or class statement runs: they are its first lines
    assert (statements_of(function, [2]).spans, statements_of(function, [2]).whole) == (((2, 3),), False)
    assert (statements_of(function, [5]).spans, statements_of(function, [5]).whole) == (((5, 7),), False)
