"""One tier of ``tiers:`` for the precise parser: every key's rule, each problem at its node.

Contract: `parse_tier` takes the `NodeReader` doing the parse and returns the `Tier`, or None when
it reported a problem (it reports every one it finds).
"""

from __future__ import annotations

import yaml

from ci.registry.model import INVALID_VALUE, PER_COMMIT, Tier, default_backend
from ci.registry.node_reader import NodeReader
from ci.registry.rules import (
    TIER_KEYS, TIER_REQUIRED, arch_problem, backend_problem, buildkite_queue_problem, device_name_problem,
    feature_problem, memory_problem, schedule_problem,
)
from ci.registry.step_parse import parse_culprit, parse_env, parse_pytest_args, parse_template


def parse_tier(parser: NodeReader, name: str, key_node: yaml.Node, node: yaml.Node) -> Tier | None:
    """The tier ``name`` (its key at ``key_node``, its mapping ``node``), or None after a problem."""
    what = f"tier {name!r}"
    if (fields := parser.record(node, what, TIER_KEYS, TIER_REQUIRED)) is None:
        return None
    before, value = len(parser.problems), fields.__getitem__
    description = parser.scalar(value("description"), f"{what} description", (str,))
    labels = parser.string_list(value("runner_labels"), f"{what} runner_labels")
    gpu_count = parser.scalar(value("gpu_count"), f"{what} gpu_count", (int,))
    if gpu_count is not None and gpu_count < 0:
        parser.problem(value("gpu_count"), INVALID_VALUE, f"{what} gpu_count must be >= 0")
        gpu_count = None
    backend, backend_ok = None, True
    if "backend" in fields:
        backend = parser.scalar(value("backend"), f"{what} backend", (str,))
        backend_ok = backend is not None and parser.check(value("backend"), what, backend_problem(backend))
        backend = backend if backend_ok else None
    arch = parser.scalar(value("arch"), f"{what} arch", (str,))
    if arch is not None and not (backend_ok and parser.check(value("arch"), what, arch_problem(arch, backend))):
        arch = None  # (a backend that is not one says why already; the arch cannot be judged)
    backend = backend or (default_backend(arch) if arch is not None else None)
    if arch == "cpu" and gpu_count:
        parser.problem(value("gpu_count"), INVALID_VALUE, f"{what} has arch 'cpu' but gpu_count {gpu_count}")
    if arch not in (None, "cpu") and gpu_count == 0:
        parser.problem(value("gpu_count"), INVALID_VALUE, f"{what} has arch {arch!r} but gpu_count 0")
    features: tuple[str, ...] | None = ()
    if "features" in fields:
        features = parser.string_list(value("features"), f"{what} features", non_empty=False)
        for item_node, feature in zip(value("features").value, features or ()):
            if arch is not None and gpu_count is not None and backend is not None:
                parser.check(item_node, what, feature_problem(feature, arch, gpu_count, backend))
    device_name = None
    if "device_name" in fields:
        device_name = parser.scalar(value("device_name"), f"{what} device_name", (str,))
        if device_name is not None and arch is not None:
            parser.check(value("device_name"), what, device_name_problem(device_name, arch))
    memory = None
    if "min_memory_gib" in fields:
        memory = parser.scalar(value("min_memory_gib"), f"{what} min_memory_gib", (int, float))
        if memory is not None and arch is not None:
            parser.check(value("min_memory_gib"), what, memory_problem(memory, arch))
    schedule = PER_COMMIT
    if "schedule" in fields:
        schedule = parser.scalar(value("schedule"), f"{what} schedule", (str,))
        if schedule is not None:
            parser.check(value("schedule"), what, schedule_problem(schedule))
    queue = None
    if "buildkite_queue" in fields:
        queue = parser.scalar(value("buildkite_queue"), f"{what} buildkite_queue", (str,))
        if queue is not None:
            parser.check(value("buildkite_queue"), what, buildkite_queue_problem(queue))
    template = parse_template(parser, value("buildkite"), what) if "buildkite" in fields else None
    env = parse_env(parser, value("env"), what) if "env" in fields else {}
    args = parse_pytest_args(parser, value("pytest_args"), what) if "pytest_args" in fields else ()
    culprit = parse_culprit(parser, value("culprit"), what) if "culprit" in fields else None
    if len(parser.problems) != before:
        return None
    return Tier(name, description, labels, gpu_count, arch, features, device_name,
                None if memory is None else float(memory), line=key_node.start_mark.line + 1, schedule=schedule,
                backend=backend, buildkite_queue=queue, buildkite=template, env=env, pytest_args=args or (),
                culprit=culprit)
