"""The fast registry parser: a line scanner for the plain block style the registry is written in.

Composing YAML nodes costs ~0.1 ms per registry entry even with libyaml (a Python node object per
scalar, a resolver call per node), which is most of `python -m ci lint` at 10,000 entries. The
registry is written in a small subset of YAML: block mappings and block sequences by indentation,
one `key: value` per line, values that are plain or simply quoted scalars or one-line flow lists.
`parse_fast` reads exactly that subset, line by line, and builds the same `Registry` as the precise
parser (`ci.registry.parse`). It never reports a problem: on any line outside the subset, and on
anything the precise parser would report, it gives up (`NotSimple`) and the caller takes the
precise path, so every message, code and position comes from one place. The value rules both
parsers apply live in `ci.registry.rules`.

Scalar types come from PyYAML's own resolver (`plain_tag`), so `yes`, `~`, `0x1f` or `2024-01-01`
mean what they mean to YAML; numbers are accepted only in forms whose value is plainly what
`SafeConstructor` builds (`12`, `2.5`), anything else takes the precise path. Anchors, aliases and
tags are outside the subset.
"""

from __future__ import annotations

import re
from typing import Any

from ci.project import DynamicImport, ProjectConfig
from ci.registry.model import (
    PER_COMMIT, SCHEMA_VERSION, STR_TAG, QuarantinePolicy, Registry, Status, TestEntry, Tier, default_backend,
    normalize_path, plain_tag,
)
from ci.registry.run_all import normalize_pattern, run_all_problems
from ci.registry.rules import (
    POLICY_KEYS, PROJECT_DYNAMIC, PROJECT_FLAG, PROJECT_KEYS, PROJECT_NON_EMPTY, TEST_KEYS, TEST_REQUIRED, TIER_KEYS,
    TIER_REQUIRED, TOP_KEYS, TOP_REQUIRED, arch_problem, backend_problem, buildkite_queue_problem, device_name_problem, dynamic_import_problem,
    entry_path_problem, feature_problem, memory_problem, policy_problem, project_item_problem, project_value,
    pytest_args_problem, reruns_problem, schedule_problem, seconds_problem,
)

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
# A plain flow item may hold '*' after its first character (`test_*.py`); at the start it is an alias.
# It may start with '-' before another character (`-k`, `--deselect`): YAML reads that as plain.
_PLAIN_ITEM = r"(?:-[A-Za-z0-9_./@+=*-]|[A-Za-z0-9_./])[A-Za-z0-9_./@+=*-]*"
_FLOW_ITEM = rf"""(?:"[^"\\]*"|'[^']*'|{_PLAIN_ITEM})"""
_FLOW = re.compile(rf"\[ *((?:{_FLOW_ITEM} *, *)*{_FLOW_ITEM})? *\]" + _COMMENT)
_FLOW_ITEMS = re.compile(rf"""("[^"\\]*"|'[^']*')|({_PLAIN_ITEM})""")  # (quoted, plain)
_PLAIN_START = re.compile(r"""[^-?:,\[\]{}#&*!|>'"%@` ]""")  # not a YAML indicator
_INT = re.compile(r"0|[1-9][0-9]{0,17}")           # int(text) == SafeConstructor's value
# float(text) == SafeConstructor's value; no leading zero, as `ci.registry.rules.number_text_problem`
_FLOAT = re.compile(r"(?:0|[1-9][0-9]{0,16})\.[0-9]{1,17}")
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_BOOL_TAG = "tag:yaml.org,2002:bool"


def _plain(text: str) -> str | int | float | bool:
    """A plain scalar -> its value; `_NotSimple` unless it is a string, a simple number, or
    ``true``/``false`` (the other spellings YAML 1.1 reads as booleans take the precise path)."""
    tag = plain_tag(text)
    if tag == STR_TAG:
        return text
    if tag == _BOOL_TAG and text in ("true", "false"):
        return text == "true"
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
    """A valid `NodeReader.string_list` value -> its tuple; `_NotSimple` for anything it would report."""
    if (type(value) is not tuple and type(value) is not list) or (non_empty and not value) \
            or len(set(value)) != len(value):
        raise _NotSimple
    for item in value:
        if type(item) is not str:
            raise _NotSimple
    return tuple(value)


