"""``python -m tools.rerun culprit ... --runner dispatch --repo OWNER/NAME --workflow FILE``: ``ci
culprit`` (docs/culprit.md) with each run a workflow_dispatch of the tier's rerun workflow at the
probed commit, through the bot's own client and run lookup (`tools.rerun.dispatch.Dispatcher`).

A run of ``--attempts`` K is up to K dispatches, one after another until one passes. Each dispatch
has a unique run-name (`dispatch.run_name`: PR #0, the tier, the commit, and as ``comment_id`` the
search's key with the run number and attempt), so a run can be found again by its name. Every
dispatch is written to a journal beside the state file (``STATE.dispatches.json``,
`ci.atomic_write`, read with `read_regular`) **before** it is sent, and its conclusion when the run
completes. A search killed at any point (kill -9) and started again with the same arguments asks for
the same runs (`ci culprit` numbers them by their place in the search); a journalled dispatch is
never sent blind again: it is looked up by its run-name first (`Dispatcher.send_all` with
``look_first``) and sent only when GitHub lists no such run; a finished one is not looked up at all.

A failed run's error signature is read from the JUnit artifact it publishes (`culprit_junit`) when it
completes, and journalled with its conclusion in one write: a search killed before that write
reads the run again (it is found by its run-name, never dispatched again); one killed after it
downloads nothing again. The search weighs the signatures as the local runner's; a run without a
readable artifact is pass/fail evidence only, and its answer line says why; an artifact GitHub
did not answer for (a 5xx, a reset, a timeout after the client's retries) stops the search with
the run unjournalled, and the resumed search reads it again.

A run's outcome is its conclusion: ``success`` passed, ``failure`` / ``timed_out`` failed; any other
(``cancelled``, ``skipped``...) stops the search (exit 1) naming the run, since it says nothing about
the test; it is journalled, and the resumed search dispatches that attempt anew (at most
`MAX_REDOS` times). Dispatches and artifact reads are paced like the bot's writes
(`budget.WritePacer`), and a search whose ``(--budget + 2) x --attempts`` dispatches, each with its
failed run's artifact reads, exceed the bot's per-comment share of the hourly request budget
(`budget.max_runs`) is refused before anything is sent.

``--pr N --comment-id ID`` (culprit.yml started by ``/culprit``): the answer, or why the search
stopped, is also written into the bot's reply to that comment (`write_reply`, `culprit_reply`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ci.atomic_write import atomic_write_text
from ci.commands import culprit
from ci.commands.culprit_local import RunResult, RunnerError
from ci.registry import load_registry
from ci.regular_file import MAX_CONFIG_BYTES, UnreadableFile, read_regular
from ci.repo_root import REGISTRY_FILENAME
from tools.rerun.budget import BOT_WRITES_PER_MINUTE, WritePacer, max_runs
from tools.rerun.dispatch import (DISPATCH_WORKFLOW, SEARCH_PR, Dispatcher, DispatchSpec, RunLookup, dispatch_inputs,
                                  run_name)
from tools.rerun import culprit_reply
from tools.rerun.culprit_junit import SIGNATURE_REQUESTS, ArtifactUnavailable, failed_signature
from tools.rerun.github import DEFAULT_BOT_LOGIN, CommitPull, GitHubClient, GitHubError
from tools.rerun.report import ReportError
from tools.rerun.runs_table import TARGETS_PART
from tools.rerun.secrets_file import SecretError, check_secret, read_secret

PROG = "rerun-test culprit"
PASSED, FAILED = frozenset({"success"}), frozenset({"failure", "timed_out"})
MAX_REDOS = 10  # dispatches of one attempt that may end without a result (cancelled, skipped...)


@dataclass
class Sent:
    """One journalled dispatch: its run-name, the search's run number, the attempt, the commit; its
    conclusion and link once the run completed, and for a failed run its error signature from the
    run's JUnit artifact ("" when none could be read, ``problem`` saying why; None in a journal an
    older search wrote)."""

    name: str
    run: int
    attempt: int
    sha: str
    conclusion: str | None = None
    url: str | None = None
    signature: str | None = None
    problem: str = ""


@dataclass
class DispatchJournal:
    """Every dispatch of one search (``identity``), written before it is sent. ``since``: when the
    search began (ISO 8601): its runs cannot be older (the lookups' ``created>=``)."""

    identity: str
    since: str
    dispatches: list[Sent] = field(default_factory=list)

    def entry(self, name: str) -> Sent | None:
        return next((s for s in self.dispatches if s.name == name), None)

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(asdict(self), indent=1) + "\n")


