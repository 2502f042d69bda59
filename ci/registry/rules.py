"""What a valid registry is: its keys and the value rules both parsers share.

The precise parser (`ci.registry.parse`) reports a rule's message at the offending node; the fast
path (`ci.registry.fast_parse`) gives up on any value a rule rejects. Keeping each rule here, once, is
what keeps the two parsers' verdicts equal (``tests/ci/test_registry_fastpath.py`` checks it), and
``tests/ci/test_registry.py`` checks that ``ci/registry/schema.json`` names the same keys.
"""

from __future__ import annotations

import keyword
import math
import re
from typing import Any

from ci.limits import is_plain_decimal
from ci.project import dotted_glob_problem
from ci.registry.model import (
    BACKENDS, MAX_SECONDS, SCHEDULES, default_backend, is_gfx, is_sm, normalize_path, sm_capability,
)

TOP_KEYS = {"version", "run_all_paths", "project", "tiers", "tests", "quarantine"}
TOP_REQUIRED = {"version", "tiers", "tests"}
PROJECT_KEYS = {"first_party", "source_roots", "test_roots", "test_patterns", "generated_modules", "unique_basenames",
                "dynamic_imports"}
# The project keys whose value is not a list of strings.
PROJECT_FLAG, PROJECT_DYNAMIC = "unique_basenames", "dynamic_imports"
# Lists that must name at least one item (an empty first_party means: discover the packages).
PROJECT_NON_EMPTY = {"source_roots", "test_roots", "test_patterns"}
TIER_KEYS = {"description", "runner_labels", "gpu_count", "arch", "features", "device_name", "min_memory_gib",
             "schedule", "backend", "buildkite_queue", "buildkite", "env", "pytest_args", "culprit"}
TIER_REQUIRED = {"description", "runner_labels", "gpu_count", "arch"}
CULPRIT_KEYS = {"auto", "budget", "runners"}
MAX_CULPRIT_RUNNERS = 64  # `ci culprit --runners`' bound
TEST_KEYS = {"tiers", "est_time", "owner", "status", "reason", "issue", "timeout", "reruns", "depends_on",
             "may_skip", "evidence", "quarantined_nodes", "env", "pytest_args"}
# The quarantine's keys (`ci.registry.quarantine_parse` reads them; the fast path leaves an entry
# with evidence or quarantined_nodes to the precise parser).
QUARANTINE_TEST_KEYS = {"evidence", "quarantined_nodes"}
POLICY_KEYS = {"threshold", "min_runs", "release_runs", "level", "issue"}
EVIDENCE_KEYS = {"tier", "score", "interval", "runs", "failures", "trials", "fingerprint", "example", "since"}
NODE_KEYS = {"node", "reason", "evidence"}
NODE_REQUIRED = {"node", "reason"}
TEST_REQUIRED = {"tiers", "est_time", "owner", "status"}

# Hardware features a tier may require, and the oldest compute capability that has each (None:
# not a property of the architecture; `ci.running.hardware` probes it). fp8 tensor cores arrived with
# Ada/Hopper (sm_89/sm_90), fp4 with Blackwell (sm_100); nvlink links two or more GPUs.
FEATURES: dict[str, tuple[int, int] | None] = {"fp8": (8, 9), "fp4": (10, 0), "nvlink": None}
MAX_MEMORY_GIB = 1 << 20  # 1 PiB per device: anything larger is a unit mistake
# Reruns of a failing test: a test that needs more is broken, and 1,000,000 reruns of a GPU test
# would hold a runner for days.
MAX_RERUNS = 10

# A GPU-tier entry's timeout is derived from its est_time: TIMEOUT_FACTOR times it, at least
# MIN_TIMEOUT (a first CUDA/Triton compile alone can take a minute), at most MAX_SECONDS.
TIMEOUT_FACTOR = 4
MIN_TIMEOUT = 120


def derived_timeout(est_time: float) -> int:
    """The ``timeout`` (whole seconds) a GPU-tier entry gets for ``est_time`` seconds."""
    return int(min(MAX_SECONDS, max(MIN_TIMEOUT, math.ceil(est_time * TIMEOUT_FACTOR))))


def seconds_problem(value: int | float) -> str | None:
    """None if ``value`` is a valid est_time/timeout: finite, > 0 and at most `MAX_SECONDS`."""
    if 0 < value <= MAX_SECONDS:  # false for NaN too; compared before any float() of a huge int
        return None
    return f"must be a finite number > 0 and at most {MAX_SECONDS} seconds (one day), got {describe_scalar(value)}"


def number_text_problem(text: str, *, integer: bool) -> str | None:
    """None if a number is written plainly (`ci.limits.is_plain_decimal`): ``30``, ``2.5``."""
    if is_plain_decimal(text, integer=integer):
        return None
    example = "such as 3" if integer else "such as 30 or 2.5"
    return (f"must be written as a plain decimal number {example} (ASCII digits, no leading zero, '_', "
            f"exponent, '+' or 0x/0o prefix), got {describe_scalar(text)}")


