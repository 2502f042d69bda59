"""GitHub's own webhook examples (``@octokit/webhooks-examples``, extracted into
tools/rerun/github_contract/webhook_examples.json), delivered signed to a real webhook server.

Every ``issue_comment`` example (created, edited, deleted) and the ``ping``, ``pull_request`` and
``workflow_run`` ones must get the right answer with no crash: issue_comment and workflow_run
deliveries are accepted (202) and then handled (the workflow_run examples, runs of other
workflows, are ignored), the others answered 200 and left alone. The examples are one
comment (one id) edited and deleted, and created five times: once its creation was handled, the
later deliveries of the same comment are skipped, so the edits and deletions go first. None of
them holds a bot command (they are comments on an issue), so a created one is also sent with its
body changed to a command (and a new comment id), and once more as a comment on a pull request
(``issue.pull_request`` added, as GitHub sends it for a comment on a PR): that one must dispatch.
"""

from __future__ import annotations

import copy
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tools.rerun.fake_github import FakeGitHub
from tools.rerun.fake_openapi import webhook_problems
from tools.rerun.handler import Outcome
from tools.rerun.server import ServerConfig, WebhookApp, running

from rerun_support import HEAD_SHA

EXAMPLES = Path(__file__).resolve().parents[2] / "tools" / "rerun" / "github_contract" / "webhook_examples.json"
SECRET = b"example-secret"
HOOK = 77


def _examples() -> list[dict[str, Any]]:
    return json.loads(EXAMPLES.read_text(encoding="utf-8"))


def test_the_extract_has_the_events_the_bot_meets() -> None:
    seen = {(e["event"], e["payload"].get("action")) for e in _examples()}
    assert {("issue_comment", a) for a in ("created", "edited", "deleted")} <= seen
    assert {"ping", "pull_request", "workflow_run"} <= {event for event, _ in seen}
    # GitHub's first workflow_run example predates fields its schema now requires; the second is whole
    runs = [e["payload"] for e in _examples() if e["event"] == "workflow_run"]
    assert [len(webhook_problems("workflow_run", p)) for p in runs] == [3, 0]


def test_every_example_gets_the_right_answer(fake: FakeGitHub, api_url: str, make_handler) -> None:
    outcomes: dict[str, Outcome] = {}
    lock = threading.Lock()

    def done(delivery: str, outcome: Any) -> None:
        with lock:
            outcomes[delivery] = outcome

    examples = _examples()
    created = next(e["payload"] for e in examples if e["event"] == "issue_comment"
                   and e["payload"]["action"] == "created")
    command = copy.deepcopy(created)
    command["comment"]["body"] = "/rerun-test test_pack.py"
    command["comment"]["id"] += 1
    on_pr = copy.deepcopy(command)
    on_pr["comment"]["id"] += 1
    repo, number = on_pr["repository"]["full_name"], on_pr["issue"]["number"]
    on_pr["issue"]["pull_request"] = {"url": f"https://api.github.com/repos/{repo}/pulls/{number}",
                                      "html_url": f"https://github.com/{repo}/pull/{number}",
                                      "diff_url": f"https://github.com/{repo}/pull/{number}.diff",
                                      "patch_url": f"https://github.com/{repo}/pull/{number}.patch",
                                      "merged_at": None}
    fake.add_user(on_pr["comment"]["user"]["login"], "write")
    fake.add_pull(number, HEAD_SHA)
    fake.default_branch = on_pr["repository"]["default_branch"]  # the bot dispatches on it

    app = WebhookApp(ServerConfig(secret=SECRET, workers=2), make_handler, on_done=done)
    with running(app) as server:
        fake.add_hook(HOOK, server.url + "/", SECRET)
        ordered = sorted(examples, key=lambda e: e["payload"].get("action") == "created")  # stable
        sent = []
        for event, payload in [(e["event"], e["payload"]) for e in ordered] + [("issue_comment", command),
                                                                                 ("issue_comment", on_pr)]:
            sent.append((event, payload, fake.deliver(HOOK, event, payload)))
            assert app.wait_idle(30)
    assert app.stats.errors == 0 and app.stats.unfinished == 0
    first_created = next(r.guid for _, p, r in sent if p.get("action") == "created")

    for event, payload, record in sent:
        expected = 202 if event in ("issue_comment", "workflow_run") else 200
        assert record.status_code == expected, (event, payload.get("action"), record)
        if event == "workflow_run":  # GitHub's examples are runs of other workflows
            assert outcomes[record.guid].status == "ignored", outcomes[record.guid]
            continue
        if event != "issue_comment":
            assert record.guid not in outcomes
            continue
        action = payload["action"]
        if action == "created" and payload not in (command, on_pr) and record.guid != first_created:
            assert record.guid not in outcomes  # the same comment, already answered: skipped
            continue
        outcome = outcomes[record.guid]
        if payload is on_pr:
            assert outcome.status == "dispatched", outcome
            assert [d["workflow"] for d in fake.dispatches]
        elif action != "created":
            assert (outcome.status, outcome.reason) == ("ignored", f"action is {action!r}, not 'created'")
        else:
            assert (outcome.status, outcome.reason) == ("ignored", "comment is on an issue, not a pull request")
    assert app.stats.skipped_comments == sum(1 for e in examples if e["payload"].get("action") == "created") - 1
    assert fake.contract_problems == []


def _run_completed(example: dict[str, Any], run: Any, repo: str, conclusion: str) -> dict[str, Any]:
    """GitHub's ``workflow_run`` ``completed`` example, made the delivery for ``run`` (a fake run the
    bot dispatched): its id, title, path, link and SHA, completed with ``conclusion``; checked
    against @octokit/openapi-webhooks' schema of that delivery."""
    payload = copy.deepcopy(example)
    payload["workflow_run"].update(run.to_json(repo), status="completed", conclusion=conclusion)
    payload["repository"]["full_name"] = repo
    assert webhook_problems("workflow_run", payload) == []
    return payload


