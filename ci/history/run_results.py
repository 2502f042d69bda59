"""A run's results read back from the history, as the failures `ci.history.verdict.judge` takes.

Contract: `load_run(store, pr=N)` reads the newest commit a pull request's reports were ingested
for (its pull_request and rerun reports); `load_run(store, sha=S)` the reports of commit ``S`` (a
prefix of 7 or more hex digits names it when one commit has it). ``tier`` narrows either to one
tier, ``repo`` to one repository. Per (test, tier), its attempts over those reports, in ingest
order: a test with a pass is passed (with a `Failure` of ``passed_on_retry`` when it also failed:
a flake within the run), one with only failures is failed, else skipped. A failure speaks with its
last failed attempt that has text, preferring one that is not infra: a breakage that also met a
bad machine on its rerun is still a breakage. ``report_id`` is the newest report's id, the cut
`ci.history.verdict.judge` takes as ``as_of``. `LookupError` when no report matches, naming what
was asked.

`load_pr_run(store, pr)` is ``ci history verdicts --pr``'s: the run of the newest merge queue batch
that holds the pull request (``reports.batch``; the reports of the batch's merge commit, as
``load_run(sha=...)`` reads them) when it was ingested after the pull request's own newest report
or the pull request has none, else `load_run(store, pr=pr)`. A batch is looked for in the pull
request's repository when it has reports, narrowed by ``tier`` and ``repo`` as `load_run` is.

`failures_in_report(cases, tier)` folds one JUnit report's cases (a run not yet in the history,
as `ci run` has it) the same way, with the same error line, signature and infra cause ingest
would store.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ci.history.ingest import case_rows, node_id
from ci.history.model import BROKEN, FAIL, MERGE_GROUP, PASS, SKIP
from ci.history.store import Store
from ci.history.verdict import Failure
from ci.results.junit import CaseResult


@dataclass(frozen=True)
class RunResults:
    """What a run of one commit holds, summed over its reports (tiers, shards, run attempts)."""

    repo: str
    sha: str
    pr: int | None
    base_sha: str
    tiers: tuple[str, ...]
    runners: tuple[str, ...]
    passed: int
    failed: int
    skipped: int
    failures: tuple[Failure, ...]  # the failed tests, and the passed ones that failed first
    report_id: int = 0  # the newest report's id: the history a verdict on this run reads (`judge`'s as_of)
    events: tuple[str, ...] = ()  # of its reports, sorted (a landed batch's commit: merge_group and push)
    batch: tuple[int, ...] = ()  # a merge_group run's pull requests, as ingested


_REPORTS = "SELECT id, repo, sha, pr, tier, runner, base_sha, event, batch FROM reports WHERE {where} ORDER BY id"
# batch is space-separated: pad it so that " 15 " matches #15 alone, never #150 or #115
_QUEUED = "SELECT sha, id FROM reports WHERE event = ? AND (' ' || batch || ' ') LIKE ?{where} ORDER BY id DESC LIMIT 1"
_CASES = """SELECT c.report_id, n.node, c.attempt, c.kind, c.fingerprint, c.error, c.infra
    FROM cases c JOIN nodes n ON n.id = c.node_id WHERE c.report_id IN ({marks}) ORDER BY c.report_id, c.attempt"""


def load_run(store: Store, *, pr: int | None = None, sha: str | None = None, tier: str | None = None,
             repo: str | None = None) -> RunResults:
    """The run of pull request ``pr`` (its newest commit) or of commit ``sha`` (see the module docstring)."""
    if (pr is None) == (sha is None):
        raise ValueError("give a pull request or a commit, not both or neither")
    extra, params = _narrow(tier, repo)
    if pr is not None:
        rows = store.fetchall(_REPORTS.format(where="pr = ?" + extra), [pr, *params])
        if not rows:
            raise LookupError(f"no report of pull request #{pr}{_said(tier, repo)} in the history")
        newest = rows[-1][2]
        rows = [r for r in rows if r[2] == newest]
    else:
        assert sha is not None
        rows = store.fetchall(_REPORTS.format(where="sha LIKE ?" + extra), [sha.lower() + "%", *params])
        shas = {str(r[2]) for r in rows}
        if len(shas) > 1:
            raise LookupError(f"commit {sha} is ambiguous in the history: {', '.join(sorted(s[:12] for s in shas))}")
        if not rows:
            raise LookupError(f"no report of commit {sha}{_said(tier, repo)} in the history")
    return _fold(store, rows)


def load_pr_run(store: Store, pr: int, *, tier: str | None = None, repo: str | None = None) -> RunResults:
    """The pull request's newest commit's run, or its newest merge queue batch's (see the module docstring)."""
    extra, params = _narrow(tier, repo)
    own = store.fetchall(_REPORTS.format(where="pr = ?" + extra), [pr, *params])
    if own and not repo:
        extra, params = _narrow(tier, str(own[-1][1]))
    queued = store.fetchall(_QUEUED.format(where=extra), [MERGE_GROUP, f"% {pr} %", *params])
    if not queued or (own and int(own[-1][0]) > int(queued[0][1])):
        return load_run(store, pr=pr, tier=tier, repo=repo)
    return _fold(store, store.fetchall(_REPORTS.format(where="sha = ?" + extra), [str(queued[0][0]), *params]))


