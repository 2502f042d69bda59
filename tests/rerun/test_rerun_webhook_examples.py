"""GitHub's own webhook examples (``@octokit/webhooks-examples``, extracted into
tools/rerun/github_contract/webhook_examples.json), delivered signed to a real webhook server.

Every ``issue_comment`` example (created, edited, deleted) and the ``ping``, ``pull_request`` and
``workflow_run`` ones must get the right answer with no crash: issue_comment deliveries are
accepted (202) and then handled, the others answered 200 and left alone. The examples are one
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

from tools.rerun.fake_github import FakeGitHub
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
        expected = 202 if event == "issue_comment" else 200
        assert record.status_code == expected, (event, payload.get("action"), record)
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
