"""Targets -> registered test files and tiers, using only `ci.registry` and the checked-out tree.

Rules, in order (first match wins):

1. unsafe text (`commands.check_target`) -> `Kind.UNSAFE`;
2. a path (has ``/``) registered exactly, or a basename registered once -> that entry;
   a basename registered more than once -> `Kind.AMBIGUOUS` with the candidates. Only registry
   keys ``ci plan`` could select count: `ci.registry.registered_file_problem` (the one rule plan,
   ``ci run`` and the bot share) rules out a key naming a directory (pytest would run everything
   below it), a dangling link or anything else that is no regular file. Such a key resolves as
   `Kind.UNKNOWN`, its ``detail`` saying what it is and its candidates the runnable registered
   files below it (or the closest ones);
3. not registered but the file exists in the tree -> `Kind.UNREGISTERED` (the reply shows the YAML
   to add); a basename found more than once in the tree lists all of them;
4. otherwise `Kind.UNKNOWN` with the closest registered paths/basenames (difflib);
5. a registered entry whose status is manual or quarantined -> `Kind.NOT_ACTIVE`;
6. ``--tier`` not among the entry's tiers -> `Kind.BAD_TIER`.

Default tiers (no ``--tier``): every tier of the entry whose `Tier.needs_gpu` is true, in registry
order; an entry with only CPU tiers runs on those. The bot exists to re-run GPU tests that PR CI
does not run, and the cpu tier already runs on every push.
"""

from __future__ import annotations

import difflib
import enum
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ci.registry import Registry, TestEntry, normalize_path, path_is_under, registered_file_problem
from tools.rerun.commands import UnsafeTarget, check_target

# Directories never searched for unregistered files (virtual envs, VCS and build output).
_SKIP_DIRS = {"node_modules", "__pycache__", "site-packages", "build", "dist"}
MAX_SUGGESTIONS = 5


class Kind(str, enum.Enum):
    RESOLVED = "resolved"
    UNSAFE = "unsafe"
    AMBIGUOUS = "ambiguous"
    UNKNOWN = "unknown"
    UNREGISTERED = "unregistered"
    NOT_ACTIVE = "not_active"
    BAD_TIER = "bad_tier"


@dataclass(frozen=True)
class Resolution:
    """What one target resolved to.

    ``path`` is the repo-relative file (None when unknown/ambiguous/unsafe); ``node_id`` is the text
    after the first ``::`` (passed through to pytest untouched); ``tiers`` are the tiers to run
    (only for RESOLVED); ``candidates`` are ambiguous matches or suggestions; ``detail`` explains
    UNSAFE targets.
    """

    target: str
    kind: Kind
    path: str | None = None
    node_id: str | None = None
    entry: TestEntry | None = None
    tiers: tuple[str, ...] = ()
    requested_tier: str | None = None
    candidates: tuple[str, ...] = ()
    detail: str = ""

    @property
    def test_id(self) -> str:
        """What pytest gets: the path, plus ``::node_id`` when one was given."""
        if self.path is None:
            raise ValueError(f"target {self.target!r} did not resolve to a file ({self.kind.value})")
        return f"{self.path}::{self.node_id}" if self.node_id else self.path


def default_tiers(registry: Registry, entry: TestEntry) -> tuple[str, ...]:
    """The tiers a target runs on without ``--tier`` (see the module docstring)."""
    gpu = tuple(t for t in entry.tiers if registry.tiers[t].needs_gpu)
    return gpu or entry.tiers


def find_in_tree(root: Path, basename: str) -> list[str]:
    """Repo-relative paths of every file named ``basename`` below ``root`` (hidden and build
    directories skipped), sorted. Compares names, never globs, so brackets in names are literal."""
    found: list[str] = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS]
        if basename in files:
            found.append((Path(directory) / basename).relative_to(root).as_posix())
    return sorted(found)


def _is_file_in_tree(root: Path, path: str) -> bool:
    candidate = (root / path)
    try:
        # Symlinks pointing outside the checkout do not count as "in the tree".
        return candidate.is_file() and candidate.resolve().is_relative_to(root.resolve())
    except OSError:
        return False


