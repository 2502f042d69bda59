"""A tier's ``env:``, ``pytest_args:``, ``buildkite:`` and ``culprit:``, an entry's ``env:`` and ``pytest_args:``,
for the precise parser.

Contract: each function takes the `ci.registry.parse.PreciseParser` doing the parse (its
``mapping``, ``scalar``, ``check`` and ``problem``), reports every problem at its node
(``file:line:col``), and returns the typed value or None when there was one. The fast path leaves
tiers and entries with ``env``, ``buildkite`` or ``culprit`` to the precise parser; it reads ``pytest_args``.
"""

from __future__ import annotations

from typing import Any

import yaml

from ci.registry.model import INVALID_VALUE, WRONG_TYPE, CulpritPolicy, StepTemplate
from ci.registry.rules import CULPRIT_KEYS, MAX_CULPRIT_RUNNERS, env_name_problem, pytest_args_problem, template_key_problem

_SCALARS = (str, int, float, bool)


def parse_env(parser: Any, node: yaml.Node, what: str) -> dict[str, str] | None:
    """An ``env:`` mapping: names ``[A-Za-z_][A-Za-z0-9_]*``, values strings (``"1"``, not ``1``)."""
    fields = parser.mapping(node, f"{what} env", None)
    if fields is None:
        return None
    before = len(parser.problems)
    out: dict[str, str] = {}
    for name, (key_node, value_node) in fields.items():
        parser.check(key_node, what, env_name_problem(name))
        value = parser.scalar(value_node, f"{what} env {name}", (str,))
        if value is not None:
            out[name] = value
    return out if len(parser.problems) == before else None


def parse_pytest_args(parser: Any, node: yaml.Node, what: str) -> tuple[str, ...] | None:
    """A ``pytest_args:`` list of strings (a word may repeat: ``--deselect A --deselect B``) that
    `ci.registry.rules.pytest_args_problem` accepts."""
    if not isinstance(node, yaml.SequenceNode):
        parser.problem(node, WRONG_TYPE, f"{what} pytest_args must be a list of strings")
        return None
    args = [parser.scalar(item, f"{what} pytest_args item", (str,)) for item in node.value]
    if any(arg is None for arg in args) or not parser.check(node, what, pytest_args_problem(tuple(args))):
        return None
    return tuple(args)


def parse_template(parser: Any, node: yaml.Node, what: str) -> StepTemplate | None:
    """A ``buildkite:`` block: step keys (any YAML but null, anchors and tags), less the plan's
    own; ``command_prefix`` a string; ``interpolate`` a list of the block's keys."""
    fields = parser.mapping(node, f"{what} buildkite", None)
    if fields is None:
        return None
    before = len(parser.problems)
    keys: dict[str, object] = {}
    prefix, interpolate = None, ()
    for key, (key_node, value_node) in fields.items():
        if key == "command_prefix":
            prefix = parser.scalar(value_node, f"{what} buildkite command_prefix", (str,))
        elif key == "interpolate":
            interpolate = parser.string_list(value_node, f"{what} buildkite interpolate") or ()
        elif parser.check(key_node, what, template_key_problem(key)):
            keys[key] = _value(parser, value_node, f"{what} buildkite {key}")
    agents = keys.get("agents")
    if isinstance(agents, dict) and "queue" in agents:
        parser.problem(fields["agents"][1], INVALID_VALUE,
                       f"{what}: buildkite: agents sets 'queue'; name it with the tier's buildkite_queue")
    if "interpolate" in fields:
        for item_node, item in zip(fields["interpolate"][1].value, interpolate):
            if item not in keys and item != "command_prefix":
                parser.problem(item_node, INVALID_VALUE, f"{what}: buildkite: interpolate names {item!r}, "
                                                         f"which is not a key of the block")
    if len(parser.problems) != before:
        return None
    return StepTemplate(keys, prefix, tuple(interpolate), line=node.start_mark.line + 1)


def parse_culprit(parser: Any, node: yaml.Node, what: str) -> CulpritPolicy | None:
    """A ``culprit:`` mapping: ``auto`` a boolean, ``budget`` runs >= 1, ``runners`` 1 to
    `MAX_CULPRIT_RUNNERS` (the bounds of ``ci culprit --budget / --runners``); each key optional."""
    fields = parser.mapping(node, f"{what} culprit", CULPRIT_KEYS)
    if fields is None:
        return None
    before, default = len(parser.problems), CulpritPolicy()
    auto = parser.scalar(fields["auto"][1], f"{what} culprit auto", (bool,)) if "auto" in fields else default.auto
    counts = {}
    for key, top in (("budget", None), ("runners", MAX_CULPRIT_RUNNERS)):
        if key not in fields:
            counts[key] = getattr(default, key)
            continue
        value = parser.scalar(fields[key][1], f"{what} culprit {key}", (int,))
        if value is not None and not (1 <= value and (top is None or value <= top)):
            bound = "a whole number >= 1" if top is None else f"a whole number from 1 to {top}"
            parser.problem(fields[key][1], INVALID_VALUE, f"{what} culprit {key} must be {bound}, got {value}")
        counts[key] = value
    if len(parser.problems) != before:
        return None
    return CulpritPolicy(bool(auto), counts["budget"], counts["runners"])


def _value(parser: Any, node: yaml.Node, what: str) -> object:
    """A template value as plain data: mappings with string keys, lists, non-null scalars."""
    if isinstance(node, yaml.SequenceNode):
        return [_value(parser, item, f"{what} item") for item in node.value]
    if isinstance(node, yaml.MappingNode):
        fields = parser.mapping(node, what, None) or {}
        return {key: _value(parser, value_node, f"{what} {key}") for key, (_, value_node) in fields.items()}
    if node.tag == "tag:yaml.org,2002:null":
        parser.problem(node, WRONG_TYPE, f"{what} is null; leave the key out (or write [] for an empty list)")
        return None
    return parser.scalar(node, what, _SCALARS)


__all__ = ["parse_culprit", "parse_env", "parse_pytest_args", "parse_template"]
