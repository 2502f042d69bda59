"""Telling a (mutant, test file) pair the mutant broke from one a flake broke, for ``bench mutation``.

Contract (``--flake-runs K``):
- Unmutated: the distinct files of the failing pairs are run ``K`` times at the base commit (one
  pytest run of them all per repeat); each test's failures are counted. A file none of whose
  tests failed there has no flake evidence: every pair with it is mutant-broken, and it is not
  rerun under a mutant.
- Under the mutant: for each mutant with a pair whose file did fail unmutated, those files are
  run ``K`` times with the mutant applied (restored from git after), and each test's failures
  are counted.
- A test the mutant broke (`mutant_broke`): it failed under the mutant and either never failed
  unmutated, or failed more often under the mutant than unmutated by a one-sided Fisher exact
  test at `ALPHA` (`ci.history.runners.fisher_greater`). A pair is a flake pair when no test of
  its file was broken by the mutant in that sense, every test that failed under the mutant also
  failed unmutated, and the file failed unmutated: its evidence (each such test with its counts
  and p) is kept and printed, and the report counts it apart from the failing pairs, never drops it.
- Counts are kept in ``<workdir>/flakes.json`` (rewritten after each step, reused by ``--resume``
  when its ``K`` matches): a run killed midway loses at most the step it was in.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from bench._mutation_gen import Mutant
from bench._mutation_run import case_failed, drop_bytecode, read_report, run_suite
from bench._mutation_store import MutantResult
from ci.atomic_write import atomic_write_text
from ci.history.runners import fisher_greater

ALPHA = 0.05  # one pair, one test at a time: a plain 5 % level, no correction across tests


@dataclass
class FailCounts:
    """Failures per test id (``file::class::name``) over ``runs`` runs; ``broken`` counts runs
    without a usable report (they count as runs of no test)."""

    runs: int = 0
    fails: dict[str, int] = field(default_factory=dict)
    broken: int = 0

    def add_report(self, failed: Iterable[str]) -> None:
        self.runs += 1
        for test in failed:
            self.fails[test] = self.fails.get(test, 0) + 1

    def of_file(self, path: str) -> dict[str, int]:
        return {t: n for t, n in self.fails.items() if t.split("::", 1)[0] == path}


@dataclass(frozen=True)
class TestEvidence:
    """One test of a pair: failures unmutated and under the mutant, and the one-sided p."""

    test: str
    unmutated: int
    unmutated_runs: int
    mutated: int
    mutated_runs: int
    p: float


@dataclass(frozen=True)
class PairVerdict:
    """Whether the mutant broke ``file`` (``flake`` False) or a flake did, with the evidence."""

    mutant: str
    file: str
    flake: bool
    evidence: tuple[TestEvidence, ...] = ()

    def describe(self) -> str:
        tests = "; ".join(f"{e.test.split('::', 1)[1]} failed {e.unmutated}/{e.unmutated_runs} unmutated, "
                          f"{e.mutated}/{e.mutated_runs} under the mutant (p={e.p:.2g})" for e in self.evidence)
        return tests or "no test failed in the reruns"


def mutant_broke(unmutated: int, unmutated_runs: int, mutated: int, mutated_runs: int) -> bool:
    """A test failing ``mutated`` of ``mutated_runs`` times under the mutant was broken by it: it
    never failed in the unmutated runs, or it failed significantly more often (module docstring)."""
    if mutated == 0:
        return False
    if unmutated == 0:
        return True
    return fisher_greater(mutated, mutated_runs, unmutated, unmutated_runs) < ALPHA


def judge(mutant: str, path: str, base: FailCounts, under: FailCounts | None) -> PairVerdict:
    """The verdict for one failing pair from the two counts (``under`` None: not rerun, because
    the file never failed unmutated)."""
    base_fails = base.of_file(path)
    if not base_fails or under is None:
        return PairVerdict(mutant, path, False)
    mut_fails = under.of_file(path)
    evidence = tuple(TestEvidence(t, base_fails.get(t, 0), base.runs, mut_fails.get(t, 0), under.runs,
                                  fisher_greater(mut_fails.get(t, 0), under.runs, base_fails.get(t, 0), base.runs))
                     for t in sorted(set(base_fails) | set(mut_fails)))
    broke = any(mutant_broke(e.unmutated, e.unmutated_runs, e.mutated, e.mutated_runs) for e in evidence)
    return PairVerdict(mutant, path, not broke, evidence)


def _failed_tests(junit: Path, tree: Path, files: Sequence[str]) -> list[str] | None:
    report = read_report(junit, tree, files)
    if report is None:
        return None
    return [f"{c.file}::{c.classname}::{c.name}" for c in report.cases if case_failed(c)]


def _repeat(counts: FailCounts, runs: int, python: str, tree: Path, files: Sequence[str], junit: Path, *,
            workers: int, limit: float, env: Mapping[str, str]) -> None:
    while counts.runs + counts.broken < runs:
        suite = run_suite(python, tree, files, junit, workers=workers, limit=limit, extra_env=env)
        failed = None if suite.failing is None else _failed_tests(junit, tree, files)
        if failed is None:
            counts.broken += 1
        else:
            counts.add_report(failed)


def _load(state: Path, runs: int) -> dict[str, FailCounts]:
    if not state.is_file():
        return {}
    data = json.loads(state.read_text())
    if data.get("runs") != runs:
        return {}
    return {key: FailCounts(**value) for key, value in data["counts"].items()}


def _save(state: Path, runs: int, counts: Mapping[str, FailCounts]) -> None:
    atomic_write_text(state, json.dumps({"runs": runs, "counts": {k: asdict(v) for k, v in counts.items()}},
                                        indent=1, sort_keys=True))


UNMUTATED = ""  # the key of the unmutated counts in flakes.json (a mutant id is never empty)


def flake_check(python: str, tree: Path, mutants: Sequence[Mutant], results: Mapping[str, MutantResult],
                workdir: Path, *, runs: int, workers: int, limit: float, env: Mapping[str, str],
                say: Callable[[str], None]) -> list[PairVerdict]:
    """The verdict of every failing pair of the judged mutants (module docstring)."""
    state = workdir / "flakes.json"
    counts = _load(state, runs)
    judged = [m for m in mutants if m.id in results and not results[m.id].broken and results[m.id].failing]
    files = sorted({f for m in judged for f in results[m.id].failing})
    base = counts.setdefault(UNMUTATED, FailCounts())
    if files and base.runs + base.broken < runs:
        say(f"bench mutation: flakes: {len(files)} failing file(s), {runs} unmutated run(s)")
        _repeat(base, runs, python, tree, files, workdir / "flakes.xml", workers=workers, limit=limit, env=env)
        _save(state, runs, counts)
    flaky_files = {f for f in files if base.of_file(f)}
    verdicts = []
    for mutant in judged:
        rerun = [f for f in results[mutant.id].failing if f in flaky_files]
        under = None
        if rerun:
            under = counts.setdefault(mutant.id, FailCounts())
            if under.runs + under.broken < runs:
                say(f"bench mutation: flakes: {mutant.id}: {len(rerun)} file(s) that fail unmutated, {runs} run(s)")
                _under_mutant(mutant, tree, lambda: _repeat(under, runs, python, tree, rerun, workdir / "flakes.xml",
                                                            workers=workers, limit=limit, env=env))
                _save(state, runs, counts)
        verdicts += [judge(mutant.id, f, base, under) for f in results[mutant.id].failing]
    _save(state, runs, counts)
    return verdicts


def _under_mutant(mutant: Mutant, tree: Path, body: Callable[[], None]) -> None:
    target = tree / mutant.path
    try:
        atomic_write_text(target, mutant.source)
        drop_bytecode(target)
        body()
    finally:
        subprocess.run(["git", "checkout", "-q", "--", mutant.path], cwd=tree, check=True)
        drop_bytecode(target)


__all__ = ["ALPHA", "FailCounts", "PairVerdict", "TestEvidence", "flake_check", "judge", "mutant_broke"]
