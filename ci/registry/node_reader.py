"""Typed values out of PyYAML nodes, each problem reported at its node (``file:line:col``).

`NodeReader` is the base of the precise parser (`ci.registry.parse.PreciseParser`): ``mapping``,
``scalar``, ``string_list``, ``seconds``, ``check`` and ``problem`` return the value or None, and
append a `Problem` to ``problems`` for every value they refuse. They never raise on bad input.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from ci.registry.model import DUPLICATE_KEY, INVALID_VALUE, MISSING_KEY, NON_POSITIVE, STR_TAG, UNKNOWN_KEY, WRONG_TYPE, Problem
from ci.registry.rules import describe_scalar, number_text_problem, seconds_problem
from ci.registry.yaml_compose import node_kind as _kind


class NodeReader:
    """Reads the nodes of the registry at ``path``; ``problems`` lists every problem found so far."""

    def __init__(self, path: str):
        self.path = path
        self.problems: list[Problem] = []
        self._constructor = yaml.SafeLoader("")

    def problem(self, node: yaml.Node | None, code: str, message: str) -> None:
        line, col = (node.start_mark.line + 1, node.start_mark.column + 1) if node else (0, 0)
        self.problems.append(Problem(self.path, line, col, code, message))

    def mapping(self, node: yaml.Node, what: str, allowed: set[str] | None,
                required: set[str] = frozenset()) -> dict[str, tuple[yaml.Node, yaml.Node]] | None:
        """Keys -> (key node, value node); reports duplicates, unknown and missing keys."""
        if not isinstance(node, yaml.MappingNode):
            self.problem(node, WRONG_TYPE, f"{what} must be a mapping, got {_kind(node)}")
            return None
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                self.problem(key_node, WRONG_TYPE, f"{what}: keys must be scalars")
                continue
            key = key_node.value
            if key in out:
                first = out[key][0].start_mark.line + 1
                self.problem(key_node, DUPLICATE_KEY,
                             f"duplicate key {key!r} in {what} (first defined on line {first})")
                continue
            if allowed is not None and key not in allowed:
                self.problem(key_node, UNKNOWN_KEY,
                             f"unknown key {key!r} in {what}; allowed: {', '.join(sorted(allowed))}")
                continue
            out[key] = (key_node, value_node)
        for key in sorted(required - out.keys()):
            self.problem(node, MISSING_KEY, f"{what} is missing required key {key!r}")
        return out

    def record(self, node: yaml.Node, what: str, allowed: set[str], required: set[str]) -> dict[str, yaml.Node] | None:
        """Keys -> value nodes of a mapping that has every ``required`` key; None (its problems
        reported, as `mapping` does) otherwise."""
        fields = self.mapping(node, what, allowed, required)
        if fields is None or not required <= fields.keys():
            return None
        return {key: value for key, (_, value) in fields.items()}

    def scalar(self, node: yaml.Node, what: str, types: tuple[type, ...]) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            self.problem(node, WRONG_TYPE, f"{what} must be a scalar, got {_kind(node)}")
            return None
        # Call the tag's constructor directly: construct_object's bookkeeping (and its cache of
        # every node) costs more than the conversion.
        if node.tag == STR_TAG:
            value = node.value  # what SafeConstructor.construct_yaml_str returns, minus 3 calls
        else:
            construct = self._constructor.yaml_constructors.get(node.tag)
            if construct is None:
                self.problem(node, WRONG_TYPE, f"{what}: unsupported YAML tag {node.tag!r}")
                return None
            value = construct(self._constructor, node)
        if isinstance(value, bool) and bool not in types:
            value = None  # `yes`/`true` is never a valid number or string here
        if value is None or not isinstance(value, types):
            expected = " or ".join(t.__name__ for t in types)
            self.problem(node, WRONG_TYPE, f"{what} must be {expected}, got {describe_scalar(node.value)}")
            return None
        # YAML also reads 5_0, 0x10, 017, 1:30, 1e3 as numbers (.inf and .nan: the range rules say so)
        if (isinstance(value, int) and not isinstance(value, bool)) or (isinstance(value, float) and math.isfinite(value)):
            message = number_text_problem(node.value, integer=float not in types)
            if message is not None:
                self.problem(node, INVALID_VALUE, f"{what} {message}")
                return None
        return value

    def string_list(self, node: yaml.Node, what: str, *, non_empty: bool = True) -> tuple[str, ...] | None:
        if not isinstance(node, yaml.SequenceNode):
            self.problem(node, WRONG_TYPE, f"{what} must be a list, got {_kind(node)}")
            return None
        items = [self.scalar(item, f"{what} item", (str,)) for item in node.value]
        if any(item is None for item in items):
            return None
        if non_empty and not items:
            self.problem(node, INVALID_VALUE, f"{what} must not be empty")
            return None
        seen: set[str] = set()
        for item_node, item in zip(node.value, items):
            if item in seen:
                self.problem(item_node, DUPLICATE_KEY, f"{what} lists {item!r} twice")
            seen.add(item)
        return tuple(items)

    def seconds(self, node: yaml.Node, what: str) -> float | None:
        value = self.scalar(node, what, (int, float))
        if value is None:
            return None
        message = seconds_problem(value)
        if message is not None:
            self.problem(node, NON_POSITIVE, f"{what} {message}")
            return None
        return value

    def check(self, node: yaml.Node, what: str, message: str | None) -> bool:
        """Report ``message`` (a rule's verdict) at ``node``; True when there was none."""
        if message is not None:
            self.problem(node, INVALID_VALUE, f"{what}: {message}")
        return message is None
