"""The registry's typed form: what `ci.registry` hands every consumer.

`Registry` holds `Tier`s, `TestEntry`s and the `ProjectConfig`; `Problem` is one finding located in
a file (``file:line:col``) and `RegistryError` carries every problem of a registry that cannot be
loaded. Nothing here reads files or YAML; the parsers (`ci.registry.parse`, `ci.registry.fast_parse`)
build these objects and `ci.registry.files` loads them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ci.limits import MAX_SECONDS
from ci.project import ProjectConfig
from ci.repo_root import REGISTRY_FILENAME

SCHEMA_VERSION = 1
PER_COMMIT, NIGHTLY = "per-commit", "nightly"
SCHEDULES = (PER_COMMIT, NIGHTLY)
# The kinds of machine a tier can be: which runtime `ci.running.hardware` asks about its devices.
BACKENDS = ("cuda", "rocm", "xpu", "npu", "tpu", "cpu")


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


# Problem codes produced while reading and parsing. Lint adds its own (see ci.lint).
YAML_SYNTAX = "R001"
DUPLICATE_KEY = "R002"
UNKNOWN_KEY = "R003"
MISSING_KEY = "R004"
WRONG_TYPE = "R005"
UNKNOWN_TIER = "R006"
NON_POSITIVE = "R007"  # a time that is not a finite number in (0, MAX_SECONDS]
MISSING_REASON = "R008"
INVALID_VALUE = "R009"
ANCHOR_OR_ALIAS = "R010"
NOT_UTF8 = "R011"


# ---------------------------------------------------------------------------------------------
# Typed entries
# ---------------------------------------------------------------------------------------------

class Status(str, enum.Enum):
    ACTIVE = "active"
    MANUAL = "manual"            # kept, never scheduled; needs a reason
    QUARANTINED = "quarantined"  # known broken; needs a reason and an issue link


@dataclass(frozen=True)
class StepTemplate:
    """A tier's ``buildkite:`` block: Buildkite step keys merged into each step `ci plan --format
    buildkite` emits for the tier (``plugins``, ``depends_on``, ``agents``, ``retry``, ...).

    ``keys`` never holds what the plan computes (`ci.registry.rules.PLAN_STEP_KEYS`) nor
    ``agents.queue`` (``buildkite_queue`` says it). ``command_prefix`` is shell run before the
    plan's command (``cd /workspace && ...``). Every ``$`` in the values is emitted doubled, so
    Buildkite's upload interpolation leaves it alone, except under the top-level keys named in
    ``interpolate`` (and ``command_prefix`` when named), which go out as written."""

    keys: Mapping[str, object] = field(default_factory=dict, hash=False)
    command_prefix: str | None = None
    interpolate: tuple[str, ...] = ()
    line: int = 0


@dataclass(frozen=True)
class CulpritPolicy:
    """A tier's ``culprit:`` opt-in (docs/registry.md): with ``auto``, a new breakage of a test on
    the default branch with more than one candidate commit requests a culprit search of its window
    (`ci culprit-requests`), of at most ``budget`` runs, ``runners`` at once."""

    auto: bool = False
    budget: int = 12
    runners: int = 1


@dataclass(frozen=True)
class Tier:
    """A class of CI machine. The name is also the pytest marker (``pytest -m gpu_b200``).

    ``backend`` is the kind of machine (`BACKENDS`): ``cpu``, ``cuda``, ``rocm``, ``xpu``, ``npu``
    or ``tpu``; when the registry does not name it, it follows from ``arch`` (`default_backend`:
    ``cpu`` -> cpu, ``sm_*`` -> cuda, ``gfx*`` -> rocm). ``arch`` is ``"cpu"``, a CUDA SM name
    (``"sm_90"``), a ROCm gfx target (``"gfx942"``) or, for xpu/npu/tpu, a free label. ``gpu_count``
    is how many accelerators a job on this tier gets. What identifies them, checked by
    `ci.running.hardware` before a tier's tests run, as far as the backend's runtime tells:
    ``arch``, ``device_name`` (a regular expression searched, case-insensitively, in the device
    name, e.g. ``"H200"``: H100 and H200 are both sm_90), ``min_memory_gib`` (each device's total
    memory, GiB = 2**30 bytes) and ``features`` (``fp8``, ``fp4``, ``nvlink``: CUDA tiers only; see
    `ci.registry.rules.FEATURES`).

    ``schedule`` is when the tier runs unasked: ``per-commit`` (pull requests and pushes plan it)
    or ``nightly`` (only the nightly workflow does, and whoever names the tier).
    ``buildkite_queue`` is the Buildkite agent queue its steps go to (`queue`: the tier's name
    unless given); ``buildkite`` the `StepTemplate` of its steps. ``env`` is set for every run of
    the tier (``ci run``, the matrix job, the Buildkite step), under an entry's own ``env``.
    ``pytest_args`` are added to every pytest ``ci run --tier`` starts for it, before an entry's.
    ``culprit`` is its `CulpritPolicy` (None: no automatic culprit search).
    """

    name: str
    description: str
    runner_labels: tuple[str, ...]
    gpu_count: int
    arch: str
    features: tuple[str, ...] = ()
    device_name: str | None = None
    min_memory_gib: float | None = None
    line: int = 0
    schedule: str = PER_COMMIT
    backend: str = ""  # "" -> default_backend(arch)
    buildkite_queue: str | None = None
    buildkite: StepTemplate | None = None
    env: Mapping[str, str] = field(default_factory=dict, hash=False)
    pytest_args: tuple[str, ...] = ()
    culprit: CulpritPolicy | None = None

    def __post_init__(self) -> None:
        if not self.backend:
            object.__setattr__(self, "backend", default_backend(self.arch) or "")

    @property
    def needs_gpu(self) -> bool:
        return self.gpu_count > 0

    @property
    def queue(self) -> str:
        """The Buildkite queue of this tier's steps: ``buildkite_queue``, else the tier's name."""
        return self.buildkite_queue or self.name


@dataclass(frozen=True)
class QuarantinePolicy:
    """The registry's top-level ``quarantine:`` section: when ``ci quarantine`` acts.

    A (node, tier) is quarantined when at least ``min_runs`` trials stand behind its flakiness
    score and the lower end of its ``level`` credible interval is at or above ``threshold``; it is
    released after ``release_runs`` clean runs in a row since the quarantine, once the upper end
    of the interval over the runs since the quarantine is below ``threshold``. ``issue`` is the
    link a file-level quarantine names (else its example run)."""

    threshold: float = 0.05
    min_runs: int = 30
    release_runs: int = 20
    level: float = 0.90
    issue: str | None = None
    line: int = 0


@dataclass(frozen=True)
class QuarantineEvidence:
    """What a quarantine rested on, as ``ci quarantine --apply`` recorded it (``evidence:``).
    ``since`` is the ``ingested_at`` of the newest report it read: runs after it count towards
    release."""

    tier: str
    score: float
    interval: tuple[float, float]
    runs: int
    failures: int
    trials: int
    fingerprint: str
    example: str
    since: str


@dataclass(frozen=True)
class QuarantinedNode:
    """One test of a file quarantined on its own (``quarantined_nodes:``): it still runs, and its
    failure does not fail the job (the plugin marks it ``xfail(strict=False)``)."""

    node: str
    reason: str
    evidence: QuarantineEvidence | None = None
    line: int = 0


@dataclass(frozen=True)
class TestEntry:
    """One registered test file.

    ``path`` is repo-relative POSIX. ``est_time`` is the expected seconds for the whole file;
    ``timeout`` the most seconds the whole file may take (the plugin gives each test what remains
    of it, see `ci.pytest_plugin`). ``depends_on`` holds repo-relative path prefixes
    (``fp4kv/quant``) or exact files whose change selects this test; the test file itself always
    counts. ``may_skip`` says every test of the file may skip on a tier's machine: a GPU tier's
    run in which every test skipped still fails unless each file that skipped says so. ``env`` is
    set for the file's run on top of its tier's (a name in both takes the entry's value);
    ``pytest_args`` are added to its pytest after the tier's (for ``-k`` / ``-m`` the entry's win).
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
    may_skip: bool = False
    evidence: QuarantineEvidence | None = None  # a file-level quarantine written by ci quarantine
    quarantined_nodes: tuple[QuarantinedNode, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, hash=False)
    pytest_args: tuple[str, ...] = ()

    def quarantined_node(self, node: str) -> QuarantinedNode | None:
        """The node-level quarantine of test id ``node`` (``path::name``), or None."""
        return next((q for q in self.quarantined_nodes if q.node == node), None)

    @property
    def basename(self) -> str:
        return self.path.rsplit("/", 1)[-1]  # path is normalized POSIX

    @property
    def is_active(self) -> bool:
        return self.status is Status.ACTIVE


@dataclass(frozen=True)
class Registry:
    """The whole registry. ``tests`` is keyed by repo-relative path, in file order; ``project``
    says where the repository keeps its code and tests (defaults: this repository's layout)."""

    path: str
    tiers: dict[str, Tier]
    tests: dict[str, TestEntry]
    run_all_paths: tuple[str, ...] = ()
    version: int = SCHEMA_VERSION
    project: ProjectConfig = field(default_factory=ProjectConfig)
    quarantine: QuarantinePolicy = field(default_factory=QuarantinePolicy)
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

    def with_tests(self, tests: dict[str, TestEntry]) -> Registry:
        """This registry with ``tests`` instead of its own (tiers, project and the rest kept)."""
        return dataclasses.replace(self, tests=tests, _by_basename={})

    def has_gpu_tier(self, entry: TestEntry) -> bool:
        """True if one of ``entry``'s tiers needs a GPU."""
        return any(self.tiers[t].needs_gpu for t in entry.tiers if t in self.tiers)


# ---------------------------------------------------------------------------------------------
# Paths, scalars, architectures
# ---------------------------------------------------------------------------------------------

def normalize_path(path: str) -> str:
    """Repo-relative POSIX form: ``./tests//a.py`` -> ``tests/a.py``, ``ci/`` -> ``ci``."""
    if not ("\\" in path or "//" in path or "/./" in path or path.startswith("./")
            or path.endswith(("/", "/.")) or path in ("", ".")):
        return path  # already normal; pathlib costs ~30 us a call, which adds up at 10,000 entries
    return PurePosixPath(path.replace("\\", "/")).as_posix().removeprefix("./")


def path_is_under(path: str, prefix: str) -> bool:
    """True if repo-relative ``path`` is ``prefix`` itself or lies inside directory ``prefix``.

    This is the one matching rule for ``depends_on``, ``run_all_paths`` and the project's roots:
    ``fp4kv`` covers ``fp4kv/quant/x.py`` but not ``fp4kv_extra/x.py``; ``.`` covers everything.
    """
    path, prefix = normalize_path(path), normalize_path(prefix)
    return prefix in ("", ".") or path == prefix or path.startswith(prefix + "/")


STR_TAG = "tag:yaml.org,2002:str"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
# YAML 1.1's implicit types, as PyYAML's resolver (SafeLoader's and CSafeLoader's) registers them by
# a scalar's first character: any other first character resolves to a string. Of the letters only
# the booleans' and null's words are typed. These settle a registry's scalars without importing
# PyYAML (a tenth of a second of every observed pytest's start, which reads the registry).
_TYPED_FIRST = frozenset("yYnNtTfFoO-+0123456789.<~=!&*")
_WORDS = {**dict.fromkeys(("yes", "Yes", "YES", "no", "No", "NO", "true", "True", "TRUE", "false", "False", "FALSE",
                           "on", "On", "ON", "off", "Off", "OFF"), "tag:yaml.org,2002:bool"),
          **dict.fromkeys(("null", "Null", "NULL"), "tag:yaml.org,2002:null")}
_DECIMAL = re.compile(r"0|[1-9][0-9]*")                # no float, timestamp or octal form fits
_DECIMAL_POINT = re.compile(r"(?:0|[1-9][0-9]*)\.[0-9]+")  # no int or timestamp form fits


@functools.lru_cache(maxsize=4096)
def plain_tag(value: str) -> str:
    """The tag YAML gives the untagged plain scalar ``value`` (registries repeat a few hundred):
    PyYAML's resolver's answer, settled here without PyYAML where the shapes above decide it."""
    first = value[:1]
    if first and first not in _TYPED_FIRST:
        return STR_TAG
    if first.isalpha():
        return _WORDS.get(value, STR_TAG)
    if _DECIMAL.fullmatch(value):
        return INT_TAG
    if _DECIMAL_POINT.fullmatch(value):
        return FLOAT_TAG
    after = value[1:2]
    if (first == "." and (not after or after not in "0123456789_iInN")
            or first in ("-", "+") and (not after or after not in "0123456789.")):
        return STR_TAG  # `.ci/`, `-k`: a number needs a digit, `inf` or `nan` after its point or sign (`_` left to PyYAML)
    return yaml_plain_tag(value)


def yaml_plain_tag(value: str) -> str:
    """PyYAML's resolver's tag for the untagged plain scalar ``value`` (imports PyYAML)."""
    import yaml  # deferred: most registries' scalars never get here (`plain_tag`)

    return yaml.resolver.Resolver().resolve(yaml.ScalarNode, value, (True, False))


def yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar for registry.yaml snippets: plain when that reads back as the same
    string, else double-quoted (``@team`` must be quoted: ``@`` cannot start a plain scalar)."""
    plain = (text and text[0] not in "@`!&*|>'\"%#{}[],?:-" and ": " not in text and " #" not in text
             and not text.endswith(":")
             and text == text.strip() and text.isprintable() and plain_tag(text) == STR_TAG)
    return text if plain else double_quoted(text)


