"""``python -m bench culprit [--quick] [--seed N] [--breakages N] [--misses] [--where] [--off-lines-percent P]
[--calibration] [--past-culprits N] [--confirm] [--learned-only]``:
culprit finding on simulated breakages, every method side by side in one run.

Windows of 2-128 candidate commits (log-uniform), the culprit uniform among them, the test's
flake rate uniform in each band (0, 0-5 %, 5-10 %, 10-20 %, 20-30 %), the noise of
`bench._culprit_sim` (per-run bad-machine latent, one retry per run). Each breakage is searched
by plain bisection, deflaked bisection (each probe repeated until two runs agree, at most 3) and
`ci.culprit` (confidence 0.99, budget 60 runs, flake and retry rates from a simulated history of
200 runs, the false-pass rate p from one of 40 closed breakages) twice: uniform prior, and the touched prior (weight 1 for a commit that changes a file
the test executes, 0.1 else; each other commit touches with the share measured on rich's or
pytest's history, alternating, the culprit always: `bench._culprit_sim.TOUCH_SHARES`), and a third
time with the touched prior and runs that report how many attempts failed ("+attempts"); then
twice with the observed prior (`ci.culprit.prior.TouchWeights`: 1 for a commit that changes a line
the test executed, 0.1 one of its files only, 0.02 nothing it executed; shares measured on rich's
map: `bench._culprit_sim.OBSERVED_SHARES`, the culprit changing executed lines), without and with
the attempt counts, the last assuming p's 90 % posterior quantile, as `ci culprit` does, and once
more assuming its mean ("p mean", as every other ci.culprit method does); then the judged method
with error signatures ("+signatures S %"), once per assumed share S of the flaky failures whose
signature is the breakage's (`SIGNATURE_SHARES`; 100 %: a signature tells nothing, today's model),
m learned from a simulated history of the test's 200 runs (`flake_match_bound`), the breakage's
signature known only when --bad's verification attempts all carry it (`verified_signature`; else
the search weighs no signature, as `ci culprit` does); and the judged method with touch weights
learned from a past of ``--past-culprits`` found culprits (default `PAST_CULPRITS`), drawn as the
measured breakages are, from a stream of their own (`ci.culprit.learned`, "learned prior").
Every ci.culprit method's runs come from one seed per breakage (the same draws for each; the
signatures from a stream of their own).
Accuracy with 1 and with 4 runners, mean runs (every run is one CI run of two attempts), mean
rounds with 1 and with 4 runners, per band; the ratio column is mean runs over deflaked
bisection's in the same band. The goal (issue 51): >= 99 % right where the flake rate is <= 20 %
with <= 0.5x deflaked bisection's runs; the verdict line says whether this run met it (`GOAL`).
``--where``: where the judged method's runs go (1 runner), per band: `Where`. ``--calibration``:
how often the judged method's top commit is the culprit against the probability it gave it, per
band, at the stop and at every step (1 runner): `Calibration`; only the bisections, the judged
method and its learned-prior twin are run then (the same breakages and draws: the other methods draw from seeds of their own).
``--confirm``: one more method, the learned-prior method whose confident answer waits while a
single run decides it (`Search(confirm=True)`: that run is repeated), on the same draws.
``--learned-only``: only the bisections and the learned-prior methods, only the bands up to 20 %
(the goal's): the same breakages and draws as the full run, a fraction of its time.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

from bench._culprit_sim import (ATTEMPTS, PAST_CULPRITS, TOUCH_SHARES, Breakage, bisect, history_false_passes,
                                history_rates, history_signatures, multisect, past_culprits, signed_failures,
                                verified_signature)
from bench.table import format_table, ratio
from ci.culprit.model import CulpritResult, NoiseModel, Probe, false_pass_bound, false_pass_rate, flake_match_bound
from ci.culprit.posterior import Posterior, prior_weights
from ci.culprit.learned import PastCulprit, learn_weights
from ci.culprit.prior import Touch, TouchWeights
from ci.culprit.search import Search, run_search

BANDS = ((0.0, 0.0), (0.0, 0.05), (0.05, 0.10), (0.10, 0.20), (0.20, 0.30))
METHODS = ("plain bisection", "deflaked bisection", "ci.culprit", "ci.culprit touched", "ci.culprit touched+attempts",
           "ci.culprit observed", "ci.culprit observed+attempts", "ci.culprit observed+attempts, p mean")
SIGNATURE_SHARES = (0.0, 0.10, 0.30, 1.0)  # assumed, not measured: each its own row
SIGNED = tuple(f"ci.culprit observed+attempts+signatures {s:.0%}".replace("%", " %") for s in SIGNATURE_SHARES)
METHODS += SIGNED
LEARNED = "ci.culprit observed+attempts, learned prior"  # the judged method with `ci.culprit.learned` weights
METHODS += (LEARNED,)
CONFIRMED = LEARNED + ", confirmed"  # `LEARNED` with `Search(confirm=True)`: only with --confirm
GOAL = "ci.culprit observed+attempts"  # judged against the goal; it assumes p's 90 % posterior quantile
# (`false_pass_bound`), as `ci culprit` does; every other ci.culprit method, "p mean" the one to
# compare it with, assumes the posterior's mean (`false_pass_rate`)
W_LOW = 0.1  # `ci culprit --w-low`'s default
CONFIDENCE = 0.99
BUDGET = 60


@dataclass
class Tally:
    right: int = 0
    right4: int = 0
    runs: int = 0
    rounds1: int = 0
    rounds4: int = 0
    count: int = 0
    prior_only: int = 0  # searches (1 runner) that answered before any run: the prior reached the confidence
    prior_only_right: int = 0
    misses: list[str] = field(default_factory=list)

    def add(self, right: bool, right4: bool, runs: int, rounds1: int, rounds4: int) -> None:
        self.right += right
        self.right4 += right4
        self.runs += runs
        self.rounds1 += rounds1
        self.rounds4 += rounds4
        self.count += 1


@dataclass
class Where:
    """Where the judged method's runs went (1 runner): before the posterior's top first reached
    `EARLY_MARK`, and after; runs at a commit already run, at the answer, its parent or elsewhere;
    the stop reasons and the top's probability at the stop. Neither method verifies --good/--bad in
    the bench (`ci culprit` spends 2 runs on it unless --no-verify), so neither count has them."""

    searches: int = 0
    runs: int = 0
    before_mark: int = 0
    again_answer: int = 0
    again_parent: int = 0
    again_other: int = 0
    top_at_stop: float = 0.0
    stops: dict[str, int] = field(default_factory=dict)

    def add(self, weights: list[float], noise: NoiseModel, result: CulpritResult) -> None:
        posterior, seen = Posterior(weights, noise), set()
        reached = None
        for k, outcome in enumerate(result.outcomes, 1):
            posterior.update(outcome)
            if reached is None and max(posterior.probabilities()) >= EARLY_MARK:
                reached = k
            if outcome.index in seen:
                offset = outcome.index - result.culprit
                self.again_answer += offset == 0
                self.again_parent += offset == -1
                self.again_other += offset not in (0, -1)
            seen.add(outcome.index)
        self.searches += 1
        self.runs += result.runs
        self.before_mark += result.runs if reached is None else reached
        self.top_at_stop += result.probability
        self.stops[result.stop.value] = self.stops.get(result.stop.value, 0) + 1

    def row(self, label: str) -> list[str]:
        n = self.searches
        return [label, f"{self.runs / n:.2f}", f"{self.before_mark / n:.2f}", f"{(self.runs - self.before_mark) / n:.2f}",
                f"{self.again_answer / n:.2f}", f"{self.again_parent / n:.2f}", f"{self.again_other / n:.2f}",
                f"{self.top_at_stop / n:.4f}", ", ".join(f"{k} {v}" for k, v in sorted(self.stops.items()))]


class Calibration:
    """The judged method's posterior against the truth: each state (after every run, and the stop
    alone) in a bucket by its top commit's probability, with how often that commit is the culprit.
    An honest posterior's right share matches the mean probability in every bucket."""

    EDGES = (0.0, 0.5, 0.9, 0.99, 0.995, 0.999, 1.0)

    def __init__(self) -> None:
        # (kind, bucket) -> [states, sum of top probabilities, right]
        self.cells: dict[tuple[str, int], list[float]] = {}

    def add(self, weights: list[float], noise: NoiseModel, result: CulpritResult, culprit: int) -> None:
        posterior = Posterior(weights, noise)
        for outcome in result.outcomes:
            posterior.update(outcome)
            probabilities = posterior.probabilities()
            top = max(range(len(probabilities)), key=probabilities.__getitem__)
            self._count("every step", probabilities[top], top == culprit)
        self._count("at the stop", result.probability, result.culprit == culprit)

    def _count(self, kind: str, top: float, right: bool) -> None:
        bucket = next(i for i in range(len(self.EDGES) - 1) if top < self.EDGES[i + 1] or i == len(self.EDGES) - 2)
        cell = self.cells.setdefault((kind, bucket), [0, 0.0, 0])
        cell[0] += 1
        cell[1] += top
        cell[2] += right

    def rows(self, label: str) -> list[list[str]]:
        return [[label, kind, f"{self.EDGES[b]:g}-{self.EDGES[b + 1]:g}", f"{n:.0f}", f"{total / n:.4f}",
                 f"{right / n:.4f}", f"{n - right:.0f} / {n - total:.1f}"]
                for (kind, b), (n, total, right) in sorted(self.cells.items())]


