"""Flake notes under `tools.rerun.fit` (issue #32's mutation survivors): the notes come after a
result's time, so fitting keeps them as long as it keeps the time and drops them, with the
failing ids, only at its last step (docs/rerun.md, "Long replies" and the flake notes).

Per step, for a result cell with notes:

1. the tally after the counts stays; the first `SHORT_FAILING` (3) failing ids stay with their
   own notes, the rest become ``… and N more``;
2. and 3. the counts, the time and the note or tally stay; the ids go (``(failing ids: in the run)``);
4. only the verdict and the non-zero counts stay: no note, no tally.
"""

from __future__ import annotations

from tools.rerun.fit import FAILING, fit, shorten
from tools.rerun.replies import MAX_BODY_CHARS, _size
from tools.rerun.report import RunResults, result_cell
from tools.rerun.runs_table import RunRow, parse_row, table

FLAKY = "flaky 14 % ±5 over 120 runs on gpu_b200"
ONE = ("tests/quant/test_pack.py::test_b",)
FIVE = tuple(f"tests/quant/test_pack.py::test_{c}" for c in "abcde")
ONE_HEAD = f"**failed**: 2 passed, 1 failed, 0 skipped, 0 errors in 3.0 s · {FLAKY}"
FIVE_HEAD = "**failed**: 0 passed, 5 failed, 0 skipped, 0 errors in 3.0 s · 2 known flakes, 3 new"
FIVE_NOTES = {FIVE[0]: FLAKY, FIVE[1]: "new", FIVE[2]: FLAKY, FIVE[3]: "new", FIVE[4]: "new"}


def _row(cell: str) -> RunRow:
    return RunRow("gpu_b200", "1/1", "`self-hosted`", "`tests/quant/test_pack.py`", "[run](https://ci/1)", cell)


def test_one_failure_keeps_its_note_until_the_last_step() -> None:
    cell = result_cell(RunResults(2, 1, 0, 0, 3.0, ONE), {ONE[0]: FLAKY})
    assert cell.startswith(ONE_HEAD + FAILING) and cell.endswith(f" · {FLAKY}")
    assert shorten(_row(cell), 1).result == cell  # one id: nothing to cut
    assert shorten(_row(cell), 2).result == ONE_HEAD + " (failing ids: in the run)"
    assert shorten(_row(cell), 3).result == ONE_HEAD + " (failing ids: in the run)"
    assert shorten(_row(cell), 4).result == "**failed**: 2 passed, 1 failed"
    # without a note (no history) the counts end at the time
    bare = result_cell(RunResults(2, 1, 0, 0, 3.0, ONE))
    assert bare.startswith("**failed**: 2 passed, 1 failed, 0 skipped, 0 errors in 3.0 s" + FAILING)
    assert " · " not in bare


def test_several_failures_keep_their_tally_and_the_first_ids_notes() -> None:
    cell = result_cell(RunResults(0, 5, 0, 0, 3.0, FIVE), FIVE_NOTES)
    assert cell.startswith(FIVE_HEAD + FAILING)
    ids = cell.partition(FAILING)[2].split("<br>")
    assert [i.rsplit(" · ", 1)[1] for i in ids] == [FLAKY, "new", FLAKY, "new", "new"]
    assert shorten(_row(cell), 1).result == FIVE_HEAD + FAILING + "<br>".join(ids[:3]) + "<br>… and 2 more"
    assert shorten(_row(cell), 2).result == FIVE_HEAD + " (failing ids: in the run)"
    assert shorten(_row(cell), 4).result == "**failed**: 5 failed"


def _table(cell: str, rows: int, step: int = 0) -> str:
    """A runs table of ``rows`` rows holding ``cell``, shortened to ``step`` (0: as written)."""
    out = []
    for i in range(1, rows + 1):
        row = RunRow("gpu_b200", f"{i}/{rows}", "`self-hosted`", "`tests/quant/test_pack.py`", "[run](https://ci/1)",
                     cell)
        out.append(shorten(row, step) if step else row)
    return table(out)


def _results(body: str) -> list[str]:
    return [row.result for line in body.split("\n") if (row := parse_row(line)) is not None]


def _runners(body: str) -> list[str]:
    return [row.runner for line in body.split("\n") if (row := parse_row(line)) is not None]


def test_fit_drops_the_notes_only_when_nothing_else_fits() -> None:
    cell = result_cell(RunResults(0, 5, 0, 0, 3.0, FIVE), FIVE_NOTES)
    rows = 60
    # filler before the table, sized so that the body fits at step 2 exactly, or only at step 4
    at_step = {step: _size(_table(cell, rows, step)) + 1 for step in (1, 2, 3, 4)}
    assert at_step[1] > at_step[2] > at_step[3] > at_step[4]
    body = "x" * (MAX_BODY_CHARS - at_step[2]) + "\n" + _table(cell, rows)
    assert _size(body) > MAX_BODY_CHARS
    fitted = fit(body)
    assert _results(fitted) == [FIVE_HEAD + " (failing ids: in the run)"] * rows  # every tally kept
    assert _runners(fitted) == ["`self-hosted`"] * rows  # step 2 was enough: step 3 not taken
    body = "x" * (MAX_BODY_CHARS - at_step[3] + 1) + "\n" + _table(cell, rows)
    fitted = fit(body)
    assert _size(fitted) <= MAX_BODY_CHARS
    assert _results(fitted) == ["**failed**: 5 failed"] * rows  # every row, no notes
