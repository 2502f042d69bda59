"""Verdict cells (`tools.rerun.verdicts`) and break opportunities (`tools.rerun.wrap`): written
and read back, escaped, and never breaking an entity or an escape."""

from __future__ import annotations

import re
from collections import Counter
from html import unescape

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options as cmarkgfm_options

from tools.rerun.commands import entities, quote
from tools.rerun.verdicts import (BROKEN_ON_MAIN, FLAKY, INFRA, KINDS, MAX_DETAIL, NEW, FailureVerdict, cell_kinds, short_cell,
                                  tally_text, verdict_cell)
from tools.rerun.wrap import MAX_RUN, breakable, breakable_code

DETAILS = {BROKEN_ON_MAIN: "broken on main since abc1234", FLAKY: "flaky 9 % ±4 over 120 runs on gpu_h200",
           INFRA: "infra on runner gpu-7", NEW: "new"}


@pytest.mark.parametrize("kind", KINDS)
def test_a_single_verdict_reads_back_as_its_kind(kind: str) -> None:
    cell = verdict_cell([FailureVerdict(kind, DETAILS[kind])])
    assert cell_kinds(cell) == Counter({kind: 1})
    assert short_cell(cell) == {BROKEN_ON_MAIN: "broken", FLAKY: "flaky", INFRA: "infra", NEW: "new"}[kind]
    assert cell_kinds(short_cell(cell)) == Counter({kind: 1})


def test_a_tally_reads_back_with_its_counts() -> None:
    verdicts = [FailureVerdict(k, DETAILS[k]) for k in (NEW, FLAKY, NEW, BROKEN_ON_MAIN, INFRA, NEW)]
    cell = verdict_cell(verdicts)
    assert cell == "1 broken on main, 1 flaky, 1 infra, 3 new"  # kinds in KINDS order
    assert cell_kinds(cell) == Counter({NEW: 3, BROKEN_ON_MAIN: 1, FLAKY: 1, INFRA: 1})
    assert tally_text(Counter({FLAKY: 2, NEW: 0})) == "2 flaky"
    assert verdict_cell([]) == "—" and cell_kinds("—") == Counter() and short_cell("—") == "—"


@pytest.mark.parametrize("kind, detail", [(FLAKY, "flaky: failed, then passed on retry in this run"),
                                          (INFRA, "infra: cuda on runner r7"), (NEW, "new: probably this change's (x)")])
def test_judge_s_details_read_back_as_their_kind(kind: str, detail: str) -> None:
    """`ci.history.verdict` writes ``flaky: ...``: the `:` becomes an entity and still reads back."""
    cell = verdict_cell([FailureVerdict(kind, detail)])
    assert cell.startswith(entities(detail.split(":")[0] + ":")) and cell_kinds(cell) == Counter({kind: 1})


def test_a_detail_without_its_label_gets_it() -> None:
    assert FailureVerdict(BROKEN_ON_MAIN, "since abc1234").text == "broken on main, since abc1234"
    assert FailureVerdict(INFRA, "infrastructure").text == "infra, infrastructure"  # a word, not the label
    assert FailureVerdict(NEW, "  new \n").text == "new"


def test_a_long_detail_is_cut_to_one_short_line() -> None:
    assert FailureVerdict(INFRA, "infra " + "x" * (MAX_DETAIL - 6)).text == "infra " + "x" * (MAX_DETAIL - 6)
    assert FailureVerdict(INFRA, "infra " + "x" * (MAX_DETAIL - 5)).text == "infra " + "x" * (MAX_DETAIL - 7) + "…"
    assert FailureVerdict(INFRA, "infra on\nrunner\t r7").text == "infra on runner r7"


def test_text_from_the_history_renders_as_text() -> None:
    hostile = "infra on runner [x](https://evil.example) | <img src=x> **b** _i_ @team `c`"
    cell = FailureVerdict(INFRA, hostile).text
    assert not {"|", "<", "[", "`", "*", "_"} & set(cell.replace("<!-- -->&#64;", ""))  # `@`: split as `quote` does
    html = cmarkgfm.github_flavored_markdown_to_html(f"| v |\n|---|\n| {cell} |", options=cmarkgfm_options.CMARK_OPT_UNSAFE)
    assert not re.search(r"<(a|img|strong|em|code)\b", html) and html.count("<td>") == 1
    assert cell_kinds(cell) == Counter({INFRA: 1})


# C0 and C1 controls, DEL, and the bidi controls (embeddings, overrides, isolates, marks).
HIDDEN = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F),
                           *range(0x2066, 0x206A))]


def test_control_and_bidi_characters_render_as_their_escapes() -> None:
    """A runner name or error line from the history with U+202E or an ANSI colour: the cell shows
    each as its escape, as `quote` does, and holds none of them."""
    cell = FailureVerdict(INFRA, "infra: cuda \u202eerror\x1b[31m on runner r7\u2066").text
    html = cmarkgfm.github_flavored_markdown_to_html(f"| v |\n|---|\n| {cell} |", options=cmarkgfm_options.CMARK_OPT_UNSAFE)
    (shown,) = re.findall(r"<td>(.*?)</td>", html, re.S)
    assert not set(HIDDEN) & set(shown)
    assert unescape(shown) == "infra: cuda \\u202eerror\\x1b[31m on runner r7\\u2066"
    assert cell_kinds(cell) == Counter({INFRA: 1})
    every = entities("".join(HIDDEN))
    assert not set(HIDDEN) & set(every)
    assert unescape(every) == "".join(HIDDEN).encode("unicode_escape").decode("ascii")  # `quote`'s escapes


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="verdict kind must be one of broken_on_main, flaky, infra, new, got 'broken'"):
        FailureVerdict("broken", "x")


# -- break opportunities ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["test/registered/npu/a_b.py::TestX::test_y[bf16-tp8]", "x" * 45,
                                  "a\u200bb\\c" * 9, "@everyone::a[b]", "&amp;::&#95;" * 4, "a" * 19 + " " + "b" * 25])
def test_break_opportunities_change_nothing_but_the_breaks(text: str) -> None:
    quoted = quote(text, limit=300)
    broken = breakable_code(text, limit=300)
    assert broken.replace("<wbr>", "") == quoted
    assert not re.search(r"&#?[0-9a-z]*<wbr>[0-9a-z]*;", broken)  # never inside an entity
    assert not re.search(r"&#92;(?:x[0-9a-f]?|u[0-9a-f]{0,3})<wbr>", broken)  # nor inside an escape


def test_breaks_fall_after_separators_and_before_scopes() -> None:
    assert breakable_code("a/b_c.d::e[f]") == \
        "<code>a/<wbr>b&#95;<wbr>c&#46;<wbr>d<wbr>&#58;&#58;e<wbr>&#91;f&#93;</code>"
    assert breakable("a/") == "a/"  # nothing to break before at the end


def test_a_long_run_breaks_every_max_run_characters() -> None:
    assert breakable("x" * MAX_RUN) == "x" * MAX_RUN  # exactly MAX_RUN: no break needed
    assert breakable("x" * (MAX_RUN + 1)) == "x" * MAX_RUN + "<wbr>x"
    assert breakable("x" * (2 * MAX_RUN + 1)) == ("x" * MAX_RUN + "<wbr>") * 2 + "x"
    assert breakable("x" * MAX_RUN + " " + "y" * MAX_RUN) == "x" * MAX_RUN + " " + "y" * MAX_RUN  # a space breaks
