"""The HUD on a history with a bad runner (tests/ci/report_infra_support.py): infra failures get their
own status, a runner is at fault only when out of line with its pool and a spell on the whole pool
is the pool's (`ci.history.runners.pool_review`: the verdicts' rule and numbers), a failing
row shows its error line inline, long names keep their distinguishing tail, and the page works at
390 px as at 1440 px. The browser half runs headless Chromium (`ci.report.browser`) at both widths
and reads geometry from the page (``getBoundingClientRect``); screenshots go to ``tmp_path``.
Oracles: the history's hand-written story, `ci.history.runners` on the same store, and
layout; never the page's script state. Without chromium this FAILS, like the other browser tests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.runners import pool_review, runner_health
from ci.history.store import open_store
from ci.report.browser import Browser, Tab
from ci.report.model import PoolRow, RunnerRow
from tests.ci.report_infra_support import (BAD, COMMITS, CUDA, FILES, GOOD, HOSTILE_ERROR, HOSTILE_FILE, HOSTILE_TEST,
                                           LONG_A, LONG_B, POOL, PREFIX, REPO, SHAS, build_history, build_pool_history,
                                           write_repo)
from tests.ci import test_history_runner_blame as blame
from tests.ci.history_support import Case, pg_server, store_location, write_report  # noqa: F401 (fixtures)
from tests.ci.report_support import built_report, chromium, clean_tab, hud_page, known_store

SIZES = {"1440": (1440, 900), "390": (390, 844)}
BAD_TEXT = f"{BAD} has infra failures in 10 of 18 reports (cuda 10)"
OUT = ("out of line with the pool: 10 of its 27 recent test runs failed with infra errors (2 tests), against 1 of 81 "
       "on the pool's 3 other runners (Fisher p = 6e-06)")
GOOD_TEXT = f"{GOOD} has infra failures in 1 of 3 reports (nccl 1)"
SPELL = ("the pool's 4 runners failed it with infra errors in all its 4 recent runs of other pull requests and main "
         "commits, none passing (an image or driver change?)")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    base = tmp_path_factory.mktemp("infra")
    return known_store(str(base / "history.sqlite"), base, write_repo, build_history)


def test_infra_failures_are_their_own_status_and_stay_failing(store: tuple[str, Path]) -> None:
    report = built_report(*store, shards=None)
    rows = {r.file: r for r in report.rows}
    assert [r.file for r in report.rows[:3]] == [LONG_A, LONG_B, HOSTILE_FILE]
    assert rows[LONG_A].cells == tuple("infra" if i % 2 == 0 else "pass" for i in range(COMMITS))
    assert rows[LONG_B].cells == tuple("infra" if i % 2 or i == 8 else "pass" for i in range(COMMITS))
    assert rows[HOSTILE_FILE].cells == ("pass",) * 8 + ("fail",)
    assert rows["tests/test_ok.py"].cells[3] == "infra" and rows["tests/test_ok.py"].state == "flaky"
    assert [(rows[f].state, rows[f].since, rows[f].streak) for f in (LONG_A, LONG_B)] == [("failing", 8, 1),
                                                                                         ("failing", 7, 2)]
    latest = rows[LONG_A].failures[-1]
    assert (latest.infra, latest.runner) == ("cuda", BAD)
    assert latest.verdict == f"infra: cuda on runner {BAD}, {OUT}; {BAD_TEXT}"  # the verdict names the runner, and why
    assert (rows[HOSTILE_FILE].failures[-1].infra, rows[HOSTILE_FILE].failures[-1].message) == ("", HOSTILE_ERROR)


def test_the_runner_out_of_line_with_its_pool_is_at_fault(store: tuple[str, Path]) -> None:
    """One runner of four fails 10 of its 18 reports: at fault, with the verdicts' counts and p."""
    report = built_report(*store, shards=None)
    assert report.runners == (RunnerRow(BAD, 18, 10, 10, (("cuda", 10),), True, BAD_TEXT, f"on gpu_h100, {OUT}"),
                              RunnerRow(GOOD, 3, 1, 1, (("nccl", 1),), False, GOOD_TEXT))
    assert report.pools == ()
    with open_store(store[0], create=False) as s:
        health, review = runner_health(s), pool_review(s, REPO, "gpu_h100")
    assert [o.runner for o in review.out_of_line] == [BAD] and review.runners == tuple(sorted(POOL))
    assert [(r.bad, r.text) for r in report.runners] == [(r.runner == BAD, health[r.runner].describe())
                                                         for r in report.runners]