def load_journal(path: Path, identity: str) -> DispatchJournal:
    """The journal at ``path`` when it is this search's, else a new one starting now. A FIFO or a
    device there is `ValueError` naming it (`read_regular`), never a hang."""
    try:
        data = json.loads(read_regular(path, MAX_CONFIG_BYTES))
        found = DispatchJournal(data["identity"], data["since"], [Sent(**s) for s in data["dispatches"]])
    except UnreadableFile as exc:
        raise ValueError(f"{path}: {exc.strerror}: give a --state path whose .dispatches.json is a regular file") \
            from None
    except (OSError, ValueError, TypeError, KeyError):
        found = None
    if found is not None and found.identity == identity:
        return found
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 60))  # clock skew margin
    return DispatchJournal(identity, since)


class DispatchRunner:
    """`ci.commands.culprit_local.BatchRunner` over workflow dispatches (see the module docstring)."""

    def __init__(self, dispatcher: Dispatcher, journal: DispatchJournal, path: Path, spec: DispatchSpec,
                 attempts: int, slots: int, *, poll: float = 30.0, run_timeout: float = 6 * 3600.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic):
        self.dispatcher, self.journal, self.path, self.spec = dispatcher, journal, path, spec
        self.attempts, self.slots, self.poll, self.run_timeout = attempts, slots, poll, run_timeout
        self.sleep, self.clock = sleep, clock
        self.key = int(hashlib.sha256(journal.identity.encode()).hexdigest()[:6], 16)

    def run_batch(self, runs: Sequence[tuple[int, str]]) -> list[RunResult]:
        """Each (run number, sha) run to its outcome, their first attempts dispatched together."""
        results: dict[int, RunResult] = {}
        failures: dict[int, list[Sent]] = {run: [] for run, _ in runs}
        active = list(runs)
        for attempt in range(1, self.attempts + 1):
            names = [self._dispatch(run, sha, attempt) for run, sha in active]
            self._wait(names)
            still = []
            for (run, sha), name in zip(active, names):
                sent = self.journal.entry(name)
                assert sent is not None and sent.conclusion is not None
                if sent.conclusion not in PASSED:
                    failures[run].append(sent)
                if sent.conclusion in PASSED or attempt == self.attempts:
                    failed = sent.conclusion not in PASSED
                    unread = [f"{s.url}: {s.problem or 'no error signature read'}" for s in failures[run]
                              if not s.signature]
                    results[run] = RunResult(failed, sent.url, attempt if failed else attempt - 1,
                                             tuple(s.signature or "" for s in failures[run]),
                                             "pass/fail evidence only: " + "; ".join(unread) if unread else "")
                else:
                    still.append((run, sha))
            active = still
            if not active:
                break
        return [results[run] for run, _ in runs]

    def about(self, sha: str) -> str:
        """The culprit's pull request(s), from GitHub's commit-to-PR association."""
        try:
            pulls = self.dispatcher.client.pulls_for_commit(self.dispatcher.repo, sha)
        except GitHubError as exc:
            return f"its pull request unknown ({exc})"
        if not pulls:
            return "no pull request associated with it"
        return "; ".join(f"PR #{p.number} ({p.title}) {p.html_url}" for p in pulls[:3])

    def _dispatch(self, run: int, sha: str, attempt: int) -> str:
        for redo in range(MAX_REDOS):  # a run that ended without a result (cancelled) is dispatched anew
            comment = self.key * 100_000 + run * 100 + attempt * 10 + redo
            name = run_name(dispatch_inputs(self.spec, SEARCH_PR, sha, comment, "1/1"))
            sent = self.journal.entry(name)
            if sent is None or sent.conclusion is None or sent.conclusion in PASSED | FAILED:
                break
        else:
            raise RunnerError(f"run {run} at {sha[:12]}: {MAX_REDOS} dispatches ended without a result "
                              f"(the last {name}): look at the runners before resuming")
        if sent is not None and sent.conclusion is not None:
            return name  # finished before a restart: neither looked up nor sent
        look_first = sent is not None  # journalled by an earlier process: it may have gone out
        if sent is None:
            sent = Sent(name, run, attempt, sha)
            self.journal.dispatches.append(sent)
            self.journal.save(self.path)  # before sending: a kill -9 after the POST leaves it journalled
        [result] = self.dispatcher.send_all([self.spec], SEARCH_PR, sha, comment, look_first=look_first)
        if not result.ok:
            raise RunnerError(f"dispatching {name} failed: {result.error}; rerun the same command to resume")
        sent.url = result.run_url
        self.journal.save(self.path)
        return name

    def _wait(self, names: list[str]) -> None:
        """Poll the runs by run-name until each has completed, journalling each conclusion."""
        deadline = self.clock() + self.run_timeout
        while waiting := [n for n in names if self.journal.entry(n).conclusion is None]:  # type: ignore[union-attr]
            try:
                found = self.dispatcher.find(waiting, 0)
            except GitHubError as exc:
                raise RunnerError(f"looking up the runs failed: {exc}; rerun the same command to resume") from None
            for name, run in found.items():
                if run.status == "completed":
                    sent = self.journal.entry(name)
                    assert sent is not None
                    if run.conclusion in FAILED:  # read before the conclusion is journalled: one write has both
                        try:
                            read = failed_signature(self.dispatcher.client, self.dispatcher.repo, run.id)
                        except ArtifactUnavailable as exc:  # unjournalled: the resumed search reads it again
                            raise RunnerError(f"run {run.html_url} ({name}) failed, and {exc}: rerun the same "
                                              "command to read it again") from None
                        sent.signature, sent.problem = read.signature, read.problem
                    sent.conclusion, sent.url = run.conclusion, run.html_url
                    self.journal.save(self.path)
                    if run.conclusion not in PASSED | FAILED:  # journalled: a resume dispatches it anew
                        raise RunnerError(f"run {run.html_url} ({name}) ended {run.conclusion}, which says nothing "
                                          "of the test: rerun the same command to dispatch it again")
            if any(self.journal.entry(n).conclusion is None for n in names):  # type: ignore[union-attr]
                if self.clock() > deadline:
                    raise RunnerError(f"{len(waiting)} run(s) not completed after {self.run_timeout:.0f} s "
                                      f"({', '.join(waiting[:3])}): rerun the same command to keep waiting")
                self.sleep(self.poll)


