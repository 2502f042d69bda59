"""The bot's reply fits a GitHub comment: 828 px wide, measured in a real browser.

Each reply is built by the bot's own code (dispatch rows, `report.result_cell`, `row_verdict`,
`headline.retitle`), rendered with cmark-gfm (`cmarkgfm`, GitHub's Markdown) into a page with the
essentials of GitHub's comment CSS (below; the values of GitHub's ``.markdown-body`` rules as
published in sindresorhus/github-markdown-css, at a comment's 14 px), opened in headless Chromium
(`ci.report.browser`) and measured: the runs table's ``scrollWidth`` must be at most 828 px. GitHub
makes a table ``display: block; width: max-content; max-width: 100%; overflow: auto``, so a table
too wide for the comment scrolls sideways: its scrollWidth is then its content's width.

Worst cases: SGLang's longest registered test paths (``test/registered/npu/...``, the real tree at
30cb848d4), its longest class names, 40 shards, every verdict kind, ids with Markdown and HTML
metacharacters (which must show as text). The old layout (runner and tests before the result, ids
without break opportunities) must fail the same measure, or the measure proves nothing.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Iterator

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options as cmarkgfm_options

from ci.report.browser import Browser, find_chromium
from tools.rerun.commands import quote
from tools.rerun.dispatch import DispatchResult, DispatchSpec
from tools.rerun.fit import fit
from tools.rerun.headline import retitle, span
from tools.rerun.replies import marker, run_row
from tools.rerun.report import RunResults, result_cell, row_verdict
from tools.rerun.runs_table import HEADER, LEGACY_HEADER, LEGACY_SEPARATOR, RunRow, table
from tools.rerun.verdicts import BROKEN_ON_MAIN, FLAKY, INFRA, NEW, FailureVerdict

COMMENT_PX = 828
# GitHub's comment essentials: .markdown-body at a comment's 14 px, its table, cell and code rules.
CSS = """
body { margin: 0; }
.markdown-body { box-sizing: border-box; width: 828px; font-size: 14px; line-height: 1.5; word-wrap: break-word;
  font-family: -apple-system, BlinkMacSystemFont, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; }
.markdown-body table { display: block; width: max-content; max-width: 100%; overflow: auto;
  border-spacing: 0; border-collapse: collapse; }
