"""Typed registry -> registry.yaml text, in the plain block style the fast path reads.

Used by ``ci init`` and ``ci import-suites`` (which keeps the existing tiers: every key of theirs is
written). Contract: ``parse_registry(render_registry(r))``
gives back ``r`` (positions aside), for any valid `Registry` ``r``; the tests check it. Comments
can be attached to an entry's ``est_time`` line (``est_time: 120  # largest of ...``), so a
generated value carries the reason it was chosen.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Mapping

import yaml

from ci.project import ProjectConfig
from ci.registry.rules import derived_timeout
from ci.registry.model import (PER_COMMIT, STR_TAG, QuarantinePolicy, Registry, Status, StepTemplate, TestEntry, Tier,
                               default_backend, double_quoted, plain_tag, yaml_scalar)
from ci.registry.quarantine_edit import render_evidence, render_node

# A string that is plain both in block and flow context and reads back as itself.
# A leading '-' before another such character is plain too (`-k`, `--deselect`).
_SAFE_PLAIN = re.compile(r"(?:-[A-Za-z0-9_./@+=-]|[A-Za-z0-9_./])[A-Za-z0-9_./@+=-]*")


def flow_item(text: str) -> str:
    """``text`` as an item of a one-line flow list (``[a, "test_*.py"]``)."""
    if _SAFE_PLAIN.fullmatch(text) and plain_tag(text) == STR_TAG:
        return text
    return double_quoted(text)


def flow_list(items: Iterable[str]) -> str:
    return "[" + ", ".join(flow_item(i) for i in items) + "]"


def number(value: float) -> str:
    """``30`` for 30.0, ``2.5`` for 2.5 (what the registry's numbers look like)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _comment(text: str) -> str:
    """``  # text`` on one line; characters YAML does not allow in a comment are shown escaped."""
    text = " ".join(text.split())
    return "  # " + "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text) if text else ""


def render_project(project: ProjectConfig) -> list[str]:
    lines = ["project:"]
    for key in ("first_party", "source_roots", "test_roots", "test_patterns", "generated_modules"):
        lines.append(f"  {key}: {flow_list(getattr(project, key))}")
    if not project.unique_basenames:
        lines.append("  unique_basenames: false")
    if project.dynamic_imports:
        lines.append("  dynamic_imports:")
        lines += [f"    {d.importer}: {flow_list(d.targets)}" for d in project.dynamic_imports]
    return lines


def render_tier(tier: Tier) -> list[str]:
    lines = [f"  {tier.name}:",
             f"    description: {yaml_scalar(tier.description)}",
             f"    runner_labels: {flow_list(tier.runner_labels)}",
             f"    gpu_count: {tier.gpu_count}",
             f"    arch: {tier.arch}"]
    if tier.device_name is not None:
        lines.append(f"    device_name: {yaml_scalar(tier.device_name)}")
    if tier.min_memory_gib is not None:
        lines.append(f"    min_memory_gib: {number(tier.min_memory_gib)}")
    if tier.features:
        lines.append(f"    features: {flow_list(tier.features)}")
    if tier.schedule != PER_COMMIT:
        lines.append(f"    schedule: {tier.schedule}")
    if tier.backend != default_backend(tier.arch):
        lines.append(f"    backend: {tier.backend}")
    if tier.buildkite_queue is not None:
        lines.append(f"    buildkite_queue: {yaml_scalar(tier.buildkite_queue)}")
    if tier.buildkite is not None:
        lines += render_template(tier.buildkite)
    lines += render_env(tier.env)
    if tier.pytest_args:
        lines.append(f"    pytest_args: {flow_list(tier.pytest_args)}")
    if tier.culprit is not None:
        c = tier.culprit
        lines.append(f"    culprit: {{auto: {str(c.auto).lower()}, budget: {c.budget}, runners: {c.runners}}}")
    return lines


def render_env(env: Mapping[str, str]) -> list[str]:
    """An ``env:`` block under a tier or an entry (nothing for an empty one); every value quoted
    where a plain scalar would read back as something else (``"1"``, ``"true"``)."""
    return ["    env:"] + [f"      {name}: {yaml_scalar(value)}" for name, value in env.items()] if env else []


def render_template(template: StepTemplate) -> list[str]:
    """A tier's ``buildkite:`` block: its step keys as block YAML (any nesting), then
    ``command_prefix`` and ``interpolate``."""
    data: dict[str, object] = dict(template.keys)
    if template.command_prefix is not None:
        data["command_prefix"] = template.command_prefix
    if template.interpolate:
        data["interpolate"] = list(template.interpolate)
    body = yaml.safe_dump(data, default_flow_style=False, sort_keys=False, allow_unicode=False, width=10**6)
    return ["    buildkite:"] + ["      " + line for line in body.splitlines()]


def render_policy(policy: QuarantinePolicy) -> list[str]:
    """The ``quarantine:`` section, only the keys that differ from the defaults (none: no section)."""
    default = QuarantinePolicy()
    keys = [k for k in ("threshold", "min_runs", "release_runs", "level", "issue")
            if getattr(policy, k) != getattr(default, k)]
    if not keys:
        return []
    values = {k: getattr(policy, k) for k in keys}
    return ["quarantine:"] + [f"  {k}: {yaml_scalar(v) if isinstance(v, str) else number(v) if isinstance(v, float) else v}"
                              for k, v in values.items()]


def render_entry(entry: TestEntry, est_time_comment: str = "") -> list[str]:
    lines = [f"  {entry.path}:",
             f"    tiers: {flow_list(entry.tiers)}",
             f"    est_time: {number(entry.est_time)}{_comment(est_time_comment)}",
             f"    owner: {yaml_scalar(entry.owner)}",
             f"    status: {entry.status.value}"]
    if entry.reason is not None:
        lines.append(f"    reason: {yaml_scalar(entry.reason)}")
    if entry.issue is not None:
        lines.append(f"    issue: {yaml_scalar(entry.issue)}")
    if entry.timeout is not None:
        lines.append(f"    timeout: {number(entry.timeout)}")
    if entry.reruns:
        lines.append(f"    reruns: {entry.reruns}")
    if entry.depends_on:
        lines.append(f"    depends_on: {flow_list(entry.depends_on)}")
    if entry.may_skip:
        lines.append("    may_skip: true")
    if entry.evidence is not None:
        lines += render_evidence(entry.evidence, "    ")
    if entry.quarantined_nodes:
        lines.append("    quarantined_nodes:")
        lines += [line for node in entry.quarantined_nodes for line in render_node(node, "      ")]
    lines += render_env(entry.env)
    if entry.pytest_args:
        lines.append(f"    pytest_args: {flow_list(entry.pytest_args)}")
    return lines


def render_registry(registry: Registry, *, header: str = "",
                    est_time_comments: Mapping[str, str] | None = None) -> str:
    """The whole registry as YAML text. ``header`` becomes leading ``#`` comment lines;
    ``est_time_comments[path]`` a comment after that entry's est_time."""
    comments = est_time_comments or {}
    lines = [_comment(line).lstrip() or "#" for line in header.splitlines()]
    lines.append(f"version: {registry.version}")
    if registry.run_all_paths:
        lines.append(f"run_all_paths: {flow_list(registry.run_all_paths)}")
    lines += render_project(registry.project)
    lines += render_policy(registry.quarantine)
    lines.append("tiers:")
    for tier in registry.tiers.values():
        lines += render_tier(tier)
    if not registry.tests:
        lines.append("tests: {}")
    else:
        lines.append("tests:")
        for entry in registry.tests.values():
            lines += render_entry(entry, comments.get(entry.path, ""))
    return "\n".join(lines) + "\n"


DEFAULT_EST_TIME = 30
PLACEHOLDER_OWNER = "@your-github-handle"


def suggested_entry(path: str, registry: Registry | None = None, tier: str | None = None) -> str:
    """The YAML entry (indented for the ``tests:`` mapping) that registers ``path``: what lint, the
    pytest plugin and the rerun bot show for an unregistered test file.

    ``tier`` defaults to the registry's first tier without GPUs (else its first tier, else
    ``cpu``); an entry on a GPU tier carries the timeout lint's L007 asks for. The owner is the
    most common owner of registered files in the same directory, if any.
    """
    tiers = registry.tiers if registry is not None else {}
    if tier is None:
        tier = next((t.name for t in tiers.values() if not t.needs_gpu), next(iter(tiers), "cpu"))
    directory = path.rsplit("/", 1)[0]
    owners = Counter(e.owner for e in (registry.tests.values() if registry else ())
                     if e.path.rsplit("/", 1)[0] == directory)
    owner = owners.most_common(1)[0][0] if owners else PLACEHOLDER_OWNER
    gpu = tier in tiers and tiers[tier].needs_gpu
    new = entry(path, (tier,), DEFAULT_EST_TIME, owner,
                timeout=derived_timeout(DEFAULT_EST_TIME) if gpu else None)
    return "\n".join(render_entry(new, f"seconds, measured: pytest {path} --durations=0")) + "\n"


def entry(path: str, tiers: tuple[str, ...], est_time: float, owner: str, *, status: Status = Status.ACTIVE,
          reason: str | None = None, timeout: float | None = None) -> TestEntry:
    """A `TestEntry` as a generator builds it (no position)."""
    return TestEntry(path=path, tiers=tiers, est_time=float(est_time), owner=owner, status=status, reason=reason,
                     timeout=None if timeout is None else float(timeout))


__all__ = ["DEFAULT_EST_TIME", "PLACEHOLDER_OWNER", "entry", "flow_item", "flow_list", "number", "render_entry", "render_env", "render_policy", "render_project",
           "render_registry", "render_template", "render_tier", "suggested_entry"]
