"""registry.yaml -> typed entries: the one place that reads the registry.

Every consumer (the pytest plugin, lint, plan, the rerun bot) gets `Registry`, `Tier` and
`TestEntry` objects from here and never touches raw YAML. Parsing works on PyYAML's node tree so
that each problem carries ``file:line:col`` and duplicate keys (which ``yaml.safe_load`` silently
resolves to the last value) are caught.

`parse_registry` collects *all* problems (lint wants every one); `load_registry` raises
`RegistryError` holding them.
"""

from __future__ import annotations

import contextlib
import enum
import fnmatch
import functools
import gc
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Iterable, Iterator

import yaml

from ci.limits import MAX_SECONDS
from ci.project import ProjectConfig

REGISTRY_FILENAME = "registry.yaml"
SCHEMA_VERSION = 1


# ---------------------------------------------------------------------------------------------
# Problems
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class Problem:
    """One finding, located in a file. ``line`` and ``col`` are 1-based; 0 means 'whole file'."""

    path: str
    line: int
    col: int
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.code} {self.message}"


class RegistryError(ValueError):
    """The registry could not be loaded; ``problems`` lists every reason."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("invalid registry:\n" + "\n".join(f"  {p}" for p in problems))


# Problem codes produced while parsing. Lint adds its own (see ci.lint).
YAML_SYNTAX = "R001"
DUPLICATE_KEY = "R002"
UNKNOWN_KEY = "R003"
MISSING_KEY = "R004"
WRONG_TYPE = "R005"
UNKNOWN_TIER = "R006"
NON_POSITIVE = "R007"
MISSING_REASON = "R008"
INVALID_VALUE = "R009"


# ---------------------------------------------------------------------------------------------
# Typed entries
# ---------------------------------------------------------------------------------------------

class Status(str, enum.Enum):
    ACTIVE = "active"
    MANUAL = "manual"            # kept, never scheduled; needs a reason
    QUARANTINED = "quarantined"  # known broken; needs a reason and an issue link


@dataclass(frozen=True)
class Tier:
    """A class of CI machine. The name is also the pytest marker (``pytest -m gpu_b200``).

    ``arch`` is ``"cpu"`` or a CUDA SM name such as ``"sm_90"``; ``gpu_count`` is how many GPUs a
    job on this tier gets; ``features`` names hardware capabilities tests may rely on
    (for example ``fp4`` for native FP4 tensor cores on B200).
    """

    name: str
    description: str
    runner_labels: tuple[str, ...]
    gpu_count: int
    arch: str
    features: tuple[str, ...] = ()
    line: int = 0

    @property
    def needs_gpu(self) -> bool:
        return self.gpu_count > 0


@dataclass(frozen=True)
class TestEntry:
    """One registered test file.

    ``path`` is repo-relative POSIX. ``est_time`` and ``timeout`` are seconds for the whole file.
    ``depends_on`` holds repo-relative path prefixes (``fp4kv/quant/``) or exact files whose change
    selects this test; the test file itself always counts.
    """

    __test__ = False  # not a pytest test class, despite the name

    path: str
    tiers: tuple[str, ...]
    est_time: float
    owner: str
    status: Status = Status.ACTIVE
    reason: str | None = None
    issue: str | None = None
    timeout: float | None = None
    reruns: int = 0
    depends_on: tuple[str, ...] = ()
    line: int = 0
    col: int = 0

    @property
    def basename(self) -> str:
        return self.path.rsplit("/", 1)[-1]  # path is normalized POSIX

    @property
    def is_active(self) -> bool:
        return self.status is Status.ACTIVE


@dataclass(frozen=True)
class Registry:
    """The whole registry. ``tests`` is keyed by repo-relative path, in file order."""

    path: str
    tiers: dict[str, Tier]
    tests: dict[str, TestEntry]
    run_all_paths: tuple[str, ...] = ()
    version: int = SCHEMA_VERSION
    project: ProjectConfig = field(default_factory=ProjectConfig)
    _by_basename: dict[str, list[TestEntry]] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_basename = self._by_basename
        for entry in self.tests.values():  # entry.basename, inlined: 10,000 property calls add up
            by_basename.setdefault(entry.path.rsplit("/", 1)[-1], []).append(entry)

    def entry(self, path: str) -> TestEntry | None:
        """The entry for a repo-relative path, or None."""
        return self.tests.get(normalize_path(path))

    def by_basename(self, name: str) -> list[TestEntry]:
        """Every entry whose file name is ``name`` (more than one is a lint error)."""
        return list(self._by_basename.get(name, ()))

    def tests_for_tier(self, tier: str, *, include_inactive: bool = False) -> list[TestEntry]:
        return [
            e for e in self.tests.values()
            if tier in e.tiers and (include_inactive or e.is_active)
        ]


def normalize_path(path: str) -> str:
    """Repo-relative POSIX form: ``./tests//a.py`` -> ``tests/a.py``, ``ci/`` -> ``ci``."""
    if not ("\\" in path or "//" in path or "/./" in path or path.startswith("./")
            or path.endswith(("/", "/.")) or path in ("", ".")):
        return path  # already normal; pathlib costs ~30 us a call, which adds up at 10,000 entries
    return PurePosixPath(path.replace("\\", "/")).as_posix().removeprefix("./")


def yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar for registry.yaml snippets: plain when that reads back as the same
    string, else double-quoted (``@team`` must be quoted: ``@`` cannot start a plain scalar)."""
    plain = (text and text[0] not in "@`!&*|>'\"%#{}[],?:-" and ": " not in text and " #" not in text
             and text == text.strip() and _plain_tag(text) == _STR_TAG)  # not `true`, `1`, `~`, ...
    return text if plain else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def path_is_under(path: str, prefix: str) -> bool:
    """True if repo-relative ``path`` is ``prefix`` itself or lies inside directory ``prefix``.

    This is the one matching rule for ``depends_on`` and ``run_all_paths``: ``fp4kv`` covers
    ``fp4kv/quant/x.py`` but not ``fp4kv_extra/x.py``.
    """
    path, prefix = normalize_path(path), normalize_path(prefix)
    return prefix in ("", ".") or path == prefix or path.startswith(prefix + "/")


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

_STR_TAG = "tag:yaml.org,2002:str"
_TOP_KEYS = {"version", "run_all_paths", "tiers", "tests"}
_TIER_KEYS = {"description", "runner_labels", "gpu_count", "arch", "features"}
_TIER_REQUIRED = {"description", "runner_labels", "gpu_count", "arch"}
_TEST_KEYS = {"tiers", "est_time", "owner", "status", "reason", "issue", "timeout", "reruns",
              "depends_on"}
_TEST_REQUIRED = {"tiers", "est_time", "owner", "status"}


class _Parser:
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
        if node.tag == _STR_TAG:
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
            self.problem(node, WRONG_TYPE, f"{what} must be {expected}, got {node.value!r}")
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

    def positive(self, node: yaml.Node, what: str) -> float | None:
        value = self.scalar(node, what, (int, float))
        if value is not None and not 0 < value < math.inf:  # also rejects .nan and .inf
            self.problem(node, NON_POSITIVE, f"{what} must be a finite number > 0 seconds, got {node.value}")
            return None
        return value

    # -- sections --------------------------------------------------------------------------------
    def parse(self) -> Registry | None:
        try:
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
        top = self.mapping(root, "registry", _TOP_KEYS, {"version", "tiers", "tests"})
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
            run_all = self.string_list(top["run_all_paths"][1], "run_all_paths") or ()
        tiers = self.tiers(top["tiers"][1]) if "tiers" in top else {}
        tests = self.tests(top["tests"][1], tiers) if "tests" in top else {}
        if self.problems:
            return None
        return Registry(self.path, tiers, tests, tuple(normalize_path(p) for p in run_all), version)

    def tiers(self, node: yaml.Node) -> dict[str, Tier]:
        entries = self.mapping(node, "tiers", None)
        out: dict[str, Tier] = {}
        for name, (key_node, value_node) in (entries or {}).items():
            if not name.isidentifier():
                self.problem(key_node, INVALID_VALUE,
                             f"tier name {name!r} must be a Python identifier (it becomes a pytest marker)")
                continue
            what = f"tier {name!r}"
            fields = self.mapping(value_node, what, _TIER_KEYS, _TIER_REQUIRED)
            if fields is None or not _TIER_REQUIRED <= fields.keys():
                continue
            description = self.scalar(fields["description"][1], f"{what} description", (str,))
            labels = self.string_list(fields["runner_labels"][1], f"{what} runner_labels")
            gpu_count = self.scalar(fields["gpu_count"][1], f"{what} gpu_count", (int,))
            if gpu_count is not None and gpu_count < 0:
                self.problem(fields["gpu_count"][1], INVALID_VALUE, f"{what} gpu_count must be >= 0")
                gpu_count = None
            arch = self.scalar(fields["arch"][1], f"{what} arch", (str,))
            if arch is not None and not (arch == "cpu" or _is_sm(arch)):
                self.problem(fields["arch"][1], INVALID_VALUE,
                             f"{what} arch must be 'cpu' or 'sm_<major><minor>' such as 'sm_90', got {arch!r}")
                arch = None
            if arch == "cpu" and gpu_count:
                self.problem(fields["gpu_count"][1], INVALID_VALUE, f"{what} has arch 'cpu' but gpu_count {gpu_count}")
            if arch not in (None, "cpu") and gpu_count == 0:
                self.problem(fields["gpu_count"][1], INVALID_VALUE, f"{what} has arch {arch!r} but gpu_count 0")
            features: tuple[str, ...] | None = ()
            if "features" in fields:
                features = self.string_list(fields["features"][1], f"{what} features", non_empty=False)
            if None in (description, labels, gpu_count, arch, features):
                continue
            out[name] = Tier(name, description, labels, gpu_count, arch, features,
                             line=key_node.start_mark.line + 1)
        return out

    def tests(self, node: yaml.Node, tiers: dict[str, Tier]) -> dict[str, TestEntry]:
        entries = self.mapping(node, "tests", None)
        out: dict[str, TestEntry] = {}
        for raw_path, (key_node, value_node) in (entries or {}).items():
            path = normalize_path(raw_path)
            if path != raw_path or path.startswith("/") or ".." in path.split("/"):
                self.problem(key_node, INVALID_VALUE,
                             f"test path {raw_path!r} must be repo-relative POSIX without '.', '..' or '//'")
                continue
            if path in out:
                self.problem(key_node, DUPLICATE_KEY, f"test {path!r} is registered twice")
                continue
            entry = self.test(path, key_node, value_node, tiers)
            if entry is not None:
                out[path] = entry
        return out

    def test(self, path: str, key_node: yaml.Node, node: yaml.Node, tiers: dict[str, Tier]) -> TestEntry | None:
        what = f"test {path!r}"
        fields = self.mapping(node, what, _TEST_KEYS, _TEST_REQUIRED)
        if fields is None or not _TEST_REQUIRED <= fields.keys():
            return None
        before = len(self.problems)
        value = lambda key: fields[key][1]  # noqa: E731

        test_tiers = self.string_list(value("tiers"), f"{what} tiers")
        for item_node, tier in zip(value("tiers").value, test_tiers or ()):
            if tier not in tiers:
                self.problem(item_node, UNKNOWN_TIER,
                             f"{what} names unknown tier {tier!r}; known tiers: {', '.join(tiers) or '(none)'}")
        est_time = self.positive(value("est_time"), f"{what} est_time")
        owner = self.scalar(value("owner"), f"{what} owner", (str,))
        status_raw = self.scalar(value("status"), f"{what} status", (str,))
        status = None
        if status_raw is not None:
            try:
                status = Status(status_raw)
            except ValueError:
                self.problem(value("status"), INVALID_VALUE,
                             f"{what} status must be one of {', '.join(s.value for s in Status)}, got {status_raw!r}")
        reason = self.scalar(value("reason"), f"{what} reason", (str,)) if "reason" in fields else None
        issue = self.scalar(value("issue"), f"{what} issue", (str,)) if "issue" in fields else None
        if status in (Status.MANUAL, Status.QUARANTINED) and not (reason or "").strip():
            self.problem(node, MISSING_REASON, f"{what} is {status.value} but gives no 'reason'")
        if status is Status.QUARANTINED and not (issue or "").strip():
            self.problem(node, MISSING_REASON, f"{what} is quarantined but gives no 'issue' link")
        timeout = self.positive(value("timeout"), f"{what} timeout") if "timeout" in fields else None
        reruns = 0
        if "reruns" in fields:
            reruns = self.scalar(value("reruns"), f"{what} reruns", (int,))
            if reruns is not None and reruns < 0:
                self.problem(value("reruns"), INVALID_VALUE, f"{what} reruns must be >= 0")
        depends_on: tuple[str, ...] | None = ()
        if "depends_on" in fields:
            depends_on = self.string_list(value("depends_on"), f"{what} depends_on", non_empty=False)
        if len(self.problems) != before:
            return None
        return TestEntry(
            path=path, tiers=test_tiers, est_time=float(est_time), owner=owner, status=status,
            reason=reason, issue=issue, timeout=None if timeout is None else float(timeout),
            reruns=reruns, depends_on=tuple(normalize_path(p) for p in depends_on),
            line=key_node.start_mark.line + 1, col=key_node.start_mark.column + 1,
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


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC (restoring its state after). Bulk parsing (a 10,000-entry registry,
    a tree of syntax trees) allocates one container per node, and the repeated collections this
    triggers cost more than the parse itself; nothing cyclic is freed meanwhile."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _kind(node: yaml.Node) -> str:
    return {yaml.MappingNode: "a mapping", yaml.SequenceNode: "a list"}.get(type(node), f"{node.value!r}")


def _is_sm(arch: str) -> bool:
    return arch.startswith("sm_") and arch[3:].isdigit() and len(arch) >= 5


def sm_capability(arch: str) -> tuple[int, int]:
    """``"sm_90"`` -> ``(9, 0)``, ``"sm_100"`` -> ``(10, 0)`` (the CUDA compute capability)."""
    if not _is_sm(arch):
        raise ValueError(f"not a CUDA SM architecture: {arch!r}")
    digits = arch[3:]
    return int(digits[:-1]), int(digits[-1])


# ---------------------------------------------------------------------------------------------
# Fast path: a line scanner for the plain block style the registry is written in
# ---------------------------------------------------------------------------------------------
#
# Composing YAML nodes costs ~0.1 ms per registry entry even with libyaml (a Python node object
# per scalar, a resolver call per node), which is most of `python -m ci lint` at 10,000 entries.
# The registry is written in a small subset of YAML: block mappings and block sequences by
# indentation, one `key: value` per line, values that are plain or simply quoted scalars or
# one-line flow lists. `_parse_fast` reads exactly that subset, line by line, and builds the same
# `Registry` as `_Parser`. It never reports a problem: on any line outside the subset, and on
# anything `_Parser` would report, it gives up (`_NotSimple`) and `parse_registry` takes the
# precise path, so every message, code and position comes from one place.
#
# Scalar types come from PyYAML's own resolver (`_plain_tag`), so `yes`, `~`, `0x1f` or
# `2024-01-01` mean what they mean to YAML; numbers are accepted only in forms whose value is
# plainly what `SafeConstructor` builds (`12`, `2.5`), anything else takes the precise path.


class _NotSimple(Exception):
    """The text is outside the fast path's subset, or has a problem: take the precise path."""