def reruns_problem(value: int) -> str | None:
    """None if ``value`` is a valid ``reruns``: 0 to `MAX_RERUNS`."""
    if 0 <= value <= MAX_RERUNS:
        return None
    if value < 0:
        return "must be >= 0"
    return (f"must be at most {MAX_RERUNS}, got {describe_scalar(value)}: a test that fails that often is "
            f"broken; quarantine it (status: quarantined) instead")


def policy_problem(key: str, value: Any) -> str | None:
    """None if ``value`` is valid for ``quarantine.<key>`` (`ci.registry.model.QuarantinePolicy`)."""
    if key in ("threshold", "level"):
        if type(value) is not float or not 0.0 < value < 1.0:
            return f"must be a number strictly between 0 and 1 such as 0.05, got {describe_scalar(value)}"
    elif key in ("min_runs", "release_runs"):
        if type(value) is not int or not 1 <= value <= 1_000_000:
            return f"must be a whole number from 1 to 1000000, got {describe_scalar(value)}"
    elif key == "issue":
        if type(value) is not str or not value.strip():
            return f"must be a non-blank link, got {describe_scalar(value)}"
    else:
        raise KeyError(key)
    return None


def node_id_problem(node: str, path: str) -> str | None:
    """None if ``node`` is a pytest test id inside the file ``path`` (``path::name[::name]``)."""
    prefix = path + "::"
    rest = node[len(prefix):] if node.startswith(prefix) else ""
    if not rest or any(not part.strip() or part != part.strip() for part in rest.split("::")):
        return f"node {describe_scalar(node)} must be a test id in this file: {prefix}<test name>"
    if not node.isprintable() or "\n" in node:
        return f"node {describe_scalar(node)} holds unprintable characters"
    return None


def entry_path_problem(raw: str) -> str | None:
    """None if ``raw`` is a registry key in normal form (repo-relative POSIX, no '.', '..', '//')."""
    if normalize_path(raw) != raw or raw.startswith("/") or (".." in raw and ".." in raw.split("/")):
        return f"test path {raw!r} must be repo-relative POSIX without '.', '..' or '//'"
    return None


_LABEL = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")  # an xpu/npu/tpu arch label: pvc, ascend910b, v5e


def backend_problem(backend: str) -> str | None:
    """None if ``backend`` is one of `BACKENDS`."""
    if backend in BACKENDS:
        return None
    return f"backend must be one of {', '.join(BACKENDS)}, got {describe_scalar(backend)}"


def arch_problem(arch: str, backend: str | None = None) -> str | None:
    """None if ``arch`` suits ``backend`` (None: the tier names none, so the arch must imply one).

    cpu takes ``cpu``, cuda ``sm_<major><minor>``, rocm ``gfx<target>``; xpu, npu and tpu take a
    lower-case label (their runtimes expose no architecture name `ci.running.hardware` could compare).
    """
    if backend is None:
        if default_backend(arch) is not None:
            return None
        return (f"arch must be 'cpu', 'sm_<major><minor>' such as 'sm_90' or 'gfx<target>' such as 'gfx942', "
                f"got {describe_scalar(arch)} (an xpu, npu or tpu tier names its backend: 'backend: xpu')")
    implied = default_backend(arch)
    if backend == "cpu" and arch != "cpu":
        return f"backend 'cpu' needs arch 'cpu', got {describe_scalar(arch)}"
    if backend == "cuda" and not is_sm(arch):
        return f"backend 'cuda' needs arch 'sm_<major><minor>' such as 'sm_90', got {describe_scalar(arch)}"
    if backend == "rocm" and not is_gfx(arch):
        return f"backend 'rocm' needs arch 'gfx<target>' such as 'gfx942', got {describe_scalar(arch)}"
    if backend in ("xpu", "npu", "tpu") and (implied is not None or not _LABEL.fullmatch(arch)):
        return (f"backend {backend!r} needs an arch label of lower-case letters, digits, '_', '.' or '-' "
                f"that is not cpu, sm_* or gfx* (such as 'pvc', 'ascend910b', 'v5e'), got {describe_scalar(arch)}")
    return None


def buildkite_queue_problem(queue: str) -> str | None:
    """None if ``queue`` can name a Buildkite agent queue: non-blank, no whitespace."""
    if queue and queue.isprintable() and not any(c.isspace() for c in queue):
        return None
    return f"buildkite_queue must be a queue name without spaces, got {describe_scalar(queue)}"


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What `ci plan --format buildkite` computes for each step: a tier's `buildkite:` template may not set it.
PLAN_STEP_KEYS = {"command", "commands", "label", "key", "parallelism", "timeout_in_minutes", "env"}
# The template's own keys, which are not Buildkite step keys.
TEMPLATE_OWN_KEYS = {"command_prefix", "interpolate"}


