"""The culprit search's types: the noise model, a probe's outcome, the result."""

from __future__ import annotations

import enum
from dataclasses import dataclass

# No outcome may rule a commit out for good: a noise rate of 0 is taken as this, so one
# surprising result (a flake the history never saw) costs probability, never the answer.
FLOOR = 1e-6
DEFAULT_BUDGET = 30  # runs a search may spend unless told (`ci culprit --budget`, the bot's `/culprit`)
# p's prior, Beta(a, b): a broken test's attempt passes about once in 1,000 (mean 0.001, the rate
# the search assumed before it learned p), held with the weight of 500 attempts, so a history's
# own breakage windows (`ci.history.false_pass`) outweigh it once they hold a few hundred attempts.
FALSE_PASS_PRIOR = (0.5, 499.5)
FALSE_PASS_LEVEL = 0.9  # the quantile of p's posterior a search assumes (`false_pass_bound`)
# m's prior, Beta(a, b): a fifth of a test's flaky failures carry the breakage's own error signature
# (a generic timeout, the same assertion a race trips), held with the weight of 5 failures, so a
# test's own history of flaky failures outweighs it after a handful.
SIGNATURE_PRIOR = (1.0, 4.0)


def false_pass_rate(passes: int, attempts: int) -> float:
    """p after ``passes`` of ``attempts`` attempts of broken code passed: the mean of the posterior
    Beta(a + passes, b + attempts - passes) under `FALSE_PASS_PRIOR` (its mean with no data)."""
    if not 0 <= passes <= attempts:
        raise ValueError(f"{passes} passes of {attempts} attempts")
    a, b = FALSE_PASS_PRIOR
    return (a + passes) / (a + b + attempts)


def false_pass_bound(passes: int, attempts: int) -> float:
    """The p a search assumes: the `FALSE_PASS_LEVEL` quantile of the same posterior, not its mean.
    A broken commit's pass is the costly surprise (the answer lands late) and a tier's breakages
    hold a handful of passes, so a single pass is believed no more than p's plausible top allows;
    a failure's weight, (1 - p)^k, hardly moves (docs/culprit.md has the bench's measure)."""
    from ci.history.beta import beta_ppf  # pure math, a layer down

    if not 0 <= passes <= attempts:
        raise ValueError(f"{passes} passes of {attempts} attempts")
    a, b = FALSE_PASS_PRIOR
    return beta_ppf(FALSE_PASS_LEVEL, a + passes, b + attempts - passes)


def flake_match_bound(matching: int, flaky: int) -> float:
    """The m a search assumes after ``matching`` of a test's ``flaky`` flaky failures carried the
    breakage's signature: the `FALSE_PASS_LEVEL` quantile of Beta(a + matching, b + flaky -
    matching) under `SIGNATURE_PRIOR`. A flaky failure read as the breakage's is the costly surprise
    (the answer lands early), so a failure with the breakage's message is believed no more than m's
    plausible top allows."""
    from ci.history.beta import beta_ppf  # pure math, a layer down

    if not 0 <= matching <= flaky:
        raise ValueError(f"{matching} matching of {flaky} flaky failures")
    a, b = SIGNATURE_PRIOR
    return beta_ppf(FALSE_PASS_LEVEL, a + matching, b + flaky - matching)


