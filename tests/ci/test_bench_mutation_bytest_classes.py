"""The built by-test-id rows by mutant class (`bench._mutation_bytest_classes`), on hand-made rows
whose class and ratios are worked out by hand below."""

from __future__ import annotations

import pytest

from bench._mutation_bytest_classes import CLASSES, ClassRow, by_class, class_table, mutant_class


def _row(selected_est: float, static_est: float, *, narrowed: int = 1, static_files: int | None = 5,
         selected_wall: float = 1.0, static_wall: float = 2.0, broken: str = "") -> dict:
    return {"selected_est": selected_est, "static_est": static_est, "narrowed": narrowed,
            "static_files": static_files, "selected_wall": selected_wall, "static_wall": static_wall,
            "broken": broken}


def test_each_row_takes_the_first_class_that_fits() -> None:
    # nothing narrowed and est at the static graph's: whole, even when the static graph is one file
    assert mutant_class(_row(10.0, 10.0, narrowed=0, static_files=1)) == "every file whole"
    # nothing narrowed but a smaller est (fewer files than the graph): not "whole"
    assert mutant_class(_row(9.0, 10.0, narrowed=0)) == "many ids or files"
    # one narrowed file at full est is not "whole" either
    assert mutant_class(_row(10.0, 10.0, narrowed=1)) == "many ids or files"
    assert mutant_class(_row(1.0, 10.0, static_files=1)) == "static graph is one file"
    assert mutant_class(_row(1.0, 10.0, static_files=2)) == "a few ids"
    # the few-ids line is inclusive: 0.16 is few, just above it is many
    assert mutant_class(_row(1.6, 10.0)) == "a few ids"
    assert mutant_class(_row(1.61, 10.0)) == "many ids or files"
    # a row written before static_files existed cannot be told from a one-file graph
    assert mutant_class(_row(1.0, 10.0, static_files=None)) is None
    assert mutant_class(_row(10.0, 10.0, narrowed=0, static_files=None)) == "every file whole"
    with pytest.raises(KeyError, match="selected_est"):
        mutant_class({"static_est": 1.0})


def test_classes_average_the_per_mutant_ratios_and_leave_out_broken_and_unclassed_rows() -> None:
    rows = [_row(10.0, 10.0, narrowed=0, selected_wall=9.0, static_wall=10.0),   # whole: est 1.0, wall 0.9
            _row(1.0, 10.0, selected_wall=3.0, static_wall=10.0),                # few: est 0.1, wall 0.3
            _row(0.5, 10.0, selected_wall=1.0, static_wall=10.0),                # few: est 0.05, wall 0.1
            _row(4.0, 10.0, selected_wall=6.0, static_wall=10.0),                # many: est 0.4, wall 0.6
            _row(1.0, 10.0, broken="selected: timed out"),                       # no verdict: not counted
            _row(1.0, 10.0, static_files=None),                                  # unclassed: counted apart
            _row(1.0, 0.0)]                                                      # no static side: not counted
    classes, unknown = by_class(rows)
    assert unknown == 1
    assert [c.name for c in classes] == list(CLASSES)
    assert classes[0] == ClassRow("every file whole", 1, 1.0, 0.9)
    assert classes[1] == ClassRow("static graph is one file", 0, None, None)
    few = classes[2]
    assert few.mutants == 2 and few.est_ratio == pytest.approx(0.075) and few.wall_ratio == pytest.approx(0.2)
    assert classes[3].mutants == 1 and classes[3].est_ratio == pytest.approx(0.4)
    text = class_table(rows)
    assert "1 row(s) without static_files left out" in text
    lines = {line.split("  ")[0]: line.split() for line in text.splitlines()[3:]}
    assert lines["a few ids"][-3:] == ["2", "0.075", "0.20"]
    assert lines["static graph is one file"][-3:] == ["0", "-", "-"]


def test_no_classed_row_gives_no_table() -> None:
    assert class_table([]) == ""
    assert class_table([_row(1.0, 10.0, static_files=None)]) == ""
