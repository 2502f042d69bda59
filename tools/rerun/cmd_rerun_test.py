"""``/rerun-test <target>... [--tier T]`` and ``/rerun-test --owner @team [--tier T]``: plan the runs.

Every target of every ``/rerun-test`` line of a comment is resolved (`tools.rerun.resolve`) and the
resolved files are grouped into **one dispatch per tier** (part ``targets``), in registry tier
order. ``--owner`` adds every active file whose registry ``owner`` matches (``@`` and case
ignored) on each of that file's GPU tiers (or on ``--tier`` only, for files that have it); files
with no GPU tier are listed as not run, since the cpu tier runs on every push.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from ci.registry import Registry, TestEntry
from tools.rerun import replies
from tools.rerun.commands import MAX_TARGETS, Command, quote
from tools.rerun.dispatch import DispatchSpec
from tools.rerun.resolve import Kind, Resolution, resolve_target
from tools.rerun.runs_table import TARGETS_PART
from tools.rerun.work import Work

_RESULT_TEXT = {
    Kind.UNSAFE: "refused: unsafe target",
    Kind.AMBIGUOUS: "ambiguous name",
    Kind.UNKNOWN: "not found",
    Kind.UNREGISTERED: "not registered",
    Kind.NOT_ACTIVE: "not active",
    Kind.BAD_TIER: "tier not allowed",
}


def _owner_key(owner: str) -> str:
    return owner.lstrip("@").lower()


def _owner_files(registry: Registry, owner: str, tier: str | None) -> tuple[list[tuple[TestEntry, tuple[str, ...]]], list[str]]:
    """(entries with the tiers each runs on, paths of the owner's files that run nowhere)."""
    runs, idle = [], []
    for entry in registry.tests.values():
        if not entry.is_active or _owner_key(entry.owner) != _owner_key(owner):
            continue
        gpu = tuple(t for t in entry.tiers if registry.tiers[t].needs_gpu)
        tiers = tuple(t for t in gpu if tier is None or t == tier)
        if tiers:
            runs.append((entry, tiers))
        else:
            idle.append(entry.path)
    return runs, idle


def _owner_work(registry: Registry, command: Command, groups: dict[str, list[str]]) -> tuple[list[str], list[str], bool]:
    """(target-table rows, notes, complete) for one ``--owner`` command; fills ``groups``."""
    owner = command.owner or ""
    label = quote(f"--owner {owner}" + (f" --tier {command.tier}" if command.tier else ""))
    files, idle = _owner_files(registry, owner, command.tier)
    notes: list[str] = []
    if idle:
        why = f"none of their tiers is {command.tier}" if command.tier else "they have no GPU tier"
        listed = "\n".join(f"  * `{p}`" for p in idle)
        notes.append(f"**{label}**: {len(idle)} active file(s) of this owner do not run here ({why}; the cpu "
                     f"tier runs on every push):\n{listed}")
    if not files:
        owners = sorted({e.owner for e in registry.tests.values() if e.is_active})
        close = difflib.get_close_matches(owner, owners, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(f'`{o}`' for o in close)}?" if close else ""
        notes.append(f"**{label}**: no active test file of this owner runs on a GPU tier"
                     f"{' ' + command.tier if command.tier else ''}.{hint} Owners in `registry.yaml`: "
                     f"{', '.join(f'`{o}`' for o in owners)}.")
        return [f"| {label} | — | nothing to run (see below) |"], notes, False
    tiers_used: dict[str, None] = {}
    for entry, tiers in files:
        for tier in tiers:
            tiers_used[tier] = None
            if entry.path not in groups.setdefault(tier, []):
                groups[tier].append(entry.path)
    shown = [t for t in registry.tiers if t in tiers_used]
    row = f"| {label} | {len(files)} file(s) | {', '.join(f'`{t}`' for t in shown)} |"
    return [row], notes, True


def _target_row(r: Resolution) -> str:
    if r.kind is Kind.RESOLVED:
        return f"| {quote(r.target)} | `{r.path}` | {', '.join(f'`{t}`' for t in r.tiers)} |"
    path = f"`{r.path}`" if r.path else "—"
    return f"| {quote(r.target)} | {path} | {_RESULT_TEXT[r.kind]} (see below) |"


def plan(registry: Registry, repo_root: Path, commands: list[Command]) -> Work:
    """The work of every runnable ``/rerun-test`` command of one comment (see the module docstring)."""
    commands = [c for c in commands if c.runnable]
    total = sum(len(c.targets) for c in commands)
    if total > MAX_TARGETS:
        return Work(notes=[f"This comment asks for {total} targets; at most {MAX_TARGETS} are allowed per "
                           f"comment, so none of them was run. Split them over several comments."],
                    complete=False)
    groups: dict[str, list[str]] = {}
    rows: list[str] = []
    notes: list[str] = []
    complete = True
    for command in commands:
        if command.owner is not None:
            owner_rows, owner_notes, ok = _owner_work(registry, command, groups)
            rows += owner_rows
            notes += owner_notes
            complete = complete and ok
            continue
        for target in command.targets:
            r = resolve_target(registry, repo_root, target, command.tier)
            rows.append(_target_row(r))
            if r.kind is not Kind.RESOLVED:
                notes.append(replies.explain(r, registry))
                complete = False
                continue
            for tier in r.tiers:
                if r.test_id not in groups.setdefault(tier, []):
                    groups[tier].append(r.test_id)
    order = list(registry.tiers)
    dispatches = [DispatchSpec(tier, TARGETS_PART, registry.tiers[tier].runner_labels, tuple(tests))
                  for tier, tests in sorted(groups.items(), key=lambda kv: order.index(kv[0]))]
    section = "\n".join(["| target | resolved file | tiers |", "|---|---|---|"] + rows) if rows else ""
    return Work(dispatches, [], [section], notes, complete)


__all__ = ["plan"]
