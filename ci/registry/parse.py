"""The precise registry parser: any YAML, every problem with ``file:line:col``.

It works on PyYAML's node tree, so duplicate keys (which ``yaml.safe_load`` silently resolves to
the last value) are caught and each problem points at its node. It is the one place problems come
from: the fast path (`ci.registry.fast_parse`) only ever accepts what this parser accepts.

Anchors and aliases are rejected before any node tree is built: the registry format needs neither,
and an alias graph (``tiers: *x8`` with nested aliases) is exponential to walk.

The node helpers are `ci.registry.node_reader`, composing is `ci.registry.yaml_compose`, one tier
is `ci.registry.tier_parse` and one entry `ci.registry.entry_parse`; this module walks the sections.
"""

from __future__ import annotations

import yaml

from ci.gc_pause import gc_paused
from ci.project import DynamicImport, ProjectConfig
from ci.registry.entry_parse import parse_entry
from ci.registry.model import (
    ANCHOR_OR_ALIAS, INVALID_VALUE, MISSING_KEY, SCHEMA_VERSION, YAML_SYNTAX, Problem, QuarantinePolicy, Registry,
    TestEntry, Tier,
)
from ci.registry.node_reader import NodeReader
from ci.registry.quarantine_parse import parse_policy
from ci.registry.rules import (
    PROJECT_DYNAMIC, PROJECT_FLAG, PROJECT_KEYS, PROJECT_NON_EMPTY, TOP_KEYS, TOP_REQUIRED, dynamic_import_problem,
    entry_path_problem, project_item_problem, project_value,
)
from ci.registry.run_all import normalize_pattern, run_all_problems
from ci.registry.tier_parse import parse_tier
from ci.registry.yaml_compose import CLoader as _CLoader, compose as _compose  # module globals: a test replaces _compose


class PreciseParser(NodeReader):
    """``PreciseParser(text, path).parse()`` -> `Registry` or None; ``problems`` lists every problem."""

    def __init__(self, text: str, path: str):
        super().__init__(path)
        self.text = text

    def parse(self) -> Registry | None:
        try:
            if self.anchors_and_aliases():
                return None
            root = _compose(self.text)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
            detail = " ".join(filter(None, [exc.context, exc.problem]))
            self.problems.append(Problem(self.path, line, col, YAML_SYNTAX, f"YAML syntax error: {detail}"))
            return None
        except yaml.YAMLError as exc:
            self.problems.append(Problem(self.path, 0, 0, YAML_SYNTAX, f"YAML error: {exc}"))
            return None
        if root is None:
            self.problems.append(Problem(self.path, 0, 0, MISSING_KEY, "registry is empty"))
            return None
        top = self.mapping(root, "registry", TOP_KEYS, TOP_REQUIRED)
        if top is None:
            return None

        version = SCHEMA_VERSION
        if "version" in top:
            node = top["version"][1]
            version = self.scalar(node, "version", (int,))
            if version is not None and version != SCHEMA_VERSION:
                self.problem(node, INVALID_VALUE, f"version {version} is not supported (expected {SCHEMA_VERSION})")
        run_all: tuple[str, ...] = ()
        if "run_all_paths" in top:
            node = top["run_all_paths"][1]
            run_all = self.string_list(node, "run_all_paths") or ()
            for index, message in run_all_problems(run_all):
                self.problem(node.value[index], INVALID_VALUE, f"run_all_paths item {message}")
        project = self.project(top["project"][1]) if "project" in top else ProjectConfig()
        tiers = self.tiers(top["tiers"][1]) if "tiers" in top else {}
        tests = self.tests(top["tests"][1], tiers) if "tests" in top else {}
        policy = parse_policy(self, *top["quarantine"]) if "quarantine" in top else QuarantinePolicy()
        if self.problems:
            return None
        return Registry(self.path, tiers, tests, tuple(map(normalize_pattern, run_all)), version, project,
                        quarantine=policy)

    def anchors_and_aliases(self) -> bool:
        """Report every anchor (``&x``) and alias (``*x``) from the event stream, which is linear in
        the text; True if there was one. Texts without ``&`` or ``*`` cannot hold either."""
        if "&" not in self.text and "*" not in self.text:
            return False
        found = False
        for event in yaml.parse(self.text, Loader=_CLoader or yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                what = f"alias '*{event.anchor}'"
            elif getattr(event, "anchor", None) is not None:
                what = f"anchor '&{event.anchor}'"
            else:
                continue
            found = True
            self.problem(event, ANCHOR_OR_ALIAS,
                         f"{what}: anchors and aliases are not allowed in the registry; write the value out")
        return found

    def project(self, node: yaml.Node) -> ProjectConfig | None:
        fields = self.mapping(node, "project", PROJECT_KEYS)
        if fields is None:
            return None
        values: dict[str, object] = {}
        for key, (_, value_node) in fields.items():
            what = f"project {key}"
            if key == PROJECT_FLAG:
                flag = self.scalar(value_node, what, (bool,))
                if flag is not None:
                    values[key] = flag
                continue
            if key == PROJECT_DYNAMIC:
                dynamic = self.dynamic_imports(value_node, what)
                if dynamic is not None:
                    values[key] = dynamic
                continue
            items = self.string_list(value_node, what, non_empty=key in PROJECT_NON_EMPTY)
            if items is None:
                continue
            if all([self.check(item_node, what, project_item_problem(key, item))
                    for item_node, item in zip(value_node.value, items)]):
                values[key] = project_value(key, items)
        return ProjectConfig(**values)  # type: ignore[arg-type]

    def dynamic_imports(self, node: yaml.Node, what: str) -> tuple[DynamicImport, ...] | None:
        entries = self.mapping(node, what, None)
        if entries is None:
            return None
        out = []
        for importer, (key_node, value_node) in entries.items():
            targets = self.string_list(value_node, f"{what} {importer}")
            if targets is not None and self.check(key_node, what, dynamic_import_problem(importer, targets)):
                out.append(DynamicImport(importer, targets))
        return tuple(out)

    def tiers(self, node: yaml.Node) -> dict[str, Tier]:
        entries = self.mapping(node, "tiers", None)
        out: dict[str, Tier] = {}
        for name, (key_node, value_node) in (entries or {}).items():
            if not name.isidentifier():
                self.problem(key_node, INVALID_VALUE,
                             f"tier name {name!r} must be a Python identifier (it becomes a pytest marker)")
                continue
            tier = parse_tier(self, name, key_node, value_node)
            if tier is not None:
                out[name] = tier
        return out

    def tests(self, node: yaml.Node, tiers: dict[str, Tier]) -> dict[str, TestEntry]:
        entries = self.mapping(node, "tests", None)
        out: dict[str, TestEntry] = {}
        for raw_path, (key_node, value_node) in (entries or {}).items():
            message = entry_path_problem(raw_path)
            if message is not None:
                self.problem(key_node, INVALID_VALUE, message)
                continue
            entry = parse_entry(self, raw_path, key_node, value_node, tiers)
            if entry is not None:
                out[raw_path] = entry
        return out


def parse_precise(text: str, path: str) -> tuple[Registry | None, list[Problem]]:
    """``(registry, [])`` or ``(None, sorted problems)`` for any YAML text."""
    parser = PreciseParser(text, path)
    with gc_paused():
        registry = parser.parse()
    return registry, sorted(parser.problems)


__all__ = ["PreciseParser", "parse_precise"]