@pytest.fixture(scope="module")
def pool_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    base = tmp_path_factory.mktemp("pool")
    return known_store(str(base / "history.sqlite"), base, write_repo, build_pool_history)


def test_a_spell_on_the_whole_pool_is_the_pools_not_a_runners(pool_store: tuple[str, Path]) -> None:
    """Every runner fails 4 of its 9 reports alike (each over any count-only rule): none is at
    fault, and each test's spell is shown as the pool's."""
    report = built_report(*pool_store, shards=None)
    assert report.runners == tuple(RunnerRow(r, 9, 4, 4, (("cuda", 4),), False,
                                             f"{r} has infra failures in 4 of 9 reports (cuda 4)") for r in sorted(POOL))
    nodes = sorted(f"{f}::test_x" for f in FILES)
    assert report.pools == tuple(PoolRow("gpu_h100", n, SPELL) for n in nodes)
    with open_store(pool_store[0], create=False) as s:
        review = pool_review(s, REPO, "gpu_h100")
    assert review.out_of_line == () and [(p.node, p.text) for p in review.spells] == [(n, SPELL) for n in nodes]


def test_pool_review_names_the_named_runners_of_its_window_up_to_as_of(store_location: str, tmp_path: Path) -> None:
    """`pool_review` lists the runners that named themselves, in the reports up to ``as_of``."""
    with open_store(store_location) as s:
        for i, runner in enumerate(("h100-01", "", "h100-02")):
            identity = RunIdentity(REPO, f"{i:07x}", "push", "gpu_h100", runner=runner)
            assert ingest(s, prepare(write_report(tmp_path, [Case("tests/test_x.py", "test_x")]), identity)).added
        first, second, _ = (int(rid) for (rid,) in s.fetchall("SELECT id FROM reports ORDER BY id"))
        reviews = [pool_review(s, REPO, "gpu_h100", as_of=as_of).runners for as_of in (None, second, first)]
    assert reviews == [("h100-01", "h100-02"), ("h100-01",), ("h100-01",)]



def test_pool_review_lists_the_runners_out_of_line_smallest_p_first(store_location: str, tmp_path: Path) -> None:
    """Four runners' 16 clean jobs; h100-01 fails 3 tests with an ECC error in each of its 4 jobs,
    h100-02 fails 5: both out of line, h100-02 (the smaller p) first, whatever their names' order."""
    with open_store(store_location) as s:
        for i, runner in enumerate(blame.RUNNERS[2:] * 4):
            blame.job(s, tmp_path, blame.sha(i), runner)
        for k in range(4):
            blame.job(s, tmp_path, blame.sha(100 + k), "h100-01", dict.fromkeys(blame.TESTS[:3], blame.ECC))
            blame.job(s, tmp_path, blame.sha(200 + k), "h100-02", dict.fromkeys(blame.TESTS[:5], blame.ECC))
        found = pool_review(s, blame.REPO, blame.TIER).out_of_line
    assert [o.runner for o in found] == ["h100-02", "h100-01"] and found[0].p < found[1].p

@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hud_page(tmp_path_factory.mktemp("infra-page"), write_repo, build_history, 1, [])


@pytest.fixture(scope="module", params=sorted(SIZES))
def browser(request: pytest.FixtureRequest) -> Iterator[Browser]:
    with chromium(*SIZES[request.param]) as b:
        yield b


@pytest.fixture
def tab(browser: Browser, page: Path) -> Iterator[Tab]:
    with clean_tab(browser, page) as t:  # no error, no injected script or dialog ran
        yield t


def _row(file: str) -> str:
    return f"[...document.querySelectorAll('#matrix .vr')].find(r => r.dataset.file === {json.dumps(file)})"


_BOX = "(e => { const b = e.getBoundingClientRect(); return [b.left, b.top, b.right, b.bottom]; })"
# what an element covers: its box and every descendant's (content that overflows a fixed height too)
_EXTENT = """(e => [e, ...e.querySelectorAll('*')].map(x => x.getBoundingClientRect()).filter(b => b.width && b.height)
    .reduce((a, b) => [Math.min(a[0], b.left), Math.min(a[1], b.top), Math.max(a[2], b.right), Math.max(a[3], b.bottom)],
            [Infinity, Infinity, -Infinity, -Infinity]))"""


