"""ci.culprit.learned: touch weights learned from found culprits, against a brute-force Dirichlet
posterior (a grid over the simplex), scipy's Beta quantile and hand-worked cases."""

from __future__ import annotations

import random

import pytest
from scipy import stats

from ci.culprit.learned import PastCulprit, learn_weights, share_posterior
from ci.culprit.prior import Touch, TouchWeights

L, F, N = Touch.LINES, Touch.FILE, Touch.NONE


def grid_quantile(alphas: tuple[float, float, float], which: int, q: float, cells: int = 600) -> float:
    """The ``q`` quantile of share ``which`` under the Dirichlet(``alphas``) density, by summing the
    unnormalised density over a midpoint grid of the simplex (no Beta marginal assumed)."""
    h = 1.0 / cells
    mass = [0.0] * cells
    for i in range(cells):
        x = (i + 0.5) * h
        for j in range(cells - i):
            y = (j + 0.5) * h
            z = 1.0 - x - y
            if z <= 0:
                continue
            s = [0.0, 0.0, 0.0]
            s[which], s[(which + 1) % 3], s[(which + 2) % 3] = x, y, z
            mass[i] += s[0] ** (alphas[0] - 1) * s[1] ** (alphas[1] - 1) * s[2] ** (alphas[2] - 1)
    total, running = sum(mass), 0.0
    for i, m in enumerate(mass):
        if running + m >= q * total:
            return (i + (q * total - running) / m) * h
        running += m
    return 1.0


def window(culprit: Touch, lines: int, file: int, none: int) -> PastCulprit:
    return PastCulprit(culprit, (L,) * lines + (F,) * file + (N,) * none)


def test_no_history_is_todays_weights() -> None:
    learned = learn_weights([])
    assert learned.weights == TouchWeights() and learned.weights.weights([L, F, N]) == [1.0, 0.1, 0.02]
    assert learned.culprits == 0 and "no found culprit" in learned.said()
    other = TouchWeights(1.0, 0.3, 0.3)
    assert learn_weights([], default=other).weights == other


def test_share_posterior_is_the_closed_form_beta() -> None:
    # Beta(A pi + k, A (1 - pi) + n - k): prior times binomial likelihood, integrated on a grid
    for k, n, pi, strength in ((0, 0, 0.07, 5.0), (3, 40, 0.07, 5.0), (40, 40, 0.87, 5.0), (2, 9, 0.3, 12.0)):
        a, b = share_posterior(k, n, pi, strength)
        assert (a, b) == pytest.approx((strength * pi + k, strength * (1 - pi) + n - k))
        total = mean = 0.0
        for i in range(20000):  # x = t^6 / 2 from each end: the density's poles at 0 and 1 become bounded
            t = (i + 0.5) / 20000
            for x, y in ((t ** 6 / 2, 1 - t ** 6 / 2), (1 - t ** 6 / 2, t ** 6 / 2)):  # y = 1 - x, kept exact
                d = x ** (strength * pi - 1) * y ** (strength * (1 - pi) - 1) * x ** k * y ** (n - k) * 3 * t ** 5
                total += d
                mean += x * d
        mean /= total
        assert mean == pytest.approx(a / (a + b), rel=1e-4)