class _Block(dict):
    """A block mapping from the fast scanner: key -> value, plus where its own key is (1-based)."""

    __slots__ = ("line", "col")

    def __init__(self, line: int, col: int) -> None:  # dict.__new__ made it empty already
        self.line = line
        self.col = col


# Characters the fast path accepts: printable, no tab, no CR, no BOM, no NEL/LS/PS (which YAML
# counts as line breaks): with those, `str.split("\n")` numbers lines as libyaml does.
_ODD_CHAR = re.compile("[^\n -~\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]")
# `indent key: rest`, `indent key:` or `indent - rest`. Keys are plain, ASCII, on one line and
# well under libyaml's 1024-character limit for simple keys.
_LINE = re.compile(r"( *)(?:([A-Za-z0-9_][A-Za-z0-9_./-]{0,254}):(?: +|$)|- +)(.*)")
_COMMENT = r"(?: +(?:#.*)?)?"  # trailing spaces, a comment
_DOUBLE = re.compile(r'"([^"\\]*)"' + _COMMENT)  # no escapes
_SINGLE = re.compile(r"'([^']*)'" + _COMMENT)    # no '' escapes
_FLOW_ITEM = r"""(?:"[^"\\]*"|'[^']*'|[A-Za-z0-9_./][A-Za-z0-9_./@+=-]*)"""
_FLOW = re.compile(rf"\[ *((?:{_FLOW_ITEM} *, *)*{_FLOW_ITEM})? *\]" + _COMMENT)
_FLOW_ITEMS = re.compile(r"""("[^"\\]*"|'[^']*')|([A-Za-z0-9_./][A-Za-z0-9_./@+=-]*)""")  # (quoted, plain)
_PLAIN_START = re.compile(r"""[^-?:,\[\]{}#&*!|>'"%@` ]""")  # not a YAML indicator
_INT = re.compile(r"0|[1-9][0-9]{0,17}")           # int(text) == SafeConstructor's value
_FLOAT = re.compile(r"[0-9]{1,17}\.[0-9]{1,17}")  # float(text) == SafeConstructor's value
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"


