"""``/rerun-tier <tier>`` (alias ``/rerun-stage``): every active test of a tier, as the plan shards it.

The shards are `ci.selection.plan.plan`'s (the same planner and shard budget as ``pr-gpu.yml``, whose
``--shard-budget`` is `DEFAULT_SHARD_BUDGET`; a test keeps the two in step), so a tier run by the bot
splits exactly as CI would: one dispatch per non-empty shard, part ``i/N``. An unknown tier gets
the list of tiers and the closest name. A ``schedule: nightly`` tier runs when named (that is how
a pull request gets it at all), and the reply says no pull request plans it.

A tier is refused, before anything is dispatched, when its shards would not all fit one reply
(`fit.max_rows`) or when, with the tiers before it in the comment, the runs would cost more than
the bot's share of GITHUB_TOKEN's hourly API budget (`budget.max_runs`, `budget.rerun_cost`).
"""

from __future__ import annotations

import difflib
from typing import Mapping

from ci.selection.plan import PlanError, plan as plan_tier
from ci.registry import NIGHTLY, Registry
from ci.selection.shard import ShardBudgetError
from tools.rerun.budget import BUDGET_SHARE, CONTENT_WRITES_PER_HOUR, HOURLY_REQUESTS, max_runs, rerun_cost
from tools.rerun.commands import Command, quote
from tools.rerun.dispatch import DispatchSpec
from tools.rerun.fit import max_rows
from tools.rerun.work import Work

DEFAULT_SHARD_BUDGET = 1800.0
"""Seconds of est_time per shard; the same number as ``--shard-budget`` in ``pr-gpu.yml``."""


def _unknown(registry: Registry, tier: str) -> str:
    close = difflib.get_close_matches(tier, list(registry.tiers), n=1, cutoff=0.0)
    closest = f" The closest name is `{close[0]}`." if close else ""
    return (f"**{quote('/rerun-tier ' + tier)}**: there is no tier {quote(tier)}.{closest} "
            f"Tiers: {', '.join(f'`{t}`' for t in registry.tiers)}.")


def _over_budget(tier: str, shards: int, planned: int, requests: int, writes: int) -> str:
    others = f" with the {planned} run(s) this comment already asks for" if planned else ""
    return (f"**`/rerun-tier {tier}`**: {shards} shards{others} would take about {requests} GitHub API requests "
            f"and {writes} writes (dispatches, reply edits), more than the bot's {BUDGET_SHARE:.0%} share of "
            f"GITHUB_TOKEN's {HOURLY_REQUESTS:,} requests and {CONTENT_WRITES_PER_HOUR} writes an hour; nothing "
            f"dispatched for this tier. Post it in a comment of its own an hour later, or run it in parts: "
            f"`/rerun-test --owner @team --tier {tier}`.")


def plan(registry: Registry, commands: list[Command], shard_budget: float = DEFAULT_SHARD_BUDGET,
         durations: Mapping[str, float] | None = None) -> Work:
    """The work of every runnable ``/rerun-tier`` command of one comment (each tier once)."""
    work = Work()
    planned = 0  # runs of the tiers before this one in the comment
    for tier in dict.fromkeys(c.tier for c in commands if c.runnable and c.tier):
        if tier not in registry.tiers:
            work = work.merge(Work(notes=[_unknown(registry, tier)], complete=False))
            continue
        try:
            tier_plan = plan_tier(registry, tier, shard_budget=shard_budget, durations=durations)
        except (PlanError, ShardBudgetError) as exc:
            work = work.merge(Work(notes=[f"**`/rerun-tier {tier}`**: cannot plan the tier: {quote(str(exc), 400)}"],
                                   complete=False))
            continue
        shards = [s for s in tier_plan.shards if s.tests]
        limit = max_rows(tier)
        if len(shards) > limit:
            # One reply row per shard, and a row holding a result is never dropped: refuse rather
            # than dispatch runs whose results could not all be shown.
            work = work.merge(Work(notes=[
                f"**`/rerun-tier {tier}`**: {len(shards)} shards of {shard_budget:g} s est_time would not fit one "
                f"reply with all their results (at most {limit} rows); nothing dispatched. Run the tier from its "
                f"workflow, or in parts: `/rerun-test --owner @team --tier {tier}`."], complete=False))
            continue
        if planned + len(shards) > max_runs():
            cost = rerun_cost(planned + len(shards))
            work = work.merge(Work(notes=[_over_budget(tier, len(shards), planned, cost.requests, cost.writes)],
                                   complete=False))
            continue
        planned += len(shards)
        runner = registry.tiers[tier].runner_labels
        specs = [DispatchSpec(tier, f"{s.index}/{s.count}", runner, s.tests) for s in shards]
        inactive = sum(1 for n in tier_plan.not_run if n.reason != "not affected by the change")
        summary = (f"`/rerun-tier {tier}`: {len(tier_plan.selected)} active file(s) in {len(shards)} shard(s) "
                   f"(shard budget {shard_budget:g} s of est_time, est. makespan {tier_plan.makespan:.0f} s)"
                   + (f"; {inactive} manual/quarantined file(s) not run" if inactive else "") + "."
                   + (" A nightly tier: no pull request plans it, so this run is the only check of its files "
                      "on this change." if registry.tiers[tier].schedule == NIGHTLY else ""))
        if not shards:
            work = work.merge(Work(sections=[summary], notes=[f"Tier `{tier}` has no active test; nothing to run."]))
            continue
        work = work.merge(Work(specs, [], [summary]))
    return work


__all__ = ["DEFAULT_SHARD_BUDGET", "plan"]