def _pytest_args(value: Any) -> tuple[str, ...]:
    """A valid ``pytest_args`` list (words may repeat) -> its tuple; `_NotSimple` otherwise."""
    if (type(value) is not tuple and type(value) is not list) or any(type(item) is not str for item in value):
        raise _NotSimple
    _valid(pytest_args_problem(tuple(value)))
    return tuple(value)


def _fields(value: Any, allowed: set[str], required: set[str]) -> _Block:
    """A mapping `NodeReader.mapping` would find no problem in (duplicates never get this far)."""
    if type(value) is not _Block or not required <= value.keys() <= allowed:
        raise _NotSimple
    return value


def _is_number(value: Any) -> bool:
    return type(value) is int or type(value) is float


def _seconds(value: Any) -> float:
    """A valid `NodeReader.seconds` value, as float."""
    if not _is_number(value) or seconds_problem(value) is not None:
        raise _NotSimple
    return float(value)


def _valid(message: str | None) -> None:
    """A shared rule's verdict: any message means the precise parser reports something."""
    if message is not None:
        raise _NotSimple


def _fast_tier(name: str, fields: Any) -> Tier:
    """`ci.registry.tier_parse.parse_tier` for one tier it would find no problem in; `_NotSimple` otherwise."""
    fields = _fields(fields, TIER_KEYS, TIER_REQUIRED)
    if "buildkite" in fields or "env" in fields or "culprit" in fields:
        raise _NotSimple  # nested mappings: `ci.registry.step_parse` reads them
    description, gpu_count, arch = fields["description"], fields["gpu_count"], fields["arch"]
    if (not name.isidentifier() or type(description) is not str or type(gpu_count) is not int or gpu_count < 0
            or type(arch) is not str):
        raise _NotSimple
    backend = fields.get("backend")
    if backend is not None:
        if type(backend) is not str:
            raise _NotSimple
        _valid(backend_problem(backend))
    _valid(arch_problem(arch, backend))
    backend = backend or default_backend(arch)
    if (arch == "cpu") != (gpu_count == 0):
        raise _NotSimple
    features = _strings(fields.get("features", ()), non_empty=False)
    for feature in features:
        _valid(feature_problem(feature, arch, gpu_count, backend))
    device_name = fields.get("device_name")
    if device_name is not None:
        if type(device_name) is not str:
            raise _NotSimple
        _valid(device_name_problem(device_name, arch))
    memory = fields.get("min_memory_gib")
    if memory is not None:
        if not _is_number(memory):
            raise _NotSimple
        _valid(memory_problem(memory, arch))
        memory = float(memory)
    schedule = fields.get("schedule", PER_COMMIT)
    if type(schedule) is not str:
        raise _NotSimple
    _valid(schedule_problem(schedule))
    queue = fields.get("buildkite_queue")
    if queue is not None:
        if type(queue) is not str:
            raise _NotSimple
        _valid(buildkite_queue_problem(queue))
    return Tier(name, description, _strings(fields["runner_labels"], non_empty=True), gpu_count, arch,
                features, device_name, memory, line=fields.line, schedule=schedule, backend=backend,
                buildkite_queue=queue, pytest_args=_pytest_args(fields.get("pytest_args", ())))