def test_infra_is_marked_by_class_colour_and_glyph_and_the_runners_at_fault_named(tab: Tab) -> None:
    cells = tab.eval(f"[...{_row(LONG_A)}.querySelectorAll('.c')].map(c => [c.className, c.textContent,"
                     " getComputedStyle(c).backgroundColor, c.getAttribute('aria-label').split(':')[0]])")
    fail = tab.eval(f"getComputedStyle({_row(HOSTILE_FILE)}.querySelector('.c[data-c=\"8\"]')).backgroundColor")
    infra = ["c i", "!", "rgb(0, 0, 0)", f"infra (infra cuda on {BAD})"]
    assert cells[0] == cells[8] == infra and cells[1][:2] == ["c p", "✓"] and fail != infra[2]
    err = tab.eval(f"(e => [e.className, e.textContent])({_row(LONG_A)}.querySelector('.err'))")
    assert err == ["err inf", f"! infra cuda on {BAD}: RuntimeError: CUDA error: uncorrectable ECC error encountered"]
    runners = tab.eval("[...document.querySelectorAll('#runners tbody tr')].map(r => [r.className,"
                       " ...[...r.cells].map(c => c.textContent)])")
    assert runners == [["bad", BAD, "! out of line", "10", "18", "10", "cuda 10", f"{BAD_TEXT}; on gpu_h100, {OUT}"],
                       ["ok", GOOD, "", "1", "3", "1", "nccl 1", GOOD_TEXT]]
    assert tab.eval("document.querySelector('.atfault').textContent") == f"! at fault: {BAD} on gpu_h100, {OUT} (runners)"
    assert tab.eval("document.querySelectorAll('#pools li').length") == 0


@pytest.fixture(scope="module")
def pool_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hud_page(tmp_path_factory.mktemp("pool-page"), write_repo, build_pool_history, 1, [])


def test_a_pool_wide_spell_is_shown_as_the_pools(browser: Browser, pool_page: Path, tmp_path: Path) -> None:
    with clean_tab(browser, pool_page) as tab:
        width = tab.eval("innerWidth")
        tab.eval("document.getElementById('runners-h').scrollIntoView()")
        (tmp_path / f"pool-{width}.png").write_bytes(tab.screenshot())
        rows = tab.eval("[...document.querySelectorAll('#runners tbody tr')].map(r => [r.className,"
                        " r.cells[0].textContent, r.cells[1].textContent])")
        assert rows == [["ok", r, ""] for r in sorted(POOL)]  # no runner marked
        items = tab.eval("[...document.querySelectorAll('#pools li')].map(li => li.textContent)")
        assert items == [f"the pool of gpu_h100: {f}::test_x: {SPELL}" for f in sorted(FILES)]
        assert tab.eval("document.querySelector('.atfault').textContent") == (
            "! at fault: the pool of gpu_h100: 4 test(s) failing on every runner (runners)")
        boxes = tab.eval(f"[...document.querySelectorAll('#pools li')].map({_BOX})")
        assert all(0 <= b[0] and b[2] <= width for b in boxes)  # each spell wraps inside the window
        assert tab.eval("document.scrollingElement.scrollWidth") <= width


def test_a_failing_row_shows_its_error_line_inline_as_text(tab: Tab) -> None:
    got = tab.eval(f"(e => [e.textContent, e.title.split('\\n'), getComputedStyle(e).textOverflow,"
                   f" e.scrollWidth > e.clientWidth])({_row(HOSTILE_FILE)}.querySelector('.err'))")
    assert got[0] == HOSTILE_ERROR and got[2:] == ["ellipsis", True]  # cut on the page, whole in its text
    assert got[1][:2] == [f"{HOSTILE_FILE}::{HOSTILE_TEST}", HOSTILE_ERROR] and got[1][2].startswith("verdict: ")
    assert tab.eval("document.querySelectorAll('img, a[href^=javascript], b').length") == 0  # markup stayed text
    width = tab.eval("innerWidth")
    box = tab.eval(f"{_BOX}({_row(HOSTILE_FILE)}.querySelector('.err'))")
    if width >= 1000:  # visible without hovering or scrolling
        assert 0 <= box[0] and box[2] <= width
    assert tab.eval(f"{_row('tests/test_ok.py')}.querySelector('.err').textContent") == ""  # not failing now