_RESOLVER = yaml.resolver.Resolver()  # the resolver SafeLoader and CSafeLoader use


@functools.lru_cache(maxsize=4096)
def _plain_tag(value: str) -> str:
    """The tag YAML gives the untagged plain scalar ``value`` (registries repeat a few hundred)."""
    return _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))


def _plain(text: str) -> str | int | float:
    """A plain scalar -> its value; `_NotSimple` unless it is a string or a simple number."""
    tag = _plain_tag(text)
    if tag == _STR_TAG:
        return text
    if tag == _INT_TAG and _INT.fullmatch(text):
        return int(text)
    if tag == _FLOAT_TAG and _FLOAT.fullmatch(text):
        return float(text)
    raise _NotSimple


def _value(rest: str) -> Any:
    """What follows ``key: `` -> its value, or None when it is empty (a block follows)."""
    first = rest[:1]
    if first == "" or first == "#":
        return None
    if first == '"' or first == "'":
        match = (_DOUBLE if first == '"' else _SINGLE).fullmatch(rest)
        if match is None:
            raise _NotSimple
        return match[1]
    if first == "[":
        match = _FLOW.fullmatch(rest)
        if match is None:
            raise _NotSimple
        if match[1] is None:
            return ()
        return tuple([_plain(plain) if plain else quoted[1:-1] for quoted, plain in _FLOW_ITEMS.findall(match[1])])
    return _plain_block_scalar(rest)


