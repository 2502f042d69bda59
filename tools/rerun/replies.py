"""Every comment the bot posts is built here, and only here.

Each reply starts with the hidden marker ``<!-- rerun-test:comment=<id> state=<s> sha=<sha> -->``
naming the comment it answers, how far handling got and the commit it was for. States:
``claimed`` (posted before anything is dispatched; "dispatching…"), ``incomplete`` (a GitHub call
failed after the claim) and ``failed`` (a read failed before it) may be resumed; ``done`` is final.
A marker without a state (older replies) is final. Text that came from the comment is shown only
through `commands.quote` (escaped inline code); an error goes in a code block, its control and
bidi characters as escapes (`commands.visible`). `cap` keeps every body under GitHub's limit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from ci.registry import Registry, Status, TestEntry
from ci.registry.writer import render_entry, suggested_entry
from tools.rerun.cmd_rerun_failed import RerunResult
from tools.rerun.commands import MAX_TARGETS, Command, help_text, quote, visible
from tools.rerun.dispatch import DispatchResult
from tools.rerun.headline import span
from tools.rerun.policy import Decision
from tools.rerun.resolve import Kind, Resolution
from tools.rerun.runs_table import RunRow, table
from tools.rerun.wrap import breakable_code

MARKER_PREFIX = "<!-- rerun-test:comment="
MARKER_RE = re.compile(r"<!-- rerun-test:comment=(\d+)(?: state=([a-z]+))?(?: sha=([0-9a-f]{7,64}))? -->")
DONE, CLAIMED, INCOMPLETE, FAILED = "done", "claimed", "incomplete", "failed"
RESUMABLE = frozenset({CLAIMED, INCOMPLETE, FAILED})
MAX_BODY_CHARS = 65536  # GitHub rejects longer comment bodies with 422
_LOGIN_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:\[bot\])?")
_TYPABLE = re.compile(r"[A-Za-z0-9_./:\[\]@= -]+")


@dataclass(frozen=True)
class Marker:
    comment_id: int
    state: str
    sha: str | None

    @property
    def resumable(self) -> bool:
        return self.state in RESUMABLE


def marker(comment_id: int, state: str = DONE, sha: str | None = None) -> str:
    return f"{MARKER_PREFIX}{comment_id} state={state}" + (f" sha={sha}" if sha else "") + " -->"


def find_marker(body: str, comment_id: int) -> Marker | None:
    """The marker for ``comment_id`` in ``body`` (the first one), or None."""
    for m in MARKER_RE.finditer(body):
        if int(m[1]) == comment_id:
            return Marker(comment_id, m[2] or DONE, m[3])
    return None


def answers(body: str, comment_id: int) -> bool:
    """True if ``body`` is a bot reply to comment ``comment_id``."""
    return find_marker(body, comment_id) is not None


def _size(text: str) -> int:
    """Characters as GitHub may count them: UTF-16 code units (never fewer than code points)."""
    return len(text.encode("utf-16-le")) // 2


def cap(body: str, limit: int = MAX_BODY_CHARS) -> str:
    """``body`` if it fits ``limit`` characters, else cut at a line boundary (an open code fence is
    closed) with a note saying how much was left out. The marker line is always kept."""
    if _size(body) <= limit:
        return body
    lines = body.split("\n")
    note = "\n\n**… truncated:** {lines} more line(s), {chars} characters, did not fit GitHub's " \
           f"{MAX_BODY_CHARS:,}-character comment limit."
    reserve = _size(note.format(lines=len(lines), chars=_size(body))) + 8
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + _size(line) + 1 + reserve > limit:
            break
        kept.append(line)
        used += _size(line) + 1
    if not kept:  # a first line longer than the limit: cut inside it
        kept = [body[: max(0, limit - reserve)]]
    text = "\n".join(kept)
    if sum(1 for line in kept if line.lstrip().startswith(("```", "~~~"))) % 2:
        text += "\n```"
    left_lines = len(lines) - len(kept)
    return text + note.format(lines=max(left_lines, 1), chars=_size(body) - _size("\n".join(kept)))


def user_mention(login: str) -> str:
    """``@login`` for a login GitHub could have issued, else the text quoted."""
    return f"@{login}" if _LOGIN_RE.fullmatch(login) else quote(login)



def _code(text: str) -> str:
    """Inline code for text the bot produced itself (registry paths, tier names)."""
    return f"`{text}`"


def error_block(error: str) -> str:
    """``error`` (not the bot's text) as a fenced code block it cannot close or escape."""
    shown = visible(error, keep="\n").replace("```", "` ` `")
    return f"```\n{shown}\n```"


def help_reply(comment_id: int, user: str, names: Sequence[str], notes: Sequence[str] = ()) -> str:
    """The ``--help`` text of each command asked about (in order, once each), plus ``notes``."""
    texts = "\n".join(help_text(name) for name in dict.fromkeys(names))
    extra = "".join(f"\n{note}\n" for note in notes)
    return f"{marker(comment_id)}\n{user_mention(user)} here is how to use the bot:\n\n{texts}{extra}"


def refusal_reply(comment_id: int, user: str, decision: Decision) -> str:
    return (f"{marker(comment_id)}\n{user_mention(user)} thanks for the request! It was refused by "
            f"{decision.rule}: {decision.reason}. Nothing was run; a maintainer can post the same "
            f"command for you. `/rerun-test --help` shows the whole policy.")


def failure_reply(comment_id: int, user: str, what: str, error: str, *, resumable: bool) -> str:
    """Something outside the comment went wrong before anything ran: a GitHub call (``resumable``:
    the delivery is retried) or an invalid registry (final: the command must be posted again)."""
    then = ("it is retried when the delivery is replayed, or post the command again" if resumable
            else "post the command again once this is fixed")
    return (f"{marker(comment_id, FAILED if resumable else DONE)}\n{user_mention(user)} the bot could not finish: "
            f"{what}.\n\n{error_block(error)}\nNothing was re-run for this comment; {then}.")


def notes_reply(comment_id: int, user: str, notes: Sequence[str]) -> str:
    """A comment whose command lines all failed to parse or were look-alikes: nothing ran."""
    return f"{marker(comment_id)}\n{user_mention(user)} nothing was run for this comment:\n\n" + "\n\n".join(notes) + "\n"


def too_many_reply(comment_id: int, user: str, count: int) -> str:
    return (f"{marker(comment_id)}\n{user_mention(user)} this comment asks for {count} targets; at most "
            f"{MAX_TARGETS} are allowed per comment, so nothing was run. Split it over several comments.")


def claim_reply(comment_id: int, user: str, sha: str, runs: int) -> str:
    """Posted before anything is dispatched: the comment is taken, the table follows."""
    return (f"{marker(comment_id, CLAIMED, sha)}\n{user_mention(user)} dispatching… ({runs} run(s) for commit "
            f"`{sha[:12]}`; this reply is updated with the table once they are sent.)")


def lookalike_note(command: Command) -> str:
    """What a look-alike line was understood as and the exact ASCII command to type."""
    lookalike = command.lookalike
    if lookalike is None:
        raise ValueError(f"line {command.line} is not a look-alike command")
    chars = ", ".join(lookalike.characters) or "invisible or look-alike characters"
    understood = lookalike.understood
    shown = f"```\n{understood}\n```" if _TYPABLE.fullmatch(understood) else quote(understood, limit=300)
    return (f"**line {command.line}** looks like a command but is written with look-alike characters "
            f"({chars}), so it was **not run**. It was understood as the command below; to run it, type "
            f"exactly this, with a plain ASCII `/` and `-` and ordinary spaces:\n\n{shown}")


def _not_active_diff(entry: TestEntry) -> str:
    """The registry change that makes a manual/quarantined entry active, as a unified diff body
    (``status``, ``reason`` and ``issue`` are adjacent in `render_entry`'s order)."""
    lines = []
    for line in render_entry(entry):
        lines.append(("-" if line.startswith(("    status:", "    reason:", "    issue:")) else " ") + line)
    last_removed = max(i for i, line in enumerate(lines) if line.startswith("-"))
    lines.insert(last_removed + 1, "+    status: active")
    return "\n".join(lines)


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
        snippet = suggested_entry(r.path, registry, tier).rstrip("\n")
        return (head + f"`{r.path}` exists in the tree but is not registered in `registry.yaml`, so no CI "
                f"job runs it and the bot cannot either. To make it runnable, add it under `tests:` "
                f"(tiers: any of {', '.join(_code(t) for t in registry.tiers)}):\n\n"
                f"```yaml\n{snippet}\n```")
    if r.kind is Kind.NOT_ACTIVE:
        entry = r.entry
        if entry is None:
            raise ValueError(f"NOT_ACTIVE resolution for {r.target!r} carries no entry")
        diff = _not_active_diff(entry)
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


def result_reply(comment_id: int, user: str, header: str, sections: Sequence[str], runs: str,
                 notes: Sequence[str], state: str = DONE, sha: str | None = None) -> str:
    """The full reply: header line, sections (targets table, summaries), the runs table, notes."""
    parts = [f"{marker(comment_id, state, sha)}\n{user_mention(user)} {header}"]
    parts += [s for s in sections if s]
    if runs:
        parts.append(runs)
    parts += [n for n in notes if n]
    return "\n\n".join(parts).rstrip() + "\n"


_DISPATCH_TEXT = {"sent": "dispatched", "found": "dispatched (an earlier attempt had sent it)",
                  "dry-run": "would dispatch (dry run)"}
MAX_TESTS_SHOWN = 5


def _tests_cell(tests: Sequence[str]) -> str:
    shown = "<br>".join(breakable_code(t, limit=200) for t in tests[:MAX_TESTS_SHOWN])
    more = len(tests) - MAX_TESTS_SHOWN
    return shown + (f"<br>… and {more} more" if more > 0 else "")


def run_row(result: DispatchResult, actions_url: str | None = None) -> RunRow:
    """The runs-table row of one dispatch, before any results arrive."""
    spec = result.spec
    if result.run_url and result.run_url != actions_url:
        run = f"[run]({result.run_url})"
    else:
        run = f"[not listed yet]({result.run_url})" if result.run_url else "—"
    text = _DISPATCH_TEXT.get(result.state) or f"dispatch failed: {breakable_code(result.error or '', limit=300)}"
    return RunRow(spec.tier, spec.part, f"`{', '.join(spec.runner)}`", _tests_cell(spec.tests), run, text)


def runs_table(results: Sequence[DispatchResult], actions_url: str | None = None) -> str:
    return table([run_row(r, actions_url) for r in results]) if results else ""


def header(dispatches: Sequence[DispatchResult], reruns: Sequence[RerunResult], sha: str, workflow: str,
           branch: str, dry_run: bool) -> str:
    """The reply's first sentence: what was sent, for which commit. How many runs were dispatched
    is the headline's span (`tools.rerun.headline`), which becomes the outcome as results arrive."""
    parts = []
    if dispatches:
        sent = sum(d.ok for d in dispatches)
        parts.append(span(f"{sent} of {len(dispatches)} run(s) dispatched") + f" (workflow `{workflow}` on `{branch}`)")
    if reruns:
        parts.append(f"{sum(r.state != 'failed' for r in reruns)} of {len(reruns)} failed run(s) re-run")
    if not parts:
        parts.append("nothing was started")
    return ("; ".join(parts) + f" for commit `{sha[:12]}`."
            + (" **Dry run: nothing was sent.**" if dry_run else ""))
