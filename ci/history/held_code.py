"""Whether the code of a default-branch fail streak passes the test in other pull requests' runs.

Contract: `held_streaks(store, repo, tier, node_id, streaks, order, at, sha)` returns the first
indexes of those of ``streaks`` that the merge base's position ``at`` lies in (from the streak's
first commit up to its fix, or to the end while it is open) whose commits were the merge base of
pull request runs that passed the test, from at least `HELD_SOURCES` pull requests other than the
judged run's. Such runs hold the streak's code: code that passes the test in others' runs is not
broken, so main's failures there were a flake firing, and `ci.history.verdict` neither names the
streak as the breakage (rule 3) nor counts main's run at the merge base as one more failed run of
the flake against it (rule 4). Two pull requests, not one: the pull request that fixes a real
breakage is based inside it and passes the test.
"""

from __future__ import annotations

from typing import Sequence

from ci.history.mainline import Streak
from ci.history.model import PASS
from ci.history.store import Store
from ci.history.verdict_queries import cut, repo_condition

HELD_SOURCES = 2
_CHUNK = 500

_PASSED_PRS = """SELECT DISTINCT r.pr FROM reports r JOIN cases c ON c.report_id = r.id
    WHERE {repo}r.tier = ? AND c.node_id = ? AND c.kind = '{passed}' AND r.pr IS NOT NULL AND r.sha <> ?
    AND r.base_sha IN ({marks}){until}"""


def held_streaks(store: Store, repo: str, tier: str, node_id: int | None, streaks: Sequence[Streak],
                 order: Sequence[str], at: int | None, sha: str, *, as_of: int | None = None) -> frozenset[int]:
    """The ``first_index`` of each streak around ``at`` whose code other pull requests' runs passed
    (see the module docstring); empty without a node or a placed merge base."""
    if node_id is None or at is None:
        return frozenset()
    where, params = repo_condition(repo)
    until, limit = cut(as_of)
    own = {int(pr) for (pr,) in store.fetchall("SELECT DISTINCT pr FROM reports WHERE sha = ? AND pr IS NOT NULL",
                                               (sha.lower(),))}
    held = set()
    for streak in streaks:
        if not streak.first_index <= at < max(streak.end_index, streak.first_index + 1):
            continue
        bases = list(order[streak.first_index:streak.end_index])[-_CHUNK:]
        rows = store.fetchall(_PASSED_PRS.format(repo=where, passed=PASS, marks=", ".join("?" * len(bases)),
                                                 until=until), (*params, tier, node_id, sha.lower(), *bases, *limit))
        if len({int(pr) for (pr,) in rows} - own) >= HELD_SOURCES:
            held.add(streak.first_index)
    return frozenset(held)
