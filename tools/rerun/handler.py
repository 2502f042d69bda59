"""One ``issue_comment`` event -> reactions, one claimed reply, dispatches and re-runs, the reply's table.

Order of work (nothing is dispatched before the comment is claimed):

1. ignore anything that is not a newly created comment on a pull request with a command, and the
   bot's own replies;
2. list the PR's comments: a *final* reply of the bot carrying this comment's marker means it was
   handled -> stop. A *resumable* one (``claimed``/``incomplete``/``failed``: an earlier attempt
   crashed or hit a GitHub failure) is taken over: its SHA is reused and every run is looked up by
   its run-name before it is dispatched, so nothing runs twice;
3. react ``eyes``; only ``--help`` and look-alike lines -> the help / the hint, no permission needed;
4. the repository's default branch (from the payload, else ``GET /repos/{o}/{r}``), the
   commenter's permission and the PR; `tools.rerun.policy` decides, a refusal names the rule;
5. plan every command (`cmd_rerun_test`, `cmd_rerun_tier`, `cmd_rerun_failed`): reads only;
6. **claim**: post a short reply with the marker (state ``claimed``) and "dispatching…"; if it
   cannot be posted, nothing is dispatched (`GitHubError`);
7. dispatch (`tools.rerun.dispatch`: once per tier, or per shard; ambiguous failures are looked up
   before any resend) and re-run failed jobs, then edit the reply into the table (state ``done``,
   or ``incomplete`` when a GitHub call failed for good) and react ``rocket`` or ``confused``.
   The client paces its writes (`budget.WritePacer`), so a ``/rerun-tier`` of many shards takes
   minutes to dispatch; meanwhile the reply shows the runs sent so far, edited at most once per
   `budget.PROGRESS_SECONDS` (`budget.Coalescer`). Every edit after the claim first re-reads the
   reply and keeps the rows that reports have already filled.

Every body is fitted under GitHub's 65,536 characters (`fit.fit`: cells shortened, rows kept).
``Outcome.errors`` lists the GitHub failures: the CLI then exits non-zero and ``serve`` keeps the
delivery unfinished. Dry run (``dry_run=True``) still reads but never writes: no reactions, claim,
dispatches or replies.

A ``/culprit`` comment (alone in its comment) takes its own path after step 4 (`_culprit`): checked
by `cmd_culprit.plan` (bad input is a reply, nothing dispatched), claimed, ``culprit.yml``
dispatched once (looked up by its run-name first when resumed), the reply edited to "searching: ...";
the search's job writes the answer into that reply later (`culprit_reply`).

A ``workflow_run`` delivery (a dispatched run completed) goes to `tools.rerun.run_ended`: its row
says "no result" unless it holds results.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ci.registry import REGISTRY_FILENAME, Registry, RegistryError, load_registry
from tools.rerun import cmd_culprit, cmd_rerun_failed, cmd_rerun_test, cmd_rerun_tier, culprit_reply, replies
from tools.rerun.budget import BOT_WRITES_PER_MINUTE, PROGRESS_SECONDS, Coalescer, WritePacer
from tools.rerun.fit import fit
from tools.rerun.cmd_rerun_failed import RerunResult
from tools.rerun.cmd_rerun_tier import DEFAULT_SHARD_BUDGET
from tools.rerun.comment_lines import CULPRIT, RERUN_FAILED, RERUN_TEST, RERUN_TIER
from tools.rerun.commands import Command, parse_comment
from tools.rerun.dispatch import DISPATCH_WORKFLOW, Dispatcher, DispatchResult, DispatchSpec, RunLookup
from tools.rerun.event import CommentEvent
from tools.rerun.github import DEFAULT_BOT_LOGIN, GitHubAPI, GitHubError, PullRequest
from tools.rerun.policy import decide
from tools.rerun.pr_runs import PR_WORKFLOWS
from tools.rerun.headline import retitle, span
from tools.rerun.layout import relayout
from tools.rerun.report import Reporter, ReportError
from tools.rerun.run_ended import RunEnded, is_run_event, mark_ended
from tools.rerun.runs_table import put_row, rows_in
from tools.rerun.work import Work

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BotConfig:
    """``repo_root``: the trusted checkout whose registry.yaml and tree are used; ``repository``
    (``owner/name``), when set, is the only repository whose events are handled (others are
    ignored: its registry and tree would be the wrong ones). ``shard_budget`` (seconds of
    est_time per shard) is what ``/rerun-tier`` plans with; ``writes_per_minute`` paces the writes of
    the process's clients; ``history`` is the test history `/culprit` reads its default window from.
    ``pr_workflows``: the workflows that run for a PR from the base branch, whose runs
    ``/rerun-failed`` finds by run-name (`pr_runs`)."""

    repo_root: Path
    workflow_file: str = DISPATCH_WORKFLOW
    dry_run: bool = False
    repository: str | None = None
    bot_login: str = DEFAULT_BOT_LOGIN  # only this author's markers count as "already answered"
    shard_budget: float = DEFAULT_SHARD_BUDGET
    lookup: RunLookup = RunLookup()
    pr_workflows: tuple[str, ...] = PR_WORKFLOWS
    writes_per_minute: float = BOT_WRITES_PER_MINUTE  # of the process's client (`pacer`); 0: unpaced
    report_settle: float = 12.0  # `Reporter`'s settle before its re-read, for the workflow_run hook
    history: str | None = None  # the test history (URL or path): `/culprit`'s default window

    def pacer(self) -> Callable[[], None] | None:
        """The ``pace`` for the process's GitHub clients (one pacer per process), None when unpaced."""
        return WritePacer(self.writes_per_minute).take if self.writes_per_minute > 0 else None


