"""Touch weights learned from found culprits, as the noise rates are learned from runs.

Each past breakage with a found culprit says which `Touch` level its culprit had and which levels
its window's candidates had. The model: a class-t commit is the culprit with a weight w_t, the
same in every window; the share of culprits in class t is then about s_t = c_t w_t / sum_u c_u w_u,
c_t the share of class-t commits in a window (the mean over the windows: each window gives one
culprit), so w_t is proportional to s_t / c_t (exact when the weights are equal).

The shares (s_lines, s_file, s_none) get a Dirichlet prior centred on today's weights
(`TouchWeights()`: prior share pi_t = c_t w0_t / sum_u c_u w0_u) and held with the weight of
`PRIOR_CULPRITS` culprits; k_t of N found culprits in class t make each share's posterior
Beta(a_t + k_t, A - a_t + N - k_t) (a_t = A pi_t, A the prior's weight: a Dirichlet's marginal).
A search assumes each share at the quantile that keeps the prior flat, `PRIOR_LEVEL`: the lines
class at its (1 - level) quantile, the other two at their level quantile. A culprit that changes
no executed line is the costly surprise (it starts with a low weight: runs, and perhaps the
answer), so an off-line culprit is believed no rarer than its share's plausible top.

No found culprit: today's weights, unchanged. A class no window holds teaches nothing of its
own weight: it keeps today's; the lines class missing from every window gives today's weights.
Pure: `ci.commands.culprit_prior` reads the history's windows and diffs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ci.culprit.prior import Touch, TouchWeights

# The prior's weight, in culprits: today's weights rest on one culprit measured at the top level
# (docs/culprit.md) and a reading of what reaches a test, so a handful of a tier's own culprits
# should outweigh them.
PRIOR_CULPRITS = 5.0
PRIOR_LEVEL = 0.9  # as the noise rates' bounds (`ci.culprit.model.FALSE_PASS_LEVEL`)
LEVELS = (Touch.LINES, Touch.FILE, Touch.NONE)


@dataclass(frozen=True)
class PastCulprit:
    """A found culprit's `Touch` level and every candidate's level in its window (its own included)."""

    culprit: Touch
    window: tuple[Touch, ...]

    def __post_init__(self) -> None:
        if self.culprit not in self.window:
            raise ValueError(f"a window of {len(self.window)} candidate(s) without its culprit's level "
                             f"{self.culprit.name}")


@dataclass(frozen=True)
class LearnedWeights:
    """The weights a search uses, with what they rest on: ``culprits`` found culprits, ``counts``
    of them per level (lines, file, none), ``commit_shares`` c_t and ``shares`` the assumed s_t
    (both empty with no history)."""

    weights: TouchWeights
    culprits: int = 0
    counts: tuple[int, int, int] = (0, 0, 0)
    commit_shares: tuple[float, ...] = ()
    shares: tuple[float, ...] = ()

    def said(self) -> str:
        """Where the weights came from, in words, for a search's log."""
        if not self.culprits:
            return "the default weights (no found culprit in the history)"
        return (f"weights learned from {self.culprits} found culprit(s) of the tier: {self.counts[0]} changed lines "
                f"their test executed, {self.counts[1]} only its files, {self.counts[2]} nothing it executed")


def share_posterior(k: int, n: int, prior_share: float, strength: float = PRIOR_CULPRITS) -> tuple[float, float]:
    """Beta(a, b) of one class's share after ``k`` of ``n`` culprits fell in it, under a prior
    share ``prior_share`` held with the weight of ``strength`` culprits."""
    if not 0 <= k <= n:
        raise ValueError(f"{k} culprits of {n} in one class")
    if not 0 < prior_share < 1 or not strength > 0:
        raise ValueError(f"prior share {prior_share} with weight {strength}: needs a share in (0, 1) and a weight > 0")
    a = strength * prior_share
    return a + k, strength - a + n - k


def learn_weights(past: Sequence[PastCulprit], default: TouchWeights = TouchWeights(),
                  strength: float = PRIOR_CULPRITS, level: float = PRIOR_LEVEL) -> LearnedWeights:
    """The touch weights ``past`` supports (see the module docstring); ``default`` with none."""
    from ci.history.beta import beta_ppf  # pure math, a layer down

    if not 0.5 <= level < 1:
        raise ValueError(f"quantile level {level} not within [0.5, 1)")
    if not past:
        return LearnedWeights(default)
    counts = tuple(sum(p.culprit is t for p in past) for t in LEVELS)
    c = tuple(sum(p.window.count(t) / len(p.window) for p in past) / len(past) for t in LEVELS)
    base = (default.lines, default.file, default.none)
    present = [i for i in range(3) if c[i] > 0]
    if 0 not in present:
        return LearnedWeights(default, len(past), counts, c)  # type: ignore[arg-type]
    total = sum(c[i] * base[i] for i in present)
    shares = [0.0, 0.0, 0.0]
    for i in present:
        if len(present) == 1:
            shares[i] = 1.0
            continue
        a, b = share_posterior(counts[i], len(past), c[i] * base[i] / total, strength)
        shares[i] = beta_ppf(1 - level if i == 0 else level, a, b)
    raw = [shares[i] / c[i] if i in present else 0.0 for i in range(3)]
    top = max(raw)
    scaled = [raw[i] / top if i in present else base[i] / base[0] * raw[0] / top for i in range(3)]
    weights = TouchWeights(*(min(1.0, max(w, 1e-12)) for w in scaled))
    return LearnedWeights(weights, len(past), counts, c, tuple(shares))  # type: ignore[arg-type]


__all__ = ["LEVELS", "LearnedWeights", "PRIOR_CULPRITS", "PRIOR_LEVEL", "PastCulprit", "learn_weights",
           "share_posterior"]