def _plain_block_scalar(rest: str) -> str | int | float:
    """A plain scalar value on a ``key:`` line, up to a comment."""
    cut = rest.find(" #")  # a comment; a plain scalar cannot contain " #"
    text = (rest if cut < 0 else rest[:cut]).rstrip(" ")
    if not _PLAIN_START.match(text) or ": " in text or text.endswith(":"):
        raise _NotSimple  # an indicator (anchor, tag, block scalar, ...) or a nested mapping
    return _plain(text)


def _has_odd_char(text: str) -> bool:
    """True if ``text`` has a character `_ODD_CHAR` matches. For ASCII text, the characters
    ``isprintable`` rejects besides the newline are exactly those (twice as fast as the regex)."""
    if text.isascii():
        return not text.replace("\n", "").isprintable()
    return _ODD_CHAR.search(text) is not None


_SKIP = ("blank or comment",)


def _scan_line(line: str) -> tuple[int, str | None, Any] | tuple[str]:
    """One line -> ``(indent, key, value)`` (key None for ``- item``; value None when a block
    follows), or `_SKIP` for a blank or comment line; `_NotSimple` outside the subset."""
    match = _LINE.match(line)
    if match is None:
        stripped = line.lstrip(" ")
        if stripped and stripped[0] != "#":
            raise _NotSimple
        return _SKIP
    spaces, key, rest = match.groups()
    value = _value(rest)
    if key is None and (value is None or type(value) is tuple):
        raise _NotSimple  # a null or nested sequence item
    return len(spaces), key, value