@dataclass(frozen=True)
class DispatchPlugin:
    """``--runner dispatch`` for `ci.commands.culprit.main`."""

    name: str = "dispatch"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("--runner dispatch")
        group.add_argument("--repo", metavar="OWNER/NAME", help="the repository whose workflow runs the probes")
        group.add_argument("--workflow", default=DISPATCH_WORKFLOW, help="workflow file (default: %(default)s)")
        group.add_argument("--ref", default="main", help="branch the workflow runs from (default: %(default)s)")
        group.add_argument("--api-url", help="GitHub API base URL (default: $GITHUB_API_URL or api.github.com)")
        group.add_argument("--token-file", help="file holding the API token (default: $GITHUB_TOKEN)")
        group.add_argument("--poll", type=float, default=30.0, help="seconds between run lookups (default 30)")
        group.add_argument("--lookup-wait", type=float, default=RunLookup.wait,
                           help="seconds to look for a journalled run by its run-name before resending it")
        group.add_argument("--writes-per-minute", type=float, default=BOT_WRITES_PER_MINUTE,
                           help="pace the dispatches like the bot's writes (default: %(default)s)")
        group.add_argument("--pr", default="", help="the pull request of the /culprit comment (empty: none)")
        group.add_argument("--comment-id", default="",
                           help="the /culprit comment whose bot reply gets the answer (empty: no reply)")
        group.add_argument("--run-url", default="", help="this search's own run, linked from the reply")
        group.add_argument("--bot-login", default=DEFAULT_BOT_LOGIN,
                           help="login of the bot's replies (default: %(default)s)")

    def make(self, args: argparse.Namespace, root: Path, state_path: Path) -> DispatchRunner:
        repo = args.repo or os.environ.get("GITHUB_REPOSITORY") or ""
        owner, _, name = repo.partition("/")
        if not owner or not name or "/" in name:
            raise ValueError(f"--repo {repo or '(none)'}: give the repository as OWNER/NAME")
        dispatches = (args.budget + 2) * args.attempts
        if dispatches > (most := max_runs(SIGNATURE_REQUESTS)):
            raise ValueError(f"--budget {args.budget} x --attempts {args.attempts}: up to {dispatches} dispatches, "
                             f"over the {most} one search may send within the bot's request budget with each "
                             f"failed run's {SIGNATURE_REQUESTS} artifact reads (tools/rerun/budget.py): "
                             "lower --budget or --attempts")
        if args.writes_per_minute <= 0 or args.poll <= 0:
            raise ValueError("--writes-per-minute and --poll must be > 0")
        _reply_to(args)  # a bad --pr or --comment-id is bad input before anything is dispatched
        client = _client(args)
        tier = load_registry(root / REGISTRY_FILENAME).tiers[args.tier]
        spec = DispatchSpec(args.tier, TARGETS_PART, tier.runner_labels, (args.test,))
        identity = " ".join([repo, args.workflow, args.tier, args.test, args.good, args.bad, str(args.attempts)])
        path = state_path.with_suffix(".dispatches.json")
        path.parent.mkdir(parents=True, exist_ok=True)
        journal = load_journal(path, identity)
        actions = f"https://github.com/{repo}/actions/workflows/{args.workflow}"
        dispatcher = Dispatcher(client, repo, args.workflow, args.ref, actions,
                                lookup=RunLookup(wait=args.lookup_wait, interval=min(1.0, args.poll)),
                                since=journal.since)
        return DispatchRunner(dispatcher, journal, path, spec, args.attempts, args.runners, poll=args.poll)


