"""``python -m tools.approval --event FILE``: may this pull request's GPU tiers run? (tools.approval.gate)

Reads a ``pull_request_target`` payload (``$GITHUB_EVENT_PATH``) and, for a fork's approval label,
GitHub's issue events, the labeler's permission and when the head commit appeared; or an
``issue_comment`` payload, for the ``/ok-to-test-gpu <sha-prefix>`` approval (tools.approval.comment:
the commenter's permission and the pull request's head). Token from ``$GITHUB_TOKEN``. Prints the
decision; ``--github-output`` appends ``run=true|false`` and ``sha=<commit>`` to ``$GITHUB_OUTPUT``;
the decision is also appended to ``$GITHUB_STEP_SUMMARY`` when set.

Exit status: 0 when decided (either way), 1 when GitHub could not be read (nothing is approved
by guessing), 2 on bad input (unreadable or malformed payload, no token, bad option).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ci.results.summary import append_step_summary
from tools.approval.comment import decide_comment, is_comment_event, parse_comment_event
from tools.approval.gate import DEFAULT_LABEL, PUSH_WINDOW, EventError, IssueEventsGitHub, decide, parse_event
from tools.rerun.github import GitHubClient, GitHubError

DEFAULT_API = "https://api.github.com"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.approval", description=__doc__.splitlines()[0])
    parser.add_argument("--event", required=True, metavar="FILE", help="pull_request_target payload JSON")
    parser.add_argument("--label", default=DEFAULT_LABEL, help="the approval label (default: %(default)s)")
    parser.add_argument("--api-url", help=f"GitHub API base URL (default: $GITHUB_API_URL or {DEFAULT_API})")
    parser.add_argument("--push-window", type=float, default=PUSH_WINDOW, metavar="SECONDS",
                        help="refuse a label applied less than this long after the head commit appeared "
                             "(default: %(default)s)")
    parser.add_argument("--github-output", action="store_true",
                        help="append run=true|false and sha=<commit> to $GITHUB_OUTPUT")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not args.push_window >= 0:
            raise EventError(f"--push-window must be >= 0 seconds, got {args.push_window}")
        raw = Path(args.event).read_bytes()
        try:
            data = json.loads(raw.decode("utf-8"))
        except RecursionError:
            raise EventError("the event JSON is nested too deeply to be a GitHub payload") from None
        comment = parse_comment_event(data) if is_comment_event(data) else None
        event = parse_event(data) if comment is None else None
        token = os.environ.get("GITHUB_TOKEN")
        if not token:
            raise EventError("GITHUB_TOKEN is not set (the permission lookup needs a token)")
        target = os.environ.get("GITHUB_OUTPUT") if args.github_output else None
        if args.github_output and not target:
            raise EventError("--github-output needs $GITHUB_OUTPUT")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, EventError) as exc:
        print(f"python -m tools.approval: {args.event}: {exc}", file=sys.stderr)
        return 2
    api = args.api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API
    github = IssueEventsGitHub(GitHubClient(api, token))
    number = comment.number if comment is not None else event.number  # type: ignore[union-attr]
    try:
        if comment is not None:
            decision = decide_comment(comment, github)
        else:
            decision = decide(event, args.label, github, push_window=args.push_window)  # type: ignore[arg-type]
    except GitHubError as exc:
        print(f"python -m tools.approval: cannot verify the approval of #{number}: {exc}", file=sys.stderr)
        return 1
    verdict = "run" if decision.run else "not run"
    print(f"GPU tiers of #{number} at {decision.sha or 'no commit'}: {verdict}: {decision.reason}")
    append_step_summary(f"### GPU tiers: {verdict}\n\n#{number} at `{decision.sha or 'no commit'}`: "
                        f"{decision.reason}\n\n")
    if target:
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(f"run={'true' if decision.run else 'false'}\nsha={decision.sha}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
