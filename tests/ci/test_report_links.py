"""The HUD's links built from data, and its pull-request view (issue #32's mutation survivors).

- Every ``href`` the page builds from the history (a run's URL in the matrix, the example runs of
  the flaky table) is an ``http://`` or ``https://`` link, or no link at all: a ``javascript:``,
  ``data:`` or scheme-relative URL is shown as its label, never as a link.
- The pull-request view shows the pull request's newest commit (the last report ingested for it),
  and the results of that commit only.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.store import open_store
from ci.registry import load_registry
from ci.report.build import build_report
from ci.report.html import render
from ci.report.model import FileRow, FlakyRow, Report, Run
from ci.selection.plan import plan
from tests.ci.history_support import Case, write_report
from tests.ci.tree_testutil import write

SAFE = ("https://ci.example/run/1", "HTTP://ci.example/run/2")
UNSAFE = ("javascript:alert(1)", "JavaScript:alert(2)", " javascript:alert(3)", "\tjavascript:alert(4)",
          "data:text/html,<script>alert(5)</script>", "//evil.example/6", "vbscript:msgbox(7)", "https:evil")


class _Links(HTMLParser):
    """Every ``<a href>`` of a page, and its visible text."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v or "" for k, v in attrs if k == "href"]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _page(flaky_examples: tuple[str, ...], run_url: str) -> _Links:
    report = Report("2026-12-03T00:00:00+00:00", "acme/gpu", (Run(0, "abc1234", "push", "1", run_url, ""),),
                    (FileRow("cpu", "tests/test_a.py", "@o", "active", ("fail",), (1.0,)),),
                    (FlakyRow(1, "cpu", "tests/test_a.py::test_x", "tests/test_a.py", "@o", 0.2, 0.1, 0.3, 2, 10,
                              flaky_examples),),
                    (), (), None, 0.9)
    parsed = _Links()
    parsed.feed(render(report))
    return parsed


def _data_links(parsed: _Links) -> list[str]:
    """The links that come from the report's data (the page's own navigation is ``#...`` or report.json);
    an empty ``href`` counts: it is a link to the page itself."""
    return [h for h in parsed.hrefs if not h.startswith("#") and h != "report.json"]


def test_flaky_examples_link_only_http_urls() -> None:
    parsed = _page(SAFE + UNSAFE, "https://ci.example/run/0")
    assert _data_links(parsed) == ["https://ci.example/run/0", *SAFE]
    text = "".join(parsed.text)
    # every example keeps its label, linked or not: "run 1" .. "run 10"
    assert all(f"run {i}" in text for i in range(1, len(SAFE + UNSAFE) + 1))


@pytest.mark.parametrize("url", UNSAFE)
def test_an_unsafe_example_or_run_url_is_never_a_link(url: str) -> None:
    parsed = _page((url,), url)
    assert _data_links(parsed) == []
    assert "run 1" in "".join(parsed.text)


REGISTRY = """\
version: 1
tiers:
  cpu: {description: cpu, runner_labels: [ubuntu-latest], gpu_count: 0, arch: cpu}
tests:
  tests/test_a.py: {tiers: [cpu], est_time: 10, owner: "@alpha", status: active}
"""
OLD, NEW = "0dd0000aa", "9ee0000bb"


def test_the_pull_request_view_shows_its_newest_commit(tmp_path: Path) -> None:
    write(tmp_path / "repo", {"registry.yaml": REGISTRY, "tests/test_a.py": "def test_one():\n    pass\n"})
    registry = load_registry(tmp_path / "repo" / "registry.yaml")
    location = str(tmp_path / "h.sqlite")
    (tmp_path / "xml").mkdir()
    with open_store(location) as store:
        for sha, outcome in ((OLD, "failed"), (NEW, "passed")):
            cases = [Case("tests/test_a.py", "test_one", outcome, "AssertionError: x" if outcome == "failed" else "")]
            ident = RunIdentity("acme/gpu", sha, "pull_request", "cpu", pr=7, run_id=sha)
            assert ingest(store, prepare(write_report(tmp_path / "xml", cases), ident)).added
    changed = ["tests/test_a.py"]
    with open_store(location, create=False) as store:
        report = build_report(store, registry, [], repo="acme/gpu", pr=7,
                              pr_plans=[plan(registry, "cpu", changed)], changed=changed)
    assert report.pull is not None and report.pull.sha == NEW
    assert [(t.file, t.status) for t in report.pull.tests] == [("tests/test_a.py", "pass")]
    page = render(report)
    assert f"Pull request #7 at {NEW}" in page and OLD not in page
