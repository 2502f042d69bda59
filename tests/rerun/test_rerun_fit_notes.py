"""Verdicts under `tools.rerun.fit`: the verdict cell keeps its detail or tally at every step but
the last, which cuts it to one word (`verdicts.short_cell`); the failing ids' kinds go with the ids
(docs/rerun.md, "Long replies" and "Verdicts").

Per step, for a row with verdicts:

1. the verdict cell stays; the first `SHORT_FAILING` (3) failing ids stay with their kinds, the
   rest become ``… and N more``;
2. and 3. the counts and the time stay, the ids go (``(failing ids: in the run)``); the verdict
   cell stays;
4. the result keeps the outcome and the non-zero counts, the verdict one word, the tests ``—``.
"""

from __future__ import annotations

from tools.rerun.fit import FAILING, fit, max_rows, shorten
from tools.rerun.replies import MAX_BODY_CHARS, _size
from tools.rerun.report import RunResults, result_cell, row_verdict
from tools.rerun.runs_table import RunRow, parse_row, table
from tools.rerun.verdicts import BROKEN_ON_MAIN, FLAKY, INFRA, NEW, FailureVerdict

FLAKE = FailureVerdict(FLAKY, "flaky 14 % ±5 over 120 runs on gpu_b200")
BROKEN = FailureVerdict(BROKEN_ON_MAIN, "broken on main since abc1234")
ONE = ("tests/quant/test_pack.py::test_b",)
FIVE = tuple(f"tests/quant/test_pack.py::test_{c}" for c in "abcde")
ONE_HEAD = "**failed**: 2 passed, 1 failed, 0 skipped, 0 errors in 3.0 s"
FIVE_HEAD = "**failed**: 0 passed, 5 failed, 0 skipped, 0 errors in 3.0 s"
FIVE_VERDICTS = {FIVE[0]: FLAKE, FIVE[1]: FailureVerdict(NEW, "new"), FIVE[2]: BROKEN, FIVE[3]: FailureVerdict(NEW, "new"),
                 FIVE[4]: FailureVerdict(INFRA, "infra on runner gpu-7")}


def _row(results: RunResults, verdicts: dict[str, FailureVerdict]) -> RunRow:
    return RunRow("gpu_b200", "1/1", "`self-hosted`", "`tests/quant/test_pack.py`", "[run](https://ci/1)",
                  result_cell(results, verdicts), row_verdict(results, verdicts))


def test_one_failure_keeps_its_verdict_detail_until_the_last_step() -> None:
    row = _row(RunResults(2, 1, 0, 0, 3.0, ONE), {ONE[0]: FLAKE})
    assert row.verdict == "flaky 14 &#37; ±5 over 120 runs on gpu&#95;b200"  # as entities: no emphasis, no tag
    assert row.result.startswith(ONE_HEAD + FAILING) and " · " not in row.result  # the detail is in its column
    assert shorten(row, 1).result == row.result and shorten(row, 1).tests == "1 test(s)"
    assert shorten(row, 2).result == ONE_HEAD + " (failing ids: in the run)" and shorten(row, 3).verdict == row.verdict
    assert (shorten(row, 4).result, shorten(row, 4).verdict, shorten(row, 4).tests) == \
        ("**failed**: 2 passed, 1 failed", "flaky", "—")
    bare = _row(RunResults(2, 1, 0, 0, 3.0, ONE), {})  # no history: no verdict
    assert bare.verdict == "—" and shorten(bare, 4).verdict == "—"


def test_several_failures_keep_their_tally_and_the_first_ids_kinds() -> None:
    row = _row(RunResults(0, 5, 0, 0, 3.0, FIVE), FIVE_VERDICTS)
    assert row.verdict == "1 broken on main, 1 flaky, 1 infra, 2 new"
    assert row.result.startswith(FIVE_HEAD + FAILING)
    ids = row.result.partition(FAILING)[2].split("<br>")
    assert [i.rsplit(" · ", 1)[1] for i in ids] == ["flaky", "new", "broken on main", "new", "infra"]
    assert shorten(row, 1).result == FIVE_HEAD + FAILING + "<br>".join(ids[:3]) + "<br>… and 2 more"
    assert shorten(row, 2).result == FIVE_HEAD + " (failing ids: in the run)"
    assert (shorten(row, 4).result, shorten(row, 4).verdict) == ("**failed**: 5 failed", "broken+")


def test_the_most_pressing_kind_leads_the_one_word_verdict() -> None:
    nodes = ("a::x", "a::y")
    for verdicts, word in [((NEW, FLAKY), "flaky+"), ((INFRA, FLAKY), "infra+"), ((NEW, NEW), "new"),
                           ((INFRA, BROKEN_ON_MAIN), "broken+")]:
        row = _row(RunResults(0, 2, 0, 0, 1.0, nodes), {n: FailureVerdict(k, k) for n, k in zip(nodes, verdicts)})
        assert shorten(row, 4).verdict == word, (verdicts, row.verdict)


def _table(row: RunRow, rows: int, step: int = 0) -> str:
    """A runs table of ``rows`` copies of ``row``, shortened to ``step`` (0: as written)."""
    out = [RunRow(row.tier, f"{i}/{rows}", row.runner, row.tests, row.run, row.result, row.verdict)
           for i in range(1, rows + 1)]
    return table([shorten(r, step) if step else r for r in out])


def _cells(body: str, field: str) -> list[str]:
    return [getattr(row, field) for line in body.split("\n") if (row := parse_row(line)) is not None]


def test_fit_cuts_the_verdicts_only_when_nothing_else_fits() -> None:
    row = _row(RunResults(0, 5, 0, 0, 3.0, FIVE), FIVE_VERDICTS)
    rows = 60
    at_step = {step: _size(_table(row, rows, step)) + 1 for step in (1, 2, 3, 4)}
    assert at_step[1] > at_step[2] > at_step[3] > at_step[4]
    body = "x" * (MAX_BODY_CHARS - at_step[2]) + "\n" + _table(row, rows)
    fitted = fit(body)
    assert _cells(fitted, "result") == [FIVE_HEAD + " (failing ids: in the run)"] * rows
    assert _cells(fitted, "verdict") == [row.verdict] * rows and _cells(fitted, "runner") == ["`self-hosted`"] * rows
    body = "x" * (MAX_BODY_CHARS - at_step[3] + 1) + "\n" + _table(row, rows)
    fitted = fit(body)
    assert _size(fitted) <= MAX_BODY_CHARS
    assert _cells(fitted, "result") == ["**failed**: 5 failed"] * rows and _cells(fitted, "verdict") == ["broken+"] * rows


def test_the_longest_reply_still_holds_a_178_shard_tier() -> None:
    """SGLang's largest tier plans 178 shards (docs/rerun.md); the verdict column must not cost it."""
    assert max_rows("gpu_b200") >= 178
