"""What the bot writes into a PR comment is safe: every result row survives a long reply, data it did not
write renders as text under a real GFM renderer (cmarkgfm), and an API error is redacted before it is cut."""

from __future__ import annotations

import random
from html import unescape
from html.parser import HTMLParser

import cmarkgfm
import pytest
from cmarkgfm.cmark import Options as cmarkgfm_options

from tools.rerun.comment_lines import command_lines
from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.fake_server import serve
from tools.rerun.fit import fit
from tools.rerun.github import DEFAULT_BOT_LOGIN as BOT_LOGIN
from tools.rerun.github import GitHubClient, GitHubError, RetryPolicy
from tools.rerun.replies import MAX_BODY_CHARS, _tests_cell, marker
from tools.rerun.report import Reporter, RunResults, result_cell, summarize
from tools.rerun.runs_table import RunRow, rows_in, table
from tools.rerun.verdicts import INFRA, FailureVerdict

from rerun_support import HEAD_SHA, PR, REPO, TOKEN as FAKE_TOKEN, comment_payload, dedent, workflow_run_name

TOKEN = "ghp_" + "Kd9" * 12  # 40 characters, like a real one


@pytest.mark.parametrize("body, cut", [
    ({"message": "x" * 490 + TOKEN + " tail"}, 500),  # the "message" of a JSON error: cut at 500
    (["y" * 180 + TOKEN], 200),                       # any other JSON: cut at 200
])
def test_a_token_straddling_the_cut_is_redacted_whole(body: object, cut: int) -> None:
    fake = FakeGitHub(token=TOKEN, run_name_template=workflow_run_name())
    fake.add_pull(PR, HEAD_SHA)
    fake.fail("GET", r"/pulls/", Scripted(422, body=body))  # 422 is final: no retry
    with serve(fake) as url:
        client = GitHubClient(url, TOKEN, timeout=5, retry=RetryPolicy(max_attempts=1), sleep=lambda s: None)
        with pytest.raises(GitHubError) as caught:
            client.get_pull(REPO, PR)
    text = str(caught.value)
    assert TOKEN[:8] not in text and TOKEN[:8] not in caught.value.reason, text
    assert "***" in caught.value.reason and len(caught.value.reason) <= cut


# -- a long reply: no row with a result is ever dropped --------------------------------------------

COMMENT = 6101
RUNNER = "`self-hosted, linux, gpu-b200`"
TESTS = [f"tests/quant/kernels/test_fp4_kv_cache_roundtrip_{i:03d}.py" for i in range(40)]


def _shard_reply(fake: FakeGitHub, shards: int) -> None:
    """The bot's reply to a `/rerun-tier` of ``shards`` shards, as the handler writes it (fitted)."""
    rows = [RunRow("gpu_b200", f"{i}/{shards}", RUNNER, _tests_cell(TESTS),
                   f"[run](https://github.com/{REPO}/actions/runs/{7_000_000 + i})", "dispatched")
            for i in range(1, shards + 1)]
    body = fit(f"{marker(COMMENT, sha=HEAD_SHA)}\n@maintainer {shards} of {shards} run(s) dispatched.\n\n"
               + table(rows) + "\n\n**notes** below the table\n")
    fake.add_comment(PR, BOT_LOGIN, body)


def _results(i: int) -> RunResults:
    failing = tuple(f"tests/quant/kernels/test_fp4_kv_cache_roundtrip_{i:03d}.py::test_roundtrip"
                    f"[bf16-e4m3-page{j}-{'x' * 60}]" for j in range(i % 3 * 10))
    return RunResults(40, len(failing), 2, 0, 38.4 + i, failing)


@pytest.mark.parametrize("shards", [40, 300])
def test_every_shard_result_survives_a_reply_over_githubs_limit(shards: int) -> None:
    fake = FakeGitHub(token=FAKE_TOKEN)
    fake.add_pull(PR, HEAD_SHA)
    _shard_reply(fake, shards)
    with serve(fake) as url:
        client = GitHubClient(url, FAKE_TOKEN, timeout=5, retry=RetryPolicy(max_attempts=2, backoff_base=0),
                              sleep=lambda s: None)
        reporter = Reporter(client, REPO, BOT_LOGIN, settle=0, sleep=lambda s: None)
        order = list(range(1, shards + 1))
        random.Random(shards).shuffle(order)  # shards report in random order
        for i in order:
            reporter.report(PR, COMMENT, "gpu_b200", f"{i}/{shards}", result_cell(_results(i)))
    (reply,) = fake.bot_replies(PR)
    assert len(reply.body.encode("utf-16-le")) // 2 <= MAX_BODY_CHARS
    rows = {row.part: row for row in rows_in(reply.body)}
    assert len(rows) == shards, f"{shards - len(rows)} rows dropped"
    for i in range(1, shards + 1):
        row = rows[f"{i}/{shards}"]
        verdict = "**failed**" if i % 3 else "**passed**"
        assert row.has_results and row.result.startswith(f"{verdict}: 40 passed"), (i, row.result)
        assert row.run == f"[run](https://github.com/{REPO}/actions/runs/{7_000_000 + i})"
    assert "**notes** below the table" in reply.body