.markdown-body table th, .markdown-body table td { padding: 6px 13px; border: 1px solid #d0d7de; }
.markdown-body code { padding: .2em .4em; margin: 0; font-size: 85%; white-space: break-spaces; border-radius: 6px;
  font-family: ui-monospace, SFMono-Regular, "SF Mono", Menlo, Consolas, "Liberation Mono", monospace; }
"""
# The real tree's longest paths under test/registered (SGLang 30cb848d4) and a long class name there.
SGLANG_FILES = (
    "test/registered/npu/basic_function/parallel_strategy/expert_parallelism/"
    "test_npu_eplb_min_rebalancing_utilization_threshold.py",
    "test/registered/npu/accuracy/qwen3_next_80b_a3b_instruct/test_npu_qwen3_next_80b_w8a8_2p_in6k_out1k5_bs16_aime25.py",
    "test/registered/npu/basic_function/parallel_strategy/data_parallelism/"
    "test_npu_load_balance_method_pd_disaggregation.py",
    "test/registered/npu/basic_function/parallel_strategy/expert_parallelism/"
    "test_npu_deepep_low_latency_deepseek_v3_2_w8a8.py",
)
LONG_CLASS = "TestEplbMinRebalancingUtilizationThreshold095"
HOSTILE = ("[link](https://evil.example)", "**passed**", "<img src=x onerror=alert(1)>", "a | b", "_em_ `c`",
           "@everyone")
RUN = "https://github.com/sgl-project/sglang/actions/runs/19876543210"
# A failure's error line as `ci.history.errors.error_line` gives it (cut at 160 by the cell): long words.
ERROR = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.11 GiB total; "
         "/sgl-workspace/sglang/python/sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_kernels.py:412)")
# Details as `ci.history.verdict.judge` writes them (the longest forms), cut by `FailureVerdict.text`.
VERDICTS = (FailureVerdict(BROKEN_ON_MAIN, "broken on main since abc1234 (3 candidate commits: abc1234, bcd2345, "
                           "cde3456, last passed at 0a1b2c3); main fails with a different error"),
            FailureVerdict(FLAKY, "flaky: the same failure as its earlier flakes (flaky 9% [5%, 13%] over 120 runs "
                           "on gpu_h200_8x)"),
            FailureVerdict(INFRA, "infra: cuda on runner sglang-h200-runner-17; 4 of 9 reports there infra"),
            FailureVerdict(NEW, "new: probably this change's (an error this test never failed with as a flake)"))


def _spec(i: int, shards: int, tests: int = 5) -> DispatchSpec:
    files = tuple(SGLANG_FILES[(i + k) % len(SGLANG_FILES)] for k in range(tests))
    return DispatchSpec("gpu_h200_8x", f"{i}/{shards}", ("self-hosted", "linux", "gpu-h200-8x", "sglang-ci"), files)


def _failing(i: int, n: int) -> tuple[str, ...]:
    names = [f"{SGLANG_FILES[i % 4]}::{LONG_CLASS}::test_gsm8k[tp8-fp8_e4m3-{k}]" for k in range(n)]
    if n > 1:  # several: three hostile names first (`fit` keeps 3 ids of a reply this long)
        names[:0] = [f"{SGLANG_FILES[1]}::{h}" for h in HOSTILE[i % 2 * 3:][:3]]
    return tuple(names[:n])


def reply(shards: int = 40, reported: int | None = None) -> str:
    """A `/rerun-tier` reply of ``shards`` rows, the first ``reported`` of them with results: one
    failure of each verdict kind, several failures (hostile names among them), passes, a run
    without a report."""
    rows = []
    for i in range(1, shards + 1):
        spec = _spec(i, shards)
        row = run_row(DispatchResult(spec, {}, f"rerun-test PR #1 {i}", "sent", run_url=f"{RUN}{i}"))
        if reported is None or i <= reported:
            kind = i % 7
            if kind < 4:  # one failure, one verdict of each kind
                results = RunResults(41, 1, 2, 0, 1834.2, _failing(i, 1), error_lines=(ERROR,))
                verdicts = {results.failing[0]: VERDICTS[kind]}
            elif kind < 6:  # several failures: the hostile names, every kind
                results = RunResults(30, 12, 0, 1, 2380.0, _failing(i, 13), error_lines=(ERROR,) * 13)
                verdicts = {n: VERDICTS[k % 4] for k, n in enumerate(results.failing)}
            else:
                results, verdicts = RunResults(120, 0, 4, 0, 95.0, ()), {}
            if i == 6:  # instead of a pass
                results, verdicts = "the JUnit report is missing or unreadable ([Errno 2] No such file)", {}
            row = row.with_result(result_cell(results, verdicts), f"[run]({RUN}{i})", row_verdict(results, verdicts))
        rows.append(row)
    body = (f"{marker(7001, sha='a' * 40)}\n@maintainer {span(f'{shards} of {shards} run(s) dispatched')} "
            f"(workflow `rerun-test-dispatch.yml` on `main`) for commit `aaaaaaaaaaaa`.\n\n" + table(rows) + "\n")
    return fit(retitle(body))


def legacy_reply(shards: int = 40) -> str:
    """The layout before this change: runner and tests first, backticked paths, ids in plain
    `quote`, the verdict inside the result cell."""
    lines = [f"{marker(7001, sha='a' * 40)}\n@maintainer {shards} of {shards} run(s) dispatched.\n",
             LEGACY_HEADER, LEGACY_SEPARATOR]
    for i in range(1, shards + 1):
        spec = _spec(i, shards)
        failing = _failing(i, 3)
        result = ("**failed**: 30 passed, 3 failed, 0 skipped, 0 errors in 38.4 s · 0 known flakes, 3 new<br>failing:<br>"
                  + "<br>".join(quote(n, limit=160) + " · new" for n in failing))
        tests = "<br>".join(f"`{t}`" for t in spec.tests)
        lines.append(f"| `{spec.tier}` | {spec.part} | `{', '.join(spec.runner)}` | {tests} | [run]({RUN}{i}) | {result} |")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert find_chromium(), "no chromium: run `python3 ci/bootstrap.py`, which finds or installs one"
    with Browser(width=1400, height=900) as b:
        yield b


def page(markdown: str, path: Path) -> Path:
    """``path``, written as a page of ``markdown`` rendered as GitHub does, with its comment CSS."""
    rendered = cmarkgfm.github_flavored_markdown_to_html(markdown, options=cmarkgfm_options.CMARK_OPT_UNSAFE)
    path.write_text(f"<!doctype html><meta charset=utf-8><style>{CSS}</style>"
                    f"<div class=markdown-body>{rendered}</div>", encoding="utf-8")
    return path


def measure(browser: Browser, markdown: str, path: Path) -> dict[str, object]:
    """Render ``markdown`` as GitHub does and measure its first table in the browser."""
    tab = browser.open(page(markdown, path))
    try:
        return tab.eval("""(function(){
          var t = document.querySelector('table'), td = t.querySelector('td'), s = getComputedStyle(td);
          return {scroll: t.scrollWidth, client: t.clientWidth, rows: t.querySelectorAll('tbody tr').length,
                  padding: s.paddingLeft + ' ' + s.paddingRight, collapse: getComputedStyle(t).borderCollapse,
                  body: document.querySelector('.markdown-body').clientWidth,
                  heads: Array.from(t.querySelectorAll('th')).map(function(h){ return h.textContent; }),
                  links: Array.from(document.querySelectorAll('a')).map(function(a){ return a.getAttribute('href'); }),
                  tags: Array.from(document.querySelectorAll('.markdown-body *')).map(function(e){ return e.tagName; }),
                  text: t.innerText};
        })()""")
    finally:
        tab.close()


@pytest.mark.parametrize("shards", [8, 40])
def test_a_reply_with_every_verdict_fits_the_comment(browser: Browser, tmp_path: Path, shards: int) -> None:
    """8 shards: every cell as written (10 failing ids of ~200 characters); 40: `fit` has cut the
    failing lists to 3 ids (a reply of 40 such rows is over GitHub's 65,536 characters)."""
    body = reply(shards)
    assert ("… and 3 more" in body) == (shards == 8) and ("… and 10 more" in body) == (shards == 40)
    got = measure(browser, body, tmp_path / "reply.html")
    assert got["padding"] == "13px 13px" and got["collapse"] == "collapse" and got["body"] == COMMENT_PX  # the CSS applies
    assert got["rows"] == shards and got["heads"] == ["tier", "part", "result", "verdict", "run", "tests", "runner"]
    assert got["scroll"] <= COMMENT_PX, f"the table is {got['scroll']} px wide in an {COMMENT_PX} px comment"
    text = str(got["text"])
    for verdict in ("broken on main since abc1234 (3 candidate commits", "flaky: the same failure as its earlier",
                    "infra: cuda on runner sglang-h200-runner-17", "4 broken on main, 3 flaky, 3 infra, 3 new",
                    "new: probably this change's"):
        assert verdict in text, verdict
    for name in HOSTILE:  # shown as text, never as a link, an image, emphasis or a mention
        assert name in text, name
    assert set(got["links"]) == {f"{RUN}{i}" for i in range(1, shards + 1)}
    assert not {"IMG", "EM", "SCRIPT"} & set(got["tags"])


@pytest.mark.parametrize("reported", [0, 17])
def test_the_reply_fits_before_and_while_results_arrive(browser: Browser, tmp_path: Path, reported: int) -> None:
    got = measure(browser, reply(40, reported), tmp_path / "partial.html")
    assert got["scroll"] <= COMMENT_PX, f"{got['scroll']} px with {reported} of 40 reported"


def test_a_single_targets_row_of_five_long_paths_fits(browser: Browser, tmp_path: Path) -> None:
    spec = DispatchSpec("gpu_h200_8x", "targets", ("self-hosted", "linux", "gpu-h200-8x"), SGLANG_FILES + SGLANG_FILES[:1])
    row = run_row(DispatchResult(spec, {}, "n", "failed", error="HTTP 422: " + "x" * 90 + " " + SGLANG_FILES[0]))
    got = measure(browser, table([row]), tmp_path / "one.html")
    assert got["scroll"] <= COMMENT_PX, got["scroll"]


def test_the_old_layout_fails_the_same_measure(browser: Browser, tmp_path: Path) -> None:
    """The check can fail: the layout before this change scrolls sideways in the same page."""
    got = measure(browser, legacy_reply(40), tmp_path / "old.html")
    assert got["heads"] == ["tier", "part", "runner", "tests", "run", "result"]
    assert got["scroll"] > COMMENT_PX and got["client"] <= COMMENT_PX, got


def test_the_width_is_the_table_and_not_the_page(browser: Browser, tmp_path: Path) -> None:
    """A table of one unbreakable 200-character word is wider than the comment; the same word with
    break opportunities is not: the measure sees content width, not the page's."""
    word = "x" * 200
    wide = measure(browser, f"{HEADER}\n|---|---|---|---|---|---|---|\n| `t` | 1/1 | {html.escape(word)} | — | r | t | r |",
                   tmp_path / "wide.html")
    narrow = measure(browser, f"{HEADER}\n|---|---|---|---|---|---|---|\n| `t` | 1/1 | {'x<wbr>' * 200} | — | r | t | r |",
                     tmp_path / "narrow.html")
    assert wide["scroll"] > COMMENT_PX >= narrow["scroll"], (wide["scroll"], narrow["scroll"])


# -- a /rerun-tier of 41 shards, 2 failing: failing first, passing collapsed, under two screens ---------

SCREEN_PX = 900
TIER_COMMENT = 7041


def _tier_reply(fake, make_client, arrange: bool, tests: int = 5) -> str:
    """The reply to a 41-shard `/rerun-tier` as the bot writes it (`run_row`, fitted), then every
    shard's results written by `Reporter` at the fake GitHub, in shard order; shards 3 and 22 fail.
    ``arrange=False`` writes the rows as before `tools.rerun.layout` (the same bodies, unarranged).
    ``tests`` per shard: with 5 the reply is over GitHub's limit and `fit` counts the tests cells;
    with 2 or 3 they are written out (SGLang's 126-character paths)."""
    from tools.rerun import layout, report as report_module
    from tools.rerun.github import DEFAULT_BOT_LOGIN
    from tools.rerun.report import Reporter

    rows = [run_row(DispatchResult(_spec(i, 41, tests), {}, f"n{i}", "sent", run_url=f"{RUN}{i}")) for i in range(1, 42)]
    fake.add_comment(1, DEFAULT_BOT_LOGIN, fit(f"{marker(TIER_COMMENT, sha='a' * 40)}\n@maintainer "
                                               f"{span('41 of 41 run(s) dispatched')} for commit `aaaaaaaaaaaa`.\n\n"
                                               + table(rows) + "\n"))
    fake.add_pull(1, "a" * 40)
    reporter = Reporter(make_client(), "acme/llm-serving", DEFAULT_BOT_LOGIN, settle=0, sleep=lambda s: None)
    original = report_module.relayout
    report_module.relayout = original if arrange else (lambda body: body)
    try:
        for i in range(1, 42):
            if i in (3, 22):
                results = RunResults(41, 1, 2, 0, 1834.2, _failing(i, 1), error_lines=(ERROR,))
            else:
                results = RunResults(120, 0, 4, 0, 95.0, ())
            reporter.report(1, TIER_COMMENT, "gpu_h200_8x", f"{i}/41", result_cell(results), f"{RUN}{i}")
    finally:
        report_module.relayout = original
    assert layout.relayout is original
    return fake.bot_replies(1)[0].body


def geometry(browser: Browser, markdown: str, path: Path) -> dict[str, object]:
    """Render ``markdown`` as GitHub does; the comment's height and each row's part and bottom edge
    (rows inside a closed ``<details>`` are not shown, so not listed)."""
    tab = browser.open(page(markdown, path))
    try:
        return tab.eval("""(function(){
          var body = document.querySelector('.markdown-body'), top = body.getBoundingClientRect().top;
          var rows = Array.from(document.querySelectorAll('tbody tr')).filter(function(r){ return !r.closest('details:not([open])'); });
          return {height: body.scrollHeight, width: Math.max.apply(null, Array.from(document.querySelectorAll('table'))
                    .map(function(t){ return t.scrollWidth; })),
                  rows: rows.map(function(r){ return [r.cells[1].textContent, r.cells[2].textContent.slice(0, 6),
                                                     r.getBoundingClientRect().bottom - top]; }),
                  summary: Array.from(document.querySelectorAll('summary')).map(function(s){ return s.textContent; }),
                  text: body.innerText};
        })()""")
    finally:
        tab.close()


@pytest.mark.parametrize("tests", [2, 3, 5])
def test_a_41_shard_tier_with_2_failures_fits_two_screens(browser: Browser, fake, make_client, tmp_path: Path,
                                                          tests: int) -> None:
    got = geometry(browser, _tier_reply(fake, make_client, arrange=True, tests=tests), tmp_path / "tier.html")
    shown = [(part, result) for part, result, _ in got["rows"]]
    assert shown[:2] == [("3/41", "failed"), ("22/41", "failed")], shown  # failing first, in shard order
    assert len(shown) == 2 and got["summary"] == ["39 passed run(s)"]  # the passing 39 collapsed
    assert all(bottom <= SCREEN_PX for _, _, bottom in got["rows"]), got["rows"]  # in the first screen
    assert got["height"] <= 2 * SCREEN_PX, got["height"]
    assert got["width"] <= COMMENT_PX, got["width"]
    assert "4762 passed, 2 failed" in str(got["text"]) and "so far" not in str(got["text"])
    assert "paced" not in str(got["text"])  # nothing waits any more


def test_the_same_41_shards_unarranged_fail_the_measure(browser: Browser, fake, make_client, tmp_path: Path) -> None:
    """The measure can fail: the rows as written before `tools.rerun.layout` make a comment many
    screens tall with the second failure far down (the issue's ~15,000 px, with 2 tests a shard)."""
    got = geometry(browser, _tier_reply(fake, make_client, arrange=False, tests=2), tmp_path / "flat.html")
    bottoms = {part: bottom for part, _, bottom in got["rows"]}
    assert got["height"] > 12 * SCREEN_PX and bottoms["22/41"] > 6 * SCREEN_PX, (got["height"], bottoms["22/41"])


def _culprit_replies() -> dict[str, str]:
    """`/culprit`'s replies at their widest: SGLang's longest path with a long class and
    parameters as the test, a commit subject and PR title of Markdown and HTML, 56 runs (the most a
    search may spend, `cmd_culprit.max_budget`, plus its two verifications)."""
    from ci.commands.culprit import Answer
    from ci.commands.culprit_local import Run
    from tools.rerun import culprit_reply
    from tools.rerun.cmd_culprit import CulpritRequest, max_budget
    from tools.rerun.github import CommitPull

    test = f"{SGLANG_FILES[0]}::{LONG_CLASS}::test_gsm8k[tp8-fp8_e4m3-0]"
    request = CulpritRequest("gpu_h200_8x", test, "a" * 40, "b" * 40, max_budget(), 1844)
    searching = culprit_reply.searching(7001, "@maintainer", request, f"{RUN}1")
    runs = tuple(Run(f"{i:040x}", i % 3 == 0, f"{RUN}{i}") for i in range(1, max_budget() + 3))
    subject = " ".join(HOSTILE) + " [3/4] NVFP4 KV cache: quantization strategy abstraction and kernel"
    pulls = [CommitPull(21954, " ".join(HOSTILE) + " " + LONG_CLASS * 2, "https://github.com/sgl-project/sglang/pull/21954",
                        "closed")]
    found = Answer("c" * 40, subject, 0.999, runs, len(runs) - 2, "confident", True)
    short = Answer("c" * 40, subject, 0.871, runs, len(runs) - 2, "budget", False)
    return {"searching": searching,
            "found": culprit_reply.answer(searching, found, pulls, test, "gpu_h200_8x", f"{RUN}1"),
            "stopped": culprit_reply.answer(searching, short, "HTTP 502: " + "x" * 300, test, "gpu_h200_8x", None),
            "failed": culprit_reply.stopped(searching, "stopped: run " + RUN + "9 ended cancelled " + LONG_CLASS * 3,
                                            f"{RUN}1", resumable=True)}


@pytest.mark.parametrize("kind", ["searching", "found", "stopped", "failed"])
def test_the_culprit_replies_fit_the_comment(browser: Browser, tmp_path: Path, kind: str) -> None:
    body = _culprit_replies()[kind]
    tab = browser.open(page(body, tmp_path / f"{kind}.html"))
    try:
        got = tab.eval("""(function(){
          var b = document.querySelector('.markdown-body'), t = document.querySelector('table');
          return {body: b.scrollWidth, table: t ? t.scrollWidth : 0, text: b.innerText,
                  links: Array.from(document.querySelectorAll('a')).map(function(a){ return a.getAttribute('href'); }),
                  tags: Array.from(document.querySelectorAll('.markdown-body *')).map(function(e){ return e.tagName; })};
        })()""")
    finally:
        tab.close()
    assert got["body"] <= COMMENT_PX and got["table"] <= COMMENT_PX, (kind, got["body"], got["table"])
    assert not {"IMG", "EM", "STRONG", "SCRIPT"} & set(got["tags"]), got["tags"]
    assert all(str(link).startswith("https://github.com/sgl-project/sglang/") for link in got["links"])
    if kind in ("found", "stopped"):
        assert all(name in got["text"] for name in HOSTILE)  # the subject shows as text
        assert ("stopped: budget spent, most likely" in got["text"]) == (kind == "stopped")
        from tools.rerun.cmd_culprit import max_budget
        assert got["text"].count("passed") + got["text"].count("failed") >= max_budget() + 2
