"""Select the tests of a tier (optionally only those a change affects) and shard them with LPT.

`plan` is pure: it reads the typed `Registry` and, when given, an `Impact` (what the import
graph says about the change, `ci.selection.deps`), never the file system or git, and never prints.
Contract:
- Every test registered for the tier appears exactly once, either in ``selected`` or in
  ``not_run`` (with the reason and the exact command that would run it). Nothing is dropped.
- A registered path that is not a regular file (``impact.not_files``: a directory, a missing
  file) is never selected: running a directory would run every test in it.
- With ``changed_files`` (repo-relative paths): a test is selected when a changed path is the
  test file itself or lies under one of its ``depends_on`` prefixes (`path_is_under`), or when
  the impact gives a reason (a changed file in its import closure or a conftest above it); a
  change under any ``run_all_paths`` entry selects every active test. Without an impact, a
  changed helper or conftest beside or above the test inside a test root (``project.test_roots``)
  selects it instead. With ``maps`` (`ci.selection.depmap_select`), a test whose runtime
  dependency map may decide is selected by it instead of by the impact; the others keep the
  impact's verdict, with the reason the map could not decide. Each test says who decided it
  (``decided_by``: `DECIDED_BY`); `decided_summary` counts them per plan.
  ``changed_files=None`` means "no change filter" (run everything active); an empty list
  selects nothing. ``uncovered`` lists changed paths that select no registered test at all.
- Times used for sharding: for a file narrowed to node ids whose map recorded each id's seconds,
  their sum; else ``durations[path]`` when given (seconds, e.g. measured p90), else the
  registry's ``est_time``.
- Shards: ``shards=N`` or ``shard_budget=S`` (smallest N whose LPT makespan <= S; a single test
  longer than S raises `ShardBudgetError`), default 1.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shlex
from dataclasses import dataclass, fields
from typing import Mapping, Sequence

from ci.selection.deps import Impact
from ci.selection.depmap_select import MapSelection
from ci.project import ProjectConfig
from ci.registry import (
    Registry, Status, TestEntry, Tier, deciding_pattern, normalize_path, path_is_under, registered_file_problem,
    run_all_rule,
)
from ci.selection.shard import ShardPlan, lpt, lpt_for_budget


# Who decided a test's verdict: its runtime map, the static import graph, or a rule of the registry
# (its own path, depends_on, run_all_paths, its status, no change filter).
DECIDED_BY = ("observation", "static graph", "rule")


class PlanError(ValueError):
    """Bad plan arguments (unknown tier, both shards and budget, ...)."""


@dataclass(frozen=True)
class PlannedTest:
    """A selected test; ``time`` is the seconds used for sharding, ``time_source`` says whence."""

    path: str
    time: float
    time_source: str  # "est_time", "durations" or "node ids" (the narrowed ids' recorded seconds)
    why: str          # "all active tests", "changed: fp4kv/quant/x.py", "imports fp4kv/quant/e2m1.py via ..."
    decided_by: str = "rule"  # one of `DECIDED_BY`
    node_ids: tuple[str, ...] | None = None  # only these ids of the file run (None: the whole file)
    ids_why: str = ""  # why ``node_ids``, or why the whole file though its map has per-id lines ("": none)


@dataclass(frozen=True)
class NotRun:
    """A test of the tier that this plan does not run, why, and how to run it by hand."""

    path: str
    reason: str
    command: str  # empty when there is nothing to run (the path is not a test file)
    decided_by: str = "rule"  # one of `DECIDED_BY`


@dataclass(frozen=True)
class PlanShard:
    """Shard ``index`` of ``count`` (1-based); ``tests`` in LPT order; ``est_time`` seconds."""

    index: int
    count: int
    tests: tuple[str, ...]
    est_time: float


@dataclass(frozen=True)
class Plan:
    tier: Tier
    selected: tuple[PlannedTest, ...]
    not_run: tuple[NotRun, ...]
    shards: tuple[PlanShard, ...]
    makespan: float
    lower_bound: float
    changed_files: tuple[str, ...] | None
    run_all_trigger: str | None  # the changed path that matched a run_all_paths entry
    uncovered: tuple[str, ...] = ()  # changed paths no registered test covers (any tier)
    run_all_excluded: tuple[str, ...] = ()  # "path (run_all_paths: !prefix)": taken back by a '!' entry
    observed: tuple[str, str] | None = None  # the newest map that decided a test: (origin, recorded_at)
    maps_used: bool = False  # runtime maps were consulted (`decided` then says who decided what)

    @property
    def has_tests(self) -> bool:
        return bool(self.selected)

    @property
    def total_time(self) -> float:
        return sum(t.time for t in self.selected)

    def shard(self, index: int, count: int) -> PlanShard:
        """Shard ``index``/``count``; ``count`` must match the plan's shard count."""
        if count != len(self.shards):
            raise PlanError(f"shard {index}/{count} asked of a plan with {len(self.shards)} shards")
        if not 1 <= index <= count:
            raise PlanError(f"shard index {index} is out of range 1..{count}")
        return self.shards[index - 1]


