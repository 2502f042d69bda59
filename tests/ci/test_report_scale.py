"""The HUD at scale and with hostile names, in a real browser (headless Chromium over the
DevTools protocol, `ci.report.browser`): a 10,000-character file name is cut with an ellipsis,
whole on hover and in the text, and moves no cell; 3,000 rows draw only what is visible; the
keyboard reaches a row that was not drawn; the filters survive a reload through the URL.

The oracles are layout (``getBoundingClientRect``) and the fixture's own numbers, never the
page's script state. Without chromium this FAILS, like tests/ci/test_report_browser.py.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterator

import pytest

from ci.report.browser import Browser, Tab, find_chromium
from ci.report.model import FileRow, Report, Run
from ci.report.write import write_report

ROWS, RUNS = 3000, 8
LONG = "tests/" + "x" * 10_000 + ".py"
STATUS = ("pass", "fail", "flaky", "skipped")


def _report(long_at: int | None) -> Report:
    runs = tuple(Run(i, f"{i:07x}", "push", str(i), f"https://ci.example/run/{i}", "") for i in range(RUNS))
    rows = tuple(FileRow("cpu" if i % 2 else "gpu", LONG if i == long_at else f"tests/test_mod{i}.py",
                         f"@team{i % 3}", "active", tuple(STATUS[(i + j) % 4] for j in range(RUNS)), (1.0,) * RUNS)
                 for i in range(ROWS))
    return Report("2026-12-04T00:00:00+00:00", "acme/big", runs, rows, (), (), (), None, 0.9)


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("scale")
    return {name: write_report(_report(at), base / name)[0] for name, at in (("short", None), ("long", 1))}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert find_chromium(), "no chromium: run `python3 ci/bootstrap.py`, which finds or installs one"
    with Browser(width=1400, height=900) as b:
        yield b


_FIRST_CELLS = """[...document.querySelectorAll('#matrix .vr')].map(r => [r.dataset.file,
    r.querySelector('.c').getBoundingClientRect().left, r.querySelector('.c[data-c="%d"]').getBoundingClientRect().left])"""
_RENDERED = "[...document.querySelectorAll('#matrix .vr')].map(r => r.dataset.file)"


def test_a_long_name_is_cut_and_moves_no_cell(browser: Browser, pages: dict[str, Path]) -> None:
    short, long = browser.open(pages["short"]), browser.open(pages["long"])
    for tab in (short, long):
        assert tab.errors == []
    base, got = short.eval(_FIRST_CELLS % (RUNS - 1)), long.eval(_FIRST_CELLS % (RUNS - 1))
    assert len(got) == len(base) and got[1][0] == LONG
    assert len({round(x, 2) for _, x, _ in base}) == 1  # one column for every row
    assert [(x, last) for _, x, last in got] == [(x, last) for _, x, last in base]  # the long name moves nothing
    cut = long.eval("""(() => { const n = document.querySelectorAll('#matrix .vr')[1].querySelector('.nm'),
        t = n.querySelector('.tl'), s = getComputedStyle(t), b = n.getBoundingClientRect();
        return [n.textContent.length, n.title.length, s.textOverflow, t.scrollWidth > t.clientWidth, b.width]; })()""")
    assert cut[:4] == [len(LONG), len(LONG), "ellipsis", True] and cut[4] <= 320
    # nothing grows the page sideways: the document is no wider than the window
    widths = long.eval("[document.documentElement.scrollWidth, window.innerWidth,"
                       " document.getElementById('matrix').getBoundingClientRect().right]")
    assert widths[0] <= widths[1] and widths[2] <= widths[1]
    short.close()
    long.close()


def test_only_visible_rows_are_drawn(browser: Browser, pages: dict[str, Path]) -> None:
    # the script and style (under 40 kB), then a row's name and indexes (~40 bytes) and a byte a cell;
    # a tag a cell (`<td class=p>✓`, 14 bytes) would add 336 kB
    assert pages["short"].stat().st_size < 40_000 + ROWS * (40 + RUNS)
    tab = browser.open(pages["short"])
    drawn = tab.eval(_RENDERED)
    assert 10 <= len(drawn) <= 120 and drawn[0] == "tests/test_mod0.py"
    # the box is as tall as every row would be: the scroll bar tells the truth
    assert tab.eval("document.querySelector('#matrix .vbody').getBoundingClientRect().height") == ROWS * 20
    tab.eval("document.getElementById('matrix').scrollTop = 1500 * 20")
    tab.eval("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    assert "tests/test_mod1500.py" in tab.eval(_RENDERED) and "tests/test_mod0.py" not in tab.eval(_RENDERED)
    assert tab.errors == []
    tab.close()


def _focused(tab: Tab) -> list[object]:
    return tab.eval("(() => { const a = document.activeElement, r = a.closest('.vr');"
                    " return [r && r.dataset.file, a.dataset.c === undefined ? null : +a.dataset.c, a.className]; })()")


def test_the_keyboard_reaches_every_cell(browser: Browser, pages: dict[str, Path]) -> None:
    tab = browser.open(pages["short"])
    tab.key("/")
    for _ in range(RUNS + 5):  # past the run links of the header, into the grid's one tab stop
        tab.key("Tab")
        if _focused(tab)[1] is not None:
            break
    assert _focused(tab) == ["tests/test_mod0.py", 0, "c p"]
    tab.key("ArrowRight")
    tab.key("ArrowDown")
    assert _focused(tab)[:2] == ["tests/test_mod1.py", 1]
    last = f"tests/test_mod{ROWS - 1}.py"
    assert last not in tab.eval(_RENDERED)  # not drawn yet
    tab.key("End", "Control")
    assert _focused(tab)[:2] == [last, RUNS - 1]
    box = tab.eval("""(() => { const b = document.getElementById('matrix').getBoundingClientRect(),
        c = document.activeElement.getBoundingClientRect(); return [b.top, b.bottom, c.top, c.bottom]; })()""")
    assert box[0] <= box[2] and box[3] <= box[1]  # scrolled into the box's view
    expected = STATUS[(ROWS - 1 + RUNS - 1) % 4]
    assert tab.eval("document.activeElement.getAttribute('aria-label')") == expected
    tab.key("ArrowUp")
    tab.key("Home")
    assert _focused(tab)[:2] == [f"tests/test_mod{ROWS - 2}.py", 0]
    tab.key("Home", "Control")
    assert _focused(tab)[:2] == ["tests/test_mod0.py", 0]
    assert tab.errors == []
    tab.close()


def test_filters_reach_undrawn_rows_and_live_in_the_url(browser: Browser, pages: dict[str, Path]) -> None:
    tab = browser.open(pages["short"])
    tab.key("/")
    tab.type("mod2999")
    assert tab.eval(_RENDERED) == ["tests/test_mod2999.py"]
    tab.key("t")  # does not type: the text box has focus, so "t" is text
    assert tab.eval("document.getElementById('f-text').value") == "mod2999t"
    tab.key("Backspace")
    tab.key("Tab")  # leave the box (for the first run link)
    tab.key("t")  # now a shortcut: the tier select
    tab.key("ArrowDown")  # every tier -> cpu
    fragment = tab.eval("location.hash")
    assert fragment == "#tier=cpu&text=mod2999"
    tab.close()
    again = browser.open(pages["short"], fragment="tier=cpu&text=mod2999")
    assert again.eval("[document.getElementById('f-tier').value, document.getElementById('f-text').value]") == [
        "cpu", "mod2999"]
    assert again.eval(_RENDERED) == ["tests/test_mod2999.py"]
    assert again.eval("document.querySelector('[data-count-of=matrix]').textContent") == f"1 of {ROWS} shown"
    again.key("Escape")
    assert again.eval("location.hash") == "" and len(again.eval(_RENDERED)) > 10
    # a hostile fragment is only a filter value: nothing runs, nothing is asked for
    evil = browser.open(pages["short"], fragment="text=%3Cimg%20src%3Dx%20onerror%3Dwindow.__pwned%3D1%3E&tier=nope")
    assert evil.eval("[window.__pwned === undefined, document.getElementById('f-tier').value]") == [True, ""]
    assert evil.eval(_RENDERED) == [] and evil.errors == []
    assert all(u.startswith(pages["short"].parent.resolve().as_uri()) for u in evil.requests)
    again.close()
    evil.close()


def test_a_run_without_a_safe_link_opens_nothing_and_shifts_no_other(browser: Browser, tmp_path: Path) -> None:
    """Run 0's URL is ``javascript:``: its header has no link, a click on its cell opens nothing, and
    the cells of the other columns still open their own run (a header list that skipped the
    link-less column would send each cell to its neighbour's run). The navigation is caught (Fetch)
    and refused, so nothing leaves the machine."""
    base = _report(None)
    runs = (Run(0, "0" * 7, "push", "0", "javascript:alert(1)", ""), *base.runs[1:])
    page = write_report(dataclasses.replace(base, runs=runs, rows=base.rows[:40]), tmp_path / "unsafe")[0]
    tab = browser.open(page)
    assert tab.eval("document.querySelectorAll('#matrix .vhead .r')[0].querySelector('a')") is None
    tab.send("Fetch.enable", {"patterns": [{"urlPattern": "*"}]})
    for column in (0, 2):
        x, y = tab.eval("""(() => { const c = document.querySelectorAll('#matrix .vr')[0].querySelector('.c[data-c="%d"]');
            const b = c.getBoundingClientRect(); return [b.left + b.width / 2, b.top + b.height / 2]; })()""" % column)
        for kind in ("mousePressed", "mouseReleased"):
            tab.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})
    paused = browser.wait_event("Fetch.requestPaused", tab.session, timeout=10)["params"]
    tab.send("Fetch.failRequest", {"requestId": paused["requestId"], "errorReason": "BlockedByClient"})
    assert paused["request"]["url"] == "https://ci.example/run/2"  # the first navigation is column 2's own
    assert tab.errors == []
    tab.close()