# -- data the bot did not write renders as text (a real GFM renderer) ------------------------------

class _Rendered(HTMLParser):
    """What rendered HTML holds: links, ``<strong>`` texts, every tag, each ``<code>`` element's
    text and the tags found inside a ``<code>`` (text the bot did not write is always in one)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.strong: list[str] = []
        self.tags: list[str] = []
        self.codes: list[str] = []
        self.inside_code: list[str] = []
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if "code" in self._open:
            self.inside_code.append(tag)
        if tag == "a":
            self.links.append(dict(attrs).get("href") or "")
        if tag == "strong":
            self.strong.append("")
        if tag == "code":
            self.codes.append("")
        if tag not in ("br", "img", "hr", "input"):
            self._open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self._open:
            del self._open[len(self._open) - 1 - self._open[::-1].index(tag):]

    def handle_data(self, data: str) -> None:
        if "strong" in self._open:
            self.strong[-1] += data
        if "code" in self._open:
            self.codes[-1] += data


def _render(markdown: str) -> _Rendered:
    parsed = _Rendered()
    parsed.feed(cmarkgfm.github_flavored_markdown_to_html(markdown, options=cmarkgfm_options.CMARK_OPT_UNSAFE))
    return parsed


def _shown(text: str) -> str:
    """How `quote` shows ``text``: itself, with control and non-ASCII characters (and ``\\``) escaped."""
    return text.encode("unicode_escape").decode("ascii")


HOSTILE = ["[link](https://evil.example)", "**passed**", "https://evil.example/x", "see www.evil.example",
           "a@evil.example", "@everyone", "<img src=x onerror=alert(1)>", "_em_ ~~del~~ `code`", "a | b",
           "![img](https://evil.example/i.png)", "<https://evil.example>", "&amp; &#x41;", "\\*x\\*", "$x^2$",
           "<!-- hidden -->", "#1 :+1:"]
BOT_LINK = "https://github.com/acme/llm-serving/actions/runs/5"
# The bot never sees an HTML comment of a command line (GitHub does not show it either).
HOSTILE_TARGETS = [name for name in HOSTILE if "<!--" not in name]


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_test_name_renders_as_its_own_text(name: str) -> None:
    node = f"tests/quant/test_pack.py::{name}"
    cell = result_cell(RunResults(1, 1, 0, 0, 2.0, (node,)))
    body = table([RunRow("gpu_b200", "1/2", RUNNER, "`tests/quant/test_pack.py`", f"[run]({BOT_LINK})", cell)])
    rendered = _render(body)
    assert rendered.links == [BOT_LINK]  # the bot's own link only
    assert rendered.strong == ["failed"]  # the bot's own verdict only
    # inside the code only the bot's own break opportunities (`tools.rerun.wrap`)
    assert set(rendered.inside_code) <= {"wbr"} and not {"img", "script", "em", "del"} & set(rendered.tags)
    assert _shown(node) in rendered.codes, rendered.codes


@pytest.mark.parametrize("name", HOSTILE_TARGETS)
def test_a_hostile_target_renders_as_its_own_text_in_the_reply(name: str, make_handler, fake: FakeGitHub) -> None:
    make_handler().handle(comment_payload(f"/rerun-test {name}"))
    (reply,) = fake.bot_replies(PR)
    rendered = _render(reply.body)
    assert rendered.links == [] and rendered.inside_code == []
    assert not {"img", "script", "em", "del"} & set(rendered.tags)
    # the command line is quoted as it was typed, each target by itself
    assert any(_shown(f"/rerun-test {name}") in code or _shown(name.split()[0]) == code for code in rendered.codes), \
        rendered.codes


ERRORS = ["AssertionError: a | b `code` <script>alert(1)</script> @everyone cc @acme/quant",
          "RuntimeError: [link](https://evil.example) **bold**\nsecond line | cell"]


@pytest.mark.parametrize("error", ERRORS)
def test_a_failed_row_shows_its_error_line_as_text(error: str, make_client, fake: FakeGitHub, tmp_path) -> None:
    """The JUnit a run uploaded -> `summarize` -> `result_cell` -> `report` at the fake GitHub ->
    cmark-gfm: the failure's first error line is in the row, as its own text, in one cell."""
    from xml.sax.saxutils import quoteattr
    junit = tmp_path / "junit.xml"
    junit.write_text(f'<testsuites><testsuite name="p" time="3"><testcase classname="tests.quant.test_pack" '
                     f'name="test_x" file="tests/quant/test_pack.py" time="1">'
                     f'<failure message={quoteattr(error, {chr(10): "&#10;"})}>E   {error.splitlines()[0].replace("<", "&lt;")}'
                     f'</failure></testcase></testsuite></testsuites>', encoding="utf-8")
    cell = result_cell(summarize(junit))
    rows = [RunRow("gpu_b200", p, RUNNER, "`t`", f"[run](https://x/{p[0]})", "dispatched") for p in ("1/2", "2/2")]
    fake.add_comment(PR, BOT_LOGIN, f"{marker(COMMENT)}\nruns\n\n" + table(rows) + "\n")
    Reporter(make_client(), REPO, BOT_LOGIN, settle=0).report(PR, COMMENT, "gpu_b200", "1/2", cell, BOT_LINK)
    body = fake.bot_replies(PR)[0].body
    assert [r.key for r in rows_in(body)] == [("gpu_b200", "1/2"), ("gpu_b200", "2/2")]  # no cell or row broken
    rendered = _render(body)
    first = error.splitlines()[0]  # `error_line` keeps the message's first line
    assert _shown(first) in rendered.codes, rendered.codes
    assert rendered.links == [BOT_LINK, "https://x/2"] and rendered.strong == ["failed"]
    assert set(rendered.inside_code) <= {"wbr"} and not {"script", "em", "img"} & set(rendered.tags)
    assert "@everyone" not in body and "<script>" not in body