@dataclass(frozen=True)
class NoiseModel:
    """How a test's runs lie. ``flake``: the chance that an attempt fails though the code is not
    broken (f); ``false_pass``: the chance that an attempt passes though it is broken (p);
    ``retry_fail``: the chance that a retry fails after a flaky failure (r >= f: the second
    attempt shares the first one's machine and load). A run fails only if all its attempts fail.
    ``flake_match``: the chance that a flaky failure of working code carries the breakage's error
    signature (m; broken code's failures do unless a flake strikes first: `signature`); None when the breakage's
    signature is unknown: runs are weighed by pass/fail and attempt counts only."""

    flake: float
    false_pass: float = FALSE_PASS_PRIOR[0] / sum(FALSE_PASS_PRIOR)
    retry_fail: float | None = None
    flake_match: float | None = None

    def __post_init__(self) -> None:
        for name in ("flake", "false_pass"):
            value = getattr(self, name)
            if not 0 <= value < 1:
                raise ValueError(f"{name} rate {value} not within [0, 1)")
        for name in ("retry_fail", "flake_match"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= 1:
                raise ValueError(f"{name} rate {value} not within [0, 1]")

    def signature(self, same: bool, broken: bool) -> float:
        """P(a failed attempt's signature is the breakage's (``same``) or another | broken or not).
        Working code fails with it at m. Broken code fails with it unless a flake struck first
        (f) with another signature (1 - m): f (1 - m) is another's. Floored both ways."""
        if self.flake_match is None:
            return 1.0
        m = min(max(self.flake_match, FLOOR), 1 - FLOOR)
        if broken:
            other = min(max(self.flake * (1 - m), FLOOR), 1 - FLOOR)
            return 1 - other if same else other
        return m if same else 1 - m

    def _rates(self) -> tuple[float, float]:
        f = max(self.flake, FLOOR)
        return f, max(self.retry_fail if self.retry_fail is not None else f, f)

    def fail_if_ok(self, attempts: int) -> float:
        """P(a run of ``attempts`` attempts fails | the code is not broken) = f r^(k-1)."""
        f, r = self._rates()
        return min(f * r ** (attempts - 1), 1 - FLOOR)

    def fail_if_broken(self, attempts: int) -> float:
        """P(a run of ``attempts`` attempts fails | the code is broken) = (1 - p)^k."""
        return min((1 - max(self.false_pass, FLOOR)) ** attempts, 1 - FLOOR)

    def failures(self, attempts: int, broken: bool) -> list[float]:
        """P(a run ends after j failed attempts | broken or not), j = 0..``attempts``: a run stops
        at its first passing attempt, so j < k is "passed after j failures" and j = k "failed".
        Not broken: 1 - f, then f r^(j-1) (1 - r), and f r^(k-1); broken: (1 - p)^j p, and
        (1 - p)^k. The last entry is `fail_if_ok` or `fail_if_broken`; the list sums to 1 (up to the floors)."""
        if broken:
            p = max(self.false_pass, FLOOR)
            return [(1 - p) ** j * p for j in range(attempts)] + [self.fail_if_broken(attempts)]
        f, r = self._rates()
        again = max(1 - r, FLOOR)  # r = 1 would make a pass after a failure impossible
        return [1 - f] + [f * r ** (j - 1) * again for j in range(1, attempts)] + [self.fail_if_ok(attempts)]


@dataclass(frozen=True)
class Probe:
    """Run the test at candidate ``index`` (0-based: c_1 is 0) with ``attempts`` attempts."""

    index: int
    attempts: int = 1


@dataclass(frozen=True)
class Outcome:
    """What one run of a `Probe` said: ``failed`` when every attempt failed. ``failures``, when the
    runner reports it, is how many attempts failed (the run stops at its first pass): a pass after
    a failure is weaker evidence of working code than a first-attempt pass. ``same_signature``: whether
    the run's last failed attempt failed with the breakage's error signature (None: unknown, or
    no attempt failed)."""

    index: int
    failed: bool
    attempts: int = 1
    failures: int | None = None
    same_signature: bool | None = None

    def __post_init__(self) -> None:
        if self.failures is not None and (not 0 <= self.failures <= self.attempts
                                          or self.failed != (self.failures == self.attempts)):
            raise ValueError(f"{self.failures} failed attempts of {self.attempts} for a run that "
                             f"{'failed' if self.failed else 'passed'}")
        if self.same_signature is not None and not (self.failed or (self.failures or 0) > 0):
            raise ValueError("a signature for a run with no failed attempt")


class StopReason(enum.Enum):
    CONFIDENT = "confident"  # the most probable commit reached the asked confidence
    BUDGET = "budget"  # the runs allowed are spent
    NOTHING_TO_LEARN = "nothing to learn"  # no run can move the posterior (noise drowns every outcome)


@dataclass(frozen=True)
class CulpritResult:
    """The most probable culprit (0-based candidate index), its posterior probability, the
    outcomes the search used (in the order recorded) and why it stopped."""

    culprit: int
    probability: float
    outcomes: tuple[Outcome, ...]
    stop: StopReason

    @property
    def runs(self) -> int:
        return len(self.outcomes)