def test_a_run_that_ended_without_a_report_is_no_result_once(fake: FakeGitHub, make_client, make_handler) -> None:
    """A 2-shard `/rerun-tier`, shard 1 reports; shard 2's run is cancelled and never reports: the
    ``workflow_run`` hook, delivered signed to a real server, makes its row "no result" with the
    run's link; the headline stops saying "so far" and the pacing note goes. A redelivery (same
    delivery id) is a duplicate; the same event under a new id, and one for the shard that reported,
    read the reply and write nothing; a run that succeeded is not even read."""
    from tools.rerun.github import DEFAULT_BOT_LOGIN
    from tools.rerun.layout import NOTE_OPEN
    from tools.rerun.report import Reporter
    from tools.rerun.runs_table import find_row

    from rerun_support import PR, REPO, comment_payload

    example = next(e["payload"] for e in _examples() if e["event"] == "workflow_run"
                   and e["payload"]["action"] == "completed" and not webhook_problems("workflow_run", e["payload"]))
    make_handler(shard_budget=30).handle(comment_payload("/rerun-tier gpu_b200", comment_id=91))
    runs = {run.display_title.split()[4]: run for run in fake.runs}  # part -> run
    Reporter(make_client(), REPO, DEFAULT_BOT_LOGIN, settle=0, sleep=lambda s: None).report(
        PR, 91, "gpu_b200", "1/2", "**passed**: 3 passed, 0 failed, 0 skipped, 0 errors in 2.0 s")
    assert "1 of 2 runs reported so far" in fake.bot_replies(PR)[0].body

    outcomes: dict[str, Any] = {}
    app = WebhookApp(ServerConfig(secret=SECRET, workers=2), lambda: make_handler(report_settle=0),
                     on_done=lambda delivery, outcome: outcomes.__setitem__(delivery, outcome))
    with running(app) as server:
        fake.add_hook(HOOK, server.url + "/", SECRET)

        def deliver(payload: dict[str, Any], guid: str | None = None) -> Any:
            record = fake.deliver(HOOK, "workflow_run", payload, guid=guid)
            assert app.wait_idle(30)
            return record

        cancelled = _run_completed(example, runs["2/2"], REPO, "cancelled")
        first = deliver(cancelled)
        assert first.status_code == 202 and outcomes[first.guid].status == "marked", outcomes
        body = fake.bot_replies(PR)[0].body
        run_url = f"https://github.com/{REPO}/actions/runs/{runs['2/2'].id}"
        row = find_row(body, "gpu_b200", "2/2")
        assert row.result == "**no result**: the run ended (cancelled) without sending a result"
        assert row.run == f"[run]({run_url})"
        assert "so far" not in body and NOTE_OPEN not in body
        assert f"3 passed, 0 failed; no result from shard 2/2 of `gpu_b200` ([run]({run_url}))" in body

        writes = len(fake.writes())
        handled = len(outcomes)
        again = deliver(cancelled, guid=first.guid)  # GitHub's redelivery keeps the delivery id
        assert again.status_code == 200 and len(outcomes) == handled  # answered duplicate, not handled
        replay = deliver(cancelled)  # the same event under another id: read, nothing written
        reported = deliver(_run_completed(example, runs["1/2"], REPO, "failure"))
        succeeded = deliver(_run_completed(example, runs["2/2"], REPO, "success"))
        assert [outcomes[r.guid].status for r in (replay, reported, succeeded)] == ["unchanged", "unchanged", "ignored"]
        assert len(fake.writes()) == writes and fake.bot_replies(PR)[0].body == body
    assert app.stats.errors == 0 and app.stats.unfinished == 0


@pytest.mark.parametrize("part", ["targets", "3/41"])
def test_the_run_name_the_dispatcher_writes_is_the_one_the_hook_reads(part: str) -> None:
    from tools.rerun.dispatch import parse_run_name, run_name

    inputs = {"pr": "17", "tier": "gpu_h100", "part": part, "sha": "0123abc" * 5 + "01234", "comment_id": "99"}
    assert parse_run_name(run_name(inputs)) == inputs
    assert parse_run_name(run_name(inputs) + " ") is None and parse_run_name("rerun-test PR #x") is None


def test_a_culprit_probe_that_failed_touches_no_comment(fake: FakeGitHub, make_client, make_handler) -> None:
    """A culprit search's probe (`culprit_dispatch`: PR #0) that ended `failure`: the hook leaves it
    to the search, with no read of a PR #0's comments and no write."""
    from tools.rerun.dispatch import SEARCH_PR, Dispatcher, DispatchSpec

    from rerun_support import REPO

    example = next(e["payload"] for e in _examples() if e["event"] == "workflow_run"
                   and e["payload"]["action"] == "completed" and not webhook_problems("workflow_run", e["payload"]))
    dispatcher = Dispatcher(make_client(), REPO, "rerun-test-dispatch.yml", "main", "https://x")
    spec = DispatchSpec("gpu_b200", "targets", ("self-hosted",), ("tests/quant/test_pack.py",))
    [sent] = dispatcher.send_all([spec], SEARCH_PR, "a" * 40, 123456789, look_first=False)
    assert sent.ok and sent.run_name.startswith("rerun-test PR #0 ")
    requests = len(fake.requests)
    outcome = make_handler(report_settle=0).handle(_run_completed(example, fake.runs[-1], REPO, "failure"))
    assert outcome.status == "ignored" and "culprit search's probe" in outcome.reason
    assert len(fake.requests) == requests  # not even a read
