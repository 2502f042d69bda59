"""One ``issue_comment`` event -> reactions, dispatches and one reply.

Order of work (each GitHub step after the first is skipped in dry-run mode when it writes):

1. ignore anything that is not a newly created comment on a pull request with a command, and the
   bot's own replies;
2. list the PR's comments: a reply carrying this comment's marker means it was handled -> stop;
3. react ``eyes``; check the author's permission (write/maintain/admin) or reply with a refusal;
4. resolve every target against ``registry.yaml`` of ``repo_root``;
5. read the PR head SHA, then dispatch the workflow once per tier, on the *default branch* (the
   workflow file that runs is the reviewed one; it checks out the PR's SHA itself);
6. post one reply (table + explanations) and react ``rocket`` if every target was dispatched,
   ``confused`` otherwise.

Dry run (``dry_run=True``) still *reads* (comments, permission, PR head) so the printed outcome is
what would really happen, but never writes: no reactions, dispatches or replies.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci.registry import Registry, RegistryError, load_registry, REGISTRY_FILENAME
from tools.rerun import replies
from tools.rerun.commands import MAX_TARGETS, Command, parse_comment
from tools.rerun.github import DEFAULT_BOT_LOGIN, GitHubClient, GitHubError
from tools.rerun.resolve import Kind, Resolution, resolve_target

log = logging.getLogger(__name__)

DISPATCH_WORKFLOW = "rerun-test-dispatch.yml"


@dataclass(frozen=True)
class BotConfig:
    """``repo_root``: the trusted checkout whose registry.yaml and tree are used; ``repository``
    (``owner/name``), when set, is the only repository whose events are handled (others are
    ignored: its registry and tree would be the wrong ones)."""

    repo_root: Path
    workflow_file: str = DISPATCH_WORKFLOW
    dry_run: bool = False
    repository: str | None = None
    bot_login: str = DEFAULT_BOT_LOGIN  # only this author's markers count as "already answered"


@dataclass(frozen=True)
class CommentEvent:
    """The fields of an ``issue_comment`` payload the bot uses."""

    repo: str
    number: int
    comment_id: int
    user: str
    body: str
    default_branch: str

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> "CommentEvent | str":
        """The event, or a string saying why the bot ignores it."""
        if not isinstance(payload, dict):
            return "payload is not a JSON object"
        if payload.get("action") != "created":
            return f"action is {payload.get('action')!r}, not 'created'"
        issue, comment, repo = payload.get("issue"), payload.get("comment"), payload.get("repository")
        if not (isinstance(issue, dict) and isinstance(comment, dict) and isinstance(repo, dict)):
            return "not an issue_comment payload (issue, comment or repository missing)"
        if not issue.get("pull_request"):
            return "comment is on an issue, not a pull request"
        body = comment.get("body") or ""
        if replies.MARKER_PREFIX in body:
            return "comment is a rerun-test reply"
        user = comment.get("user") or {}
        if user.get("type") == "Bot":
            return "comment author is a bot"
        try:
            return cls(str(repo["full_name"]), int(issue["number"]), int(comment["id"]),
                       str(user.get("login", "")), str(body), str(repo["default_branch"]))
        except (KeyError, TypeError, ValueError) as exc:
            return f"payload lacks a field the bot needs: {exc!r}"


@dataclass(frozen=True)
class Dispatch:
    """One workflow_dispatch: all targets of one tier. ``error`` is None when it was sent (or
    would have been, in dry-run)."""

    tier: str
    runner: tuple[str, ...]
    tests: tuple[str, ...]
    ref: str
    inputs: dict[str, str]
    error: str | None = None


@dataclass
class Outcome:
    """What handling one event did. ``status``: ignored, duplicate, refused, help, invalid,
    failed, dispatched (everything ran) or partial (something did not)."""

    status: str
    reason: str = ""
    reply: str | None = None
    dispatches: list[Dispatch] = field(default_factory=list)
    reactions: list[str] = field(default_factory=list)


class Handler:
    """Handles comment events for one repository checkout with one GitHub client."""

    def __init__(self, client: GitHubClient, config: BotConfig):
        self.client = client
        self.config = config

    # -- writes (suppressed in dry-run) ------------------------------------------------------------
    def _react(self, event: CommentEvent, outcome: Outcome, content: str) -> None:
        outcome.reactions.append(content)
        if self.config.dry_run:
            return
        try:
            self.client.add_reaction(event.repo, event.comment_id, content)
        except GitHubError as exc:  # a missing emoji must not stop the run
            log.warning("reaction %s on comment %d failed: %s", content, event.comment_id, exc)

    def _fail(self, event: CommentEvent, outcome: Outcome, what: str, detail: str, reason: str) -> Outcome:
        """React `confused`, mark the outcome failed and reply saying ``what`` failed and why."""
        self._react(event, outcome, "confused")
        outcome.status, outcome.reason = "failed", reason
        return self._reply(event, outcome, replies.failure_reply(event.comment_id, event.user, what, detail))

    def _reply(self, event: CommentEvent, outcome: Outcome, body: str) -> Outcome:
        outcome.reply = body
        if not self.config.dry_run:
            self.client.create_comment(event.repo, event.number, body)
        return outcome

    # -- the flow --------------------------------------------------------------------------------
    def handle(self, payload: dict[str, Any]) -> Outcome:
        """Handle one ``issue_comment`` payload. Failures after the duplicate check are reported in
        the reply; raises `GitHubError` when the existing comments cannot be listed (the bot then
        cannot prove it has not answered already) or the reply itself cannot be posted."""
        event = CommentEvent.from_payload(payload)
        if isinstance(event, str):
            return Outcome("ignored", event)
        if self.config.repository and event.repo.lower() != self.config.repository.lower():
            return Outcome("ignored", f"event is for {event.repo}, this bot serves {self.config.repository}")
        commands = parse_comment(event.body)
        if not commands:
            return Outcome("ignored", "no /rerun-test command in the comment")

        existing = self.client.list_issue_comments(event.repo, event.number)
        # Only the bot's own replies count: anyone can paste the hidden marker into a comment.
        if any(c.user == self.config.bot_login and replies.answers(c.body, event.comment_id) for c in existing):
            return Outcome("duplicate", f"comment {event.comment_id} was already answered")

        outcome = Outcome("dispatched")
        self._react(event, outcome, "eyes")
        try:
            permission = self.client.get_permission(event.repo, event.user)
        except GitHubError as exc:
            return self._fail(event, outcome, "checking the commenter's permission failed", str(exc), str(exc))
        if not permission.can_trigger:
            outcome.status, outcome.reason = "refused", f"{event.user} has permission {permission.permission}"
            return self._reply(event, outcome, replies.refusal_reply(
                event.comment_id, event.user, permission.permission, permission.role_name))

        if all(c.help for c in commands):
            outcome.status = "help"
            return self._reply(event, outcome, replies.help_reply(event.comment_id, event.user))
        return self._run(event, commands, outcome)

    def _run(self, event: CommentEvent, commands: list[Command], outcome: Outcome) -> Outcome:
        total = sum(len(c.targets) for c in commands)
        if total > MAX_TARGETS:
            self._react(event, outcome, "confused")
            outcome.status, outcome.reason = "invalid", f"{total} targets"
            return self._reply(event, outcome, replies.too_many_reply(event.comment_id, event.user, total))
        try:
            registry = load_registry(self.config.repo_root / REGISTRY_FILENAME)
        except RegistryError as exc:
            return self._fail(event, outcome, "`registry.yaml` on the default branch is invalid", str(exc),
                              "invalid registry")

        notes = [replies.command_error(c) for c in commands if c.error]
        resolutions = [resolve_target(registry, self.config.repo_root, target, c.tier)
                       for c in commands if not c.error and not c.help for target in c.targets]
        groups: dict[str, list[str]] = {}
        for r in resolutions:
            if r.kind is Kind.RESOLVED:
                for tier in r.tiers:
                    if r.test_id not in groups.setdefault(tier, []):
                        groups[tier].append(r.test_id)

        sha, results = "", {}
        if groups:
            try:
                pull = self.client.get_pull(event.repo, event.number)
            except GitHubError as exc:
                return self._fail(event, outcome, "reading the pull request's head commit failed", str(exc),
                                  str(exc))
            sha = pull.head_sha
            for tier, tests in groups.items():
                dispatch = self._dispatch(event, registry, tier, tests, sha)
                outcome.dispatches.append(dispatch)
                results[tier] = dispatch

        rows, everything_ran = _rows(registry, resolutions, results)
        notes += [replies.explain(r, registry) for r in resolutions if r.kind is not Kind.RESOLVED]
        everything_ran = everything_ran and not any(c.error for c in commands)
        sent = sum(d.error is None for d in outcome.dispatches)
        header = (f"`/rerun-test`: {sent} of {len(outcome.dispatches)} dispatch(es) sent"
                  + (f" for commit `{sha[:12]}`" if sha else "")
                  + (f" (workflow `{self.config.workflow_file}` on `{event.default_branch}`)." if sha else ".")
                  + (" **Dry run: nothing was sent.**" if self.config.dry_run else ""))
        outcome.status = "dispatched" if everything_ran and outcome.dispatches else "partial"
        self._react(event, outcome, "rocket" if outcome.status == "dispatched" else "confused")
        return self._reply(event, outcome, replies.result_reply(event.comment_id, event.user, rows, notes, header))

    def _dispatch(self, event: CommentEvent, registry: Registry, tier: str, tests: list[str], sha: str) -> Dispatch:
        runner = registry.tiers[tier].runner_labels
        inputs = {
            "pr": str(event.number),
            "sha": sha,
            "tier": tier,
            "runner": json.dumps(list(runner)),
            "tests": " ".join(tests),
            "comment_id": str(event.comment_id),
        }
        dispatch = Dispatch(tier, runner, tuple(tests), event.default_branch, inputs)
        if self.config.dry_run:
            return dispatch
        try:
            self.client.dispatch_workflow(event.repo, self.config.workflow_file, event.default_branch, inputs)
        except GitHubError as exc:
            log.error("dispatch for tier %s failed: %s", tier, exc)
            return Dispatch(tier, runner, tuple(tests), event.default_branch, inputs, error=str(exc))
        return dispatch


_RESULT_TEXT = {
    Kind.UNSAFE: "refused: unsafe target",
    Kind.AMBIGUOUS: "ambiguous name",
    Kind.UNKNOWN: "not found",
    Kind.UNREGISTERED: "not registered",
    Kind.NOT_ACTIVE: "not active",
    Kind.BAD_TIER: "tier not allowed",
}


def _rows(registry: Registry, resolutions: list[Resolution],
          results: dict[str, Dispatch]) -> tuple[list[replies.Row], bool]:
    rows: list[replies.Row] = []
    everything_ran = bool(resolutions)
    for r in resolutions:
        if r.kind is not Kind.RESOLVED:
            everything_ran = False
            tier = r.requested_tier if r.kind is Kind.BAD_TIER else None
            rows.append(replies.Row(r.target, r.path, tier, (), _RESULT_TEXT[r.kind] + " (see below)"))
            continue
        for tier in r.tiers:
            dispatch = results[tier]
            if dispatch.error is None:
                result = "dispatched"
            else:
                everything_ran = False
                result = f"dispatch failed: {replies.quote(dispatch.error, limit=200)}"
            rows.append(replies.Row(r.target, r.test_id, tier, registry.tiers[tier].runner_labels, result))
    return rows, everything_ran
