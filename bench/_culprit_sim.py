"""Simulated breakages for ``bench culprit``, and the two bisections it compares against.

The simulator's noise is written from what flaky GPU tests do, not from the search core's model
(it shares no code with ``ci.culprit``), so the core is measured under model mismatch:

- Each run lands on a machine that is *bad* (busy neighbour, throttled GPU, a slow disk) with
  probability ``q``; there every attempt fails with probability `BAD_MACHINE_FAIL`. On a good
  machine an attempt fails with probability ``g``. ``q`` and ``g`` are set so that an attempt's
  marginal failure rate is the test's flake rate; 60 % of the flakes come from bad machines,
  which is what correlates a run's retry with its first attempt.
- A broken test still passes an attempt with probability `BROKEN_PASS` (a race that hides it).
- A run fails only when all its attempts fail (pytest-rerunfailures' rule).
- Error signatures (`signed_failures`): a flaky failure carries the breakage's signature with
  probability ``share`` (the bench's assumption, one row each: 0, 10 %, 30 %, 100 %), another
  signature else; broken code fails with the breakage's signature, unless a flake strikes first
  (with the test's flake rate: then a flaky failure's signature). The breakage's signature is known
  to the search only when --bad's verification attempts all carry it (`verified_signature`). A run reports its last failed attempt's.
  The signatures are drawn from their own stream, so every share sees the same runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

BAD_MACHINE_FAIL = 0.75
BAD_MACHINE_SHARE = 0.6
BROKEN_PASS = 0.005
ATTEMPTS = 2  # one retry, as the CI runs them
# Closed breakages in the tier's history that the bench's p is learned from (a broken test's
# attempts: `history_false_passes`); a tier with a few hundred runs of its tests has had this many.
BREAKAGE_WINDOWS = 40
# The share of commits that change a file in a test's static import closure, measured on real
# first-parent histories (`bench._culprit_touch`, 1,000 commits; docs/culprit.md has the commits
# and tests): rich 44 %, pytest 34 %. The culprit touches it by construction (a breakage of the
# test lives in what it executes).
TOUCH_SHARES = {"rich": 0.44, "pytest": 0.34}
# From rich's observed map at 42899d8a (`bench._culprit_touch --depmap`, docs/culprit.md): the share
# of commits that change a line the test executed, and that change only its files or import-time
# lines (`ci.culprit.prior.Touch.FILE`); the rest change nothing it executed. One draw per commit
# decides both priors: a commit changing executed lines also touches the import closure.
OBSERVED_SHARES = (0.20, 0.17)
# Found culprits in the tier's history that the judged method's learned prior reads (`past_culprits`):
# one per closed breakage the history's p is learned from (an automatic search ran on each).
PAST_CULPRITS = BREAKAGE_WINDOWS


@dataclass(frozen=True)
class Breakage:
    """A window of ``n`` candidates whose first bad one is ``culprit`` (0-based), for a test
    whose attempts fail with marginal rate ``flake`` when not broken; ``touches[i]``: candidate i
    changes a file of the test's import closure; ``levels[i]``: its `Touch` level against the
    observed map (2 lines, 1 file only, 0 nothing)."""

    n: int
    culprit: int
    flake: float
    touches: tuple[bool, ...] = ()
    levels: tuple[int, ...] = ()

    @classmethod
    def draw(cls, rng: random.Random, n: int, culprit: int, flake: float, share: float,
             observed: tuple[float, float] = OBSERVED_SHARES, culprit_level: int = 2) -> "Breakage":
        """A breakage whose other commits each touch the test's closure with probability ``share``
        and its executed lines or files with ``observed``'s; the culprit is at ``culprit_level``
        (2: it changes executed lines) and in the closure."""
        draws = [0.0 if i == culprit else rng.random() for i in range(n)]
        lines, file = observed
        return cls(n, culprit, flake, tuple(u < max(share, lines) or i == culprit for i, u in enumerate(draws)),
                   tuple(culprit_level if i == culprit else 2 if u < lines else 1 if u < lines + file else 0
                         for i, u in enumerate(draws)))

    def run(self, rng: random.Random, index: int, attempts: int = ATTEMPTS) -> bool:
        """One run at candidate ``index``: True when it failed (every attempt failed)."""
        return self.failures(rng, index, attempts) == attempts

    def failures(self, rng: random.Random, index: int, attempts: int = ATTEMPTS) -> int:
        """One run at candidate ``index``: how many attempts failed (it stops at the first pass)."""
        if index >= self.culprit:
            def fails() -> bool:
                return rng.random() >= BROKEN_PASS
        else:
            rate = _machine_rate(rng, self.flake)

            def fails() -> bool:
                return rng.random() < rate
        failed = 0
        while failed < attempts and fails():
            failed += 1
        return failed


def signed_failures(b: Breakage, rng: random.Random, sig_rng: random.Random, index: int, share: float,
                    attempts: int = ATTEMPTS) -> tuple[int, bool | None]:
    """One run at candidate ``index`` with its signature: (failed attempts, whether the last failed
    attempt's signature is the breakage's; None when none failed). The count is `Breakage.failures`'
    from ``rng``; the signature of working code's failure is drawn from ``sig_rng``."""
    failed = b.failures(rng, index, attempts)
    if not failed:
        return 0, None
    if index >= b.culprit:  # broken: the breakage's signature, unless a flake struck first
        return failed, not (sig_rng.random() < b.flake and sig_rng.random() >= share)
    return failed, sig_rng.random() < share