def run_command(path: str, tier: str, *, inactive: bool = False) -> str:
    """The command that runs one registered test file on its tier's machine.

    A manual or quarantined file needs ``--include-inactive``: under ``--tier`` the plugin skips
    inactive files even when they are named.
    """
    command = f"python -m ci run --tier {shlex.quote(tier)} {shlex.quote(path)}"
    return command + " -- --include-inactive" if inactive else command


def plan(registry: Registry, tier: str, changed_files: Sequence[str] | None = None,
         shards: int | None = None, shard_budget: float | None = None,
         durations: Mapping[str, float] | None = None, impact: Impact | None = None,
         maps: MapSelection | None = None) -> Plan:
    """Select and shard the tests of ``tier``; see the module docstring for the contract."""
    if tier not in registry.tiers:
        raise PlanError(f"unknown tier {tier!r}; known tiers: {', '.join(registry.tiers)}")
    if shards is not None and shard_budget is not None:
        raise PlanError("give either shards or shard_budget, not both")
    durations = durations or {}
    changed = None if changed_files is None else tuple(sorted(set(changed_files)))
    trigger, excluded = None, ()
    if changed is not None:
        trigger = next((f"{c} (run_all_paths: {rule})" for c in changed
                        if (rule := run_all_rule(registry.run_all_paths, c)) is not None), None)
        excluded = tuple(f"{c} (run_all_paths: {rule})" for c in changed
                         if (rule := deciding_pattern(registry.run_all_paths, c) or "").startswith("!"))

    selected: list[PlannedTest] = []
    not_run: list[NotRun] = []
    not_files = impact.not_files if impact is not None else {}
    for entry in registry.tests_for_tier(tier, include_inactive=True):
        if entry.path in not_files:
            not_run.append(NotRun(entry.path, f"{entry.path} {not_files[entry.path]}; never selected", ""))
            continue
        command = run_command(entry.path, tier, inactive=entry.status is not Status.ACTIVE)
        if entry.status is not Status.ACTIVE:
            detail = f"{entry.status.value}: {entry.reason}" + (f" ({entry.issue})" if entry.issue else "")
            not_run.append(NotRun(entry.path, detail, command))
            continue
        why, by = _why_selected(entry, changed, trigger, impact, registry.project, maps)
        if why is None:
            reason = maps.not_run_reason(entry.path) if maps is not None else "not affected by the change"
            not_run.append(NotRun(entry.path, reason, command, by))
            continue
        narrowed = maps.narrowed(entry.path) if maps is not None and by == "observation" else None
        ids = (narrowed.ids, narrowed.why) if narrowed is not None else (None, "")
        if narrowed is not None and narrowed.ids is not None and narrowed.seconds is not None:
            selected.append(PlannedTest(entry.path, narrowed.seconds, "node ids", why, by, *ids))
        elif entry.path in durations:
            selected.append(PlannedTest(entry.path, float(durations[entry.path]), "durations", why, by, *ids))
        else:
            selected.append(PlannedTest(entry.path, entry.est_time, "est_time", why, by, *ids))

    times = {t.path: t.time for t in selected}
    if shard_budget is not None:
        split: ShardPlan = lpt_for_budget(times, shard_budget)
    else:
        split = lpt(times, 1 if shards is None else shards)
    plan_shards = tuple(PlanShard(s.index, split.count, s.tests, s.load) for s in split.shards)
    uncovered = impact.uncovered if impact is not None and changed is not None else ()
    return Plan(registry.tiers[tier], tuple(selected), tuple(not_run), plan_shards,
                split.makespan, split.lower_bound, changed, trigger, uncovered, excluded,
                maps.newest if maps is not None else None, maps is not None)


