"""Step 1 of `bench.mutation` (its docstring): the baseline, and the options every step reads.

Two runs of the candidate test files at the base commit give the universe (files that pass in
both) and each file's mean seconds; ``--max-file-seconds`` leaves slow files out, named, before
the runs (from the tree's own registry) and after them (from the baselines). Kept in
``<workdir>/baseline.json`` for ``--resume``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from bench._mutation_run import SuiteRun, run_suite
from bench._mutation_tree import TreeError, TreeSpec, collect_candidates, has_own_registry, registry_seconds, write_registry
from ci.atomic_write import atomic_write_text


@dataclass(frozen=True)
class Baseline:
    """Step 1's outcome, kept in ``<workdir>/baseline.json`` for ``--resume``."""

    universe: list[str]
    excluded: dict[str, str]
    durations: dict[str, float]
    walls: dict[str, float]


@dataclass(frozen=True)
class Options:
    """The command line, as every step of `bench.mutation` reads it."""

    python: str
    workdir: Path
    mutants: int
    seed: int
    workers: int
    resume: bool
    max_file_seconds: float | None = None
    report_only: bool = False
    observe: bool = False
    by_test: bool = False
    by_test_budget: float | None = None
    flake_runs: int = 0


def say(text: str) -> None:
    """A progress line on stderr (the bench's, never a result)."""
    print(text, file=sys.stderr, flush=True)


def baseline(opts: Options, tree: Path, spec: TreeSpec, env: dict[str, str]) -> Baseline:
    """Step 1 (module docstring): the universe and its seconds, from two runs at the base commit."""
    state = opts.workdir / "baseline.json"
    if opts.resume and state.is_file():
        kept = _within_budget(Baseline(**json.loads(state.read_text())), opts.max_file_seconds, spec)
        _ensure_registry(tree, spec, kept.universe, kept.durations)  # the copy may be new
        atomic_write_text(state, json.dumps(asdict(kept), indent=1))
        return kept
    candidates, excluded = _prefilter(collect_candidates(opts.python, tree, env), tree, spec, opts.max_file_seconds)
    runs: list[SuiteRun] = []
    for i in (1, 2):
        say(f"bench mutation: baseline run {i} of {len(candidates)} test files")
        run = run_suite(opts.python, tree, candidates, opts.workdir / f"baseline{i}.xml", workers=opts.workers,
                        limit=3600, extra_env=env)
        if run.failing is None:
            raise TreeError(f"baseline run {i} gave no verdict: {run.broken}: {run.tail[-300:]!r}")
        runs.append(run)
    failed = {f: "failed in baseline run " + " and ".join(str(i + 1) for i, r in enumerate(runs) if f in r.failing)
              for f in sorted(runs[0].failing | runs[1].failing)}  # type: ignore[operator]
    universe = [f for f in candidates if f not in failed]
    durations = {f: (runs[0].durations.get(f, 0.0) + runs[1].durations.get(f, 0.0)) / 2 for f in universe}
    result = _within_budget(Baseline(universe, {**excluded, **failed}, durations,
                                     {"baseline run 1": runs[0].wall, "baseline run 2": runs[1].wall}),
                            opts.max_file_seconds, spec)
    _ensure_registry(tree, spec, universe, durations)
    atomic_write_text(state, json.dumps(asdict(result), indent=1))
    return result


def _ensure_registry(tree: Path, spec: TreeSpec, universe: list[str], durations: dict[str, float]) -> None:
    """The generated registry, for a tree without one of its own. A tree that tracks its own
    (this repository) keeps it: its tests read it, and a generated one in its place failed
    ``tests/ci/test_registry.py`` under every mutant, for the registry and not the mutant."""
    if not has_own_registry(tree):
        write_registry(tree, spec, universe, durations)


PREFILTERED = "est_time "  # how an exclusion by the tree's own registry starts


def _prefilter(candidates: list[str], tree: Path, spec: TreeSpec,
               limit: float | None) -> tuple[list[str], dict[str, str]]:
    """``--max-file-seconds`` before any run, for a tree with its own registry: the candidates
    whose est_time there exceeds ``limit`` are left out, named (the baselines would otherwise run
    them twice only to drop them); ``spec.keep`` files stay."""
    seconds = registry_seconds(tree) if limit is not None else {}
    slow = {f: f"{PREFILTERED}{seconds[f]:g} s in the tree's registry.yaml, over --max-file-seconds {limit:g}"
            for f in candidates if seconds.get(f, 0.0) > (limit or 0.0) and not spec.kept(f)}
    return [f for f in candidates if f not in slow], slow


def _within_budget(base: Baseline, limit: float | None, spec: TreeSpec) -> Baseline:
    """``--max-file-seconds``: leave out of the universe, named, every file whose mean baseline
    seconds exceed ``limit`` (each mutant runs the whole universe; this bounds its cost), except
    the tree's ``keep`` files."""
    if limit is None:
        return base
    slow = {f: f"{base.durations[f]:.1f} s in the baselines, over --max-file-seconds {limit:g}"
            for f in base.universe if base.durations.get(f, 0.0) > limit and not spec.kept(f)}
    if not slow:
        return base
    universe = [f for f in base.universe if f not in slow]
    return Baseline(universe, {**base.excluded, **slow}, {f: base.durations[f] for f in universe}, base.walls)