def _fast_project(fields: Any) -> ProjectConfig:
    """`PreciseParser.project` for a section it would find no problem in; `_NotSimple` otherwise."""
    fields = _fields(fields, PROJECT_KEYS, set())
    values: dict[str, object] = {}
    for key, value in fields.items():
        if key == PROJECT_FLAG:
            if type(value) is not bool:
                raise _NotSimple
            values[key] = value
        elif key == PROJECT_DYNAMIC:
            if type(value) is not _Block:
                raise _NotSimple
            dynamic = []
            for importer, targets in value.items():
                targets = _strings(targets, non_empty=True)
                _valid(dynamic_import_problem(importer, targets))
                dynamic.append(DynamicImport(importer, targets))
            values[key] = tuple(dynamic)
        else:
            items = _strings(value, non_empty=key in PROJECT_NON_EMPTY)
            for item in items:
                _valid(project_item_problem(key, item))
            values[key] = project_value(key, items)
    return ProjectConfig(**values)  # type: ignore[arg-type]


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
        """`ci.registry.entry_parse.parse_entry` for an entry it would find no problem in; `_NotSimple` otherwise."""
        fields = _fields(fields, TEST_KEYS, TEST_REQUIRED)
        if "evidence" in fields or "quarantined_nodes" in fields or "env" in fields:
            raise _NotSimple  # nested quarantine records: `ci.registry.quarantine_parse` reads them
        _valid(entry_path_problem(path))
        owner, status, reason, issue = fields["owner"], fields["status"], fields.get("reason"), fields.get("issue")
        if (type(owner) is not str or type(status) is not str or status not in _STATUSES
                or ("reason" in fields and type(reason) is not str) or ("issue" in fields and type(issue) is not str)):
            raise _NotSimple
        status = _STATUSES[status]
        if ((status is not Status.ACTIVE and not (reason or "").strip())
                or (status is Status.QUARANTINED and not (issue or "").strip())):
            raise _NotSimple
        reruns, may_skip = fields.get("reruns", 0), fields.get("may_skip", False)
        if type(reruns) is not int or reruns_problem(reruns) is not None or type(may_skip) is not bool:
            raise _NotSimple
        timeout = fields.get("timeout")
        return TestEntry(
            path=path, tiers=self.tier_list(fields["tiers"]), est_time=_seconds(fields["est_time"]),
            owner=owner, status=status, reason=reason, issue=issue,
            timeout=None if timeout is None else _seconds(timeout), reruns=reruns,
            depends_on=self.dependencies(fields.get("depends_on", ())), line=fields.line, col=fields.col,
            may_skip=may_skip, pytest_args=_pytest_args(fields.get("pytest_args", ())),
        )


_STATUSES = {s.value: s for s in Status}


def parse_fast(text: str, path: str) -> Registry | None:
    """The registry, if ``text`` is in the fast path's subset and the precise parser would find no
    problem; otherwise None (the caller takes the precise path). Equal to `parse_precise`'s."""
    try:
        top = _scan(text)
        if (not TOP_REQUIRED <= top.keys() <= TOP_KEYS or type(top["version"]) is not int
                or top["version"] != SCHEMA_VERSION):
            raise _NotSimple
        run_all = _strings(top["run_all_paths"], non_empty=True) if "run_all_paths" in top else ()
        if run_all_problems(run_all):
            raise _NotSimple
        project = _fast_project(top["project"]) if "project" in top else ProjectConfig()
        tiers = top["tiers"]
        if type(tiers) is not _Block:
            raise _NotSimple
        tiers = {name: _fast_tier(name, fields) for name, fields in tiers.items()}
        tests = top["tests"]
        if type(tests) is not _Block:
            raise _NotSimple
        entries = _FastTests(tiers)
        tests = {raw: entries.entry(raw, fields) for raw, fields in tests.items()}
        policy = _fast_policy(top["quarantine"]) if "quarantine" in top else QuarantinePolicy()
    except _NotSimple:
        return None
    return Registry(path, tiers, tests, tuple(map(normalize_pattern, run_all)), top["version"], project,
                    quarantine=policy)


def _fast_policy(fields: Any) -> QuarantinePolicy:
    """`ci.registry.quarantine_parse.parse_policy` for a section it would find no problem in."""
    fields = _fields(fields, POLICY_KEYS, set())
    for key, value in fields.items():
        _valid(policy_problem(key, value))
    return QuarantinePolicy(**fields, line=fields.line)


__all__ = ["parse_fast"]


