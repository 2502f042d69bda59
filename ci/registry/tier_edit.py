"""Edit registry.yaml text for `ci tiers move`: set the ``tiers:`` list of chosen entries, changing
only those characters.

Contract: `set_entry_tiers(text, new_tiers, path)` returns ``text`` with each named entry's
``tiers`` value replaced by a one-line flow list (``tiers: [gpu_h100]``); a block-style list
(``tiers:`` then ``- cpu`` lines) becomes that one line. Comments, order, quoting and every other
entry stay byte for byte. The result is re-parsed and must give exactly those tiers, else
ValueError; the text must be a valid registry before and after, else `RegistryError`. A path
without a ``tiers`` key in the file is a KeyError naming it. The file on disk is never touched
here: the caller writes it through `ci.registry.edit_lock`. `apply_edits` (character spans
replaced, the result re-parsed) is shared with `ci durations --write`'s rewrite.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import yaml

from ci.registry.files import parse_registry
from ci.registry.model import Registry, RegistryError
from ci.registry.writer import flow_list


def set_entry_tiers(text: str, new_tiers: Mapping[str, Sequence[str]], path: str = "registry.yaml") -> str:
    """``text`` with ``tests.<p>.tiers`` set to ``new_tiers[p]`` for each ``p`` (see the module docstring)."""
    registry, problems = parse_registry(text, path)
    if registry is None:
        raise RegistryError(problems)
    tiers_nodes: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for key, value in yaml.compose(text, Loader=yaml.SafeLoader).value:
        if key.value == "tests" and isinstance(value, yaml.MappingNode):
            for test_key, test_value in value.value:
                tiers_nodes.update({test_key.value: (field_key, field_value) for field_key, field_value in test_value.value
                                    if field_key.value == "tiers"})
    missing = sorted(set(new_tiers) - tiers_nodes.keys())
    if missing:
        raise KeyError(f"{path}: no tiers entry for {', '.join(missing)}")
    edits: list[tuple[int, int, str]] = []
    for test, tiers in new_tiers.items():
        key, node = tiers_nodes[test]
        if node.flow_style or not node.value:
            edits.append((node.start_mark.index, node.end_mark.index, flow_list(tiers)))
        else:
            # A block list's node ends where the next key starts; stop at its last item instead.
            edits.append((key.end_mark.index, node.value[-1].end_mark.index, ": " + flow_list(tiers)))
    out, after = apply_edits(text, edits, path)
    for test, tiers in new_tiers.items():
        if after.tests[test].tiers != tuple(tiers):
            raise ValueError(f"{path}: setting the tiers of {test} did not take effect")
    return out


def apply_edits(text: str, edits: Sequence[tuple[int, int, str]], path: str) -> tuple[str, Registry]:
    """``text`` with each ``(start, end, replacement)`` span replaced (spans must not overlap), and
    the registry it parses to; `RegistryError` if it is not a valid registry."""
    out = text
    for start, end, replacement in sorted(edits, key=lambda edit: -edit[0]):
        out = out[:start] + replacement + out[end:]
    after, problems = parse_registry(out, path)
    if after is None:
        raise RegistryError(problems)
    return out, after
