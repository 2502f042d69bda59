"""``python -m tools.rerun {handle,serve}``: the bot's command line (the only place that prints).

``handle --event PATH`` handles one ``issue_comment`` payload (GitHub Actions: ``$GITHUB_EVENT_PATH``),
with ``GITHUB_TOKEN``, ``GITHUB_API_URL`` and ``GITHUB_REPOSITORY`` from the environment unless
``--token-file`` / ``--api-url`` / ``--repo`` say otherwise. ``serve`` runs the webhook server. ``--dry-run`` reads from GitHub but
writes nothing and prints the reply and the dispatches it would make.
Exit status: 0 handled or ignored, 1 GitHub failure, 2 bad usage or input.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from ci.registry import find_repo_root
from tools.rerun.github import DEFAULT_BOT_LOGIN, GitHubClient, GitHubError
from tools.rerun.handler import DISPATCH_WORKFLOW, BotConfig, Handler, Outcome

DEFAULT_API = "https://api.github.com"


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file:
        return Path(args.token_file).read_text(encoding="utf-8").strip()
    return os.environ.get("GITHUB_TOKEN")


def _config(args: argparse.Namespace) -> BotConfig:
    root = Path(args.repo_root).resolve() if args.repo_root else find_repo_root(Path.cwd())
    repository = args.repo or os.environ.get("GITHUB_REPOSITORY") or None
    return BotConfig(repo_root=root, workflow_file=args.workflow, dry_run=args.dry_run, repository=repository,
                     bot_login=args.bot_login)


def _print_outcome(outcome: Outcome, dry_run: bool) -> None:
    print(f"rerun-test: {outcome.status}" + (f" ({outcome.reason})" if outcome.reason else ""))
    if dry_run:
        for d in outcome.dispatches:
            print(f"would dispatch on ref {d.ref}: {json.dumps(d.inputs, sort_keys=True)}")
        if outcome.reactions:
            print(f"would react: {', '.join(outcome.reactions)}")
    else:
        for d in outcome.dispatches:
            print(f"dispatch {d.tier}: {'sent' if d.error is None else 'FAILED: ' + d.error}")
    if outcome.reply is not None:
        print(("--- reply (not posted) ---\n" if dry_run else "--- reply ---\n") + outcome.reply)


def _handle(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(Path(args.event).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"rerun-test: cannot read event {args.event}: {exc}", file=sys.stderr)
        return 2
    api = args.api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API
    handler = Handler(GitHubClient(api, _token(args)), _config(args))
    try:
        outcome = handler.handle(payload)
    except GitHubError as exc:
        print(f"rerun-test: GitHub API failure: {exc}", file=sys.stderr)
        return 1
    _print_outcome(outcome, args.dry_run)
    return 0


def _serve(args: argparse.Namespace) -> int:
    from tools.rerun.server import ServerConfig, WebhookApp, WebhookServer

    secret = Path(args.secret_file).read_bytes().strip()
    api = args.api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API
    token, config = _token(args), _config(args)
    app = WebhookApp(ServerConfig(secret=secret, workers=args.workers),
                     lambda: Handler(GitHubClient(api, token), config))
    app.start()
    server = WebhookServer((args.host, args.port), app)
    print(f"rerun-test: listening on {server.url} (repo root {config.repo_root}"
          + (", dry run" if config.dry_run else "") + ")", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        app.stop()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.rerun", description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--api-url", help=f"GitHub API base URL (default: $GITHUB_API_URL or {DEFAULT_API})")
    common.add_argument("--token-file", help="file holding the API token (default: $GITHUB_TOKEN)")
    common.add_argument("--repo-root", help="checkout whose registry.yaml and tree are used (default: found from cwd)")
    common.add_argument("--repo", help="owner/name to serve; events for other repositories are ignored "
                        "(default: $GITHUB_REPOSITORY, else any)")
    common.add_argument("--workflow", default=DISPATCH_WORKFLOW, help="workflow file to dispatch (default: %(default)s)")
    common.add_argument("--bot-login", default=DEFAULT_BOT_LOGIN,
                        help="login the bot's replies are posted as; only its replies count as answers "
                             "(default: %(default)s, the GITHUB_TOKEN identity)")
    common.add_argument("--dry-run", action="store_true", help="read from GitHub, write nothing, print what would happen")
    sub = parser.add_subparsers(dest="command", required=True)
    handle = sub.add_parser("handle", parents=[common], help="handle one issue_comment event file")
    handle.add_argument("--event", required=True, help="issue_comment payload JSON ($GITHUB_EVENT_PATH)")
    serve = sub.add_parser("serve", parents=[common], help="run the webhook server")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--secret-file", required=True, help="file holding the webhook secret")
    serve.add_argument("--workers", type=int, default=4, help="background handler threads (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    try:
        return _handle(args) if args.command == "handle" else _serve(args)
    except (OSError, ValueError) as exc:
        print(f"rerun-test: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