def _scan(text: str) -> _Block:
    """The subset's YAML text -> nested `_Block` / list / tuple / scalar values; `_NotSimple`
    otherwise.

    A key with nothing after it opens a block: a mapping or a sequence indented further. Anything
    else (indentless sequences, multi-line scalars, flow mappings, anchors, document markers,
    null values, duplicate keys, odd indentation) is `_NotSimple`.
    """
    if _has_odd_char(text):
        raise _NotSimple
    root = indented = _Block(0, 0)  # the innermost open mapping, and its indentation:
    indent_now = 0
    enclosing: list[tuple[int, _Block]] = []            # the open mappings around it
    pending: tuple[int, _Block, str, int] | None = None  # (indent, mapping, key, line) awaiting a block
    sequence: tuple[int, list[Any]] | None = None        # the open block sequence
    seen: dict[str, Any] = {}  # line -> _scan_line(line): most registry lines repeat verbatim
    for number, line in enumerate(text.split("\n"), 1):
        parsed = seen.get(line)
        if parsed is None:
            parsed = seen[line] = _scan_line(line)
        if parsed is _SKIP:
            continue
        indent, key, value = parsed
        if key is None:  # "- item"
            if pending is not None:
                if indent <= pending[0]:
                    raise _NotSimple
                sequence = (indent, [])
                pending[1][pending[2]] = sequence[1]
                pending = None
            elif sequence is None or indent != sequence[0]:
                raise _NotSimple
            sequence[1].append(value)
            continue
        sequence = None
        if pending is not None:  # the first key of a nested mapping
            if indent <= pending[0]:
                raise _NotSimple  # the pending key's value is null
            enclosing.append((indent_now, indented))
            indented = pending[1][pending[2]] = _Block(pending[3], pending[0] + 1)
            indent_now = indent
            pending = None
        elif indent != indent_now:  # the end of nested mappings
            while indent < indent_now:
                indent_now, indented = enclosing.pop()
            if indent != indent_now:
                raise _NotSimple
        if key in indented:
            raise _NotSimple
        if value is None:
            pending = (indent, indented, key, number)
        else:
            indented[key] = value
    if pending is not None or not root:
        raise _NotSimple
    return root


def _strings(value: Any, *, non_empty: bool) -> tuple[str, ...]:
    """A valid `_Parser.string_list` value -> its tuple; `_NotSimple` for anything it would report."""
    if (type(value) is not tuple and type(value) is not list) or (non_empty and not value) \
            or len(set(value)) != len(value):
        raise _NotSimple
    for item in value:
        if type(item) is not str:
            raise _NotSimple
    return tuple(value)


def _fields(value: Any, allowed: set[str], required: set[str]) -> _Block:
    """A mapping `_Parser.mapping` would find no problem in (duplicates never get this far)."""
    if type(value) is not _Block or not required <= value.keys() <= allowed:
        raise _NotSimple
    return value