CALIBRATION_HEADERS = ["band", "states", "top's probability", "count", "mean top", "right", "wrong / expected"]
EARLY_MARK = 0.9
WHERE_HEADERS = ["band", "runs", f"before top >= {EARLY_MARK}", "after", "again: answer", "again: its parent",
                 "again: other", "top at stop", "stops"]


def _ours(seed: float, b: Breakage, noises: tuple[NoiseModel, ...], runners: int,
          method: str, where: Where | None = None, calibration: Calibration | None = None,
          learned: TouchWeights = TouchWeights()) -> tuple[int, int, int, str]:
    rng, sig_rng = random.Random(seed), random.Random(seed + 0.5)
    share = SIGNATURE_SHARES[SIGNED.index(method)] if method in SIGNED else None
    noise = noises[2 + SIGNED.index(method)] if share is not None else noises[method not in (GOAL, LEARNED, CONFIRMED)]
    if "observed" in method:
        weights = (learned if method in (LEARNED, CONFIRMED) else TouchWeights()).weights([Touch(level) for level in b.levels])
    else:
        weights = prior_weights(b.n, b.touches if "touched" in method else None, W_LOW)
    detail = "attempts" in method
    search = Search(weights, noise, confidence=CONFIDENCE, budget=BUDGET, attempts=ATTEMPTS, detail=detail,
                    confirm=method == CONFIRMED)

    def probe(batch: list[Probe]) -> list[bool | int | tuple[int, bool | None]]:
        if share is not None:
            return [signed_failures(b, rng, sig_rng, p.index, share, p.attempts) for p in batch]
        return [b.failures(rng, p.index, p.attempts) if detail else b.run(rng, p.index, p.attempts) for p in batch]
    result, rounds = run_search(search, probe, runners)
    if where is not None:
        where.add(list(weights), noise, result)
    if calibration is not None:
        calibration.add(list(weights), noise, result, b.culprit)
    return result.culprit, result.runs, rounds, result.stop.value


