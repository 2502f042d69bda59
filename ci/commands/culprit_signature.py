"""``ci culprit``'s error signatures (docs/culprit.md): the breakage's, learned from ``--bad``'s
verification run, and m, how often the test's flaky failures in the history carry it.

A failure with the breakage's signature is strong evidence of broken code only when the test's
flakes rarely fail that way, so m is learned per test (`ci.history.retries.flaky_fingerprints`,
read with the other rates by ``ci.commands.culprit._noise``: the store is opened once)
under `ci.culprit.model.SIGNATURE_PRIOR`, and the search assumes its 90 % quantile
(`flake_match_bound`). No breakage signature (``--no-verify``, a runner that cannot read one, a
failure without text, --bad's attempts failing with different signatures): runs weigh by
pass/fail and attempt counts only, as before.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ci.commands.culprit_local import Run
from ci.culprit.model import FALSE_PASS_LEVEL, SIGNATURE_PRIOR, flake_match_bound


def breakage_signature(runs: Sequence[Run], bad: str) -> str | None:
    """The signature every failed attempt of ``bad``'s first failed run (its verification) shares;
    None when they differ (a flake struck one of them: which is the breakage's is not known), when
    one is unknown, or when there is no such run."""
    first = next((r for r in runs if r.sha == bad and r.failed), None)
    seen = set(first.signatures) if first is not None else set()
    return next(iter(seen)) if len(seen) == 1 and "" not in seen else None


def same_signature(run: Run, breakage: str | None) -> bool | None:
    """Whether ``run``'s last failed attempt failed with the breakage's signature; None when either
    is unknown or no attempt of the run failed."""
    if breakage is None or not run.signatures or not run.signatures[-1]:
        return None
    return run.signatures[-1] == breakage


def flake_match(flaky: Mapping[str, int], breakage: str) -> tuple[float, str]:
    """m for the search, and where it came from: of the test's flaky failures in the history
    (``flaky``: how many carry each signature, `flaky_fingerprints`; empty when there is no
    readable history, and m is the prior's), those with ``breakage``'s signature."""
    matching, total = flaky.get(breakage, 0), sum(flaky.values())
    m = flake_match_bound(matching, total)
    prior = "Beta({:g}, {:g})".format(*SIGNATURE_PRIOR)
    return m, (f"breakage signature {breakage} (--bad's run); a flaky failure carries it with "
               f"{m:.3f}, the {FALSE_PASS_LEVEL:.0%} quantile of m's posterior from {matching} of {total} flaky "
               f"failure(s) in the history ({prior} prior)")
