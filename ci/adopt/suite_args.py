"""An imported suite's within-file filters (``-k``, ``-m``, ``--deselect``) as registry ``pytest_args``.

A command line's filters apply to every file it collects, except a file it names by node id
(``tests/x.py::test_a``), which the registry cannot say (a node id in ``pytest_args`` would add
tests to every file's run): such a file has no expressible args (None). Placing them:

1. a tier takes the args as its ``pytest_args`` when every (suite, file) placed on it has the same
   args: the common case of one suite per tier (one Buildkite step, one make target per job);
2. otherwise each file on that tier takes them as its entry's ``pytest_args`` when all its
   (suite, file) pairs on such tiers agree, and none of its tiers has args of its own (a tier's
   args come first on the command line, so the two would mix);
3. otherwise the file runs whole on those tiers, and a note says why.

A tier that already has ``pytest_args`` in the base registry is never given others (step 1 skips it).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from ci.adopt.pytest_argv import FILTER_OPTIONS, PytestCommand
from ci.adopt.suite_import import tiers_for
from ci.registry import Registry
from ci.registry.rules import pytest_args_problem


@dataclass(frozen=True)
class FileFilter:
    """``path`` collected by a command of ``suite``, with the args that select within it (``()``:
    the whole file; None: a node id names it, which ``pytest_args`` cannot say)."""

    suite: str
    path: str
    args: tuple[str, ...] | None


@dataclass
class PlacedArgs:
    """The registry with the args placed; ``carried`` suite -> where its filters went (a phrase);
    ``notes`` one line per kind of file left running whole."""

    registry: Registry
    carried: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def command_filters(command: PytestCommand, files: Iterable[str]) -> list[tuple[str, tuple[str, ...] | None]]:
    """(file, its args) for each of ``files`` that ``command`` collects: the command's ``-k`` /
    ``-m`` / ``--deselect`` options in their order, or None for a file one of its node ids names."""
    options: list[str] = []
    named: set[str] = set()
    words = iter(command.filters)
    for word in words:
        if word in FILTER_OPTIONS:
            options += [word, next(words)]
        else:
            named.add(posixpath.normpath(posixpath.join(command.cwd, word.partition("::")[0])))
    return [(f, None if f in named else tuple(options)) for f in files]


def place_args(registry: Registry, filters: list[FileFilter], tier_map: Mapping[str, list[str]]) -> PlacedArgs:
    """``registry`` with ``filters`` as tiers' and entries' ``pytest_args`` (see the module)."""
    on_tier: dict[str, list[FileFilter]] = {}
    for f in filters:
        entry = registry.tests.get(f.path)
        for tier in tiers_for(f.suite, tier_map):
            if entry is not None and entry.is_active and tier in entry.tiers:
                on_tier.setdefault(tier, []).append(f)
    out = PlacedArgs(registry)
    tiers = dict(registry.tiers)
    open_tiers: dict[str, list[FileFilter]] = {}
    for tier, found in on_tier.items():
        kinds = {f.args for f in found}
        if len(kinds) == 1 and None not in kinds and not tiers[tier].pytest_args:
            (args,) = kinds
            if args and pytest_args_problem(args) is None:
                tiers[tier] = replace(tiers[tier], pytest_args=args)
                for suite in dict.fromkeys(f.suite for f in found):
                    out.carried.setdefault(suite, f"tier {tier!r}")
            continue
        open_tiers[tier] = found
    per_file: dict[str, set[tuple[str, ...] | None]] = {}
    for found in open_tiers.values():
        for f in found:
            per_file.setdefault(f.path, set()).add(f.args)
    tests = dict(registry.tests)
    whole: dict[str, list[str]] = {"named by node id": [], "selected differently by its suites": [],
                                   "also on a tier with pytest_args": []}
    for path, kinds in per_file.items():
        entry = tests[path]
        if kinds == {()}:
            continue
        if None in kinds:
            whole["named by node id"].append(path)
        elif len(kinds) > 1:
            whole["selected differently by its suites"].append(path)
        elif any(tiers[t].pytest_args for t in entry.tiers):
            whole["also on a tier with pytest_args"].append(path)
        else:
            (args,) = kinds
            if pytest_args_problem(args) is None:
                tests[path] = replace(entry, pytest_args=args)
    entries: dict[str, set[str]] = {}
    for found in open_tiers.values():
        for f in found:
            if f.args and tests[f.path].pytest_args == f.args:
                entries.setdefault(f.suite, set()).add(f.path)
    for suite, paths in entries.items():
        out.carried.setdefault(suite, f"the entries of {len(paths)} file(s)")
    for why, paths in whole.items():
        if paths:
            out.notes.append(f"{len(paths)} file(s) run whole where their suites select within them ({why}; "
                             f"pytest_args cannot say it), e.g. {', '.join(sorted(paths)[:3])}")
    out.registry = replace(registry.with_tests(tests), tiers=tiers)
    return out


__all__ = ["FileFilter", "PlacedArgs", "command_filters", "place_args"]