def double_quoted(text: str) -> str:
    """``text`` as a double-quoted YAML scalar (backslash, quote and unprintable characters escaped)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if c.isprintable() else _escape(c) for c in escaped) + '"'


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def is_sm(arch: str) -> bool:
    """True for ``sm_<major><minor>`` names such as ``sm_90`` and ``sm_100``."""
    return arch.startswith("sm_") and arch[3:].isdigit() and len(arch) >= 5


def is_gfx(arch: str) -> bool:
    """True for ROCm ``gfx<major><minor><stepping>`` targets such as ``gfx942``, ``gfx90a``, ``gfx1100``."""
    return _GFX.fullmatch(arch) is not None


_GFX = re.compile(r"gfx[0-9]{1,2}[0-9a-f]{2}")


def default_backend(arch: str) -> str | None:
    """The backend an ``arch`` implies: ``cpu`` -> cpu, ``sm_*`` -> cuda, ``gfx*`` -> rocm, else None
    (an xpu, npu or tpu tier names its backend)."""
    if arch == "cpu":
        return "cpu"
    if is_sm(arch):
        return "cuda"
    return "rocm" if is_gfx(arch) else None


def sm_capability(arch: str) -> tuple[int, int]:
    """``"sm_90"`` -> ``(9, 0)``, ``"sm_100"`` -> ``(10, 0)`` (the CUDA compute capability)."""
    if not is_sm(arch):
        raise ValueError(f"not a CUDA SM architecture: {arch!r}")
    digits = arch[3:]
    return int(digits[:-1]), int(digits[-1])


__all__ = [
    "ANCHOR_OR_ALIAS", "CulpritPolicy", "BACKENDS", "default_backend", "is_gfx", "DUPLICATE_KEY", "INVALID_VALUE", "MAX_SECONDS", "MISSING_KEY", "MISSING_REASON",
    "NIGHTLY", "NON_POSITIVE", "NOT_UTF8", "PER_COMMIT", "QuarantineEvidence", "QuarantinePolicy", "QuarantinedNode",
    "REGISTRY_FILENAME", "SCHEDULES", "SCHEMA_VERSION", "STR_TAG", "StepTemplate", "UNKNOWN_KEY", "UNKNOWN_TIER",
    "WRONG_TYPE", "YAML_SYNTAX", "Problem", "Registry", "RegistryError", "Status", "TestEntry", "Tier", "double_quoted", "is_sm",
    "normalize_path", "path_is_under", "plain_tag", "yaml_plain_tag", "sm_capability", "yaml_scalar",
]
