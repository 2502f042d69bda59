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

A plan that runtime dependency maps helped decide (``Plan.maps_used``) is pinned instead: the
selection was made at plan time from maps the job's agent does not have, so one step per non-empty
shard (``key`` ``tier-<name>``, or ``tier-<name>-shard-<i>`` for several) runs that shard's files
by name (``ci run --tier T FILE...``), and no map path or selection argument is baked in. A shard
with files the maps narrowed to node ids carries its ids text (`ci.selection.shard_ids`) in the
step's ``env`` as `IDS_ENV`; the command writes it to a temporary file for ``-p ci.pytest_ids
--ci-ids``, so the step runs exactly those ids.

A tier's quarantined files get their own step, ``soft_fail: true`` (its failure never fails the
build), ``key`` ``tier-<name>-quarantined``, running them with ``CI_RUN_QUARANTINED=1`` as the
nightly GitHub job does. Nothing selected anywhere: ``steps: []``.

A plan made from a changed-files list carries the list, not the planning agent's path: the step's
``env`` holds it as `CHANGED_FILES_ENV` (one path a line, at most `MAX_CHANGED_FILES_BYTES`) and
the command writes it to a temporary file for ``ci run --changed-files``.

The agent interpolates ``$VAR`` and ``${VAR}`` in every string value while uploading
(buildkite/interpolate's grammar: ``$$`` and ``\\$`` are an escaped ``$``). Every value that
came from the registry or the command line has each ``$`` doubled (`upload_literal`), so it
arrives as written; a value with a backslash before a ``$`` cannot be written so and is refused.
"""

from __future__ import annotations

import copy
import math
import re
import shlex
from collections.abc import Mapping, Sequence

import yaml

from ci.registry import Registry, Status, StepTemplate, Tier, derived_timeout
from ci.selection.plan import Plan
from ci.selection.shard_ids import IDS_ENV, CarriedIds, carried_ids

# Minutes a job spends before and after its tests: checkout, `ci/bootstrap.py`, the report.
SETUP_MINUTES = 15
SHARD = '"$$((BUILDKITE_PARALLEL_JOB + 1))/$$BUILDKITE_PARALLEL_JOB_COUNT"'
CHANGED_FILES_ENV = "CI_CHANGED_FILES"
MAX_CHANGED_FILES_BYTES = 64 * 1024  # under Linux's 128 KiB for one environment string
# The list goes through a file: `ci run --changed-files` reads regular files only (no <(...)).
_CHANGED_FILES_PREFIX = ('changed=$$(mktemp) && printf \'%s\\n\' "$$' + CHANGED_FILES_ENV
                         + '" > "$$changed" && ')
_CHANGED_FILES_ARG = ' --changed-files "$$changed"'
_IDS_PREFIX = 'ids=$$(mktemp) && printf \'%s\' "$$' + IDS_ENV + '" > "$$ids" && '


_ODD_BACKSLASH_DOLLAR = re.compile(r"(?<!\\)(?:\\\\)*\\\$")


class BuildkiteError(ValueError):
    """A value the pipeline cannot carry through Buildkite's upload unchanged."""


def upload_literal(value: str, what: str) -> str:
    """``value`` with each ``$`` doubled, so the agent's upload interpolation gives ``value`` back.

    Raises `BuildkiteError` naming ``what`` when an odd run of backslashes stands before a ``$``:
    the agent keeps ``\\\\`` as it is but reads ``\\$`` as an escape, and no spelling of that pair
    survives."""
    if _ODD_BACKSLASH_DOLLAR.search(value):
        raise BuildkiteError(f"{what} {value!r} has a backslash before a '$', which Buildkite's upload "
                             "interpolation cannot pass through unchanged; rename it or drop the backslash")
    return value.replace("$", "$$")


def _literal(text: str) -> str:
    """``text`` as one shell word that the agent's upload-time interpolation leaves alone."""
    upload_literal(text, "argument")
    return shlex.quote(text).replace("$", "$$")


def _escaped(value: object, what: str) -> object:
    """A template value with `upload_literal` applied to every string in it (keys are not interpolated)."""
    if isinstance(value, str):
        return upload_literal(value, what)
    if isinstance(value, list):
        return [_escaped(item, what) for item in value]
    if isinstance(value, dict):
        return {key: _escaped(item, f"{what} {key}") for key, item in value.items()}
    return value


def _file_seconds(registry: Registry, path: str) -> float:
    """The most seconds one file may take: its ``timeout``, else what its est_time derives."""
    entry = registry.tests[path]
    return entry.timeout if entry.timeout is not None else derived_timeout(entry.est_time)


def _minutes(seconds: float) -> int:
    return max(1, math.ceil(seconds / 60)) + SETUP_MINUTES


def _templated(step: dict[str, object], tier: Tier, plan_env: Mapping[str, str]) -> dict[str, object]:
    """``step`` with the tier's ``buildkite:`` template and ``env`` merged in. The template cannot
    set the plan's keys (the parser refuses them); in ``env`` the plan's names win over the tier's."""
    what = f"tier {tier.name!r}"
    template = tier.buildkite or StepTemplate()
    verbatim = set(template.interpolate)
    merged = {key: copy.deepcopy(value) if key in verbatim else _escaped(value, f"{what} buildkite {key}")
              for key, value in template.keys.items()}
    agents = merged.pop("agents", {})
    step["agents"] = {**(agents if isinstance(agents, dict) else {}),
                      "queue": upload_literal(tier.queue, f"{what} buildkite_queue")}
    step.update((key, value) for key, value in merged.items() if key not in step)
    env = {name: upload_literal(value, f"{what} env {name}") for name, value in tier.env.items()}
    env.update(plan_env)
    if env:
        step["env"] = env
    if template.command_prefix is not None:
        prefix = template.command_prefix
        if "command_prefix" not in verbatim:
            prefix = upload_literal(prefix, f"{what} buildkite command_prefix")
        step["command"] = f"{prefix} && {step['command']}"
    return step


def _changed_files_env(changed: Sequence[str]) -> dict[str, str]:
    text = "\n".join(changed)
    size = len(text.encode("utf-8"))
    if size > MAX_CHANGED_FILES_BYTES:
        raise BuildkiteError(f"the --changed-files list is {size} bytes; --format buildkite carries at most "
                             f"{MAX_CHANGED_FILES_BYTES} in each step: select by --base REF instead")
    return {CHANGED_FILES_ENV: upload_literal(text, "--changed-files list")}


def _tier_step(plan: Plan, registry: Registry, selection: str, changed: Sequence[str] | None) -> dict[str, object]:
    tier, count = plan.tier, len(plan.shards)
    shard = f" --shard {SHARD}" if count > 1 else ""
    longest = max(sum(_file_seconds(registry, t) for t in s.tests) for s in plan.shards)
    command = f"python -m ci run --tier {shlex.quote(tier.name)}{shard}{selection}"
    if changed is not None:
        command = _CHANGED_FILES_PREFIX + command + _CHANGED_FILES_ARG
    step: dict[str, object] = {
        "label": f"{tier.name}: {len(plan.selected)} test file(s)" + (f" in {count} shards" if count > 1 else ""),
        "key": f"tier-{tier.name}",
        "command": command,
        "agents": {"queue": tier.queue},
        "timeout_in_minutes": _minutes(longest),
    }
    if count > 1:
        step["parallelism"] = count
    return _templated(step, tier, {} if changed is None else _changed_files_env(changed))


def _pinned_steps(plan: Plan, registry: Registry, carried: CarriedIds) -> list[dict[str, object]]:
    """One step per non-empty shard of a map-decided plan, running its files by name (and, when
    some were narrowed, its node ids through the ids file)."""
    tier, count = plan.tier, len(plan.shards)
    steps = []
    for shard in (s for s in plan.shards if s.tests):
        command = " ".join(["python -m ci run --tier", _literal(tier.name), *(_literal(f) for f in shard.tests)])
        ids = carried.of(plan, shard)
        if ids:
            command = (_IDS_PREFIX + command + ' -- -p ci.pytest_ids --ci-ids "$$ids"')
        of = f", shard {shard.index}/{count}" if count > 1 else ""
        step: dict[str, object] = {
            "label": f"{tier.name}: {len(shard.tests)} test file(s){of}",
            "key": f"tier-{tier.name}" + (f"-shard-{shard.index}" if count > 1 else ""),
            "command": command,
            "agents": {"queue": tier.queue},
            "timeout_in_minutes": _minutes(sum(_file_seconds(registry, t) for t in shard.tests)),
        }
        steps.append(_templated(step, tier, {IDS_ENV: upload_literal(ids, "a node id")} if ids else {}))
    return steps


def _quarantined_step(plan: Plan, registry: Registry) -> dict[str, object] | None:
    files = [n.path for n in plan.not_run
             if n.path in registry.tests and registry.tests[n.path].status is Status.QUARANTINED]
    if not files:
        return None
    tier = plan.tier
    step: dict[str, object] = {
        "label": f"{tier.name}: {len(files)} quarantined file(s), non-blocking",
        "key": f"tier-{tier.name}-quarantined",
        "command": " ".join(["python -m ci run --tier", shlex.quote(tier.name), *(_literal(f) for f in files)]),
        "agents": {"queue": tier.queue},
        "soft_fail": True,
        "timeout_in_minutes": _minutes(sum(_file_seconds(registry, f) for f in files)),
    }
    return _templated(step, tier, {"CI_RUN_QUARANTINED": "1"})


def pipeline(plans: Sequence[Plan], registry: Registry, selection_args: Sequence[str] = (),
             changed: Sequence[str] | None = None, carried: CarriedIds | None = None) -> dict[str, object]:
    """The pipeline for ``plans`` (see the module docstring). ``selection_args`` are the
    ``ci plan`` arguments every ``ci run`` must repeat to select what the plan selected
    (``--base REF``, ``--durations F``); ``changed`` the paths of a ``--changed-files`` list,
    which each step carries in its ``env``; ``carried`` the shards' ids texts (default: `carried_ids`
    of ``plans``). Raises `BuildkiteError` for a value that cannot pass
    Buildkite's upload unchanged, or a list over `MAX_CHANGED_FILES_BYTES`."""
    selection = "".join(" " + _literal(a) for a in selection_args)
    carried = carried if carried is not None else carried_ids(plans)
    steps: list[Mapping[str, object]] = []
    for plan in plans:
        if plan.has_tests and plan.maps_used:
            steps += _pinned_steps(plan, registry, carried)
        elif plan.has_tests:
            steps.append(_tier_step(plan, registry, selection, changed))
        quarantined = _quarantined_step(plan, registry)
        if quarantined is not None:
            steps.append(quarantined)
    return {"steps": steps}


def to_buildkite(plans: Sequence[Plan], registry: Registry, selection_args: Sequence[str] = (),
                 changed: Sequence[str] | None = None, carried: CarriedIds | None = None) -> str:
    """`pipeline` as YAML for ``buildkite-agent pipeline upload``."""
    return yaml.safe_dump(pipeline(plans, registry, selection_args, changed, carried), sort_keys=False,
                          width=1 << 16)


__all__ = ["BuildkiteError", "CHANGED_FILES_ENV", "MAX_CHANGED_FILES_BYTES", "SETUP_MINUTES", "pipeline",
           "to_buildkite", "upload_literal"]