def test_long_names_keep_their_distinguishing_tail(tab: Tab) -> None:
    assert LONG_A[:60] == LONG_B[:60] == PREFIX
    wide = tab.eval("innerWidth") >= 1000  # under 700 px the end takes the whole column
    for name, tail in ((LONG_A, "decode_paged_kv.py"), (LONG_B, "prefill_ragged.py")):
        # a range of text is seen where it lies inside the span that clips it and inside the cell
        got = tab.eval(f"""(() => {{ const n = {_row(name)}.querySelector('.nm'), r = document.createRange(),
            tl = n.querySelector('.tl'), hd = n.querySelector('.hd'), t = tl.firstChild.firstChild, h = hd.firstChild;
            const inside = (a, el) => {{ const b = el.getBoundingClientRect(); return a.left >= b.left && a.right <= b.right; }};
            r.setStart(t, t.length - {len(tail)}); r.setEnd(t, t.length); const e = r.getBoundingClientRect();
            r.setStart(h, 0); r.setEnd(h, 5); const s = r.getBoundingClientRect();
            return [n.textContent, n.title, inside(e, tl) && inside(e, n), inside(s, hd) && inside(s, n), e.width > 0]; }})()""")
        assert got == [name, name, True, wide, True], name  # the end (and, wide, the first folder) in the box


def test_the_page_fits_its_width(tab: Tab, tmp_path: Path) -> None:
    width, height = tab.eval("[innerWidth, innerHeight]")
    (tmp_path / f"hud-{width}.png").write_bytes(tab.screenshot())
    assert tab.eval("document.scrollingElement.scrollWidth") <= width  # no sideways scroll of the page
    filters = tab.eval(f"{_EXTENT}(document.getElementById('filters'))")
    for heading in ("document.querySelector('h1')", "document.getElementById('matrix-h')"):
        box = tab.eval(f"{_BOX}({heading})")
        assert box[2] <= filters[0] or box[0] >= filters[2] or box[3] <= filters[1] or box[1] >= filters[3], heading
    matrix = tab.eval(f"{_BOX}(document.getElementById('matrix'))")
    assert tab.eval("getComputedStyle(document.getElementById('matrix')).overflowX") == "auto"
    assert matrix[0] >= 0 and matrix[2] <= width
    seen = tab.eval(f"""[...document.querySelectorAll('#matrix .c[data-c]')].map({_BOX}).filter(b =>
        b[0] >= {max(0, matrix[0])} && b[2] <= {min(width, matrix[2])} && b[1] >= 0 && b[3] <= {height}).length""")
    assert seen >= 1  # a result cell in the first screen, no scrolling
    if width < 1000:  # the matrix scrolls sideways inside its own box, not the page
        assert tab.eval("(m => m.scrollWidth > m.clientWidth)(document.getElementById('matrix'))") is True
    # a heading reached by the nav's link: room below the page, so it can reach the top
    tab.eval("document.body.style.paddingBottom = '3000px'; document.getElementById('matrix-h').scrollIntoView()")
    box, filters = tab.eval(f"{_BOX}(document.getElementById('matrix-h'))"), tab.eval(f"{_EXTENT}(document.getElementById('filters'))")
    assert tab.eval("scrollY") > 0 and (box[3] <= filters[1] or box[1] >= filters[3])  # the sticky bar covers it not
    (tmp_path / f"hud-{width}-matrix.png").write_bytes(tab.screenshot())


# Issue 51: the culprit search of a row failing now, first in its error cell. LONG_B: found, with
# the search's run; LONG_A: stopped short, its run link not http(s) (shown without a link);
# HOSTILE_FILE: requested, no answer yet; tests/test_ok.py (not failing now): nothing shown.
SEARCH_URL = "https://github.com/acme/infra/actions/runs/5"


def _culprit_history(location: str, directory: Path) -> None:
    from ci.history.culprits import CulpritAnswer, CulpritRequest, record_answer, record_requests

    build_history(location, directory)
    with open_store(location) as s:
        record_requests(s, [CulpritRequest(REPO, "gpu_h100", LONG_B, SHAS[0], SHAS[7], 12, 2, 7)]
                        + [CulpritRequest(REPO, "gpu_h100", f, SHAS[7], SHAS[8], 12, 2, 1)
                           for f in (HOSTILE_FILE, "tests/test_ok.py")])
        record_answer(s, CulpritAnswer(REPO, "gpu_h100", LONG_B, SHAS[0], SHAS[7], SHAS[5], 0.995, 6, "confident", True,
                                       run_url=SEARCH_URL))
        record_answer(s, CulpritAnswer(REPO, "gpu_h100", LONG_A, SHAS[1], SHAS[8], SHAS[3], 0.5, 12, "budget", False,
                                       run_url="javascript:window.__pwned=6"))