@dataclass
class Outcome:
    """What handling one event did. ``status``: ignored, duplicate, refused, help, invalid, failed,
    dispatched (everything ran) or partial (something did not). ``errors``: GitHub failures."""

    status: str
    reason: str = ""
    reply: str | None = None
    dispatches: list[DispatchResult] = field(default_factory=list)
    reruns: list[RerunResult] = field(default_factory=list)
    reactions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Handler:
    """Handles comment events for one repository checkout with one GitHub client."""

    def __init__(self, client: GitHubAPI, config: BotConfig, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        self.client = client
        self.config = config
        self.sleep = sleep
        self.clock = clock

    # -- writes (suppressed in dry-run) ------------------------------------------------------------
    def _react(self, event: CommentEvent, outcome: Outcome, content: str) -> None:
        outcome.reactions.append(content)
        if self.config.dry_run:
            return
        try:
            self.client.add_reaction(event.repo, event.comment_id, content)
        except GitHubError as exc:  # a missing emoji must not stop the run
            log.warning("reaction %s on comment %d failed: %s", content, event.comment_id, exc)

    def _own_reply(self, event: CommentEvent) -> int | None:
        """The id of the bot's reply to this comment, if one exists (confirms an ambiguous POST)."""
        for comment in self.client.list_issue_comments(event.repo, event.number):
            if comment.user == self.config.bot_login and replies.answers(comment.body, event.comment_id):
                return comment.id
        return None

    def _write(self, event: CommentEvent, outcome: Outcome, reply: "_ReplyRef", body: str) -> None:
        """Post the reply, or edit it if it exists; always fitted under GitHub's limit (`fit.fit`:
        a long runs table has its cells shortened, never its rows cut)."""
        body = fit(body)
        outcome.reply = body
        if self.config.dry_run:
            return
        if reply.id is None:
            reply.id = self.client.create_comment(event.repo, event.number, body,
                                                  confirm=lambda: self._own_reply(event))
        else:
            self.client.edit_comment(event.repo, reply.id, body)

    def _fail(self, event: CommentEvent, outcome: Outcome, reply: "_ReplyRef", what: str, detail: str,
              github: bool = True) -> Outcome:
        """React `confused`, mark the outcome failed and reply saying ``what`` failed and why.
        ``github``: a GitHub failure (the reply says it is retried; the CLI exits non-zero)."""
        self._react(event, outcome, "confused")
        outcome.status, outcome.reason = "failed", detail
        if github:
            outcome.errors.append(detail)
        self._write(event, outcome, reply, replies.failure_reply(event.comment_id, event.user, what, detail,
                                                                 resumable=github))
        return outcome

    # -- the flow --------------------------------------------------------------------------------
    def handle(self, payload: dict[str, Any]) -> Outcome:
        """Handle one ``issue_comment`` payload (see the module docstring). Raises `GitHubError`
        when the comments cannot be listed (the bot then cannot prove it has not answered), or
        when the claim or the final reply cannot be written. A ``workflow_run`` payload goes to
        `_run_ended`."""
        if is_run_event(payload):
            return self._run_ended(payload)
        event = CommentEvent.from_payload(payload)
        if isinstance(event, str):
            return Outcome("ignored", event)
        if self.config.repository and event.repo.lower() != self.config.repository.lower():
            return Outcome("ignored", f"event is for {event.repo}, this bot serves {self.config.repository}")
        commands = parse_comment(event.body)
        if not commands:
            return Outcome("ignored", "no bot command in the comment")

        reply, prior = _ReplyRef(None), None
        for c in self.client.list_issue_comments(event.repo, event.number):
            # Only the bot's own replies count: anyone can paste the hidden marker into a comment.
            found = replies.find_marker(c.body, event.comment_id) if c.user == self.config.bot_login else None
            if found is not None and not found.resumable:
                return Outcome("duplicate", f"comment {event.comment_id} was already answered")
            if found is not None:
                reply, prior = _ReplyRef(c.id), found

        outcome = Outcome("dispatched")
        if prior is None:
            self._react(event, outcome, "eyes")
        notes = [replies.lookalike_note(c) for c in commands if c.lookalike]
        notes += [replies.command_error(c) for c in commands if c.error and not c.lookalike]
        runnable = [c for c in commands if c.runnable]
        if not runnable:
            asked = [c.name for c in commands if c.help]
            outcome.status = "help" if asked else "invalid"
            if not asked:
                self._react(event, outcome, "confused")
            body = (replies.help_reply(event.comment_id, event.user, asked, notes) if asked
                    else replies.notes_reply(event.comment_id, event.user, notes))
            self._write(event, outcome, reply, body)
            return outcome

        try:
            default_branch = event.default_branch or self.client.get_repo(event.repo).default_branch
            permission = self.client.get_permission(event.repo, event.user)
            pull = self.client.get_pull(event.repo, event.number)
        except GitHubError as exc:
            return self._fail(event, outcome, reply, "reading the repository, the permission or the pull "
                              "request failed", str(exc))
        for command in runnable:
            decision = decide(command.action, event.user, permission, pull)
            if not decision.allowed:
                outcome.status, outcome.reason = "refused", f"{decision.rule}: {decision.reason}"
                self._write(event, outcome, reply, replies.refusal_reply(event.comment_id, event.user, decision))
                return outcome

        if any(c.name == CULPRIT for c in runnable):
            return self._culprit(event, outcome, reply, runnable, notes, default_branch, resumed=prior is not None)
        sha = (prior.sha if prior is not None and prior.sha else None) or pull.head_sha
        try:
            work = self._plan(event, runnable, pull, sha)
        except RegistryError as exc:
            return self._fail(event, outcome, reply, "`registry.yaml` on the default branch is invalid",
                              str(exc), github=False)
        except GitHubError as exc:
            return self._fail(event, outcome, reply, "reading the workflow runs failed", str(exc))
        work.notes[:0] = notes
        work.complete = work.complete and not notes  # a line that did not parse, or a look-alike, did not run
        return self._carry_out(event, outcome, reply, work, sha, default_branch, resumed=prior is not None)

    def _plan(self, event: CommentEvent, commands: list[Command], pull: PullRequest, sha: str) -> Work:
        registry: Registry | None = None
        if any(c.name in (RERUN_TEST, RERUN_TIER) for c in commands):
            registry = load_registry(self.config.repo_root / REGISTRY_FILENAME)
        work = Work()
        if registry is not None:
            work = work.merge(cmd_rerun_test.plan(registry, self.config.repo_root,
                                                  [c for c in commands if c.name == RERUN_TEST]))
            work = work.merge(cmd_rerun_tier.plan(registry, [c for c in commands if c.name == RERUN_TIER],
                                                  self.config.shard_budget))
        if any(c.name == RERUN_FAILED for c in commands):
            workflows = self.config.pr_workflows + (self.config.workflow_file,)
            work = work.merge(cmd_rerun_failed.plan(self.client, event.repo, pull, sha, workflows))
        return work

    def _carry_out(self, event: CommentEvent, outcome: Outcome, reply: "_ReplyRef", work: Work, sha: str,
                   default_branch: str, resumed: bool) -> Outcome:
        config = self.config
        edits = Coalescer(PROGRESS_SECONDS, self.clock)
        if work.writes and not config.dry_run:
            # The claim: from here on a redelivery finds the marker and never starts a second round.
            claim = replies.claim_reply(event.comment_id, event.user, sha, work.writes)
            self._write(event, outcome, reply, claim)
            edits.wrote(claim)
        actions_url = f"{event.html_url}/actions/workflows/{config.workflow_file}"
        dispatcher = Dispatcher(self.client, event.repo, config.workflow_file, default_branch, actions_url,
                                config.lookup, sleep=self.sleep, since=event.created_at)

        def progress(done: list[DispatchResult]) -> None:
            body = replies.result_reply(
                event.comment_id, event.user, span(f"dispatching… {len(done)} of {len(work.dispatches)} run(s) sent")
                + f" for commit `{sha[:12]}` (paced to stay within GitHub's rate limits).", work.sections,
                replies.runs_table(done, actions_url), [], replies.CLAIMED, sha)
            if reply.id is None or config.dry_run or not edits.due(body):
                return
            try:
                kept = self._keep_reported(event, reply.id, body)
                self.client.edit_comment(event.repo, reply.id, fit(relayout(retitle(kept))))
            except GitHubError as exc:  # progress is a courtesy; the final edit says what happened
                log.warning("progress edit of reply %d failed: %s", reply.id, exc)
            edits.wrote(body)
        outcome.dispatches = dispatcher.send_all(work.dispatches, event.number, sha, event.comment_id,
                                                 look_first=resumed, dry_run=config.dry_run, progress=progress)
        outcome.reruns = cmd_rerun_failed.carry_out(self.client, event.repo, work.reruns, config.dry_run)
        outcome.errors += [f"dispatch {d.run_name}: {d.error}" for d in outcome.dispatches if not d.ok]
        outcome.errors += [f"re-run of run {r.run.id}: {r.error}" for r in outcome.reruns if r.state == "failed"]

        ran = bool(work.writes) and not outcome.errors
        outcome.status = "dispatched" if ran and work.complete else "partial"
        state = replies.INCOMPLETE if outcome.errors else replies.DONE
        body = replies.result_reply(
            event.comment_id, event.user, replies.header(outcome.dispatches, outcome.reruns, sha, config.workflow_file,
                                                 default_branch, config.dry_run),
            work.sections + [cmd_rerun_failed.render(outcome.reruns)], replies.runs_table(outcome.dispatches, actions_url),
            work.notes, state, sha)
        if (resumed or work.dispatches) and reply.id is not None and not config.dry_run:
            body = relayout(retitle(self._keep_reported(event, reply.id, body)))
        self._write(event, outcome, reply, body)
        self._react(event, outcome, "rocket" if outcome.status == "dispatched" else "confused")
        return outcome

    def _culprit(self, event: CommentEvent, outcome: Outcome, reply: "_ReplyRef", commands: list[Command],
                 notes: list[str], default_branch: str, resumed: bool) -> Outcome:
        """``/culprit``: check it (`cmd_culprit.plan`), claim, dispatch culprit.yml once (looked up
        first when resumed), reply "searching: ..."; bad input is a reply and dispatches nothing."""
        user = replies.user_mention(event.user)
        try:
            if len(commands) > 1 or notes:
                raise cmd_culprit.CulpritProblem("post `/culprit` in a comment of its own: one search per comment, "
                                                 "and no other command beside it")
            registry = load_registry(self.config.repo_root / REGISTRY_FILENAME)
            request = cmd_culprit.plan(registry, self.config.repo_root, commands[0], history=self.config.history,
                                       repo=event.repo)
        except RegistryError as exc:
            return self._fail(event, outcome, reply, "`registry.yaml` on the default branch is invalid", str(exc),
                              github=False)
        except cmd_culprit.CulpritProblem as exc:
            self._react(event, outcome, "confused")
            outcome.status, outcome.reason = "invalid", str(exc)
            self._write(event, outcome, reply, replies.notes_reply(event.comment_id, event.user, notes + [str(exc)]))
            return outcome
        inputs = request.inputs(event.number, event.comment_id)
        name = cmd_culprit.culprit_run_name(inputs)
        spec = DispatchSpec(request.tier, "culprit", (), (request.test,))
        if self.config.dry_run:
            outcome.dispatches = [DispatchResult(spec, inputs, name, "dry-run")]
            self._write(event, outcome, reply, culprit_reply.searching(event.comment_id, user, request, None))
            return outcome
        self._write(event, outcome, reply, culprit_reply.claim(event.comment_id, user))
        actions_url = f"{event.html_url}/actions/workflows/{cmd_culprit.CULPRIT_WORKFLOW}"
        dispatcher = Dispatcher(self.client, event.repo, cmd_culprit.CULPRIT_WORKFLOW, default_branch, actions_url,
                                self.config.lookup, sleep=self.sleep, since=event.created_at)
        try:
            found = dispatcher.find([name], self.config.lookup.wait) if resumed else {}
        except GitHubError as exc:  # cannot prove it was not sent: send nothing
            state, url, error = "failed", None, f"looking for the earlier run failed: {exc}"
        else:
            state, url, error = ("found", found[name].html_url, None) if name in found else \
                dispatcher.send_inputs(inputs, name)
        outcome.dispatches = [DispatchResult(spec, inputs, name, state, error, url)]
        if error is not None:
            outcome.status = "partial"
            outcome.errors.append(f"dispatch {name}: {error}")
        self._write(event, outcome, reply, culprit_reply.searching(event.comment_id, user, request, url, error))
        self._react(event, outcome, "rocket" if error is None else "confused")
        return outcome

    def _run_ended(self, payload: dict[str, Any]) -> Outcome:
        """A dispatched run completed: its row says "no result" unless it holds results
        (`tools.rerun.run_ended`); ``marked``, ``unchanged`` or ``ignored``."""
        ended = RunEnded.from_payload(payload, self.config.workflow_file)
        if isinstance(ended, str):
            return Outcome("ignored", ended)
        if self.config.repository and ended.repo.lower() != self.config.repository.lower():
            return Outcome("ignored", f"event is for {ended.repo}, this bot serves {self.config.repository}")
        if self.config.dry_run:
            return Outcome("ignored", f"dry run: {ended.tier} {ended.part} ended ({ended.conclusion})")
        reporter = Reporter(self.client, ended.repo, self.config.bot_login, settle=self.config.report_settle,
                            sleep=self.sleep)
        try:
            marked = mark_ended(reporter, ended)
        except ReportError as exc:  # no reply to mark, or the row kept being overwritten
            return Outcome("failed", str(exc))
        what = f"{ended.tier} {ended.part} of comment {ended.comment_id}"
        return Outcome("marked", f"{what}: no result ({ended.conclusion})") if marked else \
            Outcome("unchanged", f"{what} already holds results")

    def _keep_reported(self, event: CommentEvent, reply_id: int, body: str) -> str:
        """``body`` with the rows that already hold results in the reply as it is now: reports of
        runs that finished while later ones were still being dispatched."""
        return _keep_reported_rows(body, self.client.get_comment(event.repo, reply_id).body)


@dataclass
class _ReplyRef:
    """The bot's reply to the comment being handled: its id once posted (or found)."""

    id: int | None


def _keep_reported_rows(body: str, current: str) -> str:
    """``body`` with every row that already holds results in ``current`` kept (a report that
    arrived while a crashed attempt was being resumed)."""
    for row in rows_in(current):
        if row.has_results:
            body = put_row(body, row)
    return body


__all__ = ["BotConfig", "CommentEvent", "DISPATCH_WORKFLOW", "Handler", "Outcome"]