def env_name_problem(name: str) -> str | None:
    """None if ``name`` can be an environment variable's name (``[A-Za-z_][A-Za-z0-9_]*``)."""
    if _ENV_NAME.fullmatch(name):
        return None
    return f"env name must match [A-Za-z_][A-Za-z0-9_]*, got {describe_scalar(name)}"


def template_key_problem(key: str) -> str | None:
    """None if a tier's ``buildkite:`` template may set step key ``key``."""
    if key == "env":
        return "buildkite: sets 'env'; give the tier an 'env:' mapping instead (the plan merges it into each step)"
    if key in PLAN_STEP_KEYS:
        return (f"buildkite: sets {key!r}, which `ci plan` computes for each step; drop it "
                f"(a command goes before the plan's with 'command_prefix')")
    return None


# pytest options a tier's or entry's `pytest_args` may not give, each with why: they would break
# what `ci run` promises (one JUnit report of every selected test, its plugin loaded, its worker
# count, the registry's timeouts and reruns) or run nothing, or wait for a person.
REFUSED_PYTEST_ARGS = {
    **dict.fromkeys(("--junitxml", "--junit-xml", "--junit-prefix", "--result-log"), "`ci run` writes the JUnit report"),
    **dict.fromkeys(("-p", "-c", "--config-file", "--rootdir"), "`ci run` sets the plugins and the configuration"),
    **dict.fromkeys(("-n", "--numprocesses", "--maxprocesses", "-d", "--dist", "--tx"), "use `ci run --workers`"),
    **dict.fromkeys(("--co", "--collect-only", "--collectonly", "--setup-plan", "--setup-only", "--fixtures",
                     "--fixtures-per-test", "--markers", "-h", "--help", "-V", "--version"), "it runs no test"),
    **dict.fromkeys(("-x", "--exitfirst", "--maxfail", "--lf", "--last-failed", "--sw", "--stepwise",
                     "--sw-skip", "--stepwise-skip"), "the report must hold every selected test, on any machine"),
    **dict.fromkeys(("--pdb", "--trace"), "it waits for a person"),
    **dict.fromkeys(("--timeout", "--reruns"), "give the entry 'timeout:' / 'reruns:'"),
    **dict.fromkeys(("--registry", "--tier", "--include-inactive", "--run-quarantined"), "`ci run` passes its plugin's options"),
}
_SHORT_VALUE = set("kmpncoWr")  # short options whose value is the rest of the word or the next word


def pytest_args_problem(args: tuple[str, ...]) -> str | None:
    """None if ``args`` may be added to `ci run`'s pytest: options only (a bare word must be the
    value of the option before it: a path or node id would add tests to every file's run), none of
    `REFUSED_PYTEST_ARGS`, and no ``-o junit_*``. A long option without ``=`` is taken to take the
    next word as its value."""
    takes_value, option = False, ""
    for word in args:
        if takes_value:
            takes_value = False
            if option in ("-o", "--override-ini") and word.startswith("junit_"):
                return f"pytest_args: {option} {word!r}: `ci run` writes the JUnit report"
            continue
        if not word.startswith("-") or word == "-":
            return (f"pytest_args: {describe_scalar(word)} is no option's value: a path or node id would add tests "
                    f"to every file's run (select within files with -k, -m or --deselect)")
        if word.startswith("--"):
            option, eq, value = word.partition("=")
            takes_value = not eq
        else:
            option, rest = word[:2], word[2:]
            for i, char in enumerate(word[1:]):
                option, rest = "-" + char, word[i + 2:]
                if option in REFUSED_PYTEST_ARGS or char in _SHORT_VALUE:
                    break
            takes_value, value = option[1:] in _SHORT_VALUE and not rest, rest
        if option in REFUSED_PYTEST_ARGS:
            return f"pytest_args: {word!r} is refused: {REFUSED_PYTEST_ARGS[option]}"
        if option in ("-o", "--override-ini") and value.startswith("junit_"):
            return f"pytest_args: {word!r}: `ci run` writes the JUnit report"
    return None


def schedule_problem(schedule: str) -> str | None:
    """None if ``schedule`` is a tier schedule."""
    if schedule in SCHEDULES:
        return None
    return f"schedule must be one of {', '.join(SCHEDULES)}, got {describe_scalar(schedule)}"


