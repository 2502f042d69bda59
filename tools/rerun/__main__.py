"""``python -m tools.rerun {handle,serve,report,redeliver,culprit}``: the bot's command line (the only place that prints).

``handle --event PATH`` handles one ``issue_comment`` payload (GitHub Actions: ``$GITHUB_EVENT_PATH``),
with ``GITHUB_TOKEN``, ``GITHUB_API_URL`` and ``GITHUB_REPOSITORY`` from the environment unless
``--token-file`` / ``--api-url`` / ``--repo`` say otherwise. ``serve`` runs the webhook server with
its delivery journal in ``--state-dir`` (one server per state directory: a second one exits 2). ``report`` writes a dispatched run's JUnit results into
its row of the bot's reply. ``redeliver`` asks GitHub to redeliver the webhook deliveries ``serve``
did not take (`tools.rerun.redeliver`). ``culprit`` is ``ci culprit`` with ``--runner dispatch``
(`tools.rerun.culprit_dispatch`). ``--dry-run`` reads from GitHub but writes nothing and prints the reply
and the dispatches it would make.
Exit status: 0 handled or ignored, 1 GitHub failure (or, for ``report``, a missing or bad JUnit
report), 2 bad usage or input. A token is never printed: not in errors, not in log lines.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ci.registry import find_repo_root
from tools.rerun.budget import BOT_WRITES_PER_MINUTE
from tools.rerun.cmd_rerun_tier import DEFAULT_SHARD_BUDGET
from tools.rerun.dispatch import DISPATCH_WORKFLOW, RunLookup
from tools.rerun.github import DEFAULT_BOT_LOGIN, GitHubClient, GitHubError
from tools.rerun.handler import BotConfig, Handler, Outcome
from tools.rerun.journal import JournalError
from tools.rerun.pr_runs import PR_WORKFLOWS
from tools.rerun.runs_table import TARGETS_PART
from tools.rerun.secrets_file import RedactingFilter, SecretError, check_secret, read_secret

if TYPE_CHECKING:
    from tools.rerun.report import Reporter

DEFAULT_API = "https://api.github.com"
PRUNE_AFTER = 30 * 24 * 3600.0  # handled deliveries are forgotten after 30 days
SWITCH_INTERVAL = 0.0005  # seconds; see _serve


def _token(args: argparse.Namespace) -> str | None:
    """The API token: ``--token-file``, else ``$GITHUB_TOKEN``; None only in dry-run without one."""
    if args.token_file:
        return read_secret(args.token_file, "token")
    env = os.environ.get("GITHUB_TOKEN")
    if env is not None:
        return check_secret(env, "$GITHUB_TOKEN")
    if getattr(args, "dry_run", False):
        return None
    raise SecretError("no token: pass --token-file or set $GITHUB_TOKEN")


def _api(args: argparse.Namespace) -> str:
    return args.api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API


def _repository(args: argparse.Namespace) -> str | None:
    return args.repo or os.environ.get("GITHUB_REPOSITORY") or None


def _config(args: argparse.Namespace) -> BotConfig:
    root = Path(args.repo_root).resolve() if args.repo_root else find_repo_root(Path.cwd())
    if not args.shard_budget > 0:
        raise ValueError(f"--shard-budget must be a positive number of seconds, got {args.shard_budget}")
    if not args.writes_per_minute >= 0:
        raise ValueError(f"--writes-per-minute must be >= 0, got {args.writes_per_minute}")
    if not args.lookup_wait >= 0:
        raise ValueError(f"--lookup-wait must be >= 0 seconds, got {args.lookup_wait}")
    lookup = RunLookup(wait=args.lookup_wait, link_wait=min(RunLookup.link_wait, args.lookup_wait))
    return BotConfig(repo_root=root, workflow_file=args.workflow, dry_run=args.dry_run,
                     repository=_repository(args), bot_login=args.bot_login, shard_budget=args.shard_budget,
                     lookup=lookup, pr_workflows=tuple(args.pr_workflow or PR_WORKFLOWS),
                     writes_per_minute=args.writes_per_minute,
                     history=args.history or os.environ.get("CI_HISTORY_STORE") or None)


def _print_outcome(outcome: Outcome, dry_run: bool) -> None:
    print(f"rerun-test: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else ""))
    for d in outcome.dispatches:
        if dry_run:
            print(f"would dispatch: {json.dumps(d.inputs, sort_keys=True)}")
        else:
            print(f"dispatch {d.spec.tier} {d.spec.part}: {d.state}" + (f": {d.error}" if d.error else ""))
    for r in outcome.reruns:
        print(f"re-run failed jobs of run {r.run.id}: {r.state}" + (f": {r.error}" if r.error else ""))
    if dry_run and outcome.reactions:
        print(f"would react: {', '.join(outcome.reactions)}")
    for error in outcome.errors:
        print(f"rerun-test: GitHub failure: {error}", file=sys.stderr)
    if outcome.reply is not None:
        print(("--- reply (not posted) ---\n" if dry_run else "--- reply ---\n") + outcome.reply)


def _handle(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(Path(args.event).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        print(f"rerun-test: cannot read event {args.event}: {exc}", file=sys.stderr)
        return 2
    config = _config(args)
    handler = Handler(GitHubClient(_api(args), _token(args), pace=config.pacer()), config)
    try:
        outcome = handler.handle(payload)
    except GitHubError as exc:
        print(f"rerun-test: GitHub API failure: {exc}", file=sys.stderr)
        return 1
    _print_outcome(outcome, args.dry_run)
    return 1 if outcome.errors else 0


def _serve(args: argparse.Namespace) -> int:
    from tools.rerun.journal import Journal
    from tools.rerun.server import ServerConfig, WebhookApp, WebhookServer
    from tools.rerun.state_lock import StateLock
    from tools.rerun.worker_process import ProcessWorkers, WorkerSpec

    # The server process only parses, verifies, journals and acknowledges (the handlers run in the
    # worker process); a 0.5 ms GIL switch interval (default 5 ms) lowered its ack p99 in
    # interleaved runs of bench/rerun_bot.py. Set here, not in library code: it is process-wide.
    sys.setswitchinterval(SWITCH_INTERVAL)
    secret = read_secret(args.secret_file, "webhook secret").encode()
    token, config, api = _token(args), _config(args), _api(args)
    lock = StateLock.acquire(args.state_dir)  # held until this process ends: one server per journal
    journal = Journal.in_dir(args.state_dir, durable=args.durable)  # JournalError: corrupt, read-only
    pruned = journal.prune(PRUNE_AFTER)
    server_config = ServerConfig(secret=secret, workers=args.workers)
    pool = ProcessWorkers(WorkerSpec(api, token, config, args.workers), server_config.queue_size)
    app = WebhookApp(server_config, journal=journal, pool=pool)
    server = WebhookServer((args.host, args.port), app)
    app.start()
    counts = journal.counts()
    print(f"rerun-test: listening on {server.url} (repo root {config.repo_root}, journal {journal.path}: "
          f"{counts.get('accepted', 0)} unfinished replayed, {counts.get('done', 0)} handled, {pruned} pruned; "
          f"worker process {pool.process.pid}" + (", dry run" if config.dry_run else "") + ")", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        app.stop()
        journal.close()
        lock.release()
    return 0


def _report(args: argparse.Namespace) -> int:
    from tools.rerun.report import Reporter, ReportError, result_cell, row_verdict, summarize

    repo = _repository(args)
    if not repo:
        raise ValueError("report needs --repo owner/name (or $GITHUB_REPOSITORY)")
    if (args.junit is None) == (args.ended is None):
        raise ValueError("report needs --junit FILE (the run's results) or --ended CONCLUSION (it sent none)")
    if args.history_wait is not None and not 0 < args.history_wait <= 3600:
        raise ValueError(f"--history-wait must be a number of seconds above 0 and at most 3600, got {args.history_wait}")
    reporter = Reporter(GitHubClient(_api(args), _token(args)), repo, args.bot_login, settle=args.settle_seconds)
    if args.ended is not None:
        return _report_ended(args, reporter)
    results = summarize(args.junit, root=Path.cwd())
    verdicts = {}
    history = args.history or os.environ.get("CI_HISTORY_STORE")
    if history and not isinstance(results, str):
        from ci.history.store import failure_text
        from tools.rerun.verdicts import NOTES_WAIT_S, read_verdicts

        try:
            verdicts = read_verdicts(history, args.tier, results.cases, results.failing, sha=args.sha or "",
                                     repo=repo, wait=args.history_wait or NOTES_WAIT_S)
        except Exception as exc:  # a history that cannot be read costs the verdicts, never the row
            print(f"rerun-test report: history: {failure_text(exc, history)}; the row has no verdicts",
                  file=sys.stderr)
    try:
        done = reporter.report(args.pr, args.comment_id, args.tier, args.part, result_cell(results, verdicts),
                               args.run_url, args.slot, row_verdict(results, verdicts))
    except (GitHubError, ReportError) as exc:
        print(f"rerun-test report: {exc}", file=sys.stderr)
        return 1
    if done is None:  # only `only_if_waiting` writes nothing; never for a report with results
        raise ValueError("the report was not written")
    print(f"rerun-test report: wrote {args.tier} {args.part} into comment {done.comment_id} "
          f"({done.writes} write(s), {done.lost} lost update(s) repaired"
          + (", superseded by a later report" if done.superseded else "") + ")")
    if isinstance(results, str):
        print(f"rerun-test report: {results}", file=sys.stderr)
        return 1
    return 0


def _report_ended(args: argparse.Namespace, reporter: "Reporter") -> int:
    """A run that ended without sending results: its row says so, unless results came after all."""
    from tools.rerun.headline import silent_cell
    from tools.rerun.report import ReportError

    try:
        done = reporter.report(args.pr, args.comment_id, args.tier, args.part, silent_cell(args.ended),
                               args.run_url, args.slot, only_if_waiting=True)
    except (GitHubError, ReportError) as exc:
        print(f"rerun-test report: {exc}", file=sys.stderr)
        return 1
    if done is None:
        print(f"rerun-test report: {args.tier} {args.part} already holds results; nothing written")
    else:
        print(f"rerun-test report: marked {args.tier} {args.part} in comment {done.comment_id} as ended "
              f"({args.ended}) without a result")
    return 0


def _redeliver(args: argparse.Namespace) -> int:
    from tools.rerun.redeliver import HookDeliveries, HookRef, sweep, window_start

    if args.app == (args.hook_id is not None):
        raise ValueError("give --hook-id N (a repository webhook) or --app (the GitHub App's webhook)")
    repo = _repository(args)
    if args.hook_id is not None and not repo:
        raise ValueError("--hook-id needs --repo owner/name (or $GITHUB_REPOSITORY)")
    hook = HookRef(app=True) if args.app else HookRef(repo, args.hook_id)
    since = window_start(args.since_hours)
    deliveries = HookDeliveries(GitHubClient(_api(args), _token(args)), hook)
    try:
        report = sweep(deliveries, since, max_attempts=args.max_attempts, dry_run=args.dry_run)
    except GitHubError as exc:
        print(f"rerun-test redeliver: cannot list the deliveries: {exc}", file=sys.stderr)
        return 1
    verb = "would redeliver" if args.dry_run else "redelivered"
    for a in report.redelivered:
        print(f"{verb} {a.guid} ({a.event} {a.action or ''}; last attempt {a.delivered_at:%Y-%m-%d %H:%M:%S}Z: "
              f"{a.status_code} {a.status})")
    for a in report.given_up:
        print(f"gave up on {a.guid}: {args.max_attempts} attempts failed, the last {a.status_code} {a.status}")
    for a in report.final:
        print(f"not redelivered {a.guid}: answered {a.status_code} {a.status}, which a resend would get again")
    for a, error in report.failed:
        print(f"rerun-test redeliver: redelivering {a.guid} failed: {error}", file=sys.stderr)
    print(f"rerun-test redeliver: {report.scanned} attempt(s) since {since:%Y-%m-%d %H:%M:%S}Z, "
          f"{len(report.redelivered)} {verb}, {len(report.given_up)} given up, {len(report.final)} final, "
          f"{len(report.failed)} failed" + ("" if report.complete else "; the listing was cut short (page limit)"))
    return 1 if report.failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.rerun", description=__doc__.splitlines()[0])
    github = argparse.ArgumentParser(add_help=False)
    github.add_argument("--api-url", help=f"GitHub API base URL (default: $GITHUB_API_URL or {DEFAULT_API})")
    github.add_argument("--token-file", help="file holding the API token (default: $GITHUB_TOKEN)")
    github.add_argument("--repo", help="owner/name to serve; events for other repositories are ignored "
                        "(default: $GITHUB_REPOSITORY, else any)")
    github.add_argument("--bot-login", default=DEFAULT_BOT_LOGIN,
                        help="login the bot's replies are posted as; only its replies count as answers "
                             "(default: %(default)s, the GITHUB_TOKEN identity)")
    common = argparse.ArgumentParser(add_help=False, parents=[github])
    common.add_argument("--repo-root", help="checkout whose registry.yaml and tree are used (default: found from cwd)")
    common.add_argument("--workflow", default=DISPATCH_WORKFLOW, help="workflow file to dispatch (default: %(default)s)")
    common.add_argument("--shard-budget", type=float, default=DEFAULT_SHARD_BUDGET,
                        help="seconds of est_time per shard for /rerun-tier (default: %(default)s, as pr-gpu.yml)")
    common.add_argument("--lookup-wait", type=float, default=RunLookup.wait,
                        help="seconds to look for a run by its run-name before (re)sending a dispatch "
                             "(default: %(default)s)")
    common.add_argument("--pr-workflow", action="append", metavar="FILE",
                        help="a workflow that runs for pull requests from the base branch and names the PR in its "
                             f"run-name; /rerun-failed finds its runs by that name (repeatable; default: "
                             f"{', '.join(PR_WORKFLOWS)})")
    common.add_argument("--writes-per-minute", type=float, default=BOT_WRITES_PER_MINUTE,
                        help="space the bot's GitHub writes (dispatches, comments, reactions) to this many a minute, "
                             "under GitHub's 80 (default: %(default)s; 0: unpaced, for a fake GitHub)")
    common.add_argument("--history", metavar="URL_OR_PATH",
                        help="test history store: /culprit's default --good/--bad is a test's breakage window there "
                             "(default: $CI_HISTORY_STORE; none: /culprit needs both)")
    common.add_argument("--dry-run", action="store_true", help="read from GitHub, write nothing, print what would happen")
    sub = parser.add_subparsers(dest="command", required=True)
    handle = sub.add_parser("handle", parents=[common], help="handle one issue_comment event file")
    handle.add_argument("--event", required=True, help="issue_comment payload JSON ($GITHUB_EVENT_PATH)")
    serve = sub.add_parser("serve", parents=[common], help="run the webhook server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--secret-file", required=True, help="file holding the webhook secret")
    serve.add_argument("--state-dir", required=True, help="directory of the delivery journal (SQLite, WAL)")
    serve.add_argument("--durable", action="store_true",
                       help="fsync every journal commit (survives power loss, not only a killed process)")
    serve.add_argument("--workers", type=int, default=4, help="background handler threads (default: %(default)s)")
    report = sub.add_parser("report", parents=[github], help="write a run's JUnit results into the bot's reply")
    report.add_argument("--junit", help="JUnit XML of the run")
    report.add_argument("--ended", metavar="CONCLUSION",
                        help="instead of --junit: the run ended (GitHub's conclusion: cancelled, failure...) and "
                             "sent no result; its row says so and the headline names it, unless it holds results")
    report.add_argument("--pr", type=int, required=True, help="pull request number")
    report.add_argument("--comment-id", type=int, required=True, help="the comment the run answers")
    report.add_argument("--tier", required=True, help="tier of the run (its row in the reply)")
    report.add_argument("--part", default=TARGETS_PART, help="`targets` or shard `i/N` (default: %(default)s)")
    report.add_argument("--run-url", help="link to the run")
    report.add_argument("--slot", default="", help="`k/M`: write in slot k of M (the run's place among its comment's "
                        "runs), so reports finishing together take turns (default: the part when `i/N`)")
    report.add_argument("--sha", help="the commit the run tested (the dispatch's `sha` input): a failure that also "
                        "passed at this commit in the history is flaky")
    report.add_argument("--history", metavar="URL_OR_PATH",
                        help="test history store (`ci history ingest`): each failure gets a verdict (broken on main, "
                             "flaky, infra or new) (default: $CI_HISTORY_STORE; none: no verdicts)")
    report.add_argument("--history-wait", type=float, metavar="SECONDS",
                        help="the longest the verdicts may hold the row up: a history that has not answered by then "
                             "costs the verdicts, never the row (default: 20)")
    report.add_argument("--settle-seconds", type=float, default=12.0,
                        help="re-read the reply this long after writing, to catch a lost update (default: %(default)s)")
    redeliver = sub.add_parser("redeliver", parents=[github],
                               help="ask GitHub to redeliver the webhook deliveries serve did not take "
                                    "(GitHub never retries them itself); run it every few minutes")
    redeliver.add_argument("--hook-id", type=int, help="the repository webhook's id (X-GitHub-Hook-ID)")
    redeliver.add_argument("--app", action="store_true",
                           help="the GitHub App's webhook (/app/hook); the token must be the App's JWT")
    redeliver.add_argument("--since-hours", type=float, default=24.0,
                           help="look this far back, at most 72 (GitHub's limit) (default: %(default)s)")
    redeliver.add_argument("--max-attempts", type=int, default=3,
                           help="leave an event alone once it has had this many attempts (default: %(default)s)")
    redeliver.add_argument("--dry-run", action="store_true", help="list what would be redelivered, send nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["culprit"]:  # ci culprit's own parser, with --runner dispatch added
        from tools.rerun.culprit_dispatch import main as culprit_main
        return culprit_main(argv[1:])
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    commands = {"handle": _handle, "serve": _serve, "report": _report, "redeliver": _redeliver}
    try:
        return commands[args.command](args)
    except (OSError, ValueError, JournalError) as exc:  # SecretError is a ValueError; it never holds the value
        print(f"rerun-test: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