def _client(args: argparse.Namespace) -> GitHubClient:
    """The bot's client for ``--api-url`` and ``--token-file`` / ``$GITHUB_TOKEN``; `ValueError` without a token."""
    try:
        token = read_secret(args.token_file, "token") if args.token_file else \
            check_secret(os.environ.get("GITHUB_TOKEN", ""), "$GITHUB_TOKEN")
    except SecretError as exc:
        raise ValueError(f"{exc}: pass --token-file or set $GITHUB_TOKEN") from None
    api = args.api_url or os.environ.get("GITHUB_API_URL") or "https://api.github.com"
    return GitHubClient(api, token, pace=WritePacer(args.writes_per_minute).take)


def _reply_to(args: argparse.Namespace) -> tuple[int, int] | None:
    """(pr, comment id) whose reply gets the answer, None when both are empty; `ValueError` otherwise."""
    if not args.pr and not args.comment_id:
        return None
    if not (args.pr.isdigit() and args.comment_id.isdigit()):
        raise ValueError(f"--pr {args.pr or '(empty)'} --comment-id {args.comment_id or '(empty)'}: give both as "
                         "numbers, or neither")
    return int(args.pr), int(args.comment_id)


def write_reply(args: argparse.Namespace, answer: culprit.Answer | None, problem: str, resumable: bool) -> str | None:
    """`ci culprit`'s ``on_end`` for ``--runner dispatch``: the answer (or why it stopped) into the bot's
    reply to ``--comment-id`` (`culprit_reply`); what could not be written, or None."""
    try:
        where = _reply_to(args) if args.runner == "dispatch" else None
        if where is None:
            return None
        client = _client(args)
    except ValueError as exc:
        return str(exc)
    repo = args.repo or os.environ.get("GITHUB_REPOSITORY") or ""
    run_url = culprit.search_run_url(args) or None  # the link the stored answer gives too

    def render(previous: str) -> str:
        if answer is None:
            return culprit_reply.stopped(previous, problem, run_url, resumable=resumable)
        try:
            pulls: list[CommitPull] | str = client.pulls_for_commit(repo, answer.sha)
        except GitHubError as exc:
            pulls = str(exc)
        return culprit_reply.answer(previous, answer, pulls, args.test, args.tier, run_url)
    try:
        culprit_reply.write_answer(client, repo, args.bot_login, *where, render)
    except (GitHubError, ReportError) as exc:
        return f"the reply to comment {where[1]} on #{where[0]}: {exc}"
    return None


def main(argv: list[str]) -> int:
    """``ci culprit`` with ``--runner dispatch`` available; the same exit statuses. With ``--pr`` and
    ``--comment-id`` the answer also goes into the bot's reply to that comment (`write_reply`)."""
    return culprit.main(argv, plugins=(DispatchPlugin(),), prog=PROG, on_end=write_reply)


__all__ = ["DispatchJournal", "DispatchPlugin", "DispatchRunner", "Sent", "load_journal", "main", "write_reply"]
