"""A `/rerun-tier` of more runs than one page of GitHub's runs listing (up to `fit.max_rows`, ~178).

The dispatch endpoint names the run it started (``return_run_details``), so every row links its
own run; the lookup by run-name (a resumed comment, an ambiguous POST) reads every page it needs,
so no run is dispatched twice and none is left unlinked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.rerun.fake_github import FakeGitHub, Scripted
from tools.rerun.github import Dispatched
from tools.rerun.replies import find_marker
from tools.rerun.runs_table import rows_in

from rerun_support import PR, REPO, comment_payload

SHARDS = 150


@pytest.fixture
def wide_root(tmp_path: Path) -> Path:
    """A repository whose tier `gpu_x` has 150 files of one shard budget each: 150 shards."""
    lines = ["version: 1", "tiers:", "  gpu_x:", "    description: one GPU", "    runner_labels: [gpu-x]",
             "    gpu_count: 1", "    arch: sm_90", "tests:"]
    for i in range(SHARDS):
        lines += [f"  tests/t{i}/test_{i}.py:", "    tiers: [gpu_x]", "    est_time: 1800", "    timeout: 86400",
                  "    owner: \"@t\"", "    status: active"]
    (tmp_path / "registry.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def _linked_runs(body: str) -> list[str]:
    return [row.run for row in rows_in(body)]


def test_every_shard_of_a_wide_tier_links_its_own_run(fake: FakeGitHub, make_handler, wide_root: Path) -> None:
    outcome = make_handler(root=wide_root).handle(comment_payload("/rerun-tier gpu_x", comment_id=61))
    assert outcome.status == "dispatched" and len(fake.dispatches) == SHARDS
    by_title = {run.display_title: run.id for run in fake.runs}
    assert {d.run_url for d in outcome.dispatches} == {
        f"https://github.com/{REPO}/actions/runs/{by_title[d.run_name]}" for d in outcome.dispatches}
    links = _linked_runs(fake.bot_replies(PR)[0].body)
    assert len(links) == SHARDS and all("/actions/runs/" in link for link in links)
    assert not any(r.path.endswith("/runs") for r in fake.requests)  # GitHub's answers named every run


def test_resuming_a_wide_tier_dispatches_nothing_twice(fake: FakeGitHub, make_handler, wide_root: Path) -> None:
    """A crash after the dispatches, before the final reply: the redelivery finds all 150 runs
    (two pages of the listing) and sends none again."""
    payload = comment_payload("/rerun-tier gpu_x", comment_id=62)
    make_handler(root=wide_root).handle(payload)
    reply = fake.bot_replies(PR)[0]
    marker = find_marker(reply.body, 62)
    assert marker is not None
    reply.body = reply.body.replace("state=done", "state=claimed")  # as a crash would have left it
    outcome = make_handler(root=wide_root).handle(payload)
    assert len(fake.dispatches) == SHARDS
    assert {d.state for d in outcome.dispatches} == {"found"} and len(outcome.dispatches) == SHARDS
    lookups = [r for r in fake.requests if r.method == "GET" and r.path.endswith("/rerun-test-dispatch.yml/runs")]
    assert {r.query["page"][0] for r in lookups} == {"1", "2"}
    assert all(r.query["created"] == [">=" + payload["comment"]["created_at"]] for r in lookups)


def test_the_dispatch_endpoint_names_the_run_only_when_asked(fake: FakeGitHub, make_client) -> None:
    client = make_client()
    started = client.dispatch_workflow(REPO, "rerun-test-dispatch.yml", "main", {"pr": "1"})
    (run,) = fake.runs
    assert (started.sent, started.run_id, started.html_url) == (True, run.id,
                                                                f"https://github.com/{REPO}/actions/runs/{run.id}")
    assert fake.dispatches[0]["return_run_details"] is True
    plain = client.request("POST", f"/repos/{REPO}/actions/workflows/rerun-test-dispatch.yml/dispatches",
                           json={"ref": "main"})
    assert plain is not None and (plain.status_code, plain.content) == (204, b"")
    details = client.request("POST", f"/repos/{REPO}/actions/workflows/rerun-test-dispatch.yml/dispatches",
                             json={"ref": "main", "return_run_details": True})
    assert details is not None and details.status_code == 200
    assert set(details.json()) == {"workflow_run_id", "run_url", "html_url"}
    assert details.json()["run_url"] == f"https://api.github.com/repos/{REPO}/actions/runs/{fake.runs[-1].id}"
    fake.fail("POST", r"/dispatches$", Scripted(204))  # a server that ignores return_run_details
    assert client.dispatch_workflow(REPO, "rerun-test-dispatch.yml", "main", {"pr": "1"}) == Dispatched(True)
