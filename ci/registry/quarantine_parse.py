"""The quarantine's part of the registry, for the precise parser: the top-level ``quarantine:``
policy, an entry's ``evidence:`` and its ``quarantined_nodes:``.

Contract: each function takes the `ci.registry.parse.PreciseParser` doing the parse (its
``mapping``, ``scalar`` and ``problem``), reports every problem at its node, and returns the typed
value or None when there was one. The value rules are `ci.registry.rules`' (``policy_problem``,
``node_id_problem``), shared with the fast path.
"""

from __future__ import annotations

from typing import Any

import yaml

from ci.registry.model import (DUPLICATE_KEY, INVALID_VALUE, UNKNOWN_TIER, WRONG_TYPE, QuarantineEvidence,
                               QuarantinedNode, QuarantinePolicy)
from ci.registry.rules import (EVIDENCE_KEYS, NODE_KEYS, NODE_REQUIRED, POLICY_KEYS, describe_scalar,
                               node_id_problem, policy_problem)

_TYPES: dict[str, tuple[type, ...]] = {"threshold": (float, int), "level": (float, int), "min_runs": (int,),
                                       "release_runs": (int,), "issue": (str,)}


def parse_policy(parser: Any, key_node: yaml.Node, node: yaml.Node) -> QuarantinePolicy | None:
    """The ``quarantine:`` section (its key and value nodes); keys left out take
    `QuarantinePolicy`'s defaults."""
    fields = parser.mapping(node, "quarantine", POLICY_KEYS)
    if fields is None:
        return None
    before = len(parser.problems)
    values: dict[str, Any] = {}
    for key, (_, value_node) in fields.items():
        value = parser.scalar(value_node, f"quarantine {key}", _TYPES[key])
        if value is None:
            continue
        message = policy_problem(key, float(value) if key in ("threshold", "level") else value)
        if message is not None:
            parser.problem(value_node, INVALID_VALUE, f"quarantine {key} {message}")
            continue
        values[key] = value
    if len(parser.problems) != before:
        return None
    for key in ("threshold", "level"):
        if key in values:
            values[key] = float(values[key])
    return QuarantinePolicy(**values, line=key_node.start_mark.line + 1)


def parse_evidence(parser: Any, node: yaml.Node, what: str, tiers: tuple[str, ...]) -> QuarantineEvidence | None:
    """An ``evidence:`` mapping (every key required: ``ci quarantine`` writes them all); its tier
    must be one of the entry's ``tiers``."""
    what = f"{what} evidence"
    fields = parser.mapping(node, what, EVIDENCE_KEYS, EVIDENCE_KEYS)
    if fields is None or not EVIDENCE_KEYS <= fields.keys():
        return None
    before = len(parser.problems)
    get = lambda key, types: parser.scalar(fields[key][1], f"{what} {key}", types)  # noqa: E731
    tier = get("tier", (str,))
    if tier is not None and tier not in tiers:
        parser.problem(fields["tier"][1], UNKNOWN_TIER, f"{what} tier {tier!r} is not one of the entry's tiers")
    score = get("score", (float, int))
    interval_node = fields["interval"][1]
    interval: tuple[float, ...] = ()
    if isinstance(interval_node, yaml.SequenceNode) and len(interval_node.value) == 2:
        parts = [parser.scalar(n, f"{what} interval", (float, int)) for n in interval_node.value]
        interval = tuple(float(p) for p in parts if p is not None)
    else:
        parser.problem(interval_node, WRONG_TYPE, f"{what} interval must be a list [low, high]")
    for value, value_node in ((score, fields["score"][1]), *zip(interval, interval_node.value or ())):
        if value is not None and not 0.0 <= float(value) <= 1.0:
            parser.problem(value_node, INVALID_VALUE, f"{what}: a rate must be within 0 and 1, got {describe_scalar(value)}")
    if len(interval) == 2 and not interval[0] <= interval[1]:
        parser.problem(interval_node, INVALID_VALUE, f"{what} interval [{interval[0]}, {interval[1]}] has low > high")
    counts = {key: get(key, (int,)) for key in ("runs", "failures", "trials")}
    for key, value in counts.items():
        if value is not None and value < 0:
            parser.problem(fields[key][1], INVALID_VALUE, f"{what} {key} must be >= 0")
    texts = {key: get(key, (str,)) for key in ("fingerprint", "example", "since")}
    if len(parser.problems) != before:
        return None
    return QuarantineEvidence(tier, float(score), (interval[0], interval[1]), counts["runs"], counts["failures"],
                              counts["trials"], texts["fingerprint"], texts["example"], texts["since"])


def parse_nodes(parser: Any, node: yaml.Node, path: str, tiers: tuple[str, ...]) -> tuple[QuarantinedNode, ...] | None:
    """A ``quarantined_nodes:`` list: each item a test id of this file with a reason (and the
    evidence ``ci quarantine`` recorded); one id twice is a problem."""
    what = f"test {path!r} quarantined_nodes"
    if not isinstance(node, yaml.SequenceNode):
        parser.problem(node, WRONG_TYPE, f"{what} must be a list")
        return None
    before = len(parser.problems)
    out: list[QuarantinedNode] = []
    seen: dict[str, int] = {}
    for item in node.value:
        fields = parser.mapping(item, f"{what} item", NODE_KEYS, NODE_REQUIRED)
        if fields is None or not NODE_REQUIRED <= fields.keys():
            continue
        name = parser.scalar(fields["node"][1], f"{what} node", (str,))
        reason = parser.scalar(fields["reason"][1], f"{what} reason", (str,))
        if name is not None:
            message = node_id_problem(name, path)
            if message is not None:
                parser.problem(fields["node"][1], INVALID_VALUE, f"{what}: {message}")
            elif name in seen:
                parser.problem(fields["node"][1], DUPLICATE_KEY,
                               f"{what} names {name!r} twice (first on line {seen[name]})")
            seen.setdefault(name, item.start_mark.line + 1)
        if reason is not None and not reason.strip():
            parser.problem(fields["reason"][1], INVALID_VALUE, f"{what} reason must not be blank")
        evidence = parse_evidence(parser, fields["evidence"][1], f"{what} item", tiers) if "evidence" in fields else None
        out.append(QuarantinedNode(name, reason, evidence, line=item.start_mark.line + 1))
    return tuple(out) if len(parser.problems) == before else None


__all__ = ["parse_evidence", "parse_nodes", "parse_policy"]
