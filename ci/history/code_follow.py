"""A device error that follows the code, not the machines: a breakage read as a pool's fault.

Contract: `follows_code(store, repo, tier, node_id, kind, sha, order, full)` is asked of a failure
with an infra-looking error of ``kind`` (``cases.infra``: a CUDA, NCCL... error) that no runner is
out of line for: when `ci.history.runners` would call it the whole pool's (`ci.history.runners.pool_wide`:
every recent run of the test failed so, on several runners, with no pass between, as an image or
driver change would), and when it follows the test (it failed so on other runners). It returns the
`CodeSplit` when the test's runs split by the code they hold rather than by the time they ran:
there is a default-branch commit C such that

- every run that failed so holds C (a default-branch run at C or after it in ``order``, a pull
  request run whose merge base `ci.history.mainline.place` puts there; C is the oldest code that
  failed so), at least `MIN_FAILED` of them from `MIN_SOURCES` pull requests or main commits other
  than the judged one's, on `MIN_RUNNERS` runners;
- no run holding C passed the test (so a run of older code that failed so, which makes C older,
  leaves passes of that code on the wrong side: a changed driver or image fails whatever code it
  meets, and code that passed before it does not split);
- after the first run holding C failed so, at least one run without C (a pull request based before
  C) passed the test: at the same time, on the same pool, the code without C passes and the code
  with it fails. Without such a run the two readings cannot be told apart, and the pool's stands.

Then the error is the code's, whatever its words: rule 1 of `ci.history.verdict` does not blame the
pool, and the default-branch runs that failed so count as the test's failures (a streak a commit
began). Runs whose code cannot be placed (no merge base, a commit the order lacks) say nothing.
Without such a split, or with a run without C failing so after C's first failure, the pool's reading
stands. The judged run and its pull request's other runs never count (one change's JUnit).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ci.history.mainline import place, position
from ci.history.model import DEFAULT_BRANCH_EVENTS, PASS
from ci.history.runners import Source, sources_of
from ci.history.store import Store
from ci.history.verdict_queries import cut, repo_condition

MIN_FAILED = 3
MIN_SOURCES = 2
MIN_RUNNERS = 2
LOOKBACK = 400  # the test's newest reports read: the question is about the spell now under way

# one row per report, its attempts grouped
_RUNS = """SELECT r.id, r.runner, r.sha, r.pr, r.event, r.base_sha,
    MAX(CASE WHEN c.infra = ? THEN 1 ELSE 0 END), MAX(CASE WHEN c.kind = '{passed}' THEN 1 ELSE 0 END)
    FROM reports r JOIN cases c ON c.report_id = r.id WHERE {repo}r.tier = ? AND c.node_id = ?{until}
    GROUP BY r.id, r.runner, r.sha, r.pr, r.event, r.base_sha ORDER BY r.id DESC LIMIT {limit}"""


@dataclass(frozen=True)
class CodeSplit:
    """The test's runs split at ``since`` (a default-branch commit): ``failed`` runs holding it
    failed so (``sources`` pull requests and main commits, ``runners`` machines), ``passed_beside``
    runs without it passed after the first of them; ``kind`` the infra-looking error's kind."""

    since: str
    kind: str
    failed: int
    sources: int
    runners: int
    passed_beside: int

    def describe(self) -> str:
        """``its cuda errors follow the code: all 4 runs holding abc1234 (3 sources, 2 runners) ...``"""
        return (f"its {self.kind} errors follow the code, not the machines: all {self.failed} runs holding "
                f"{self.since[:7]} ({self.sources} pull requests and main commits, {self.runners} runners) failed "
                f"so, and {self.passed_beside} without it passed since")


@dataclass(frozen=True)
class _Run:
    report: int
    runner: str
    at: int  # the position in the order of the code it holds
    failed_so: bool
    passed: bool
    source: Source


def follows_code(store: Store, repo: str, tier: str, node_id: int | None, kind: str, sha: str,
                 order: Sequence[str], full: Sequence[str], *, as_of: int | None = None) -> CodeSplit | None:
    """The `CodeSplit` of the test ``node_id``'s failures of ``kind`` on ``tier``, judged for a run at
    ``sha``, when they follow a default-branch commit of ``order`` (see the module docstring); None
    otherwise. ``full``: every tier's default-branch commits, oldest first, to place a merge base
    that did not run the tier."""
    if node_id is None or not kind or not order:
        return None
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    rows = store.fetchall(_RUNS.format(passed=PASS, repo=where, until=until, limit=LOOKBACK),
                          (kind, *params, tier, node_id, *limit))
    source = sources_of([(str(s), pr) for _, _, s, pr, *_ in rows], sha)
    runs = []
    placed: dict[tuple[bool, str], int | None] = {}  # many runs share a commit or a merge base
    for rid, runner, commit, pr, event, base, bad, passed in rows:
        if (src := source(str(commit), pr)) == "own":
            continue
        main = event in DEFAULT_BRANCH_EVENTS
        code = str(commit) if main else str(base or "")
        if code and (main, code) not in placed:
            placed[(main, code)] = position(order, code) if main else place(order, full, code)
        if (at := placed.get((main, code)) if code else None) is not None:
            runs.append(_Run(int(rid), str(runner or ""), at, bool(int(bad)), bool(int(passed)) and not int(bad), src))
    failing = [run for run in runs if run.failed_so]
    if len(failing) < MIN_FAILED:
        return None
    since = min(run.at for run in failing)
    first = min(run.report for run in failing)
    holding = [run for run in runs if run.at >= since]
    without = [run for run in runs if run.at < since]
    if any(run.passed for run in holding):  # also what rejects a run of older code failing so: C is then older
        return None
    passed_beside = sum(1 for run in without if run.passed and run.report > first)
    sources = {run.source for run in failing}
    names = {run.runner for run in failing} - {""}
    if not passed_beside or len(sources) < MIN_SOURCES or len(names) < MIN_RUNNERS:
        return None
    return CodeSplit(order[since], kind, len(failing), len(sources), len(names), passed_beside)


class CodeQuestion:
    """`follows_code`'s question about one failure, asked at most once (rule 1 asks it only when the
    pool would be blamed or the error follows the test), its answer kept in ``split``; calling it
    says whether the failures follow a commit."""

    def __init__(self, store: Store, repo: str, tier: str, node_id: int | None, kind: str, sha: str,
                 order: Sequence[str], full: Sequence[str], *, as_of: int | None = None) -> None:
        self.kind = kind
        self._ask = (store, repo, tier, node_id, kind, sha, order, full, as_of)
        self._asked = False
        self.split: CodeSplit | None = None

    def __call__(self) -> bool:
        if not self._asked:
            store, repo, tier, node_id, kind, sha, order, full, as_of = self._ask
            self.split = follows_code(store, repo, tier, node_id, kind, sha, order, full, as_of=as_of)
            self._asked = True
        return self.split is not None
