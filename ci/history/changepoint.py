"""An intermittent breakage: the commit from which a test fails with one error far more often than before.

Contract: `change_point(runs, order, fingerprint)` walks the test's attempts (the default
branch's, and pull request runs' at their merge base, as the verdicts give them) in commit order (`ci.history.mainline`'s; infra failures, skips and commits not in the order left
out) and tries each commit C that failed it with ``fingerprint``, oldest first. C is a change
point when, with k0 of n0 attempts before C and k1 of n1 from C on failing with that signature:

- there is a past to compare with (n0 >= `MIN_BEFORE`) and a repeat after (k1 >= `MIN_AFTER`
  failures at two or more commits);
- a binomial test rejects "the rate did not change": k1 or more failures in n1 attempts at the
  highest rate the past allows (the `LEVEL` upper bound of its Jeffreys posterior) has a chance
  under `ALPHA` / m, m the failing commits of the walk that meet the two minimums above (each is a
  hypothesis tried: Bonferroni keeps the walk's false-alarm rate under `ALPHA`, where testing every
  commit at `ALPHA` would find a rise in a steady flake's long history);
- the past is too quiet for one rate over the whole walk: k0 or fewer failures in n0 attempts at
  the pooled rate (k0 + k1) / (n0 + n1) has a chance under `ALPHA` / m too (C is picked after
  looking, and any flake's attempts before its first failure are clean);
- the change is still there: the passes since the last failure are no longer a run than the rate
  from C to that failure makes likely (chance at least `ALPHA`), else a fix ended it; nor is there
  a commit E after C from which the test fails no more often than the past allows and far less
  often than from C to E (`_back_to_past`): a fix, a revert or a loaded week's end, then the
  flake's ordinary failures, which must not keep the rise standing.

The first such C is returned: a race or an order dependence that a commit brought in fails 40 %
of runs from then on, passing in between, which a flake rate learned over the whole history
would explain run by run; a flake whose rate did not move has no such commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ci.history.beta import beta_cdf, beta_ppf
from ci.history.mainline import MAX_CANDIDATES, MainRun
from ci.history.model import BROKEN, FAIL, PASS

MIN_BEFORE = 10
MIN_AFTER = 3
ALPHA = 0.01
LEVEL = 0.95


@dataclass(frozen=True)
class ChangePoint:
    """The commit ``since`` (at ``index`` in the order) from which the rate moved; ``last_clean``
    the newest commit before it that ran the test ('' when none); the counts before and after."""

    since: str
    index: int
    last_clean: str
    candidates: tuple[str, ...]  # the commits after last_clean up to since, oldest first
    before: tuple[int, int]  # (failed with the signature, attempts)
    after: tuple[int, int]

    def describe(self) -> str:
        """``fails 5 of 12 attempts from it on, 0 of 30 before``"""
        return (f"fails {self.after[0]} of {self.after[1]} attempts from it on, "
                f"{self.before[0]} of {self.before[1]} before: an intermittent breakage")


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p)."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    return beta_cdf(p, k, n - k + 1) if p < 1.0 else 1.0


def change_point(runs: Sequence[MainRun], order: Sequence[str], fingerprint: str) -> ChangePoint | None:
    """The first commit from which the test fails with ``fingerprint`` significantly more often
    (see the module docstring), or None."""
    if not fingerprint:
        return None
    where = {sha: i for i, sha in enumerate(order)}
    seq = sorted((where[r.sha], r.report_id, r.kind == FAIL and r.fingerprint == fingerprint) for r in runs
                 if not r.infra and r.kind in (PASS, FAIL, BROKEN) and r.sha in where)
    tried = [c for c in sorted({pos for pos, _, hit in seq if hit}) if _eligible(seq, c)]
    alpha = ALPHA / max(1, len(tried))  # Bonferroni: every failing commit of the walk is a hypothesis tried
    for c in tried:
        before = [hit for pos, _, hit in seq if pos < c]
        after = [(pos, hit) for pos, _, hit in seq if pos >= c]
        k0, n0 = sum(before), len(before)
        k1, n1 = sum(hit for _, hit in after), len(after)
        past = beta_ppf(LEVEL, k0 + 0.5, n0 - k0 + 0.5)
        if binomial_tail(k1, n1, past) >= alpha:
            continue
        if 1.0 - binomial_tail(k0 + 1, n0, (k0 + k1) / (n0 + n1)) >= alpha:  # a flake's quiet start, picked after
            continue
        last_hit = max(i for i, (_, hit) in enumerate(after) if hit)
        clean = len(after) - 1 - last_hit
        if (1.0 - k1 / (last_hit + 1)) ** clean < ALPHA or _back_to_past(after, past):  # it ended
            continue
        ran_before = [pos for pos, _, _ in seq if pos < c]
        prev = max(ran_before) if ran_before else -1
        span = tuple(order[prev + 1:c + 1])
        return ChangePoint(order[c], c, order[prev] if prev >= 0 else "", span[-MAX_CANDIDATES:], (k0, n0), (k1, n1))
    return None



def _back_to_past(after: Sequence[tuple[int, bool]], past: float) -> bool:
    """Whether, from some commit E after C on, the attempts fail no more often than the past allows
    (k2 or more of n2 at the past's upper bound ``past`` has a chance of at least `ALPHA`) and far
    less often than from C up to E (k2 or fewer at that rate: under `ALPHA` over the commits E
    tried): the rise ended, and the past's own flakes since do not make it still there."""
    commits = sorted({pos for pos, _ in after})[1:]
    for e in commits:
        k_mid = sum(hit for pos, hit in after if pos < e)
        n_mid = sum(1 for pos, _ in after if pos < e)
        k2 = sum(hit for pos, hit in after if pos >= e)
        n2 = len(after) - n_mid
        if k_mid < MIN_AFTER or k2 == 0 or binomial_tail(k2, n2, past) < ALPHA:
            continue
        if 1.0 - binomial_tail(k2 + 1, n2, k_mid / n_mid) < ALPHA / len(commits):
            return True
    return False


def _eligible(seq: Sequence[tuple[int, int, bool]], c: int) -> bool:
    """Whether commit index ``c`` has a past to compare with and a repeat after it (the tests' minimum)."""
    n0 = sum(1 for pos, _, _ in seq if pos < c)
    hits = [pos for pos, _, hit in seq if pos >= c and hit]
    return n0 >= MIN_BEFORE and len(hits) >= MIN_AFTER and len(set(hits)) >= 2
