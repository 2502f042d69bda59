"""Order dependence: a test that fails only in the jobs where a certain other test file also ran.

Contract: `order_dependence(runs, order, fingerprint, files, own_file)` reads the test's attempts
(the default branch's, and pull request runs' at their merge base, as `ci.history.changepoint`
reads them) one job (report) at a time: a job *failed* when an attempt failed with
``fingerprint``, *passed* when its first attempt passed; infra failures, skips and other errors say
nothing and are left out. ``files[report_id]`` is the set of test files the job ran. A file X
(never the test's own) is the cause the failures follow when:

- every failed job ran X and no passed job did (the failures follow the job's layout, which moves
  as files are added and sharding deals them anew), with at least `MIN_JOBS` of each;
- that split is unlikely by chance: for a failing that ignores X, the chance that the failed jobs
  are exactly the ones holding X is ``1 / C(failed + passed, failed)``, under `ALPHA` divided by
  the number of files tried (Bonferroni);
- it came and went with the code: in commit order the test failed, then passed, then failed again,
  so no single commit's breakage (which fails every job from it on) explains it.

A test polluted by another file's state (a cache, a global, a CUDA context) fails every attempt in
such a job, retries included, and passes in every other: it is the test's flakiness, not the
change of the commit where the layout last moved. `job_files` reads the files of jobs from the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Mapping, Sequence

from ci.history.mainline import MainRun
from ci.history.model import FAIL, PASS
from ci.history.store import Store
from ci.history.verdict_queries import cut, repo_condition

MIN_JOBS = 3
ALPHA = 0.01
_CHUNK = 500


@dataclass(frozen=True)
class OrderDependence:
    """The test fails with its signature only in the jobs that also ran ``file``: ``failed`` such
    jobs failed it, ``passed`` jobs without it passed it."""

    file: str
    failed: int
    passed: int

    def describe(self) -> str:
        """``fails only in jobs that also ran tests/b.py (6 with it failed, 9 without it passed)``"""
        return (f"fails only in jobs that also ran {self.file} ({self.failed} with it failed, "
                f"{self.passed} without it passed): order-dependent")


def order_dependence(runs: Sequence[MainRun], order: Sequence[str], fingerprint: str,
                     files: Mapping[int, frozenset[str]], own_file: str) -> OrderDependence | None:
    """The file whose presence in the job the test's failures with ``fingerprint`` follow (see
    the module docstring), or None."""
    if not fingerprint:
        return None
    where = {sha: i for i, sha in enumerate(order)}
    seen: dict[int, list[MainRun]] = {}
    for r in runs:
        if r.report_id in files and r.sha in where:
            seen.setdefault(r.report_id, []).append(r)
    jobs: dict[int, tuple[int, bool]] = {}
    for rid, attempts in seen.items():
        if any(a.kind == FAIL and a.fingerprint == fingerprint and not a.infra for a in attempts):
            jobs[rid] = (where[attempts[0].sha], True)  # stock reruns carry no text: any attempt may speak
        elif attempts[0].kind == PASS:
            jobs[rid] = (where[attempts[0].sha], False)
    failed = [rid for rid, (_, hit) in jobs.items() if hit]
    passed = [rid for rid, (_, hit) in jobs.items() if not hit]
    if len(failed) < MIN_JOBS or len(passed) < MIN_JOBS:
        return None
    tried = sorted(frozenset.intersection(*(files[rid] for rid in failed)) - {own_file})
    if not tried or len(tried) / comb(len(failed) + len(passed), len(failed)) >= ALPHA:
        return None
    walk = [hit for _, _, hit in sorted((pos, rid, hit) for rid, (pos, hit) in jobs.items())]
    if not _came_back(walk):
        return None
    for name in tried:
        if not any(name in files[rid] for rid in passed):
            return OrderDependence(name, len(failed), len(passed))
    return None


def _came_back(walk: Sequence[bool]) -> bool:
    """Whether the outcomes in commit order go fail, pass, fail (in that order, others between)."""
    state = 0
    for hit in walk:
        if state in (0, 2) and hit:
            state += 1
        elif state == 1 and not hit:
            state = 2
        if state == 3:
            return True
    return False


def job_files(store: Store, report_ids: Sequence[int]) -> dict[int, frozenset[str]]:
    """The test files each of ``report_ids`` (jobs) ran, from the tests it reported."""
    out: dict[int, set[str]] = {}
    ids = sorted(set(report_ids))
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        for rid, name in store.fetchall("SELECT DISTINCT c.report_id, n.file FROM cases c JOIN nodes n "
                                        f"ON n.id = c.node_id WHERE c.report_id IN ({', '.join('?' * len(chunk))})",
                                        chunk):
            out.setdefault(int(rid), set()).add(str(name))
    return {rid: frozenset(names) for rid, names in out.items()}


def judged_jobs(store: Store, repo: str, tier: str, sha: str, node_id: int | None,
                as_of: int | None) -> list[int]:
    """The reports (jobs) of commit ``sha`` on ``tier`` that failed the node, oldest first."""
    if node_id is None:
        return []
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    rows = store.fetchall(f"SELECT DISTINCT r.id FROM reports r JOIN cases c ON c.report_id = r.id WHERE {where}"
                          f"r.tier = ? AND r.sha = ? AND c.node_id = ? AND c.kind = '{FAIL}'{until} ORDER BY r.id",
                          (*params, tier, sha.lower(), node_id, *limit))
    return [int(rid) for (rid,) in rows]


def judged_order_dependence(store: Store, repo: str, tier: str, node: str, node_id: int | None, sha: str,
                            fingerprint: str, runs: Sequence[MainRun], order: Sequence[str],
                            as_of: int | None) -> OrderDependence | None:
    """`order_dependence` of the node over ``runs`` when a job of ``sha`` that failed it ran that
    file too (the judged failure is one more of them); None otherwise."""
    mine = judged_jobs(store, repo, tier, sha, node_id, as_of)
    if not mine or not fingerprint:
        return None
    files = job_files(store, [*mine, *(r.report_id for r in runs)])
    found = order_dependence(runs, order, fingerprint, files, node.split("::")[0])
    return found if found is not None and any(found.file in files.get(rid, ()) for rid in mine) else None
