"""Plans -> a Buildkite pipeline (`buildkite-agent pipeline upload` reads it: YAML, one command
step per tier, on the tier's agent queue).

Per tier with selected tests, one step:

* ``agents: {queue: <tier.queue>}`` (the tier's ``buildkite_queue``, else its name);
* ``parallelism: N`` for N shards (omitted for one): Buildkite starts N jobs, each with
  ``BUILDKITE_PARALLEL_JOB`` (0-based) and ``BUILDKITE_PARALLEL_JOB_COUNT``, and each runs
  ``ci run --tier T --shard <job + 1>/<count>`` with the plan's own selection arguments, so shard
  i/N holds what the plan put there. ``$$`` keeps the variables for the job's shell: the agent
  interpolates a single ``$`` while uploading, when they are not set yet;
* ``timeout_in_minutes``: the largest shard's file timeouts (``timeout``, else the derived one)
  plus `SETUP_MINUTES` for checkout and bootstrap, in whole minutes;
* ``key`` ``tier-<name>`` and a label with the tier, the file count and the shard count.

A tier's quarantined files get their own step, ``soft_fail: true`` (its failure never fails the
build), ``key`` ``tier-<name>-quarantined``, running them with ``CI_RUN_QUARANTINED=1`` as the
nightly GitHub job does. Nothing selected anywhere: ``steps: []``.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence

import yaml

from ci.registry import Registry, Status, derived_timeout
from ci.selection.plan import Plan

# Minutes a job spends before and after its tests: checkout, `ci/bootstrap.py`, the report.
SETUP_MINUTES = 15
SHARD = '"$$((BUILDKITE_PARALLEL_JOB + 1))/$$BUILDKITE_PARALLEL_JOB_COUNT"'


def _literal(text: str) -> str:
    """``text`` as one shell word that the agent's upload-time interpolation leaves alone."""
    return shlex.quote(text).replace("$", "$$")


def _file_seconds(registry: Registry, path: str) -> float:
    """The most seconds one file may take: its ``timeout``, else what its est_time derives."""
    entry = registry.tests[path]
    return entry.timeout if entry.timeout is not None else derived_timeout(entry.est_time)


def _minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60)) + SETUP_MINUTES


def _tier_step(plan: Plan, registry: Registry, selection: str) -> dict[str, object]:
    tier, count = plan.tier, len(plan.shards)
    shard = f" --shard {SHARD}" if count > 1 else ""
    longest = max(sum(_file_seconds(registry, t) for t in s.tests) for s in plan.shards)
    step: dict[str, object] = {
        "label": f"{tier.name}: {len(plan.selected)} test file(s)" + (f" in {count} shards" if count > 1 else ""),
        "key": f"tier-{tier.name}",
        "command": f"python -m ci run --tier {shlex.quote(tier.name)}{shard}{selection}",
        "agents": {"queue": tier.queue},
        "timeout_in_minutes": _minutes(longest),
    }
    if count > 1:
        step["parallelism"] = count
    return step


def _quarantined_step(plan: Plan, registry: Registry) -> dict[str, object] | None:
    files = [n.path for n in plan.not_run
             if n.path in registry.tests and registry.tests[n.path].status is Status.QUARANTINED]
    if not files:
        return None
    tier = plan.tier
    return {
        "label": f"{tier.name}: {len(files)} quarantined file(s), non-blocking",
        "key": f"tier-{tier.name}-quarantined",
        "command": " ".join(["python -m ci run --tier", shlex.quote(tier.name), *(_literal(f) for f in files)]),
        "env": {"CI_RUN_QUARANTINED": "1"},
        "agents": {"queue": tier.queue},
        "soft_fail": True,
        "timeout_in_minutes": _minutes(sum(_file_seconds(registry, f) for f in files)),
    }


def pipeline(plans: Sequence[Plan], registry: Registry, selection_args: Sequence[str] = ()) -> dict[str, object]:
    """The pipeline for ``plans`` (see the module docstring). ``selection_args`` are the
    ``ci plan`` arguments every ``ci run`` must repeat to select what the plan selected
    (``--base REF``, ``--changed-files F``, ``--durations F``)."""
    selection = "".join(" " + _literal(a) for a in selection_args)
    steps: list[Mapping[str, object]] = []
    for plan in plans:
        if plan.has_tests:
            steps.append(_tier_step(plan, registry, selection))
        quarantined = _quarantined_step(plan, registry)
        if quarantined is not None:
            steps.append(quarantined)
    return {"steps": steps}


def to_buildkite(plans: Sequence[Plan], registry: Registry, selection_args: Sequence[str] = ()) -> str:
    """`pipeline` as YAML for ``buildkite-agent pipeline upload``."""
    return yaml.safe_dump(pipeline(plans, registry, selection_args), sort_keys=False, width=1 << 16)


__all__ = ["SETUP_MINUTES", "pipeline", "to_buildkite"]
