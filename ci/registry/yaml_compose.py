"""YAML text -> PyYAML node tree for the precise registry parser, with libyaml when PyYAML has it.

`compose` is the one call that builds a node tree; `node_kind` names a node for messages.
"""

from __future__ import annotations

from typing import Any

import yaml

from ci.registry.rules import describe_scalar

if hasattr(yaml, "CSafeLoader"):
    class CLoader(yaml.CSafeLoader):  # type: ignore[misc,name-defined]
        """libyaml's parser and composer with the safe resolver, memoized: a registry repeats the
        same few scalars (keys, statuses, tiers) thousands of times, and resolving each one runs
        Python regexes."""

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._tags: dict[tuple[Any, Any, Any], str] = {}

        # The safe resolver has no path resolvers, so these per-node hooks have nothing to do.
        def descend_resolver(self, current_node: Any, current_index: Any) -> None:
            pass

        def ascend_resolver(self) -> None:
            pass

        def resolve(self, kind: Any, value: Any, implicit: Any) -> str:
            key = (kind, value, implicit)
            tag = self._tags.get(key)
            if tag is None:
                tag = self._tags[key] = super().resolve(kind, value, implicit)
            return tag
else:  # pragma: no cover - PyYAML built without libyaml
    CLoader = None


def compose(text: str) -> yaml.Node | None:
    """YAML text -> node tree, with libyaml when PyYAML has it (several times faster).

    On a syntax error the pure-Python composer runs again for its more specific messages (the
    marks are the same).
    """
    if CLoader is not None:
        try:
            return yaml.compose(text, Loader=CLoader)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def node_kind(node: yaml.Node) -> str:
    """What a node is, for messages. Never the repr of a collection (it could be huge)."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return describe_scalar(node.value)


__all__ = ["CLoader", "compose", "node_kind"]