# Bidi controls reorder what follows them and ESC starts a terminal colour: none reaches a reply.
TROJAN = "\u202eevil\u2066\x1b[31m"


def test_bidi_and_escape_characters_show_as_escapes_in_a_row() -> None:
    node = f"tests/quant/test_pack.py::test_{TROJAN}"
    cell = result_cell(RunResults(1, 1, 0, 0, 2.0, (node,)))
    verdict = FailureVerdict(INFRA, f"infra: cuda error {TROJAN} on runner r7").text
    body = table([RunRow("gpu_b200", "1/2", RUNNER, "`t`", f"[run]({BOT_LINK})", cell, verdict)])
    html = cmarkgfm.github_flavored_markdown_to_html(body, options=cmarkgfm_options.CMARK_OPT_UNSAFE)
    assert not {"\u202e", "\u2066", "\x1b"} & set(html)
    rendered = _render(body)
    assert _shown(node) in rendered.codes  # the test name, as `quote` shows it
    assert "infra: cuda error \\u202eevil\\u2066\\x1b[31m on runner r7" in unescape(html)  # the error line


def test_bidi_and_escape_characters_show_as_escapes_in_an_error(make_handler, fake: FakeGitHub) -> None:
    fake.fail("GET", rf"/pulls/{PR}$", Scripted(404, body={"message": f"Not Found\n{TROJAN}"}))
    assert make_handler().handle(comment_payload("/rerun-test test_pack.py")).status == "failed"
    (reply,) = fake.bot_replies(PR)
    html = cmarkgfm.github_flavored_markdown_to_html(reply.body, options=cmarkgfm_options.CMARK_OPT_UNSAFE)
    assert not {"\u202e", "\u2066", "\x1b"} & set(html)
    assert "Not Found\n\\u202eevil\\u2066\\x1b[31m" in unescape(html)  # the error's own line break kept


# -- report and comment parsing: mutation survivors ------------------------------------------------

def test_a_run_with_errors_and_no_failures_is_shown_as_failed() -> None:
    assert result_cell(RunResults(3, 0, 0, 1, 1.0, ("tests/a.py::test_setup",))).startswith("**failed**: ")
    assert result_cell(RunResults(3, 0, 1, 0, 1.0, ())).startswith("**passed**: ")


def test_shard_2_of_3_never_overwrites_shard_1_of_3(make_client, fake: FakeGitHub) -> None:
    rows = [RunRow("gpu_b200", f"{i}/3", RUNNER, "`t`", f"[run](https://x/{i})", "dispatched") for i in (1, 2, 3)]
    rows.append(RunRow("gpu_h100", "2/3", RUNNER, "`t`", "[run](https://x/9)", "dispatched"))
    fake.add_comment(PR, BOT_LOGIN, f"{marker(COMMENT)}\nruns\n\n" + table(rows) + "\n")
    Reporter(make_client(), REPO, BOT_LOGIN, settle=0).report(PR, COMMENT, "gpu_b200", "2/3", "**passed**: shard 2")
    results = {row.key: row.result for row in rows_in(fake.bot_replies(PR)[0].body)}
    assert results == {("gpu_b200", "1/3"): "dispatched", ("gpu_b200", "2/3"): "**passed**: shard 2",
                       ("gpu_b200", "3/3"): "dispatched", ("gpu_h100", "2/3"): "dispatched"}


@pytest.mark.parametrize("outer, inner", [("````", "```"), ("~~~~", "~~~"), ("`````", "````")])
def test_a_shorter_fence_inside_a_longer_one_does_not_close_it(outer: str, inner: str) -> None:
    body = dedent(f"""
        here is the log:
        {outer}
        {inner}
        /rerun-test test_pack.py
        {inner}
        {outer}
        /rerun-failed
        """)
    assert [(c.name, c.line) for c in command_lines(body)] == [("rerun-failed", 7)]
