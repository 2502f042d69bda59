"""registry.yaml -> typed entries: the one import point for everything that reads the registry.

Every consumer (the pytest plugin, lint, plan, run, the rerun bot) gets `Registry`, `Tier`,
`TestEntry` and `ProjectConfig` objects from here and never touches raw YAML. The work is split by
job:

* `ci.registry.model`: the typed objects, `Problem` / `RegistryError`, path helpers;
* `ci.registry.rules`: the keys and value rules both parsers share (and `derived_timeout`);
* `ci.registry.run_all`: ``run_all_paths`` patterns (``!`` exclusions, the last match wins);
* `ci.registry.parse`: the node-tree parser, every problem with ``file:line:col``;
* `ci.registry.fast_parse`: the line scanner for the plain block style (equal result, no problems);
* `ci.registry.files`: the repository root, reading (UTF-8 only), loading, the test tree;
* `ci.registry.writer`: the one renderer of entries (lint's suggestions, the plugin, the bot);
* ``schema.json``: the same keys as JSON Schema, for editors (a test keeps it equal to `rules`).

`parse_registry` collects *all* problems (lint wants every one); `load_registry` raises
`RegistryError` holding them.
"""

from __future__ import annotations

from ci.project import ProjectConfig
from ci.registry.files import (
    UNREADABLE_DIR, RepoRootNotFound, TestTree, decode_registry, entry_is, registered_file_problem, unreadable_dir_problem, display_path, explicit_repo_root, find_repo_root, gc_paused, iter_test_files,
    link_problem, load_registry, parse_registry, read_registry_text, scan_test_tree, set_repo_root,
)
from ci.registry.model import (
    ANCHOR_OR_ALIAS, BACKENDS, DUPLICATE_KEY, INVALID_VALUE, MAX_SECONDS, MISSING_KEY, MISSING_REASON, NON_POSITIVE,
    NIGHTLY, NOT_UTF8, PER_COMMIT, REGISTRY_FILENAME, SCHEDULES, SCHEMA_VERSION, CulpritPolicy, QuarantineEvidence, QuarantinePolicy,
    QuarantinedNode, UNKNOWN_KEY, UNKNOWN_TIER, WRONG_TYPE, YAML_SYNTAX, Problem,
    Registry, RegistryError, Status, StepTemplate, TestEntry, Tier, default_backend, is_gfx, normalize_path, path_is_under, sm_capability, yaml_scalar,
)
from ci.registry.rules import FEATURES, derived_timeout
from ci.registry.run_all import covers_everything_under, deciding_pattern, run_all_rule

__all__ = [
    "ANCHOR_OR_ALIAS", "BACKENDS", "default_backend", "is_gfx", "covers_everything_under", "deciding_pattern", "run_all_rule", "DUPLICATE_KEY", "FEATURES", "INVALID_VALUE", "MAX_SECONDS", "MISSING_KEY", "MISSING_REASON",
    "CulpritPolicy", "NIGHTLY", "NON_POSITIVE", "NOT_UTF8", "PER_COMMIT", "QuarantineEvidence", "QuarantinePolicy", "QuarantinedNode",
    "REGISTRY_FILENAME", "SCHEDULES", "SCHEMA_VERSION", "UNKNOWN_KEY", "UNKNOWN_TIER", "WRONG_TYPE",
    "UNREADABLE_DIR", "YAML_SYNTAX", "entry_is", "registered_file_problem", "unreadable_dir_problem", "Problem", "ProjectConfig", "Registry", "RegistryError", "RepoRootNotFound", "Status",
    "StepTemplate", "TestEntry", "TestTree", "Tier", "decode_registry", "derived_timeout", "display_path", "explicit_repo_root",
    "find_repo_root",
    "gc_paused", "iter_test_files", "link_problem", "load_registry", "normalize_path", "parse_registry",
    "path_is_under", "read_registry_text", "scan_test_tree", "set_repo_root", "sm_capability", "yaml_scalar",
]


def __getattr__(name: str) -> object:
    """``_parse_precise``, the precise parser alone (the benchmark times it), imported on first use:
    it imports PyYAML, which loading a registry in the fast path's subset never needs."""
    if name == "_parse_precise":
        from ci.registry.parse import parse_precise

        return parse_precise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