def _number(value: Any) -> float:
    """A valid `_Parser.positive` value, as float."""
    if (type(value) is not int and type(value) is not float) or not 0 < value < math.inf:
        raise _NotSimple
    return float(value)


def _fast_tier(name: str, fields: Any) -> Tier:
    """`_Parser.tiers` for one tier it would find no problem in; `_NotSimple` otherwise."""
    fields = _fields(fields, _TIER_KEYS, _TIER_REQUIRED)
    description, gpu_count, arch = fields["description"], fields["gpu_count"], fields["arch"]
    if (not name.isidentifier() or type(description) is not str or type(gpu_count) is not int
            or type(arch) is not str or not ((arch == "cpu" and gpu_count == 0) or (_is_sm(arch) and gpu_count > 0))):
        raise _NotSimple
    return Tier(name, description, _strings(fields["runner_labels"], non_empty=True), gpu_count, arch,
                _strings(fields.get("features", ()), non_empty=False), line=fields.line)


class _FastTests:
    """`TestEntry`s for the fast path. Entries repeat a few ``tiers`` and ``depends_on`` lists (the
    scanner shares one tuple per distinct line), so each distinct list is checked once."""

    def __init__(self, tiers: dict[str, Tier]):
        self.tiers = tiers
        self._tier_lists: dict[tuple[Any, ...], tuple[str, ...]] = {}
        self._dependencies: dict[tuple[Any, ...], tuple[str, ...]] = {}

    def tier_list(self, value: Any) -> tuple[str, ...]:
        names = self._tier_lists.get(value) if type(value) is tuple else None
        if names is None:
            names = _strings(value, non_empty=True)
            for name in names:
                if name not in self.tiers:
                    raise _NotSimple
            self._tier_lists[names] = names
        return names

    def dependencies(self, value: Any) -> tuple[str, ...]:
        paths = self._dependencies.get(value) if type(value) is tuple else None
        if paths is None:
            raw = _strings(value, non_empty=False)
            paths = self._dependencies[raw] = tuple(map(normalize_path, raw))
        return paths

    def entry(self, path: str, fields: Any) -> TestEntry:
        """`_Parser.test` for an entry it would find no problem in; `_NotSimple` otherwise."""
        fields = _fields(fields, _TEST_KEYS, _TEST_REQUIRED)
        if normalize_path(path) != path or path.startswith("/") or (".." in path and ".." in path.split("/")):
            raise _NotSimple
        owner, status, reason, issue = fields["owner"], fields["status"], fields.get("reason"), fields.get("issue")
        if (type(owner) is not str or type(status) is not str or status not in _STATUSES
                or ("reason" in fields and type(reason) is not str) or ("issue" in fields and type(issue) is not str)):
            raise _NotSimple
        status = _STATUSES[status]
        if ((status is not Status.ACTIVE and not (reason or "").strip())
                or (status is Status.QUARANTINED and not (issue or "").strip())):
            raise _NotSimple
        reruns = fields.get("reruns", 0)
        if type(reruns) is not int or reruns < 0:
            raise _NotSimple
        timeout = fields.get("timeout")
        return TestEntry(
            path=path, tiers=self.tier_list(fields["tiers"]), est_time=_number(fields["est_time"]),
            owner=owner, status=status, reason=reason, issue=issue,
            timeout=None if timeout is None else _number(timeout), reruns=reruns,
            depends_on=self.dependencies(fields.get("depends_on", ())), line=fields.line, col=fields.col,
        )


_STATUSES = {s.value: s for s in Status}