def feature_problem(feature: str, arch: str, gpu_count: int, backend: str = "cuda") -> str | None:
    """None if a tier with ``arch``, ``gpu_count`` and ``backend`` can have ``feature`` (features
    are CUDA's: nothing checks them on another backend's machine)."""
    if feature not in FEATURES:
        return f"unknown feature {feature!r}; known features: {', '.join(FEATURES)}"
    if arch == "cpu":
        return f"feature {feature!r} needs a GPU tier (arch is 'cpu')"
    if backend != "cuda":
        return f"feature {feature!r} is checked only on cuda tiers; this tier's backend is {backend!r}"
    oldest = FEATURES[feature]
    if oldest is not None and is_sm(arch) and sm_capability(arch) < oldest:
        return f"feature {feature!r} needs sm_{oldest[0]}{oldest[1]} or newer, but arch is {arch!r}"
    if feature == "nvlink" and gpu_count < 2:
        return f"feature 'nvlink' links GPUs: it needs gpu_count >= 2, got {gpu_count}"
    return None


def device_name_problem(pattern: str, arch: str) -> str | None:
    """None if ``pattern`` is a usable device-name regular expression for a tier with ``arch``."""
    if arch == "cpu":
        return "device_name needs a GPU tier (arch is 'cpu')"
    if not pattern.strip():
        return "device_name must not be blank"
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"device_name {pattern!r} is not a regular expression: {exc}"
    return None


def memory_problem(value: int | float, arch: str) -> str | None:
    if arch == "cpu":
        return "min_memory_gib needs a GPU tier (arch is 'cpu')"
    if 0 < value <= MAX_MEMORY_GIB:
        return None
    return f"min_memory_gib must be a finite number of GiB > 0 and at most {MAX_MEMORY_GIB}, got {describe_scalar(value)}"


_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


def project_item_problem(key: str, item: str) -> str | None:
    """None if ``item`` is a valid entry of the project list ``key``."""
    if key == "first_party":
        if not item.isidentifier() or keyword.iskeyword(item) or not item.isascii():
            return f"{item!r} is not a top-level package name"
        return None
    if key == "generated_modules":
        if any(c in item for c in "*?["):  # what a build puts in a folder: 'acme.vendored.*'
            return dotted_glob_problem(item)
        if not _DOTTED.fullmatch(item) or any(keyword.iskeyword(part) for part in item.split(".")):
            return f"{item!r} is not a dotted module name such as 'acme._version'"
        return None
    if key in ("source_roots", "test_roots"):
        path = normalize_path(item)
        if not item.strip() or path.startswith("/") or ".." in path.split("/") or "\\" in item:
            return f"{item!r} must be a repo-relative POSIX directory ('.' for the root) without '..'"
        return None
    if key == "test_patterns":
        if "/" in item or "\\" in item or not item.endswith(".py") or item == ".py":
            return f"{item!r} must be a file-name glob ending in '.py' such as 'test_*.py' (no '/')"
        return None
    raise KeyError(key)


def dynamic_import_problem(importer: str, targets: tuple[str, ...]) -> str | None:
    """None if ``importer: [targets]`` is a valid ``project: dynamic_imports`` entry."""
    if project_item_problem("generated_modules", importer) is not None:
        return f"{importer!r} is not a dotted module name such as 'acme.models.registry'"
    for target in targets:
        problem = dotted_glob_problem(target)
        if problem is not None:
            return problem
    return None


def project_value(key: str, items: tuple[str, ...]) -> tuple[str, ...]:
    """The typed value of project list ``key`` (root directories in normal form)."""
    if key in ("source_roots", "test_roots"):
        return tuple(normalize_path(item) or "." for item in items)
    return items


def describe_scalar(value: Any) -> str:
    """A short repr for messages (a 10,000-character value is cut, never echoed whole)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = [
    "FEATURES", "MAX_MEMORY_GIB", "MAX_RERUNS", "MIN_TIMEOUT", "number_text_problem", "reruns_problem", "PROJECT_KEYS", "PROJECT_NON_EMPTY", "TEST_KEYS", "TEST_REQUIRED",
    "CULPRIT_KEYS", "MAX_CULPRIT_RUNNERS", "TIER_KEYS", "TIER_REQUIRED", "backend_problem", "env_name_problem", "template_key_problem",
    "PLAN_STEP_KEYS", "TEMPLATE_OWN_KEYS", "buildkite_queue_problem", "TIMEOUT_FACTOR", "TOP_KEYS", "TOP_REQUIRED", "arch_problem", "derived_timeout",
    "describe_scalar", "device_name_problem", "EVIDENCE_KEYS", "NODE_KEYS", "NODE_REQUIRED", "POLICY_KEYS",
    "QUARANTINE_TEST_KEYS", "node_id_problem", "policy_problem", "feature_problem", "memory_problem", "project_item_problem",
    "project_value", "seconds_problem", "dynamic_import_problem", "schedule_problem", "PROJECT_FLAG", "PROJECT_DYNAMIC",
    "entry_path_problem", "pytest_args_problem", "REFUSED_PYTEST_ARGS",
]