def _why_selected(entry: TestEntry, changed: tuple[str, ...] | None, trigger: str | None,
                  impact: Impact | None, project: ProjectConfig,
                  maps: MapSelection | None = None) -> tuple[str | None, str]:
    """Why the test is selected (None: it is not), and who decided (`DECIDED_BY`)."""
    if changed is None:
        return "all active tests", "rule"
    if trigger is not None:
        return f"run-all path changed: {trigger}", "rule"
    for path in changed:
        for prefix in (entry.path, *entry.depends_on):
            if path_is_under(path, prefix):
                what = "" if prefix == entry.path else f" (depends_on {prefix})"
                return f"changed: {path}{what}", "rule"
    if impact is not None:
        static = impact.reasons.get(entry.path)
        if maps is None:
            return static, "static graph"
        return maps.why(entry.path, static), "observation" if entry.path in maps.decided else "static graph"
    for path in changed:
        if _is_test_support(path, entry.path, project):
            return f"changed: {path} (test support beside or above the test)", "rule"
    return None, "static graph"


def decided_summary(p: Plan) -> str | None:
    """"N files by observation (newest from <origin> at <time>), M by the static graph[, K by
    rule]" over every test the plan judged; None when no runtime map was consulted."""
    if not p.maps_used:
        return None
    counts = {by: 0 for by in DECIDED_BY}
    for item in (*p.selected, *p.not_run):
        counts[item.decided_by] += 1
    newest = f" (newest from {p.observed[0]} at {p.observed[1]})" if p.observed is not None else ""
    text = f"{counts['observation']} files by observation{newest}, {counts['static graph']} by the static graph"
    return text + (f", {counts['rule']} by rule" if counts["rule"] else "")


def _is_test_support(changed: str, test_path: str, project: ProjectConfig) -> bool:
    """True if ``changed`` is a non-test file (conftest.py, a helper module, data) in the test's
    own folder or a folder above it inside a test root (``project.test_roots``): pytest loads
    conftests on that path and tests import their neighbours, so such a change can break the test
    without being listed in its ``depends_on``. Used only without an import-graph impact."""
    folder, _, name = changed.rpartition("/")
    if any(fnmatch.fnmatchcase(name, pattern) for pattern in project.test_patterns):
        return False
    if not any(path_is_under(folder, root) for root in project.test_roots):
        return False
    return path_is_under(test_path, folder)


# ---------------------------------------------------------------------------------------------
# Renderings (strings; the CLI prints them)
# ---------------------------------------------------------------------------------------------

def ids_command(p: Plan, ids_file: str) -> str | None:
    """The command that runs ``p``'s selection with its files narrowed to node ids (`ci.pytest_ids`
    reads ``ids_file``, `ids_file_text`); None when no file of it is narrowed."""
    if not any(t.node_ids is not None for t in p.selected):
        return None
    files = " ".join(shlex.quote(t.path) for t in p.selected)
    return (f"python -m ci run --tier {shlex.quote(p.tier.name)} {files} -- -p ci.pytest_ids "
            f"--ci-ids {shlex.quote(ids_file)}")


def to_json(plans: Sequence[Plan], ids_file: str | None = None) -> str:
    """Every field of every plan, as JSON (stable key order); ``ids_command`` with ``ids_file``."""
    out = []
    for p in plans:
        # asdict() deep-copies field by field: ~10x slower than this on 10,000 entries
        data = {f.name: getattr(p, f.name) for f in fields(p)}
        for name in ("selected", "not_run", "shards"):
            data[name] = [{**vars(item), "tests": list(item.tests)} if name == "shards" else dict(vars(item))
                          for item in data[name]]
        data["changed_files"] = None if p.changed_files is None else list(p.changed_files)
        data["uncovered"] = list(p.uncovered)
        data["run_all_excluded"] = list(p.run_all_excluded)
        data["tier"] = p.tier.name
        data["has_tests"] = p.has_tests
        data["total_time"] = p.total_time
        data["decided"] = decided_summary(p)
        data["ids_command"] = ids_command(p, ids_file) if ids_file else None
        out.append(data)
    return json.dumps({"plans": out}, indent=2, sort_keys=True)