def verified_signature(rng: random.Random, b: Breakage, share: float, attempts: int = ATTEMPTS) -> bool:
    """Whether ``ci culprit`` learns the breakage's signature from --bad's verification run: every
    failed attempt there carries it (a flake striking first, with the test's flake rate, carries
    another unless it shares the breakage's, ``share``); else the search runs without signatures."""
    return not any(rng.random() < b.flake and rng.random() >= share for _ in range(attempts))


def history_signatures(rng: random.Random, flake: float, share: float, runs: int = 200) -> tuple[int, int]:
    """What the test's history of ``runs`` runs with one retry says of its flaky failures'
    signatures: (failed attempts carrying the breakage's signature, failed attempts)."""
    matching = failed = 0
    for _ in range(runs):
        rate = _machine_rate(rng, flake)
        for _ in range(ATTEMPTS):
            if rng.random() >= rate:
                break
            failed += 1
            matching += rng.random() < share
    return matching, failed


def history_rates(rng: random.Random, flake: float, runs: int = 200) -> tuple[float, float]:
    """What a test history of ``runs`` runs of the (not broken) test with one retry says: the first
    attempt's failure rate, and a retry's failure rate after a failed first attempt (same machine),
    each a Jeffreys posterior mean (as ``ci flaky`` scores)."""
    firsts = both = 0
    for _ in range(runs):
        rate = _machine_rate(rng, flake)
        if rng.random() < rate:
            firsts += 1
            both += rng.random() < rate
    return (firsts + 0.5) / (runs + 1), (both + 0.5) / (firsts + 1)


def history_false_passes(rng: random.Random, windows: int = BREAKAGE_WINDOWS) -> tuple[int, int]:
    """What the tier's history says of broken code (`ci.history.false_pass` reads the same from a
    store): ``windows`` closed breakages of 2-8 runs each, every attempt passing with `BROKEN_PASS`;
    runs at a window's edges that passed look like the fix and are dropped, as is a window with
    fewer than two failed runs. (attempts, passes) inside the windows."""
    attempts = passes = 0
    for _ in range(windows):
        runs = []
        for _ in range(rng.randint(2, 8)):
            failed = 0
            while failed < ATTEMPTS and rng.random() >= BROKEN_PASS:
                failed += 1
            runs.append(failed)
        while runs and runs[0] < ATTEMPTS:
            runs.pop(0)
        while runs and runs[-1] < ATTEMPTS:
            runs.pop()
        if sum(r == ATTEMPTS for r in runs) >= 2:
            attempts += sum(min(r + 1, ATTEMPTS) for r in runs)
            passes += sum(r < ATTEMPTS for r in runs)
    return attempts, passes


def past_culprits(rng: random.Random, count: int, off_lines: float = 0.0) -> list[Breakage]:
    """``count`` past breakages of the tier with their culprits found, drawn as the measured ones are
    (windows of 2-128 commits, log-uniform; the other commits' levels from `OBSERVED_SHARES`; one
    culprit in ``1 / off_lines`` changing only the test's files, the rest its executed lines), from
    ``rng`` alone, so the measured breakages' draws do not move. Their noise is not drawn: only the
    levels are read."""
    shares = list(TOUCH_SHARES.values())
    out = []
    for k in range(count):
        n = max(2, min(128, round(2 ** rng.uniform(1, 7))))
        out.append(Breakage.draw(rng, n, rng.randrange(n), 0.0, shares[k % len(shares)],
                                 culprit_level=1 if off_lines and rng.random() < off_lines else 2))
    return out


def _machine_rate(rng: random.Random, flake: float) -> float:
    """An attempt's failure rate on the machine this run landed on."""
    q = flake * BAD_MACHINE_SHARE / BAD_MACHINE_FAIL
    g = flake * (1 - BAD_MACHINE_SHARE) / (1 - q)
    return BAD_MACHINE_FAIL if rng.random() < q else g


def bisect(rng: random.Random, b: Breakage, repeats: bool) -> tuple[int, int, int]:
    """Plain bisection (one run per probe) or deflaked (repeat until two agree, at most 3):
    (answer, runs, rounds with one runner)."""
    lo, hi, runs = -1, b.n - 1, 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        failed, used = _probe(rng, b, mid, repeats)
        runs += used
        lo, hi = (lo, mid) if failed else (mid, hi)
    return hi, runs, runs


def multisect(rng: random.Random, b: Breakage, runners: int, repeats: bool) -> tuple[int, int]:
    """Bisection spread over ``runners``: plain probes ``runners`` points a round; deflaked probes
    ``runners // 2`` points with their two runs at once, and a third round where two disagree.
    (answer, rounds)."""
    lo, hi, rounds = -1, b.n - 1, 0
    points = runners // 2 if repeats else runners
    while hi - lo > 1:
        span = hi - lo
        mids = sorted({lo + max(1, span * (j + 1) // (points + 1)) for j in range(points)} - {hi})
        results = {}
        rounds += 1
        third = False
        for m in mids:
            if repeats:
                a, c = b.run(rng, m), b.run(rng, m)
                if a != c:
                    third = True
                    a = b.run(rng, m)
                results[m] = a
            else:
                results[m] = b.run(rng, m)
        rounds += third
        fails = [m for m in mids if results[m]]
        new_hi = fails[0] if fails else hi
        passes = [m for m in mids if not results[m] and m < new_hi]
        lo, hi = (passes[-1] if passes else lo), new_hi
    return hi, rounds


def _probe(rng: random.Random, b: Breakage, index: int, repeats: bool) -> tuple[bool, int]:
    first = b.run(rng, index)
    if not repeats:
        return first, 1
    second = b.run(rng, index)
    if first == second:
        return first, 2
    return b.run(rng, index), 3
