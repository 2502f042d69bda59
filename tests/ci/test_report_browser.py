"""The HUD in a real browser: headless Chromium (Debian's ``chromium``) driven over the DevTools
protocol (`ci.report.browser`), on the known history of tests/ci/report_support.py.

Checked: no console error or uncaught exception, no request but the page itself from its own
folder, no injected script runs, every matrix cell, flaky rank and shard bar where the fixture
puts it (by layout, not only by markup), the filters through real key presses, and every
durations cell reached by arrow keys. Screenshots
go to the test's tmp_path and, when set, ``$CI_ARTIFACTS``. Without chromium this FAILS (``ci/bootstrap.py``,
the README commands' first step, finds or installs one): a browser test that skips would check nothing.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from ci.report.browser import Browser, Tab
from tests.ci.report_support import EVIL_FILE, EXPECTED, PR, RUNS, build_history, chromium, hud_page, write_repo

LETTER = {"pass": "✓", "fail": "✗", "flaky": "~", "skipped": "S", "quarantined": "Q", "manual": "M", "not-run": "·"}


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hud_page(tmp_path_factory.mktemp("hud"), write_repo, build_history, PR,
                    ["tests/test_a.py", "tests/test_b.py"], "--shards", "2")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium() as b:
        yield b


@pytest.fixture
def tab(browser: Browser, page: Path) -> Tab:
    return browser.open(page)


def _save(tab: Tab, name: str, tmp_path: Path, full: bool = False) -> Path:
    shot = tmp_path / name
    shot.write_bytes(tab.screenshot(full_page=full))
    if os.environ.get("CI_ARTIFACTS"):
        target = Path(os.environ["CI_ARTIFACTS"]) / "report"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, target / name)
    return shot


def _visible(tab: Tab) -> list[str]:
    return tab.eval("[...document.querySelectorAll('#matrix .vr')].filter(r => r.offsetParent !== null)"
                    ".map(r => r.dataset.tier + ' ' + r.dataset.file)")


def test_page_loads_clean_and_asks_for_nothing_else(tab: Tab, page: Path, tmp_path: Path) -> None:
    assert tab.first_paint_ms() is not None
    assert tab.errors == []
    own = page.parent.resolve().as_uri() + "/"
    assert tab.requests and all(url.startswith(own) for url in tab.requests), tab.requests
    assert tab.eval("window.__pwned === undefined") is True  # no injected script or handler ran
    assert tab.eval("document.querySelectorAll('script:not([type=\"application/json\"])').length") == 1
    assert tab.eval("document.querySelectorAll('script[type=\"application/json\"]').length") == 1  # data, not run
    assert tab.eval("document.querySelectorAll('#matrix img, #durations img').length") == 0
    # the markup-laden file name is shown as the text it is
    assert EVIL_FILE in tab.eval("[...document.querySelectorAll('#matrix .vr .nm')].map(t => t.textContent)")
    assert _save(tab, "report-top.png", tmp_path).stat().st_size > 10_000
    _save(tab, "report-full.png", tmp_path, full=True)


def test_matrix_cells_sit_under_their_runs(tab: Tab) -> None:
    rows = tab.eval("""[...document.querySelectorAll('#matrix .vr')].map(r => ({key: r.dataset.tier + '|' +
        r.dataset.file, cells: [...r.querySelectorAll('.c')].map(c => [c.className, c.textContent,
        c.getBoundingClientRect().left + c.getBoundingClientRect().width / 2])}))""")
    heads = tab.eval("""[...document.querySelectorAll('#matrix .vhead .r')].map(h => [h.getBoundingClientRect().left,
        h.getBoundingClientRect().right, h.querySelector('a').href])""")
    assert [h[2] for h in heads] == [f"https://ci.example/run/{i}" for i in range(RUNS)]
    got = {tuple(r["key"].split("|", 1)): r["cells"] for r in rows}
    assert set(got) == set(EXPECTED)
    classes = {"pass": "p", "fail": "f", "flaky": "k", "skipped": "s", "quarantined": "q", "manual": "m", "not-run": "n"}
    for key, statuses in EXPECTED.items():
        cells = got[key]
        assert [c[0] for c in cells] == ["c " + classes[s] for s in statuses], key
        assert [c[1] for c in cells] == [LETTER[s] for s in statuses], key
        for (_, _, centre), (left, right, _) in zip(cells, heads):
            assert left <= centre <= right, key  # each cell sits in its run's column


def test_flaky_ranks_and_plan_bars(tab: Tab) -> None:
    ranks = tab.eval("[...document.querySelectorAll('#flaky tbody tr')].map(r => [r.cells[0].textContent,"
                     " r.cells[1].textContent, r.cells[3].textContent])")
    assert ranks == [["1", "tests/test_b.py::test_wobble", "@beta"], ["2", "tests/test_a.py::test_one", "@alpha"]]
    # cpu, 2 shards: a (10 s) alone; e (7 s) then b (2 s). The axis is 900 px for the 10 s makespan.
    bars = tab.eval("""(() => { const svg = document.querySelector('svg.gantt[data-tier="cpu"]'), o = svg.getBoundingClientRect();
        return [...svg.querySelectorAll('rect.bar')].map(b => { const r = b.getBoundingClientRect();
        return [b.dataset.file, +b.dataset.shard, Math.round(r.left - o.left), Math.round(r.width), Math.round(r.top - o.top)]; }); })()""")
    assert sorted(bars) == sorted([["tests/test_a.py", 1, 60, 900, 4], ["tests/test_e.py", 2, 60, 630, 20],
                                   ["tests/test_b.py", 2, 690, 180, 20]])
    makespan = tab.eval("(() => { const svg = document.querySelector('svg.gantt[data-tier=\"cpu\"]');"
                        " return Math.round(svg.querySelector('line.makespan').getBoundingClientRect().left"
                        " - svg.getBoundingClientRect().left); })()")
    assert makespan == 960


def test_pull_request_view_names_the_rerun(tab: Tab) -> None:
    rows = tab.eval("[...document.querySelectorAll('#pull tbody tr')].map(r => [...r.cells].map(c => c.textContent))")
    by_key = {(r[0], r[1]): r for r in rows}
    assert by_key[("cpu", "tests/test_a.py")][2:6] == ["selected", "changed: tests/test_a.py", "✓", "pass"]
    assert by_key[("cpu", "tests/test_b.py")][6] == "/rerun-test tests/test_b.py --tier cpu"
    assert by_key[("cpu", "tests/test_a.py")][6] == ""


def test_filters_from_the_keyboard(tab: Tab, tmp_path: Path) -> None:
    everything = _visible(tab)
    assert len(everything) == len(EXPECTED)
    tab.key("/")
    assert tab.eval("document.activeElement.id") == "f-text"
    tab.type("test_b")
    assert _visible(tab) == ["cpu tests/test_b.py", "gpu_h100 tests/test_b.py"]
    assert tab.eval("document.querySelector('[data-count-of=matrix]').textContent") == "2 of 7 shown"
    _save(tab, "report-filtered.png", tmp_path)
    tab.key("Escape")
    assert _visible(tab) == everything and tab.eval("document.getElementById('f-text').value") == ""
    tab.key("s")  # the status select; its options: every status, pass, fail, ...
    assert tab.eval("document.activeElement.id") == "f-status"
    tab.key("ArrowDown")
    tab.key("ArrowDown")
    assert tab.eval("document.getElementById('f-status').value") == "fail"
    assert _visible(tab) == [f"cpu {EVIL_FILE}", "cpu tests/test_a.py"]  # failing now first
    tab.key("Escape")
    tab.key("t")
    tab.key("ArrowDown")  # every tier -> cpu
    assert sorted(_visible(tab)) == sorted(f"{t} {f}" for t, f in EXPECTED if t == "cpu")
    assert tab.eval("[...document.querySelectorAll('div.plan')].filter(p => p.offsetParent !== null)"
                    ".map(p => p.dataset.tier)") == ["cpu"]
    assert tab.errors == []


def _click(tab: Tab, x: float, y: float) -> None:
    for kind in ("mousePressed", "mouseReleased"):
        tab.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})


_CELL_AT = """(() => { const row = [...document.querySelectorAll('#matrix .vr')]
    .find(r => r.dataset.tier === 'cpu' && r.dataset.file === '%s');
    const c = row.querySelectorAll('.c')[%d]; c.scrollIntoView({block: 'center'}); const b = c.getBoundingClientRect();
    return [b.left + b.width / 2, b.top + b.height / 2]; })()"""


def _navigation(browser: Browser, tab: Tab) -> str:
    """The URL the tab set out for, caught (Fetch) and refused, so nothing leaves the machine."""
    paused = browser.wait_event("Fetch.requestPaused", tab.session, timeout=10)["params"]
    tab.send("Fetch.failRequest", {"requestId": paused["requestId"], "errorReason": "BlockedByClient"})
    return paused["request"]["url"]


def test_a_click_on_a_passing_cell_opens_its_run(browser: Browser, page: Path) -> None:
    """A real mouse click on the passing cell of (cpu, tests/test_e.py) in run 1 goes to run 1."""
    tab = browser.open(page)
    tab.send("Fetch.enable", {"patterns": [{"urlPattern": "https://*"}, {"urlPattern": "http://*"}]})
    _click(tab, *tab.eval(_CELL_AT % ("tests/test_e.py", 1)))
    assert _navigation(browser, tab) == "https://ci.example/run/1"
    tab.close()


def test_a_click_on_a_failing_cell_pins_its_failure_with_the_run_link(browser: Browser, page: Path) -> None:
    """A real click on the failing cell of (cpu, tests/test_a.py) in run 2 opens no run: it pins
    the failure's tip (the failing test, its message), focused on its link to run 2; a click on
    that link goes to run 2."""
    tab = browser.open(page)
    tab.send("Fetch.enable", {"patterns": [{"urlPattern": "https://*"}, {"urlPattern": "http://*"}]})
    _click(tab, *tab.eval(_CELL_AT % ("tests/test_a.py", 2)))
    tip = tab.eval("(() => { const t = document.getElementById('tip'); return [t.hidden, [...t.children].map(c => c.textContent),"
                   " t.querySelector('a').href, document.activeElement === t.querySelector('a')]; })()")
    assert tip == [False, ["cpu tests/test_a.py at 0000002: fail", "tests/test_a.py::test_one",
                           "AssertionError: off by one", "open the run"], "https://ci.example/run/2", True]
    _click(tab, *tab.eval("(() => { const b = document.querySelector('#tip a').getBoundingClientRect();"
                          " return [b.left + b.width / 2, b.top + b.height / 2]; })()"))
    assert _navigation(browser, tab) == "https://ci.example/run/2"
    tab.close()


def test_every_durations_cell_is_reachable_by_keys(tab: Tab) -> None:
    """The durations grid is one tab stop; arrows and End walk its cells, from the file to the flags."""
    tab.eval("document.querySelector('#durations [tabindex=\"0\"]').focus()")
    where = "[document.activeElement.closest('.vr').dataset.file, document.activeElement.textContent]"
    assert tab.eval(where) == ["tests/test_a.py", "tests/test_a.py"]
    tab.key("ArrowRight")
    assert tab.eval(where) == ["tests/test_a.py", "6"]  # runs with a sample
    tab.key("End")
    assert tab.eval(where) == ["tests/test_a.py", "drift"]
    tab.key("ArrowDown")
    assert tab.eval(where) == ["tests/test_b.py", ""]  # no flag
    assert tab.errors == []