def test_weights_against_a_brute_force_dirichlet() -> None:
    # strength and counts so that every shape is over 1 (the grid's density stays bounded)
    past = ([window(L, 3, 2, 5)] * 6 + [window(F, 1, 4, 5)] * 3 + [window(N, 1, 1, 2)] * 2)  # windows of 10 and 4
    strength = 30.0
    learned = learn_weights(past, strength=strength, level=0.9)
    c = (sum(p.window.count(t) / len(p.window) for p in past) / len(past) for t in (L, F, N))
    c = tuple(c)
    assert learned.commit_shares == pytest.approx(c)
    # each window's own shares, averaged (one culprit each), not the pooled commits (which weigh long windows more)
    assert c == pytest.approx(((6 * 0.3 + 3 * 0.1 + 2 * 0.25) / 11, (6 * 0.2 + 3 * 0.4 + 2 * 0.25) / 11,
                               (6 * 0.5 + 3 * 0.5 + 2 * 0.5) / 11))
    w0 = (1.0, 0.1, 0.02)
    prior = [ci * wi / sum(cj * wj for cj, wj in zip(c, w0)) for ci, wi in zip(c, w0)]
    alphas = tuple(strength * p + k for p, k in zip(prior, (6, 3, 2)))
    assert min(alphas) > 1
    bounds = [grid_quantile(alphas, 0, 0.1), grid_quantile(alphas, 1, 0.9), grid_quantile(alphas, 2, 0.9)]
    closed = [stats.beta.ppf(0.1, alphas[0], sum(alphas) - alphas[0]),
              stats.beta.ppf(0.9, alphas[1], sum(alphas) - alphas[1]),
              stats.beta.ppf(0.9, alphas[2], sum(alphas) - alphas[2])]
    assert bounds == pytest.approx(closed, abs=2e-3)  # the grid agrees that each marginal is that Beta
    assert learned.shares == pytest.approx(closed, rel=1e-8)
    raw = [s / ci for s, ci in zip(closed, c)]
    expected = [r / max(raw) for r in raw]
    got = learned.weights
    assert [got.lines, got.file, got.none] == pytest.approx(expected, rel=1e-8)
    assert learned.counts == (6, 3, 2) and learned.culprits == 11


def test_culprits_on_executed_lines_sharpen_the_prior_and_off_line_ones_flatten_it() -> None:
    rng = random.Random(7)

    def history(count: int, off: float) -> list[PastCulprit]:
        out = []
        for _ in range(count):
            n = rng.randint(2, 60)
            others = tuple(L if u < 0.2 else F if u < 0.37 else N for u in (rng.random() for _ in range(n - 1)))
            culprit = F if rng.random() < off else L
            out.append(PastCulprit(culprit, others + (culprit,)))
        return out

    on_lines = [learn_weights(history(count, 0.0)).weights for count in (10, 40, 200)]
    assert on_lines[0].file > on_lines[1].file > on_lines[2].file
    assert on_lines[0].none > on_lines[1].none > on_lines[2].none
    assert on_lines[1].file < 0.1 and on_lines[1].none < 0.02  # 40 on-line culprits: sharper than today's
    off = learn_weights(history(200, 0.1))
    assert off.counts[1] > 0
    # one culprit in ten off the lines: its class is weighed near its true relative rate,
    # (0.1 / 0.17) / (0.9 / 0.2) = 0.13, not today's 0.1 or the on-line history's 0.007
    assert 0.1 < off.weights.file < 0.4 and off.weights.file > 20 * on_lines[2].file
    assert off.weights.none < 0.02  # no culprit there: that class still sharpens
    assert off.said().startswith("weights learned from 200 found culprit(s) of the tier: ")


def test_a_strong_prior_keeps_todays_weights_and_missing_classes_keep_theirs() -> None:
    strong = learn_weights([window(L, 2, 3, 5)] * 3, strength=1e7).weights
    assert [strong.lines, strong.file, strong.none] == pytest.approx([1.0, 0.1, 0.02], rel=5e-3)
    no_none = learn_weights([window(L, 2, 3, 0)] * 40)
    # no window held a commit that touches nothing executed: its weight is today's, against lines
    assert no_none.weights.none == pytest.approx(0.02 * no_none.weights.lines)
    assert no_none.weights.file < 0.1
    off_top = learn_weights([window(F, 3, 1, 0)] * 40)  # the file class weighs most: lines below 1
    assert off_top.weights.file == 1.0 and off_top.weights.lines < 0.5
    assert off_top.weights.none == pytest.approx(0.02 * off_top.weights.lines)
    only_lines = learn_weights([window(L, 4, 0, 0)] * 5)
    assert only_lines.weights == TouchWeights(1.0, 0.1, 0.02)
    no_lines = learn_weights([window(F, 0, 3, 2)] * 5)  # nothing to weigh the others against
    assert no_lines.weights == TouchWeights()


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="without its culprit's level LINES"):
        PastCulprit(L, (F, N))
    with pytest.raises(ValueError, match="without its culprit"):
        PastCulprit(L, ())
    with pytest.raises(ValueError, match="3 culprits of 2"):
        share_posterior(3, 2, 0.5)
    with pytest.raises(ValueError, match="needs a share in"):
        share_posterior(0, 2, 0.0)
    with pytest.raises(ValueError, match="quantile level 0.2"):
        learn_weights([window(L, 1, 0, 0)], level=0.2)
