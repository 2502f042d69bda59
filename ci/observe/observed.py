"""Observing an adopter's own command: the environment that records it, and the map at its end.

`prepare` makes a parts directory ready and returns the variables that switch recording on in
every Python process the command starts under this interpreter (or another with ``ci``
importable and coverage.py installed), however deep: the recorder's start-up hook
(`ci.observe.startup`, installed here), the recording's directory and root (`PARTS_ENV`,
`ROOT_ENV`), the test files' roots and patterns (`OBSERVE_ENV`, read by
`ci.observe.script_test`), the map variable that makes a pytest of the tree record per test
file (`RECORD_ENV`; the pytest is not the recording's owner, the parts directory is this one's),
and coverage.py's config for interpreters the slipcover hook does not start in; with ``by_test``
also `ci.observe.bytest` in ``PYTEST_PLUGINS`` (lines per node id). `collect` merges what the
processes left (`ci.observe.merge`, `ci.observe.bytest_parts.read_parts`) into one map, and says which
test files have no complete entry and why.

Contract: `prepare` raises `ValueError` for options the recorder refuses (``CI_DEPMAP_CORE``, a
core ``by_test`` cannot record beside: `ci.observe.bytest_parts.refusal`) and
`OSError` when the hook or the directory cannot be written; `collect` raises `ValueError` for a
directory `prepare` did not make, and `OSError`/`ValueError` for parts it cannot read.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from ci.observe import startup, worktree
from ci.observe.bytest_parts import BYTEST_ENV, PLUGIN, read_parts, refusal
from ci.observe.child_config import write_child_config
from ci.observe.files import (CHILD_CORE_ENV, OBSERVE_ENV, OBSERVED_PYTEST_ENV, PARTS_ENV, RECORD_ENV, ROOT_ENV,
                              TEST_ENV, RepoFiles)
from ci.observe.live import unheard_reasons
from ci.observe.options import record_options
from ci.selection.depmap_format import DepMap

META = "observe.json"  # what `collect` needs of `prepare`: the root and tier
UNFINISHED = "a process of it ended without saving, or not every test finished"


@dataclass(frozen=True)
class Partial:
    """A test file without a complete entry ("" for the command's own, non-test processes)."""

    test: str
    reason: str


def prepare(parts: Path, root: Path, test_roots: Sequence[str], test_patterns: Sequence[str],
            tier: str | None, by_test: bool = False, plugins: str = "") -> dict[str, str]:
    """See the module docstring; ``parts`` exists and is empty; ``plugins``: the caller's own
    ``PYTEST_PLUGINS``, kept. Returns the variables to add."""
    options = record_options()
    why_not = refusal(options.core) if by_test else None
    if why_not is not None:
        raise ValueError(why_not)
    hook = startup.install()
    if hook is None:
        raise OSError("cannot write the recorder's start-up hook into this interpreter's site-packages")
    files = RepoFiles(root)
    config = write_child_config(parts, files, options.core)
    worktree.snapshot(parts, root)
    (parts / META).write_text(json.dumps({"root": str(root), "tier": tier}), encoding="utf-8")
    env = {PARTS_ENV: str(parts), ROOT_ENV: str(root), RECORD_ENV: str(parts / "unused-map.json"),
           OBSERVE_ENV: ",".join(test_roots) + "|" + ",".join(test_patterns), "COVERAGE_PROCESS_START": str(config)}
    if options.core in ("slipcover", "sysmon") and options.subprocesses:
        env[CHILD_CORE_ENV] = options.core  # the hook measures the children (`ci.observe.child`), not coverage.py
    if by_test:
        env.update({BYTEST_ENV: str(parts), "PYTEST_PLUGINS": ",".join(p for p in (plugins, PLUGIN) if p)})
    return env


def observed_env(base: dict[str, str], added: dict[str, str]) -> dict[str, str]:
    """``base`` without another recording's per-process variables, plus ``added``."""
    dropped = {TEST_ENV, OBSERVED_PYTEST_ENV, CHILD_CORE_ENV, BYTEST_ENV}
    return {**{k: v for k, v in base.items() if k not in dropped}, **added}


def collect(parts: Path) -> tuple[DepMap, list[Partial]]:
    """The map of what ran, and each test file without a complete entry (see the module docstring)."""
    try:
        meta = json.loads((parts / META).read_text(encoding="utf-8"))
        root, tier = Path(meta["root"]), meta["tier"]
    except (OSError, ValueError, KeyError, TypeError):
        raise ValueError(f"{parts}: not a directory that `ci observe --env` prepared (no readable {META})") from None
    from ci.observe.merge import build_map  # deferred: it imports coverage.py

    depmap = build_map(parts, RepoFiles(root), tier, *worktree.finish(parts, root))
    by_test = read_parts(parts)
    if by_test:  # an id's lines are worth no more than its file's entry: partial there, partial here
        depmap = replace(depmap, tests={test: replace(entry, by_test=replace(by_test[test], complete=by_test[
            test].complete and entry.complete)) if test in by_test else entry for test, entry in depmap.tests.items()})
    reasons = unheard_reasons(parts)
    partial = [Partial("", reasons[""])] if "" in reasons else []
    partial += [Partial(test, reasons.get(test, UNFINISHED)) for test, entry in sorted(depmap.tests.items())
                if not entry.complete and "" not in reasons]
    return depmap, partial
