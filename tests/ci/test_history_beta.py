"""`ci.history.beta` against scipy (the reference) and against brute-force fp64 integration."""

from __future__ import annotations

import itertools
import math

import pytest
from scipy import stats

from ci.history.beta import beta_cdf, beta_ppf
from ci.history.flaky import posterior

SHAPES = [0.5, 1.0, 1.5, 3.5, 10.5, 100.5, 1000.5, 50_000.5]
SHAPES_B = [0.5, 2.5, 7.0, 99.5, 5_000.5, 200_000.5]
QUANTILES = [1e-6, 1e-3, 0.05, 0.5, 0.95, 0.999]


@pytest.mark.parametrize("a, b", list(itertools.product(SHAPES, SHAPES_B)))
def test_cdf_and_quantile_match_scipy(a: float, b: float) -> None:
    for q in QUANTILES:
        reference = stats.beta.ppf(q, a, b)
        assert beta_ppf(q, a, b) == pytest.approx(reference, rel=1e-9, abs=1e-300)
        assert beta_cdf(reference, a, b) == pytest.approx(stats.beta.cdf(reference, a, b), rel=1e-10, abs=1e-15)


def test_cdf_matches_brute_force_integration() -> None:
    """Composite Simpson on the density of a few moderate shapes (no singular endpoint)."""
    for a, b, x in [(2.0, 3.0, 0.3), (5.5, 1.5, 0.8), (10.5, 90.5, 0.12), (3.0, 3.0, 0.5)]:
        n = 20_000
        h = x / n
        log_norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
        pdf = [math.exp(log_norm + (a - 1) * math.log(t) + (b - 1) * math.log1p(-t)) if t > 0 else 0.0
               for t in (i * h for i in range(n + 1))]
        simpson = h / 3 * (pdf[0] + pdf[-1] + 4 * sum(pdf[1:-1:2]) + 2 * sum(pdf[2:-1:2]))
        assert beta_cdf(x, a, b) == pytest.approx(simpson, rel=1e-9)


def test_edges_and_refusals() -> None:
    assert beta_cdf(0.0, 2, 3) == 0.0 and beta_cdf(1.0, 2, 3) == 1.0
    assert beta_ppf(0.0, 2, 3) == 0.0 and beta_ppf(1.0, 2, 3) == 1.0
    assert beta_ppf(0.5, 1, 1) == pytest.approx(0.5)
    for bad in [(0.5, 0, 1), (0.5, 1, -1), (0.5, math.inf, 1), (0.5, math.nan, 1), (1.5, 1, 1)]:
        with pytest.raises(ValueError):
            beta_cdf(*bad)
        with pytest.raises(ValueError):
            beta_ppf(*bad)


def test_posterior_is_jeffreys() -> None:
    mean, interval = posterior(3, 40, 0.90)
    assert mean == pytest.approx(3.5 / 41)
    assert (interval.low, interval.high) == pytest.approx(stats.beta.ppf([0.05, 0.95], 3.5, 37.5), rel=1e-9)
    _, none = posterior(0, 0)
    assert none.low < 0.01 and none.high > 0.99
    with pytest.raises(ValueError):
        posterior(5, 4)