def simulate(breakages: int, seed: int, off_lines: float = 0.0, where: dict[str, Where] | None = None,
             calibration: dict[str, Calibration] | None = None,
             methods: tuple[str, ...] = METHODS, past: int = PAST_CULPRITS,
             bands: tuple[tuple[float, float], ...] = BANDS) -> dict[tuple[str, str], Tally]:
    """Every method's tally per band label, over ``breakages`` per band; ``off_lines``: the share of
    culprits that change only the test's files, none of its executed lines (`Touch.FILE`); ``where``
    (band label -> `Where`, filled in) when given: where the judged method's runs went;
    ``calibration`` likewise, its posterior against the truth. ``methods``: those run (a
    ci.culprit method's draws come from seeds of its own, so leaving some out changes no other's).
    ``past``: the found culprits `LEARNED` learns its weights from, per breakage (`past_culprits`:
    drawn as the measured breakages are, from a stream of their own). ``bands``: a prefix of
    `BANDS` (the bands are drawn in order, so a prefix's draws are the full run's)."""
    if bands != BANDS[:len(bands)]:
        raise ValueError(f"bands {bands}: not a prefix of {BANDS}")
    rng, past_rng = random.Random(seed), random.Random(f"{seed} past")
    tallies: dict[tuple[str, str], Tally] = {}
    shares = list(TOUCH_SHARES.values())
    for low, high in bands:
        label = _band(low, high)
        for k in range(breakages):
            n = max(2, min(128, round(2 ** rng.uniform(1, 7))))
            b = Breakage.draw(rng, n, rng.randrange(n), rng.uniform(low, high), shares[k % len(shares)],
                              culprit_level=1 if off_lines and rng.random() < off_lines else 2)
            f, r = history_rates(rng, b.flake)
            attempts, passes = history_false_passes(rng)
            bound = false_pass_bound(passes, attempts)
            noises = (NoiseModel(f, bound, max(r, f)), NoiseModel(f, false_pass_rate(passes, attempts), max(r, f)),
                      *(NoiseModel(f, bound, max(r, f), flake_match_bound(*history_signatures(rng, b.flake, share)))
                        for share in SIGNATURE_SHARES))
            seeds = (rng.random(), rng.random())  # the runs of every ci.culprit method, 1 and 4 runners
            verify = random.Random(seeds[0] + 0.25)  # --bad's verification: is the breakage's signature learned?
            noises = (*noises[:2], *(n if verified_signature(verify, b, share) else replace(n, flake_match=None)
                                     for n, share in zip(noises[2:], SIGNATURE_SHARES)))
            learned = learn_weights([PastCulprit(Touch(p.levels[p.culprit]), tuple(map(Touch, p.levels)))
                                     for p in past_culprits(past_rng, past, off_lines)]).weights \
                if LEARNED in methods or CONFIRMED in methods else None
            for method in methods:
                tally = tallies.setdefault((label, method), Tally())
                if method.startswith("ci.culprit"):
                    spent = where.setdefault(label, Where()) if where is not None and method == GOAL else None
                    honest = calibration.setdefault(f"{label} {method}", Calibration()) \
                        if calibration is not None and method in (GOAL, LEARNED) else None
                    touch = learned if method in (LEARNED, CONFIRMED) and learned is not None else TouchWeights()
                    answer, runs, rounds1, stop = _ours(seeds[0], b, noises, 1, method, spent, honest, touch)
                    answer4, _, rounds4, _ = _ours(seeds[1], b, noises, 4, method, learned=touch)
                    tally.prior_only += runs == 0
                    tally.prior_only_right += runs == 0 and answer == b.culprit
                    if answer != b.culprit:
                        tally.misses.append(f"{'early' if answer < b.culprit else 'late'} by {abs(answer - b.culprit)}"
                                            f" of {b.n}, {stop}, {runs} runs, flake {b.flake:.2f}")
                else:
                    repeats = method.startswith("deflaked")
                    answer, runs, rounds1 = bisect(rng, b, repeats)
                    answer4, rounds4 = multisect(rng, b, 4, repeats)
                tally.add(answer == b.culprit, answer4 == b.culprit, runs, rounds1, rounds4)
    return tallies