def suggestions(registry: Registry, name: str) -> tuple[str, ...]:
    """The registered paths closest to ``name`` (compared by basename, or by path if ``name`` has
    a ``/``), best first."""
    if "/" in name:
        return tuple(difflib.get_close_matches(name, list(registry.tests), n=MAX_SUGGESTIONS, cutoff=0.6))
    by_base: dict[str, list[str]] = {}
    for path in registry.tests:
        by_base.setdefault(PurePosixPath(path).name, []).append(path)
    close = difflib.get_close_matches(name, list(by_base), n=MAX_SUGGESTIONS, cutoff=0.6)
    return tuple(p for base in close for p in by_base[base])[:MAX_SUGGESTIONS]


def _not_runnable(registry: Registry, root: Path, target: str, entry: TestEntry, node: str | None,
                  tier: str | None) -> Resolution:
    """A registry key that names no runnable test file (see rule 2): `Kind.UNKNOWN`, never run."""
    below = tuple(p for p in registry.tests
                  if p != entry.path and path_is_under(p, entry.path) and registered_file_problem(root, p) is None)
    candidates = below[:MAX_SUGGESTIONS] or tuple(
        p for p in suggestions(registry, entry.path) if p != entry.path and registered_file_problem(root, p) is None)
    return Resolution(target, Kind.UNKNOWN, node_id=node, requested_tier=tier, candidates=candidates,
                      detail=f"{entry.path} {registered_file_problem(root, entry.path)}")


def resolve_target(registry: Registry, root: Path, target: str, tier: str | None = None) -> Resolution:
    """Resolve one target (see the module docstring for the rules)."""
    try:
        check_target(target)
    except UnsafeTarget as exc:
        return Resolution(target, Kind.UNSAFE, requested_tier=tier, detail=str(exc))
    file_part, _, node_id = target.partition("::")
    node = node_id or None
    name = normalize_path(file_part)

    entry: TestEntry | None
    if "/" in name:
        entry = registry.entry(name)
        if entry is not None and registered_file_problem(root, entry.path) is not None:
            return _not_runnable(registry, root, target, entry, node, tier)
        if entry is None:
            if _is_file_in_tree(root, name):
                return Resolution(target, Kind.UNREGISTERED, path=name, node_id=node, requested_tier=tier)
            return Resolution(target, Kind.UNKNOWN, node_id=node, requested_tier=tier,
                              candidates=suggestions(registry, name))
    else:
        every = registry.by_basename(name)
        matches = [e for e in every if registered_file_problem(root, e.path) is None]
        if not matches and every:
            return _not_runnable(registry, root, target, every[0], node, tier)
        if len(matches) > 1:
            return Resolution(target, Kind.AMBIGUOUS, node_id=node, requested_tier=tier,
                              candidates=tuple(e.path for e in matches))
        if not matches:
            in_tree = find_in_tree(root, name)
            if len(in_tree) == 1:
                return Resolution(target, Kind.UNREGISTERED, path=in_tree[0], node_id=node, requested_tier=tier)
            if in_tree:
                return Resolution(target, Kind.UNREGISTERED, node_id=node, requested_tier=tier,
                                  candidates=tuple(in_tree))
            return Resolution(target, Kind.UNKNOWN, node_id=node, requested_tier=tier,
                              candidates=suggestions(registry, name))
        entry = matches[0]

    if not entry.is_active:
        return Resolution(target, Kind.NOT_ACTIVE, path=entry.path, node_id=node, entry=entry, requested_tier=tier)
    if tier is not None:
        if tier not in entry.tiers:
            return Resolution(target, Kind.BAD_TIER, path=entry.path, node_id=node, entry=entry,
                              requested_tier=tier, candidates=entry.tiers)
        tiers: tuple[str, ...] = (tier,)
    else:
        tiers = default_tiers(registry, entry)
    return Resolution(target, Kind.RESOLVED, path=entry.path, node_id=node, entry=entry, tiers=tiers,
                      requested_tier=tier)