def _parse_fast(text: str, path: str) -> Registry | None:
    """The registry, if ``text`` is in the fast path's subset and `_Parser` would find no problem;
    otherwise None (the caller takes the precise path). Equal to `_parse_precise`'s registry."""
    try:
        top = _scan(text)
        if (not {"version", "tiers", "tests"} <= top.keys() <= _TOP_KEYS or type(top["version"]) is not int
                or top["version"] != SCHEMA_VERSION):
            raise _NotSimple
        run_all = _strings(top["run_all_paths"], non_empty=True) if "run_all_paths" in top else ()
        tiers = top["tiers"]
        if type(tiers) is not _Block:
            raise _NotSimple
        tiers = {name: _fast_tier(name, fields) for name, fields in tiers.items()}
        tests = top["tests"]
        if type(tests) is not _Block:
            raise _NotSimple
        entries = _FastTests(tiers)
        tests = {raw: entries.entry(raw, fields) for raw, fields in tests.items()}
    except _NotSimple:
        return None
    return Registry(path, tiers, tests, tuple(normalize_path(p) for p in run_all), top["version"])


def parse_registry(text: str, path: str = REGISTRY_FILENAME) -> tuple[Registry | None, list[Problem]]:
    """Parse registry text. Returns ``(registry, [])`` or ``(None, problems)`` - never both.

    A registry in the plain block style is read by the fast path; anything else, and every
    registry with a problem, by `_Parser` (both give equal registries).
    """
    with gc_paused():
        registry = _parse_fast(text, path)
    if registry is not None:
        return registry, []
    return _parse_precise(text, path)


def _parse_precise(text: str, path: str) -> tuple[Registry | None, list[Problem]]:
    """`parse_registry` on the node tree, for any YAML: the one place problems come from."""
    parser = _Parser(text, path)
    with gc_paused():
        registry = parser.parse()
    return registry, sorted(parser.problems)


def load_registry(path: str | Path | None = None) -> Registry:
    """Load and validate ``registry.yaml`` (default: the one at the repository root).

    Raises `RegistryError` listing every problem, each as ``file:line:col: code message``.
    """
    file = Path(path) if path is not None else find_repo_root() / REGISTRY_FILENAME
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise RegistryError([Problem(str(file), 0, 0, YAML_SYNTAX, f"cannot read registry: {exc.strerror}")]) from exc
    registry, problems = parse_registry(text, _display_path(file))
    if registry is None:
        raise RegistryError(problems)
    return registry


def find_repo_root(start: str | Path | None = None) -> Path:
    """The nearest directory at or above ``start`` (default: this package) holding registry.yaml."""
    here = Path(start).resolve() if start is not None else Path(__file__).resolve().parent
    for candidate in (here, *here.parents):
        if (candidate / REGISTRY_FILENAME).is_file():
            return candidate
    raise FileNotFoundError(f"no {REGISTRY_FILENAME} found at or above {here}")


def _display_path(file: Path) -> str:
    try:
        return file.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return file.as_posix()


def iter_test_files(root: Path, patterns: Iterable[str] = ("test_*.py",), under: str = "tests") -> list[str]:
    """Repo-relative paths of every test file below ``root/under``, sorted.

    An os.scandir walk: about 15x faster than ``Path.rglob`` on a tree of 10,000 files.
    """
    # One regex for all patterns (each translation is a self-contained "(?s:...)\Z" group).
    translated = [fnmatch.translate(pattern) for pattern in patterns]
    matches = re.compile("|".join(translated)).match if translated else (lambda name: None)
    prefix = normalize_path(under)
    found: set[str] = set()
    stack = [(os.path.join(root, prefix), "" if prefix == "." else prefix + "/")]
    while stack:
        directory, rel = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):  # as rglob's "**" before Python 3.13
                stack.append((entry.path, f"{rel}{entry.name}/"))
            elif matches(entry.name) and entry.is_file():
                found.add(rel + entry.name)
    return sorted(found)


__all__: list[str] = [
    "MAX_SECONDS", "Problem", "Registry", "RegistryError", "Status", "TestEntry", "Tier", "find_repo_root", "gc_paused",
    "iter_test_files", "load_registry", "normalize_path", "path_is_under", "yaml_scalar", "parse_registry", "sm_capability",
]
