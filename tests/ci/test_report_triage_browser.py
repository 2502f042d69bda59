"""The HUD's triage in a real browser (headless Chromium over the DevTools protocol,
`ci.report.browser`), on tests/ci/report_triage_support.py's history: the first rows are the
breakages, failing-since names the streak's first commit, hide-green hides passing rows and lives
in the URL, a failing cell's tip shows its test and message as text (a message holding an
``<img onerror>`` runs nothing), one column per commit with merged attempts counted, and the pull
request's failing test first. Oracles: the fixture's hand-written story and layout, never the
page's script state. Without chromium this FAILS, like tests/ci/test_report_browser.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from ci.report.browser import Browser, Tab
from tests.ci.report_support import chromium, clean_tab, hud_page
from tests.ci.report_triage_support import (AUTHORS, BASE, EXPECTED, HOSTILE, MERGED_PR, ORDER, PR, SHAS, build_history,
                                            write_repo)

_ROWS = "[...document.querySelectorAll('#matrix .vr')].map(r => [r.dataset.tier, r.dataset.file])"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hud_page(tmp_path_factory.mktemp("triage"), write_repo, build_history, PR, ["tests/test_ac.py"])


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


@pytest.fixture
def tab(browser: Browser, page: Path) -> Iterator[Tab]:
    with clean_tab(browser, page) as t:  # no error, no injected script or dialog ran
        yield t


def _cell(tab: Tab, file: str, column: int) -> str:
    return (f"[...document.querySelectorAll('#matrix .vr')].find(r => r.dataset.file === {file!r})"
            f".querySelector('.c[data-c=\"{column}\"]')")


def _centre(tab: Tab, element: str) -> tuple[float, float]:
    x, y = tab.eval(f"(() => {{ const b = ({element}).getBoundingClientRect(); return [b.left + b.width / 2,"
                    " b.top + b.height / 2]; })()")
    return x, y


def test_the_first_rows_are_the_breakages_with_failing_since(tab: Tab) -> None:
    assert [tuple(r) for r in tab.eval(_ROWS)] == ORDER
    # drawn top to bottom in that order (layout, not only the DOM's order)
    tops = tab.eval("[...document.querySelectorAll('#matrix .vr')].map(r => r.getBoundingClientRect().top)")
    assert tops == sorted(tops) and len(set(tops)) == len(tops)
    since = tab.eval("[...document.querySelectorAll('#matrix .vr')].map(r => [r.querySelector('.since').textContent,"
                     " r.querySelector('.since').title.split(' ')[0]])")
    assert since == [[f"{SHAS[7][:7]} · 1 run", SHAS[7]], [f"{SHAS[3][:7]} · 4 runs", SHAS[3]]] + [["", ""]] * 4
    # every cell under its commit's column, and one column per commit
    heads = tab.eval("[...document.querySelectorAll('#matrix .vhead .r')].map(h => [h.querySelector('a').textContent,"
                     " h.querySelector('a').href, h.dataset.run, h.querySelector('.au').textContent])")
    assert heads == [[s[:7], f"{BASE}/commit/{s}", f"{BASE}/actions/runs/{55 if i == 5 else i}", AUTHORS[i]]
                     for i, s in enumerate(SHAS)]
    assert tab.eval("document.querySelectorAll('.vhead b').length") == 0  # the author's markup is text
    prs = tab.eval("[...document.querySelectorAll('#matrix .vhead .r')].map(h => h.querySelector('.prn a'))"
                   ".map(a => a && [a.textContent, a.href])")
    assert prs == [None] * 6 + [[f"#{MERGED_PR}", f"{BASE}/pull/{MERGED_PR}"], None]
    letters = {"pass": "✓", "fail": "✗", "flaky": "~", "not-run": "·"}
    cells = tab.eval("[...document.querySelectorAll('#matrix .vr')].map(r => [...r.querySelectorAll('.c')]"
                     ".map(c => c.textContent).join(''))")
    assert cells == ["".join(letters[s] for s in EXPECTED[key]) for key in ORDER]


def test_a_merged_cell_shows_its_attempts(tab: Tab) -> None:
    got = tab.eval(f"(() => {{ const c = {_cell(tab, 'tests/test_ab.py', 5)}; return [c.dataset.n,"
                   " getComputedStyle(c, '::after').content, c.getAttribute('aria-label')]; })()")
    assert got == ["2", '"2"', "flaky, 2 attempts: tests/test_ab.py::test_x: AssertionError: first try"]
    assert tab.eval(f"{_cell(tab, 'tests/test_ab.py', 4)}.dataset.n") is None


def test_hide_green_hides_passing_rows_and_round_trips_the_url(browser: Browser, page: Path, tab: Tab) -> None:
    x, y = _centre(tab, "document.getElementById('f-green')")
    for kind in ("mousePressed", "mouseReleased"):
        tab.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})
    assert [tuple(r) for r in tab.eval(_ROWS)] == ORDER[:4]
    assert tab.eval("document.querySelector('[data-count-of=matrix]').textContent") == "4 of 6 shown"
    tab.key("/")
    tab.type("zz")
    assert tab.eval("location.hash") == "#text=zz&hide=green"
    again = browser.open(page, fragment="text=zz&hide=green")
    assert again.eval("document.getElementById('f-green').checked") is True
    assert again.eval(_ROWS) == [["gpu_b200", "tests/test_zz.py"]]
    again.key("Escape")
    assert again.eval("[location.hash, document.getElementById('f-green').checked]") == ["", False]
    assert len(again.eval(_ROWS)) == 6
    again.key("g")  # the keyboard toggle
    assert [tuple(r) for r in again.eval(_ROWS)] == ORDER[:4] and again.eval("location.hash") == "#hide=green"
    assert again.errors == []
    again.close()


def test_hovering_a_failing_cell_shows_its_failure_as_text(tab: Tab) -> None:
    x, y = _centre(tab, _cell(tab, "tests/test_zz.py", 3))
    tab.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
    tip = tab.eval("(() => { const t = document.getElementById('tip'), b = t.getBoundingClientRect();"
                   " return [t.hidden, [...t.children].map(c => c.textContent), b.top >= 0 && b.bottom <= innerHeight]; })()")
    assert tip == [False, [f"gpu_b200 tests/test_zz.py at {SHAS[3][:7]}: fail", "tests/test_zz.py::test_x",
                           "AssertionError: wrong answer", "open the run"], True]
    # the hostile message is text: the first line whole, no element made of it, nothing run
    x, y = _centre(tab, _cell(tab, "tests/test_zz.py", 7))
    tab.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
    tab.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y + 1})
    texts = tab.eval("[...document.getElementById('tip').children].map(c => c.textContent)")
    assert texts[:3] == [f"gpu_b200 tests/test_zz.py at {SHAS[7][:7]}: fail", "tests/test_zz.py::test_x (and 1 more failed)",
                         HOSTILE.split("\n")[0]]
    assert texts[3].startswith(f"verdict: broken on main since {SHAS[3][:7]} (") and texts[4] == "open the run"
    assert tab.eval("document.querySelectorAll('img, #tip b, #tip strong').length") == 0
    # a passing cell shows nothing; leaving the grid hides it
    x, y = _centre(tab, _cell(tab, "tests/test_aa.py", 0))
    tab.send("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": x, "y": y})
    assert tab.eval("document.getElementById('tip').hidden") is True


def test_a_hostile_message_renders_as_text(tmp_path: Path, browser: Browser) -> None:
    """The one failing test of a file carries `HOSTILE` (an ``<img onerror>``, Markdown): its tip
    holds that first line verbatim, as text."""
    from ci.report.model import Failure, FileRow, Report, Run
    from ci.report.write import write_report

    runs = (Run(0, SHAS[0], "push", "1", f"{BASE}/actions/runs/1", ""),)
    row = FileRow("cpu", "tests/test_<b>x</b>.py", "@o", "active", ("fail",), (1.0,), "failing", 0, 1, 0.0,
                  (Failure(0, 'tests/test_<b>x</b>.py::test_<img src=x onerror="window.__pwned=4">', HOSTILE.split("\n")[0], 1),))
    page = write_report(Report("t", "acme/x", runs, (row,), (), (), (), None, 0.9), tmp_path / "hostile")[0]
    tab = browser.open(page)
    tab.key("Tab")
    x, y = _centre(tab, "document.querySelector('#matrix .c')")
    for kind in ("mousePressed", "mouseReleased"):
        tab.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})
    texts = tab.eval("[...document.getElementById('tip').children].map(c => c.textContent)")
    assert texts[1:3] == ['tests/test_<b>x</b>.py::test_<img src=x onerror="window.__pwned=4">', HOSTILE.split("\n")[0]]
    assert tab.eval("[document.querySelectorAll('img, #tip b, #matrix b').length, window.__pwned === undefined]") == [0, True]
    assert tab.errors == []
    tab.close()


def test_enter_pins_the_tip_and_escape_gives_the_focus_back(tab: Tab) -> None:
    tab.eval(f"{_cell(tab, 'tests/test_new_break.py', 0)}.focus()")  # the grid's tab stop, first row
    tab.key("End")
    assert tab.eval("document.activeElement.getAttribute('aria-label')").startswith("fail: tests/test_new_break.py")
    tab.key("Enter")
    assert tab.eval("[document.getElementById('tip').hidden, document.activeElement.href]") == [
        False, f"{BASE}/actions/runs/7"]
    tab.key("Escape")
    assert tab.eval("[document.getElementById('tip').hidden, document.activeElement.dataset.c,"
                    " document.activeElement.closest('.vr').dataset.file]") == [True, "7", "tests/test_new_break.py"]


def test_the_pull_request_view_lists_its_failure_first(tab: Tab) -> None:
    rows = tab.eval("[...document.querySelectorAll('#pull tbody tr')].map(r => [...r.cells].map(c => c.textContent))")
    assert [r[:3] + [r[5]] for r in rows[:2]] == [["cpu", "tests/test_ab.py", "not selected", "fail"],
                                                  ["cpu", "tests/test_ac.py", "selected", "not-run"]]
    assert rows[0][7].startswith("tests/test_ab.py::test_x: AssertionError: pr broke it [verdict: new: probably this change's")
    assert all(r[7] == "" for r in rows[1:])