def test_the_culprit_search_is_on_its_failing_row(store_location: str, tmp_path: Path) -> None:
    from ci.report.model import Culprit

    report = built_report(*known_store(store_location, tmp_path, write_repo, _culprit_history), shards=None)
    rows = {r.file: r.culprit for r in report.rows}
    assert rows == {LONG_B: Culprit(SHAS[5], 0.995, True, SEARCH_URL, SHAS[0], SHAS[7]),
                    LONG_A: Culprit(SHAS[3], 0.5, False, "", SHAS[1], SHAS[8]),
                    HOSTILE_FILE: Culprit("", None, False, "", SHAS[7], SHAS[8]), "tests/test_ok.py": None}


def _old_breakage_history(location: str, directory: Path) -> None:
    """Searches of breakages since closed: HOSTILE_FILE's (bad c3; it fails from c8 on) is its only
    one; LONG_B's (bad c1) was answered after its current streak's request (bad c7, searching)."""
    from ci.history.culprits import CulpritAnswer, CulpritRequest, record_answer, record_requests

    build_history(location, directory)
    with open_store(location) as s:
        record_requests(s, [CulpritRequest(REPO, "gpu_h100", LONG_B, SHAS[6], SHAS[7], 12, 2, 1)])
        for file, good, bad in ((HOSTILE_FILE, SHAS[2], SHAS[3]), (LONG_B, SHAS[0], SHAS[1])):
            record_answer(s, CulpritAnswer(REPO, "gpu_h100", file, good, bad, bad, 0.995, 3, "confident", True,
                                           run_url=SEARCH_URL))


def test_a_closed_breakages_search_is_not_shown_on_a_new_one(store_location: str, tmp_path: Path) -> None:
    from ci.report.model import Culprit

    report = built_report(*known_store(store_location, tmp_path, write_repo, _old_breakage_history), shards=None)
    rows = {r.file: r.culprit for r in report.rows}
    assert rows[HOSTILE_FILE] is None
    assert rows[LONG_B] == Culprit("", None, False, "", SHAS[6], SHAS[7])


@pytest.fixture(scope="module")
def culprit_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hud_page(tmp_path_factory.mktemp("culprit-page"), write_repo, _culprit_history, 1, [])


def test_the_culprit_search_shows_first_in_the_error_cell(browser: Browser, culprit_page: Path, tmp_path: Path) -> None:
    with clean_tab(browser, culprit_page) as tab:  # the hostile link ran nothing
        width = tab.eval("innerWidth")
        (tmp_path / f"culprit-{width}.png").write_bytes(tab.screenshot())
        got = {f: tab.eval(f"(e => [e.textContent, e.firstChild.tagName, e.firstChild.getAttribute('href'),"
                           f" e.firstChild.title, e.title.split('\\n').pop()])({_row(f)}.querySelector('.err'))")
               for f in (LONG_B, LONG_A, HOSTILE_FILE)}
        assert got[LONG_B] == [f"culprit {SHAS[5][:7]} (99.5%) · ! infra cuda on {BAD}: {CUDA}", "A", SEARCH_URL,
                               f"culprit {SHAS[5]}, probability 0.995 in {SHAS[0][:7]}..{SHAS[7][:7]}; opens the search run",
                               f"culprit {SHAS[5]}, probability 0.995 in {SHAS[0][:7]}..{SHAS[7][:7]}; opens the search run"]
        assert got[LONG_A][:3] == [f"culprit {SHAS[3][:7]} (50.0%, unsure) · ! infra cuda on {BAD}: {CUDA}", "SPAN", None]
        assert got[LONG_A][3] == f"culprit {SHAS[3]}, probability 0.500 (stopped short) in {SHAS[1][:7]}..{SHAS[8][:7]}"
        assert got[HOSTILE_FILE][:3] == [f"culprit: searching · {HOSTILE_ERROR}", "SPAN", None]
        assert got[HOSTILE_FILE][3].startswith("culprit search requested, no answer yet")
        assert tab.eval(f"{_row('tests/test_ok.py')}.querySelector('.err').textContent") == ""
        assert tab.eval("document.querySelectorAll('a[href^=javascript], img').length") == 0
        assert tab.eval("document.scrollingElement.scrollWidth") <= width  # the page still fits its width
        box = tab.eval(f"{_BOX}({_row(LONG_B)}.querySelector('.cul'))")
        if width >= 1000:  # the culprit is on screen, whole, without scrolling
            assert 0 <= box[0] and box[2] <= width
        err = tab.eval(f"{_BOX}({_row(LONG_B)}.querySelector('.err'))")
        assert err[0] <= box[0] and box[2] <= err[2]  # inside its cell at every width
