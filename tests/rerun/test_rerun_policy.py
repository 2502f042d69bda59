"""The permission policy: its rules one by one, and end to end through the handler."""

from __future__ import annotations

import pytest

from tools.rerun.commands import help_text
from tools.rerun.fake_github import FakeGitHub
from tools.rerun.github import Permission, PullRequest
from tools.rerun.policy import POLICY_TEXT, RULE_AUTHOR, RULE_COLLABORATOR, RULE_FORK, Action, decide

from rerun_support import HEAD_SHA, PR, REPO, comment_payload

WRITE, READ, NONE = (Permission("u", "write", "write"), Permission("u", "read", "triage"),
                     Permission("u", "none", "none"))


def _pull(author: str = "alice", head_repo: str | None = REPO) -> PullRequest:
    return PullRequest(PR, "open", HEAD_SHA, "feature", "main", author, head_repo, REPO)


@pytest.mark.parametrize("action, user, permission, pull, allowed, rule", [
    # rule 1: write+ runs everything, on forks too
    (Action.RERUN_TIER, "bob", WRITE, _pull(head_repo="mallory/fork"), True, RULE_COLLABORATOR),
    (Action.RERUN_OWNER, "bob", Permission("bob", "admin", "admin"), _pull(), True, RULE_COLLABORATOR),
    (Action.RERUN_TEST, "bob", Permission("bob", "read", "maintain"), _pull(), True, RULE_COLLABORATOR),
    # rule 2: the author of a same-repository PR: /rerun-test <target> and /rerun-failed only
    (Action.RERUN_TEST, "alice", READ, _pull(), True, RULE_AUTHOR),
    (Action.RERUN_FAILED, "Alice", NONE, _pull(), True, RULE_AUTHOR),
    (Action.RERUN_TIER, "alice", READ, _pull(), False, RULE_AUTHOR),
    (Action.RERUN_OWNER, "alice", READ, _pull(), False, RULE_AUTHOR),
    # rule 3: the author of a fork PR gets nothing (a deleted fork counts as a fork)
    (Action.RERUN_TEST, "alice", READ, _pull(head_repo="alice/fork"), False, RULE_FORK),
    (Action.RERUN_FAILED, "alice", NONE, _pull(head_repo=None), False, RULE_FORK),
    # neither author nor writer
    (Action.RERUN_TEST, "carol", READ, _pull(), False, RULE_COLLABORATOR),
    # /culprit: exactly as /rerun-test <target>
    (Action.CULPRIT, "bob", WRITE, _pull(head_repo="mallory/fork"), True, RULE_COLLABORATOR),
    (Action.CULPRIT, "alice", READ, _pull(), True, RULE_AUTHOR),
    (Action.CULPRIT, "alice", READ, _pull(head_repo="alice/fork"), False, RULE_FORK),
    (Action.CULPRIT, "carol", READ, _pull(), False, RULE_COLLABORATOR),
])
def test_rules(action: Action, user: str, permission: Permission, pull: PullRequest, allowed: bool,
               rule: str) -> None:
    decision = decide(action, user, permission, pull)
    assert (decision.allowed, decision.rule) == (allowed, rule), decision.reason


def test_the_refusal_says_what_refused_and_help_prints_the_policy() -> None:
    fork = decide(Action.RERUN_TEST, "alice", READ, _pull(head_repo="alice/fork"))
    assert "`alice/fork`" in fork.reason and "GPU runners" in fork.reason
    tier = decide(Action.RERUN_TIER, "alice", READ, _pull())
    assert "`/rerun-test <target>` and `/rerun-failed`" in tier.reason and "needs write permission" in tier.reason
    for name in ("rerun-test", "rerun-failed", "rerun-tier", "rerun-stage"):
        assert POLICY_TEXT in help_text(name)
    with pytest.raises(ValueError, match="pull request is needed"):
        decide(Action.RERUN_TEST, "alice", READ, None)


@pytest.fixture
def authored(fake: FakeGitHub) -> FakeGitHub:
    fake.add_user("alice", "read")
    fake.add_pull(PR, HEAD_SHA, author="alice")
    fake.add_pull(PR + 1, HEAD_SHA, author="alice", head_repo="alice/llm-serving")
    return fake


def test_same_repository_author_may_rerun_tests_but_not_a_tier(authored: FakeGitHub, make_handler) -> None:
    assert make_handler().handle(comment_payload("/rerun-test test_pack.py", user="alice")).status == "dispatched"
    assert len(authored.dispatches) == 2
    mixed = comment_payload("/rerun-test test_pack.py\n/rerun-tier gpu_b200", user="alice")
    outcome = make_handler().handle(mixed)
    assert outcome.status == "refused" and len(authored.dispatches) == 2  # all or nothing
    assert "refused by rule 2 (PR author, same repository)" in authored.bot_replies(PR)[-1].body


def test_fork_author_is_refused_and_told_why(authored: FakeGitHub, make_handler) -> None:
    outcome = make_handler().handle(comment_payload("/rerun-test test_pack.py", user="alice", number=PR + 1))
    assert outcome.status == "refused" and authored.dispatches == []
    body = authored.bot_replies(PR + 1)[0].body
    assert "refused by rule 3 (pull request from a fork)" in body and "`alice/llm-serving`" in body