def _band(low: float, high: float) -> str:
    return "0 %" if high == 0 else f"{low * 100:.0f}-{high * 100:.0f} %"


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    seed = _flag(argv, "--seed", 51)
    per_band = _flag(argv, "--breakages", 12 if quick else 200)
    off_lines = _flag(argv, "--off-lines-percent", 0) / 100
    where: dict[str, Where] | None = {} if "--where" in argv else None
    calibration: dict[str, Calibration] | None = {} if "--calibration" in argv else None
    past = _flag(argv, "--past-culprits", PAST_CULPRITS)
    methods = METHODS if calibration is None else ("plain bisection", "deflaked bisection", GOAL, LEARNED)
    bands = BANDS
    if "--confirm" in argv:
        methods += (CONFIRMED,)
    if "--learned-only" in argv:
        methods = tuple(m for m in methods if not m.startswith("ci.culprit") or m in (LEARNED, CONFIRMED))
        bands = tuple(band for band in BANDS if band[1] <= 0.20)
    tallies = simulate(per_band, seed, off_lines, where, calibration, methods, past, bands)
    rows = []
    judged = tuple(m for m in (GOAL, LEARNED, CONFIRMED, *SIGNED) if m in methods)
    met = {m: True for m in judged}
    short: dict[str, list[str]] = {m: [] for m in judged}
    for low, high in bands:
        label = _band(low, high)
        base = tallies[(label, "deflaked bisection")]
        for method in methods:
            t = tallies[(label, method)]
            rows.append([f"{label} {method}", t.count, f"{t.right / t.count:.1%}", f"{t.right4 / t.count:.1%}",
                         f"{t.runs / t.count:.1f}",
                         ratio(t.runs / base.runs) if base.runs else "-", f"{t.rounds1 / t.count:.1f}",
                         f"{t.rounds4 / t.count:.1f}"])
        for m in judged:
            ours = tallies[(label, m)]
            if high <= 0.20 and not (ours.right >= math.ceil(0.99 * ours.count) and ours.runs <= 0.5 * base.runs):
                met[m] = False
                short[m].append(label)
    print(format_table(["band / method", "breakages", "right", "right (4 runners)", "mean runs", "runs / deflaked",
                        "rounds (1 runner)", "rounds (4 runners)"], rows,
                       f"culprit finding, {per_band} breakages per flake band, windows 2-128, seed {seed}"))
    if "--misses" in argv:
        for (label, method), t in tallies.items():
            for miss in t.misses:
                print(f"miss: {label} {method}: {miss}")
    if calibration is not None:
        print(format_table(CALIBRATION_HEADERS, [row for label, c in calibration.items() for row in c.rows(label)],
                           f"{GOAL}: its top commit's probability against how often it is the culprit, seed {seed}"))
    if where is not None:
        print(format_table(WHERE_HEADERS, [w.row(label) for label, w in where.items()],
                           f"where {GOAL}'s runs go (1 runner), seed {seed}"))
    for m in judged:
        alone = [(label, tallies[(label, m)]) for label in map(lambda band: _band(*band), bands)]
        print(f"answered on the prior alone, no run ({m}, 1 runner): "
              + "; ".join(f"{label} {t.prior_only} of {t.count} ({t.prior_only_right} right)" for label, t in alone))
    for m in judged:
        print(f"goal ({m}): >= 99 % right and <= 0.5x deflaked bisection's runs in every band up to 20 %: "
              f"{'met' if met[m] else 'MISSED'}{'' if met[m] else ' (short: ' + ', '.join(short[m]) + ')'}")
    return 0


def _flag(argv: list[str], name: str, default: int) -> int:
    for i, arg in enumerate(argv):
        if arg.startswith(name + "="):
            return int(arg.split("=", 1)[1])
        if arg == name and i + 1 < len(argv):
            return int(argv[i + 1])
    return default
