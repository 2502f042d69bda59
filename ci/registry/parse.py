"""The precise registry parser: any YAML, every problem with ``file:line:col``.

It works on PyYAML's node tree, so duplicate keys (which ``yaml.safe_load`` silently resolves to
the last value) are caught and each problem points at its node. It is the one place problems come
from: the fast path (`ci.registry.fast_parse`) only ever accepts what this parser accepts.

Anchors and aliases are rejected before any node tree is built: the registry format needs neither,
and an alias graph (``tiers: *x8`` with nested aliases) is exponential to walk.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

from ci.gc_pause import gc_paused
from ci.project import DynamicImport, ProjectConfig
from ci.registry.model import (
    ANCHOR_OR_ALIAS, DUPLICATE_KEY, INVALID_VALUE, MISSING_KEY, MISSING_REASON, NON_POSITIVE, SCHEMA_VERSION,
    STR_TAG, UNKNOWN_KEY, UNKNOWN_TIER, WRONG_TYPE, YAML_SYNTAX, Problem, QuarantinePolicy, Registry, Status,
    TestEntry, Tier, PER_COMMIT, default_backend, normalize_path,
)
from ci.registry.run_all import normalize_pattern, run_all_problems
from ci.registry.quarantine_parse import parse_evidence, parse_nodes, parse_policy
from ci.registry.step_parse import parse_culprit, parse_env, parse_pytest_args, parse_template
from ci.registry.rules import (
    PROJECT_DYNAMIC, PROJECT_FLAG, PROJECT_KEYS, PROJECT_NON_EMPTY, TEST_KEYS, TEST_REQUIRED, TIER_KEYS, TIER_REQUIRED, TOP_KEYS, TOP_REQUIRED,
    arch_problem, backend_problem, buildkite_queue_problem, describe_scalar, device_name_problem, dynamic_import_problem, entry_path_problem, feature_problem, memory_problem,
    number_text_problem, project_item_problem, project_value, reruns_problem, schedule_problem, seconds_problem,
)


class PreciseParser:
    """``PreciseParser(text, path).parse()`` -> `Registry` or None; ``problems`` lists every problem."""

    def __init__(self, text: str, path: str):
        self.text = text
        self.path = path
        self.problems: list[Problem] = []
        self._constructor = yaml.SafeLoader("")

    # -- helpers ---------------------------------------------------------------------------------
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

    # -- sections --------------------------------------------------------------------------------
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
            tier = self.tier(name, key_node, value_node)
            if tier is not None:
                out[name] = tier
        return out

    def tier(self, name: str, key_node: yaml.Node, node: yaml.Node) -> Tier | None:
        what = f"tier {name!r}"
        fields = self.mapping(node, what, TIER_KEYS, TIER_REQUIRED)
        if fields is None or not TIER_REQUIRED <= fields.keys():
            return None
        before = len(self.problems)
        value = lambda key: fields[key][1]  # noqa: E731
        description = self.scalar(value("description"), f"{what} description", (str,))
        labels = self.string_list(value("runner_labels"), f"{what} runner_labels")
        gpu_count = self.scalar(value("gpu_count"), f"{what} gpu_count", (int,))
        if gpu_count is not None and gpu_count < 0:
            self.problem(value("gpu_count"), INVALID_VALUE, f"{what} gpu_count must be >= 0")
            gpu_count = None
        backend, backend_ok = None, True
        if "backend" in fields:
            backend = self.scalar(value("backend"), f"{what} backend", (str,))
            backend_ok = backend is not None and self.check(value("backend"), what, backend_problem(backend))
            backend = backend if backend_ok else None
        arch = self.scalar(value("arch"), f"{what} arch", (str,))
        if arch is not None and not (backend_ok and self.check(value("arch"), what, arch_problem(arch, backend))):
            arch = None  # (a backend that is not one says why already; the arch cannot be judged)
        backend = backend or (default_backend(arch) if arch is not None else None)
        if arch == "cpu" and gpu_count:
            self.problem(value("gpu_count"), INVALID_VALUE, f"{what} has arch 'cpu' but gpu_count {gpu_count}")
        if arch not in (None, "cpu") and gpu_count == 0:
            self.problem(value("gpu_count"), INVALID_VALUE, f"{what} has arch {arch!r} but gpu_count 0")
        features: tuple[str, ...] | None = ()
        if "features" in fields:
            features = self.string_list(value("features"), f"{what} features", non_empty=False)
            for item_node, feature in zip(value("features").value, features or ()):
                if arch is not None and gpu_count is not None and backend is not None:
                    self.check(item_node, what, feature_problem(feature, arch, gpu_count, backend))
        device_name = None
        if "device_name" in fields:
            device_name = self.scalar(value("device_name"), f"{what} device_name", (str,))
            if device_name is not None and arch is not None:
                self.check(value("device_name"), what, device_name_problem(device_name, arch))
        memory = None
        if "min_memory_gib" in fields:
            memory = self.scalar(value("min_memory_gib"), f"{what} min_memory_gib", (int, float))
            if memory is not None and arch is not None:
                self.check(value("min_memory_gib"), what, memory_problem(memory, arch))
        schedule = PER_COMMIT
        if "schedule" in fields:
            schedule = self.scalar(value("schedule"), f"{what} schedule", (str,))
            if schedule is not None:
                self.check(value("schedule"), what, schedule_problem(schedule))
        queue = None
        if "buildkite_queue" in fields:
            queue = self.scalar(value("buildkite_queue"), f"{what} buildkite_queue", (str,))
            if queue is not None:
                self.check(value("buildkite_queue"), what, buildkite_queue_problem(queue))
        template = parse_template(self, value("buildkite"), what) if "buildkite" in fields else None
        env = parse_env(self, value("env"), what) if "env" in fields else {}
        args = parse_pytest_args(self, value("pytest_args"), what) if "pytest_args" in fields else ()
        culprit = parse_culprit(self, value("culprit"), what) if "culprit" in fields else None
        if len(self.problems) != before:
            return None
        return Tier(name, description, labels, gpu_count, arch, features, device_name,
                    None if memory is None else float(memory), line=key_node.start_mark.line + 1, schedule=schedule,
                    backend=backend, buildkite_queue=queue, buildkite=template, env=env, pytest_args=args or (),
                    culprit=culprit)

    def tests(self, node: yaml.Node, tiers: dict[str, Tier]) -> dict[str, TestEntry]:
        entries = self.mapping(node, "tests", None)
        out: dict[str, TestEntry] = {}
        for raw_path, (key_node, value_node) in (entries or {}).items():
            message = entry_path_problem(raw_path)
            if message is not None:
                self.problem(key_node, INVALID_VALUE, message)
                continue
            entry = self.test(raw_path, key_node, value_node, tiers)
            if entry is not None:
                out[raw_path] = entry
        return out

    def test(self, path: str, key_node: yaml.Node, node: yaml.Node, tiers: dict[str, Tier]) -> TestEntry | None:
        what = f"test {path!r}"
        fields = self.mapping(node, what, TEST_KEYS, TEST_REQUIRED)
        if fields is None or not TEST_REQUIRED <= fields.keys():
            return None
        before = len(self.problems)
        value = lambda key: fields[key][1]  # noqa: E731

        test_tiers = self.string_list(value("tiers"), f"{what} tiers")
        for item_node, tier in zip(value("tiers").value, test_tiers or ()):
            if tier not in tiers:
                self.problem(item_node, UNKNOWN_TIER,
                             f"{what} names unknown tier {tier!r}; known tiers: {', '.join(tiers) or '(none)'}")
        est_time = self.seconds(value("est_time"), f"{what} est_time")
        owner = self.scalar(value("owner"), f"{what} owner", (str,))
        status_raw = self.scalar(value("status"), f"{what} status", (str,))
        status = None
        if status_raw is not None:
            try:
                status = Status(status_raw)
            except ValueError:
                self.problem(value("status"), INVALID_VALUE,
                             f"{what} status must be one of {', '.join(s.value for s in Status)}, "
                             f"got {describe_scalar(status_raw)}")
        reason = self.scalar(value("reason"), f"{what} reason", (str,)) if "reason" in fields else None
        issue = self.scalar(value("issue"), f"{what} issue", (str,)) if "issue" in fields else None
        if status in (Status.MANUAL, Status.QUARANTINED) and not (reason or "").strip():
            self.problem(node, MISSING_REASON, f"{what} is {status.value} but gives no 'reason'")
        if status is Status.QUARANTINED and not (issue or "").strip():
            self.problem(node, MISSING_REASON, f"{what} is quarantined but gives no 'issue' link")
        timeout = self.seconds(value("timeout"), f"{what} timeout") if "timeout" in fields else None
        reruns = 0
        if "reruns" in fields:
            reruns = self.scalar(value("reruns"), f"{what} reruns", (int,))
            message = reruns_problem(reruns) if reruns is not None else None
            if message is not None:
                self.problem(value("reruns"), INVALID_VALUE, f"{what} reruns {message}")
        depends_on: tuple[str, ...] | None = ()
        if "depends_on" in fields:
            depends_on = self.string_list(value("depends_on"), f"{what} depends_on", non_empty=False)
        may_skip = self.scalar(value("may_skip"), f"{what} may_skip", (bool,)) if "may_skip" in fields else False
        evidence = None
        if "evidence" in fields:
            if status is not Status.QUARANTINED:
                self.problem(value("evidence"), INVALID_VALUE, f"{what} has evidence but is not quarantined")
            evidence = parse_evidence(self, value("evidence"), what, test_tiers or ())
        nodes = parse_nodes(self, value("quarantined_nodes"), path, test_tiers or ()) \
            if "quarantined_nodes" in fields else ()
        env = parse_env(self, value("env"), what) if "env" in fields else {}
        args = parse_pytest_args(self, value("pytest_args"), what) if "pytest_args" in fields else ()
        if len(self.problems) != before:
            return None
        return TestEntry(
            path=path, tiers=test_tiers, est_time=float(est_time), owner=owner, status=status,
            reason=reason, issue=issue, timeout=None if timeout is None else float(timeout),
            reruns=reruns, depends_on=tuple(normalize_path(p) for p in depends_on),
            line=key_node.start_mark.line + 1, col=key_node.start_mark.column + 1, may_skip=may_skip,
            evidence=evidence, quarantined_nodes=nodes, env=env, pytest_args=args or (),
        )


if hasattr(yaml, "CSafeLoader"):
    class _CLoader(yaml.CSafeLoader):  # type: ignore[misc,name-defined]
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
    _CLoader = None


def _compose(text: str) -> yaml.Node | None:
    """YAML text -> node tree, with libyaml when PyYAML has it (several times faster).

    On a syntax error the pure-Python composer runs again for its more specific messages (the
    marks are the same).
    """
    if _CLoader is not None:
        try:
            return yaml.compose(text, Loader=_CLoader)
        except yaml.YAMLError:
            pass
    return yaml.compose(text, Loader=yaml.SafeLoader)


def _kind(node: yaml.Node) -> str:
    """What a node is, for messages. Never the repr of a collection (it could be huge)."""
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    return describe_scalar(node.value)


def parse_precise(text: str, path: str) -> tuple[Registry | None, list[Problem]]:
    """``(registry, [])`` or ``(None, sorted problems)`` for any YAML text."""
    parser = PreciseParser(text, path)
    with gc_paused():
        registry = parser.parse()
    return registry, sorted(parser.problems)


__all__ = ["PreciseParser", "parse_precise"]
