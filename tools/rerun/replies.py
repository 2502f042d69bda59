"""Every comment the bot posts is built here, and only here.

Each reply starts with the hidden marker ``<!-- rerun-test:comment=<id> -->`` naming the comment it
answers; the handler looks for it before dispatching so a comment is never acted on twice. Text
that came from the comment is shown only through `commands.quote` (escaped inline code).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ci.registry import Registry, Status, TestEntry, yaml_scalar
from tools.rerun.commands import COMMAND, HELP_TEXT, MAX_TARGETS, Command, quote
from tools.rerun.resolve import Kind, Resolution

MARKER_PREFIX = "<!-- rerun-test:comment="
MARKER_RE = re.compile(r"<!-- rerun-test:comment=(\d+) -->")
_LOGIN_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")


def marker(comment_id: int) -> str:
    return f"{MARKER_PREFIX}{comment_id} -->"


def answers(body: str, comment_id: int) -> bool:
    """True if ``body`` is a bot reply to comment ``comment_id``."""
    return any(int(m) == comment_id for m in MARKER_RE.findall(body))


@dataclass(frozen=True)
class Row:
    """One line of the result table. ``result`` is short Markdown written by the handler."""

    target: str
    path: str | None
    tier: str | None
    runner: tuple[str, ...]
    result: str


def _user(login: str) -> str:
    return f"@{login}" if _LOGIN_RE.fullmatch(login) else quote(login)


def _code(text: str) -> str:
    """Inline code for text the bot produced itself (registry paths, tier names)."""
    return f"`{text}`"


def help_reply(comment_id: int, user: str) -> str:
    return f"{marker(comment_id)}\n{_user(user)} here is how to use the bot:\n\n{HELP_TEXT}"


def refusal_reply(comment_id: int, user: str, permission: str, role: str) -> str:
    return (f"{marker(comment_id)}\n{_user(user)} thanks for the request! Only users with write, maintain "
            f"or admin permission on this repository can start `{COMMAND}` runs (your permission is "
            f"{quote(permission)}, role {quote(role)}). A maintainer can post the same command for you.")


def failure_reply(comment_id: int, user: str, what: str, error: str) -> str:
    """Something outside the comment went wrong (GitHub API, invalid registry)."""
    return (f"{marker(comment_id)}\n{_user(user)} `{COMMAND}` could not finish: {what}.\n\n"
            f"```\n{error.replace('```', '` ` `')}\n```\nNothing was re-run for this comment; "
            f"post the command again once this is fixed.")


def too_many_reply(comment_id: int, user: str, count: int) -> str:
    return (f"{marker(comment_id)}\n{_user(user)} this comment asks for {count} targets; at most "
            f"{MAX_TARGETS} are allowed per comment, so nothing was run. Split it over several comments.")


def yaml_entry(path: str, tiers: Sequence[str], est_time: float | str, owner: str,
               extra: Sequence[str] = ()) -> list[str]:
    """Lines of a ``tests:`` entry as it appears in registry.yaml (two-space indent)."""
    lines = [f"  {path}:", f"    tiers: [{', '.join(tiers)}]", f"    est_time: {est_time}",
             f"    owner: {yaml_scalar(owner)}"]
    return lines + [f"    {line}" for line in extra]


def _entry_lines(entry: TestEntry) -> tuple[list[str], list[str]]:
    """(lines kept, lines that make the entry inactive) of an existing entry."""
    est = int(entry.est_time) if float(entry.est_time).is_integer() else entry.est_time
    kept = yaml_entry(entry.path, entry.tiers, est, entry.owner)
    if entry.timeout is not None:
        kept.append(f"    timeout: {entry.timeout:g}")
    if entry.reruns:
        kept.append(f"    reruns: {entry.reruns}")
    if entry.depends_on:
        kept.append(f"    depends_on: [{', '.join(entry.depends_on)}]")
    inactive = [f"    status: {entry.status.value}"]
    if entry.reason is not None:
        inactive.append(f"    reason: {yaml_scalar(entry.reason)}")
    if entry.issue is not None:
        inactive.append(f"    issue: {yaml_scalar(entry.issue)}")
    return kept, inactive


def explain(resolution: Resolution, registry: Registry) -> str:
    """The paragraph under the table for a target that did not run (empty for resolved ones)."""
    r = resolution
    head = f"**{quote(r.target)}**: "
    if r.kind is Kind.UNSAFE:
        return head + f"refused: the target {r.detail}. Targets may only contain `A-Z a-z 0-9 _ . / : [ ] -`."
    if r.kind is Kind.AMBIGUOUS:
        listed = "\n".join(f"  * `{c}`" for c in r.candidates)
        return head + f"several registered files have this name; give the path instead:\n{listed}"
    if r.kind is Kind.UNKNOWN:
        if r.candidates:
            listed = "\n".join(f"  * `{c}`" for c in r.candidates)
            return head + f"no registered test file and no file in the tree matches. Did you mean:\n{listed}"
        return head + "no registered test file and no file in the tree matches, and nothing registered is close."
    if r.kind is Kind.UNREGISTERED:
        if r.path is None:
            listed = "\n".join(f"  * `{c}`" for c in r.candidates)
            return (head + "not registered, and several files in the tree have this name; pick one by "
                    f"path and register it first:\n{listed}")
        tier = r.requested_tier if r.requested_tier in registry.tiers else next(iter(registry.tiers), "cpu")
        snippet = "\n".join(yaml_entry(r.path, [tier], "60  # seconds: measure it", "your-team",
                                       ["status: active"]))
        return (head + f"`{r.path}` exists in the tree but is not registered in `registry.yaml`, so no CI "
                f"job runs it and the bot cannot either. To make it runnable, add it under `tests:` "
                f"(tiers: any of {', '.join(_code(t) for t in registry.tiers)}):\n\n"
                f"```yaml\n{snippet}\n```")
    if r.kind is Kind.NOT_ACTIVE:
        entry = r.entry
        if entry is None:
            raise ValueError(f"NOT_ACTIVE resolution for {r.target!r} carries no entry")
        kept, inactive = _entry_lines(entry)
        diff = "\n".join([f" {line}" for line in kept] + [f"-{line}" for line in inactive]
                         + ["+    status: active"])
        why = f"reason: {quote(entry.reason or '', limit=300)}"
        if entry.issue:
            why += f"; issue: {entry.issue if entry.issue.startswith('https://') else quote(entry.issue)}"
        what = "manual (kept, never scheduled)" if entry.status is Status.MANUAL else "quarantined (known broken)"
        return (head + f"`{entry.path}` is registered as {what}, so the bot will not run it ({why}). "
                f"Once the reason no longer holds, this change to `registry.yaml` (line {entry.line}) "
                f"makes it runnable:\n\n```diff\n{diff}\n```")
    if r.kind is Kind.BAD_TIER:
        return (head + f"tier {quote(r.requested_tier or '')} is not one of this file's tiers; "
                f"use one of {', '.join(_code(t) for t in r.candidates)}.")
    return ""


def command_error(command: Command) -> str:
    return f"**line {command.line}** {quote(command.text)}: {command.error}"


def result_reply(comment_id: int, user: str, rows: Sequence[Row], notes: Sequence[str],
                 header: str) -> str:
    """The table reply: one row per (target, tier), then one note per problem."""
    lines = [marker(comment_id), f"{_user(user)} {header}", ""]
    if rows:
        lines += ["| target | resolved file | tier | runner | result |", "|---|---|---|---|---|"]
    for row in rows:
        lines.append("| " + " | ".join([
            quote(row.target),
            _code(row.path) if row.path else "—",
            _code(row.tier) if row.tier else "—",
            _code(", ".join(row.runner)) if row.runner else "—",
            row.result,
        ]) + " |")
    if notes:
        lines += [""] + [f"{note}\n" for note in notes]
    return "\n".join(lines).rstrip() + "\n"
