"""Edit registry.yaml text for `ci quarantine`: quarantine or release a file or single tests,
changing only those characters.

Contract: `edit_quarantines(text, path, edits)` returns the new text. Each edit touches one entry:

- `QuarantineFile`: ``status`` becomes ``quarantined``; ``reason`` and ``issue`` are set (their
  values replaced where the keys exist, else new lines), and an ``evidence:`` block is added;
- `ReleaseFile`: ``status`` becomes ``active`` and the ``reason``, ``issue`` and ``evidence``
  lines go (only an entry with ``evidence``, that is one `ci quarantine` wrote, is released);
- `QuarantineNodes`: items are appended to ``quarantined_nodes:`` (the key is added when absent);
- `ReleaseNodes`: those items' lines go, and the key with them when none is left.

Everything else (comments, blank lines, quoting, order, other entries) stays byte for byte. The
result must parse to exactly the registry the edits describe, else ValueError and nothing is
returned (the registry on disk is never touched here: the caller writes it atomically).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence, Union

import yaml

from ci.registry.model import (QuarantineEvidence, QuarantinedNode, Registry, RegistryError, Status, TestEntry,
                               yaml_scalar)
from ci.registry.parse import parse_precise


@dataclass(frozen=True)
class QuarantineFile:
    path: str
    reason: str
    issue: str
    evidence: QuarantineEvidence


@dataclass(frozen=True)
class ReleaseFile:
    path: str


@dataclass(frozen=True)
class QuarantineNodes:
    path: str
    nodes: tuple[QuarantinedNode, ...]


@dataclass(frozen=True)
class ReleaseNodes:
    path: str
    nodes: frozenset[str]


Edit = Union[QuarantineFile, ReleaseFile, QuarantineNodes, ReleaseNodes]


def _decimal(value: float) -> str:
    """A rate as a plain decimal the registry accepts (4 places, trailing zeros dropped)."""
    text = f"{value:.4f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def render_evidence(evidence: QuarantineEvidence, indent: str) -> list[str]:
    """The ``evidence:`` block, its key at ``indent``."""
    inner = indent + "  "
    return [f"{indent}evidence:",
            f"{inner}tier: {yaml_scalar(evidence.tier)}",
            f"{inner}score: {_decimal(evidence.score)}",
            f"{inner}interval: [{_decimal(evidence.interval[0])}, {_decimal(evidence.interval[1])}]",
            f"{inner}runs: {evidence.runs}",
            f"{inner}failures: {evidence.failures}",
            f"{inner}trials: {evidence.trials}",
            f"{inner}fingerprint: {yaml_scalar(evidence.fingerprint) if evidence.fingerprint else chr(34) * 2}",
            f"{inner}example: {yaml_scalar(evidence.example) if evidence.example else chr(34) * 2}",
            f"{inner}since: {yaml_scalar(evidence.since)}"]


def render_node(node: QuarantinedNode, dash_indent: str) -> list[str]:
    """One ``quarantined_nodes`` item, its ``-`` at ``dash_indent``."""
    lines = [f"{dash_indent}- node: {yaml_scalar(node.node)}", f"{dash_indent}  reason: {yaml_scalar(node.reason)}"]
    if node.evidence is not None:
        lines += render_evidence(node.evidence, dash_indent + "  ")
    return lines


def _last_scalar_end(node: yaml.Node) -> int:
    """Where the last scalar (or flow collection) inside ``node`` ends: a block collection's own
    end mark lies past the comments and blank lines that follow it."""
    while isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and not node.flow_style and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, yaml.MappingNode) else last
    return node.end_mark.index


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def _line_end(text: str, index: int) -> int:
    """Just past the newline ending the line that holds ``index`` (its trailing comment kept)."""
    end = text.find("\n", index)
    return len(text) if end < 0 else end + 1


class _Editor:
    def __init__(self, text: str, path: str):
        self.text = text if text.endswith("\n") else text + "\n"
        self.path = path
        self.changes: list[tuple[int, int, str]] = []
        root = yaml.compose(self.text, Loader=yaml.SafeLoader)
        tests = next(v for k, v in root.value if k.value == "tests")
        self.entries = {k.value: v for k, v in tests.value}

    def entry(self, path: str) -> tuple[yaml.MappingNode, dict[str, tuple[yaml.Node, yaml.Node]], str]:
        node = self.entries[path]
        if not isinstance(node, yaml.MappingNode) or node.flow_style:
            raise ValueError(f"{self.path}: the entry {path} (line {node.start_mark.line + 1}) is not a block "
                             f"mapping; edit it by hand")
        pairs = {k.value: (k, v) for k, v in node.value}
        return node, pairs, " " * node.value[0][0].start_mark.column

    def replace_value(self, value: yaml.Node, new: str) -> None:
        self.changes.append((value.start_mark.index, value.end_mark.index, new))

    def remove_key(self, key: yaml.Node, value: yaml.Node) -> None:
        start = _line_start(self.text, key.start_mark.index)
        self.changes.append((start, _line_end(self.text, _last_scalar_end(value)), ""))

    def insert_at_end(self, node: yaml.MappingNode, lines: list[str]) -> None:
        at = _line_end(self.text, _last_scalar_end(node))
        self.changes.append((at, at, "".join(line + "\n" for line in lines)))

    def quarantine_file(self, edit: QuarantineFile) -> None:
        node, pairs, indent = self.entry(edit.path)
        self.replace_value(pairs["status"][1], "quarantined")
        added: list[str] = []
        for key, value in (("reason", edit.reason), ("issue", edit.issue)):
            if key in pairs:
                self.replace_value(pairs[key][1], yaml_scalar(value))
            else:
                added.append(f"{indent}{key}: {yaml_scalar(value)}")
        if "evidence" in pairs:
            self.remove_key(*pairs["evidence"])
        self.insert_at_end(node, added + render_evidence(edit.evidence, indent))

    def release_file(self, edit: ReleaseFile) -> None:
        _, pairs, _ = self.entry(edit.path)
        self.replace_value(pairs["status"][1], "active")
        for key in ("reason", "issue", "evidence"):
            if key in pairs:
                self.remove_key(*pairs[key])

    def quarantine_nodes(self, edit: QuarantineNodes) -> None:
        node, pairs, indent = self.entry(edit.path)
        existing = pairs.get("quarantined_nodes")
        if existing is None:
            self.insert_at_end(node, [f"{indent}quarantined_nodes:"]
                               + [line for n in edit.nodes for line in render_node(n, indent + "  ")])
            return
        items = existing[1]
        if not isinstance(items, yaml.SequenceNode) or items.flow_style or not items.value:
            raise ValueError(f"{self.path}: quarantined_nodes of {edit.path} (line {items.start_mark.line + 1}) "
                             f"is not a block list; edit it by hand")
        first = items.value[0].start_mark.index
        dash = self.text.rfind("-", _line_start(self.text, first), first)
        dash_indent = " " * (dash - _line_start(self.text, first))
        at = _line_end(self.text, _last_scalar_end(items))
        self.changes.append((at, at, "".join(line + "\n" for n in edit.nodes for line in render_node(n, dash_indent))))

    def release_nodes(self, edit: ReleaseNodes) -> None:
        _, pairs, _ = self.entry(edit.path)
        key, items = pairs["quarantined_nodes"]
        kept = [i for i in items.value if _node_of(i) not in edit.nodes]
        if not kept:
            self.remove_key(key, items)
            return
        for item in items.value:
            if _node_of(item) in edit.nodes:
                start = _line_start(self.text, item.start_mark.index)
                self.changes.append((start, _line_end(self.text, _last_scalar_end(item)), ""))


def _node_of(item: yaml.Node) -> str | None:
    if isinstance(item, yaml.MappingNode):
        for k, v in item.value:
            if k.value == "node" and isinstance(v, yaml.ScalarNode):
                return v.value
    return None


def expected_entry(entry: TestEntry, edit: Edit) -> TestEntry:
    """What ``entry`` must read as after ``edit`` (positions aside)."""
    if isinstance(edit, QuarantineFile):
        return dataclasses.replace(entry, status=Status.QUARANTINED, reason=edit.reason, issue=edit.issue,
                                   evidence=edit.evidence)
    if isinstance(edit, ReleaseFile):
        return dataclasses.replace(entry, status=Status.ACTIVE, reason=None, issue=None, evidence=None)
    if isinstance(edit, QuarantineNodes):
        return dataclasses.replace(entry, quarantined_nodes=entry.quarantined_nodes + edit.nodes)
    return dataclasses.replace(entry, quarantined_nodes=tuple(q for q in entry.quarantined_nodes
                                                              if q.node not in edit.nodes))


def _sans_positions(entry: TestEntry) -> TestEntry:
    return dataclasses.replace(entry, line=0, col=0, quarantined_nodes=tuple(
        dataclasses.replace(q, line=0) for q in entry.quarantined_nodes))


def edit_quarantines(text: str, path: str, edits: Sequence[Edit]) -> str:
    """``text`` with ``edits`` applied (see the module docstring); ValueError if the result would
    not read as exactly that, `RegistryError` if ``text`` does not parse."""
    before, problems = parse_precise(text, path)
    if before is None:
        raise RegistryError(problems)
    if len({e.path for e in edits}) != len(edits):
        raise ValueError("one edit per entry")
    editor = _Editor(text, path)
    expected: dict[str, TestEntry] = dict(before.tests)
    for edit in edits:
        if edit.path not in before.tests:
            raise ValueError(f"{path}: {edit.path} is not registered")
        getattr(editor, _METHODS[type(edit)])(edit)
        expected[edit.path] = expected_entry(before.tests[edit.path], edit)
    out = editor.text
    for start, end, new in sorted(editor.changes, reverse=True):
        out = out[:start] + new + out[end:]
    after, problems = parse_precise(out, path)
    if after is None:
        raise ValueError(f"{path}: the quarantine edit would break the registry: {problems[0]}")
    if not _same(after, before, expected):
        raise ValueError(f"{path}: cannot make the quarantine edit without changing anything else; edit it by hand")
    return out


def _same(after: Registry, before: Registry, expected: dict[str, TestEntry]) -> bool:
    if list(after.tests) != list(expected) or after.tiers.keys() != before.tiers.keys():
        return False
    if dataclasses.replace(after.quarantine, line=0) != dataclasses.replace(before.quarantine, line=0):
        return False
    return all(_sans_positions(after.tests[p]) == _sans_positions(e) for p, e in expected.items())


_METHODS = {QuarantineFile: "quarantine_file", ReleaseFile: "release_file", QuarantineNodes: "quarantine_nodes",
            ReleaseNodes: "release_nodes"}

__all__ = ["Edit", "QuarantineFile", "QuarantineNodes", "ReleaseFile", "ReleaseNodes", "edit_quarantines",
           "render_evidence", "render_node"]