def to_text(plans: Sequence[Plan], ids_file: str | None = None) -> str:
    """The plans for a person; with ``ids_file``, the command that runs a plan's narrowed ids."""
    lines: list[str] = []
    for p in plans:
        n = len(p.shards)
        head = f"tier {p.tier.name}: {len(p.selected)} selected, {len(p.not_run)} not run"
        if p.changed_files is not None:
            head += f" ({len(p.changed_files)} changed files"
            head += f"; run-all triggered by {p.run_all_trigger})" if p.run_all_trigger else ")"
        lines.append(head)
        lines += [f"  run-all not triggered: {excluded}" for excluded in p.run_all_excluded]
        lines.append(f"  {n} shard(s): est. makespan {p.makespan:.0f}s, lower bound {p.lower_bound:.0f}s, "
                     f"total {p.total_time:.0f}s")
        decided = decided_summary(p)
        if decided is not None:
            lines.append(f"  decided: {decided}")
        why = {t.path: t.why for t in p.selected}
        ids = {t.path: t for t in p.selected if t.ids_why}
        by = {t.path: f"{t.decided_by:<12}  " if decided else "" for t in (*p.selected, *p.not_run)}
        for s in p.shards:
            lines.append(f"  shard {s.index}/{s.count}  {s.est_time:7.0f}s  {len(s.tests)} test(s)")
            for t in s.tests:
                lines.append(f"      {t}" if p.changed_files is None else f"      {by[t]}{t}  ({why[t]})")
                lines += [f"          {line}" for line in _ids_lines(ids[t])] if t in ids else []
        command = ids_command(p, ids_file) if ids_file else None
        if command is not None:
            lines.append(f"  run by test id: {command}")
        if p.not_run:
            lines.append("  not run:")
            for nr in p.not_run:
                lines.append(f"      {by[nr.path]}{nr.path}: {nr.reason}")
                if nr.command:
                    lines.append(f"          run it: {nr.command}")
    uncovered = sorted({path for p in plans for path in p.uncovered})
    for path in uncovered:
        lines.append(f"warning: {path} changed but is covered by no test "
                     "(no test imports it, no depends_on or run_all_paths entry names it)")
    return "\n".join(lines)


def _ids_lines(test: PlannedTest, shown: int = 20) -> list[str]:
    """How a file runs: by which ids (at most ``shown`` listed) or whole, and why."""
    if test.node_ids is None:
        return [f"by test id: {test.ids_why}"]
    more = [f"  ... and {len(test.node_ids) - shown} more"] if len(test.node_ids) > shown else []
    return [f"by test id: {test.ids_why}", *(f"  {node}" for node in test.node_ids[:shown]), *more]


def ids_file_text(plans: Sequence[Plan]) -> str:
    """What `ci.pytest_ids` reads (``--ci-ids FILE``): one line per node id of a file narrowed to
    ids, one per file that runs whole (every selected file of every plan is named)."""
    return "".join(ids_lines([t.path for t in p.selected], {t.path: t.node_ids for t in p.selected
                                                              if t.node_ids is not None}) for p in plans)


def ids_lines(paths: Sequence[str], narrowed: Mapping[str, Sequence[str]]) -> str:
    """The ids text of ``paths`` in order: the node ids of each path ``narrowed`` holds, the path
    itself for one that runs whole; one per line."""
    return "".join(f"{line}\n" for path in paths for line in (narrowed[path] if path in narrowed else (path,)))


def explicit_target_problem(registry: Registry, root: str, target: str) -> str | None:
    """Why an explicit target of ``ci run`` (``path`` or ``path::node``, repo-relative or absolute
    under ``root``) is refused, or None: it must be a registry key that `plan` could select, by
    `ci.registry.registered_file_problem` (the rule the rerun bot follows too). A directory
    would make pytest run every test below it, registered or not."""
    file_part = target.split("::", 1)[0]
    if os.path.isabs(file_part):
        file_part = os.path.relpath(file_part, root)
    rel = normalize_path(file_part)
    if rel not in registry.tests:
        below = sorted(p for p in registry.tests if path_is_under(p, rel) and p != rel)
        if below:
            shown = ", ".join(below[:3]) + (f" and {len(below) - 3} more" if len(below) > 3 else "")
            return f"is not a registered test file but a directory holding {shown}: name the files"
        return f"is not registered in {registry.path}"
    return registered_file_problem(root, rel)