def _narrow(tier: str | None, repo: str | None) -> tuple[str, list[str]]:
    where, params = "", []
    if tier:
        where, params = where + " AND tier = ?", params + [tier]
    if repo:
        where, params = where + " AND repo = ?", params + [repo]
    return where, params


def _said(tier: str | None, repo: str | None) -> str:
    return (f" on tier {tier}" if tier else "") + (f" of {repo}" if repo else "")


def _fold(store: Store, reports: list[tuple]) -> RunResults:
    info = {int(r[0]): r for r in reports}
    repo, sha, pr = str(reports[-1][1]), str(reports[-1][2]), reports[-1][3]
    base = next((str(r[6]) for r in reversed(reports) if r[6]), "")
    attempts: dict[tuple[str, str], list[tuple[int, str, str, str, str]]] = {}
    ids = sorted(info)
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        for rid, node, _, kind, fp, error, infra in store.fetchall(_CASES.format(marks=", ".join("?" * len(chunk))),
                                                                   chunk):
            attempts.setdefault((str(node), str(info[int(rid)][4])), []).append(
                (int(rid), str(kind), str(fp), str(error), str(infra)))
    passed = failed = skipped = 0
    failures: list[Failure] = []
    for (node, tier), seen in sorted(attempts.items()):
        kinds = [k for _, k, _, _, _ in seen]
        bad = [a for a in seen if a[1] in (FAIL, BROKEN)]
        if PASS in kinds:
            passed += 1
        elif bad:
            failed += 1
        else:
            skipped += 1
        if not bad:
            continue
        # The last failure with text speaks; a code failure over an infra one (a breakage that also
        # met a bad machine on its rerun is still a breakage).
        texts = [a for a in bad if a[3] or a[2]]
        speaking = next((a for a in reversed(texts) if not a[4]), texts[-1] if texts else bad[-1])
        rid, _, fp, error, infra = speaking
        failures.append(Failure(node, tier, sha, repo, error, fp, infra, str(info[rid][5]), len(bad), PASS in kinds))
    return RunResults(repo, sha, int(pr) if pr is not None else None, base,
                      tuple(sorted({str(r[4]) for r in reports})), tuple(sorted({str(r[5]) for r in reports if r[5]})),
                      passed, failed, skipped, tuple(failures), max(info), tuple(sorted({str(r[7]) for r in reports})),
                      next((tuple(int(n) for n in str(r[8]).split()) for r in reversed(reports) if r[8]), ()))


def failures_in_report(cases: Sequence[CaseResult], tier: str, *, sha: str = "", repo: str = "",
                       runner: str = "") -> tuple[list[Failure], int, int, int]:
    """(failures, passed, failed, skipped) of one report's tests (see the module docstring)."""
    failures: list[Failure] = []
    passed = failed = skipped = 0
    for case in cases:
        rows = case_rows(case)
        kinds = [r.kind for r in rows]
        bad = [r for r in rows if r.kind in (FAIL, BROKEN)]
        if kinds[-1] == PASS:
            passed += 1
        elif kinds[-1] == SKIP and not bad:
            skipped += 1
        else:
            failed += 1
        if not bad:
            continue
        texts = [r for r in bad if r.error or r.fingerprint]
        speaking = next((r for r in reversed(texts) if not r.infra), texts[-1] if texts else bad[-1])
        failures.append(Failure(node_id(case), tier, sha, repo, speaking.error, speaking.fingerprint, speaking.infra,
                                runner, len(bad), kinds[-1] == PASS))
    return failures, passed, failed, skipped
