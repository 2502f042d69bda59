"""The culprit search core (`ci.culprit`) against brute-force oracles on small windows.

The posterior oracle enumerates every hypothesis and, for each run, every attempt sequence of the
noise model's Markov chain (first attempt fails with f, a retry after a failure with r, a broken
attempt fails with 1 - p), multiplying probabilities directly (no logs, no prefix trick). The
gain oracle enumerates every joint outcome vector of a batch over every hypothesis.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest

from ci.culprit.choose import choose_batch, joint_gain
from ci.culprit.model import NoiseModel, Outcome, Probe, StopReason
from ci.culprit.posterior import Posterior, prior_weights
from ci.culprit.search import Search, run_search


def attempt_chain_fail(noise: NoiseModel, broken: bool, k: int) -> float:
    """P(all k attempts fail), summed over every attempt sequence of the chain."""
    f, p = max(noise.flake, 1e-6), max(noise.false_pass, 1e-6)
    r = max(noise.retry_fail if noise.retry_fail is not None else f, f)
    total = 0.0
    for seq in itertools.product((True, False), repeat=k):  # True: the attempt failed
        prob, prev_failed = 1.0, False
        for j, failed in enumerate(seq):
            q = (1 - p) if broken else (f if j == 0 else (r if prev_failed else f))
            prob *= q if failed else 1 - q
            prev_failed = failed
        if all(seq):
            total += prob
    return total


def attempt_chain_stop(noise: NoiseModel, broken: bool, k: int, failures: int) -> float:
    """P(the first ``failures`` attempts fail and the next passes, or all k fail), summed over every
    sequence of k attempts (those a run stops before running included)."""
    f, p = max(noise.flake, 1e-6), max(noise.false_pass, 1e-6)
    r = max(noise.retry_fail if noise.retry_fail is not None else f, f)
    total = 0.0
    for seq in itertools.product((True, False), repeat=k):
        prob, prev_failed = 1.0, False
        for j, failed in enumerate(seq):
            q = (1 - p) if broken else (f if j == 0 else (r if prev_failed else f))
            prob *= q if failed else 1 - q
            prev_failed = failed
        if all(seq[:failures]) and (failures == k or not seq[failures]):
            total += prob
    return total


def brute_posterior(weights, noise, outcomes):
    joint = []
    for h, w in enumerate(weights):
        prob = w
        for o in outcomes:
            if o.failures is not None:
                prob *= attempt_chain_stop(noise, o.index >= h, o.attempts, o.failures)
                continue
            fail = attempt_chain_fail(noise, o.index >= h, o.attempts)
            prob *= fail if o.failed else 1 - fail
        joint.append(prob)
    total = sum(joint)
    return [j / total for j in joint]


def brute_gain(probs, noise, probes):
    def lik(y, h):
        out = 1.0
        for pr, failed in zip(probes, y):
            fail = attempt_chain_fail(noise, pr.index >= h, pr.attempts)
            out *= fail if failed else 1 - fail
        return out
    outcomes = list(itertools.product((True, False), repeat=len(probes)))
    py = {y: sum(p * lik(y, h) for h, p in enumerate(probs)) for y in outcomes}
    h_y = -sum(v * math.log2(v) for v in py.values() if v > 0)
    h_y_given = -sum(p * sum(lik(y, h) * math.log2(lik(y, h)) for y in outcomes if lik(y, h) > 0)
                     for h, p in enumerate(probs))
    return h_y - h_y_given


NOISES = [NoiseModel(0.0, 0.0), NoiseModel(0.1, 0.01, 0.5), NoiseModel(0.3, 0.002, 0.8), NoiseModel(0.05)]


@pytest.mark.parametrize("detail", [False, True])
@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("seed", range(6))
def test_posterior_equals_enumeration(noise: NoiseModel, seed: int, detail: bool) -> None:
    """With ``detail`` most runs say how many attempts failed (a pass after a failure is weaker
    evidence of working code than a first-attempt pass), mixed with runs that say only
    failed or passed."""
    rng = random.Random(seed)
    n = rng.randint(1, 7)
    weights = prior_weights(n, [rng.random() < 0.5 for _ in range(n)], w_low=0.2)
    post = Posterior(weights, noise)
    outcomes = []
    for _ in range(rng.randint(0, 12)):
        k = rng.randint(1, 3)
        j = rng.randint(0, k)
        o = Outcome(rng.randrange(n), j == k, k, j if detail and rng.random() < 0.7 else None)
        post.update(o)
        outcomes.append(o)
        assert post.probabilities() == pytest.approx(brute_posterior(weights, noise, outcomes), rel=1e-9, abs=1e-12)


def test_a_pass_after_a_failure_moves_the_posterior_less() -> None:
    noise = NoiseModel(0.1, 0.005, 0.5)
    first, retried = Posterior([1.0, 1.0], noise), Posterior([1.0, 1.0], noise)
    first.update(Outcome(0, False, 2, 0))
    retried.update(Outcome(0, False, 2, 1))
    assert first.probabilities()[1] > retried.probabilities()[1] > 0.5


def test_failed_attempts_that_contradict_the_outcome_are_refused() -> None:
    with pytest.raises(ValueError, match="2 failed attempts of 2 for a run that passed"):
        Outcome(0, False, 2, 2)


def test_long_searches_stay_in_range() -> None:
    """2,000 updates would underflow a product of probabilities; the log weights do not."""
    post = Posterior([1.0] * 8, NoiseModel(0.1, 0.01))
    for _ in range(1000):
        post.update(Outcome(3, True))
        post.update(Outcome(2, False))
    probs = post.probabilities()
    assert probs[3] == pytest.approx(1.0) and all(math.isfinite(p) for p in probs)


@pytest.mark.parametrize("noise", NOISES[1:])
@pytest.mark.parametrize("seed", range(4))
def test_joint_gain_equals_enumeration(noise: NoiseModel, seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(2, 6)
    raw = [rng.random() + 0.01 for _ in range(n)]
    probs = [r / sum(raw) for r in raw]
    probes = [Probe(rng.randrange(n), rng.randint(1, 2)) for _ in range(rng.randint(1, 3))]
    assert joint_gain(probs, noise, probes) == pytest.approx(brute_gain(probs, noise, probes), abs=1e-9)


@pytest.mark.parametrize("runners", [1, 2, 3])
def test_each_greedy_step_maximises_the_enumerated_joint_gain(runners: int) -> None:
    noise = NoiseModel(0.15, 0.01, 0.6)
    raw = [1, 3, 2, 5, 1, 1, 4]
    probs = [r / sum(raw) for r in raw]
    batch = choose_batch(probs, noise, runners)
    assert len(batch) == runners
    for step in range(runners):
        earlier = batch[:step]
        best = max(brute_gain(probs, noise, earlier + [Probe(i)]) for i in range(len(probs)))
        assert brute_gain(probs, noise, earlier + [batch[step]]) == pytest.approx(best, abs=1e-9)


def test_choose_picks_the_max_gain_probe_not_the_median() -> None:
    """By hand, f = 0.3, one attempt, p ~ 0: a probe at i fails with F = c_i + (1 - c_i) 0.3 (c_i the
    posterior mass up to i) and teaches H(F) - (1 - c_i) H(0.3) bits, H(0.3) = 0.8813. For
    probabilities 0.5, 0.1, 0.4: at 0, F = 0.65, 0.9341 - 0.4407 = 0.4934; at 1, F = 0.72,
    0.8555 - 0.3525 = 0.5030. The median split is at 0 (its mass reaches 0.5); a flaky failure
    is weak evidence, so the better probe puts more mass on the failing side."""
    noise = NoiseModel(0.3, 0.0)
    probs = [0.5, 0.1, 0.4]
    assert joint_gain(probs, noise, [Probe(0)]) == pytest.approx(0.4934, abs=1e-4)
    assert joint_gain(probs, noise, [Probe(1)]) == pytest.approx(0.5030, abs=1e-4)
    assert choose_batch(probs, noise, 1) == [Probe(1)]


@pytest.mark.parametrize("noise", NOISES[1:])
@pytest.mark.parametrize("seed", range(4))
def test_detailed_joint_gain_equals_enumeration(noise: NoiseModel, seed: int) -> None:
    """With runs that report their failed attempts, each greedy step against an enumeration of
    every joint count vector."""
    rng = random.Random(seed)
    n = rng.randint(2, 6)
    raw = [rng.random() + 0.01 for _ in range(n)]
    probs = [r / sum(raw) for r in raw]
    k = rng.randint(1, 3)
    assert_greedy_steps_enumerated(probs, noise, k, list(range(k + 1)),
                                   lambda broken, j: attempt_chain_stop(noise, broken, k, j))


def assert_greedy_steps_enumerated(probs, noise, k, said, lik_run) -> None:
    """Each greedy step of a 2-probe batch (runs of k attempts reporting their detail) against the
    joint gain enumerated over every outcome vector: ``said`` lists a run's outcomes,
    ``lik_run(broken, outcome)`` is the oracle's probability of one."""
    def brute(probes):
        def lik(y, h):
            return math.prod(lik_run(pr.index >= h, o) for pr, o in zip(probes, y))
        ys = list(itertools.product(said, repeat=len(probes)))
        h_y = -sum(v * math.log2(v) for v in (sum(p * lik(y, h) for h, p in enumerate(probs)) for y in ys) if v > 0)
        return h_y + sum(p * lik(y, h) * math.log2(lik(y, h)) for h, p in enumerate(probs) for y in ys if lik(y, h) > 0)
    batch = choose_batch(probs, noise, 2, attempt_choices=(k,), detail=True)
    assert joint_gain(probs, noise, batch, detail=True) == pytest.approx(brute(batch), abs=1e-9)
    for step in range(len(batch)):
        best = max(brute(batch[:step] + [Probe(i, k)]) for i in range(len(probs)))
        assert brute(batch[:step + 1]) == pytest.approx(best, abs=1e-9)


def test_noiseless_search_is_bisection() -> None:
    search = Search([1.0] * 16, NoiseModel(0.0, 0.0))
    first = search.next_batch()
    assert [p.index for p in first] in ([7], [8])
    result, rounds = run_search(search, lambda batch: [p.index >= 11 for p in batch])
    assert result.culprit == 11 and result.stop is StopReason.CONFIDENT and rounds == 4


def test_a_commit_that_touches_nothing_the_test_runs_is_probed_late() -> None:
    touches = [False] * 7 + [True]
    probs = Posterior(prior_weights(8, touches, w_low=0.01), NoiseModel(0.0, 0.0)).probabilities()
    assert probs[7] > 0.9
    assert choose_batch(probs, NoiseModel(0.0, 0.0), 1)[0].index == 6  # the split that tests the favourite


def test_run_search_records_the_failed_attempt_counts_a_probe_reports() -> None:
    search = Search([1.0] * 8, NoiseModel(0.1, 0.01, 0.5), attempts=2, detail=True)
    result, _ = run_search(search, lambda batch: [2 if p.index >= 5 else 0 for p in batch])
    assert result.culprit == 5 and result.stop is StopReason.CONFIDENT
    assert all(o.failures == (2 if o.failed else 0) for o in result.outcomes)


def test_budget_stops_and_says_so() -> None:
    search = Search([1.0] * 64, NoiseModel(0.2, 0.01), budget=3)
    result, _ = run_search(search, lambda batch: [True] * len(batch), runners=2)
    assert result.runs == 3 and result.stop is StopReason.BUDGET


@pytest.mark.parametrize("none, runs", [
    (0.0064, 0),  # a learned prior of 40 culprits on executed lines: 1 / 1.0064 = 0.9936 >= 0.99
    (0.0102, 1),  # 1 / 1.0102 = 0.98990, just short: a run first
    (0.1, 1),
])
def test_a_search_answers_on_its_prior_alone_only_at_the_confidence(none: float, runs: int) -> None:
    """The rule: a search stops before any run only when the prior's top commit already reaches
    the confidence asked, as after any run; else it runs. Two commits, the first on executed lines
    (weight 1), the other on nothing (``none``); the culprit is the first."""
    top = 1 / (1 + none)
    search = Search([1.0, none], NoiseModel(0.1, 0.003, 0.5), confidence=0.99, attempts=2)
    batch = search.next_batch()
    assert (batch == []) == (top >= 0.99) == (runs == 0)
    result, _ = run_search(search, lambda b: [p.index >= 0 for p in b])
    assert result.culprit == 0 and result.stop is StopReason.CONFIDENT and result.probability >= 0.99
    assert (result.runs == 0) == (runs == 0)


def test_flaky_search_finds_the_culprit_under_its_own_model() -> None:
    rng = random.Random(7)
    noise = NoiseModel(0.2, 0.01, 0.5)
    right = 0
    for trial in range(40):
        culprit = rng.randrange(32)

        def probe(batch):
            return [rng.random() < attempt_chain_fail(noise, p.index >= culprit, p.attempts) for p in batch]
        result, _ = run_search(Search([1.0] * 32, noise, attempts=2), probe, runners=2)
        right += result.culprit == culprit
    assert right >= 39


def test_nothing_to_learn_stops() -> None:
    search = Search([1.0, 1.0], NoiseModel(0.9, 0.1))  # a run fails as often either way
    assert search.next_batch() == [] and search.stop_reason() is StopReason.NOTHING_TO_LEARN


@pytest.mark.parametrize("bad", [dict(flake=1.0), dict(flake=-0.1), dict(flake=0.1, false_pass=1.5),
                                 dict(flake=0.1, retry_fail=2.0)])
def test_impossible_noise_is_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        NoiseModel(**bad)


def _git_diff(tmp_path, old: str, new: str) -> str:
    import subprocess

    (tmp_path / "a").write_text(old)
    (tmp_path / "b").write_text(new)
    return subprocess.run(["git", "diff", "--no-index", "-U0", "--no-color", str(tmp_path / "a"), str(tmp_path / "b")],
                          capture_output=True, text=True).stdout


@pytest.mark.parametrize("seed", range(40))
def test_carried_lines_land_where_git_moved_them(tmp_path, seed) -> None:
    """Oracle: every old line has its own text; after random insertions, deletions and
    replacements, a line git kept is found by its text, and a replaced or removed one lies in or
    beside its hunk."""
    from ci.selection.diff_hunks import carry_lines, file_diffs

    rng = random.Random(seed)
    old = [f"line {i}" for i in range(1, 41)]
    new, fate = [], {}  # fate: old line -> its new line, or None when replaced or deleted
    for i, text in enumerate(old, 1):
        roll = rng.random()
        if roll < 0.1:
            new.append(f"inserted {i}")
        if roll < 0.2 and 0.1 <= roll:
            fate[i] = None  # deleted
            continue
        if 0.2 <= roll < 0.3:
            new.append(f"replaced {i}")
            fate[i] = None
            continue
        new.append(text)
        fate[i] = len(new)
    hunks = file_diffs(_git_diff(tmp_path, "\n".join(old) + "\n", "\n".join(new) + "\n"))[0].hunks
    picked = frozenset(rng.sample(range(1, 41), 15))
    carried = carry_lines(picked, hunks)
    kept = {fate[i] for i in picked if fate[i] is not None}
    assert kept <= carried
    replaced = [i for i in picked if fate[i] is None]
    extra = carried - kept
    for line in extra:  # only the new side of a hunk that replaced a picked line, or where one was removed
        assert any(h.new_start <= line < h.new_start + h.new_count or h.new_count == 0 and line in
                   (h.new_start, h.new_start + 1) for h in hunks)
    if not replaced:
        assert carried == kept


def test_touch_levels_and_their_weights() -> None:
    from ci.culprit.prior import Touch, TouchWeights, carry, touch_level
    from ci.selection.diff_hunks import FileDiff, Hunk

    executed = {"pkg/a.py": frozenset({3, 4, 5})}
    change = lambda path, start, count=1: [FileDiff(path, path, (Hunk(start, count, start, count),))]  # noqa: E731
    assert touch_level(change("pkg/a.py", 4), executed, frozenset()) is Touch.LINES
    assert touch_level(change("pkg/a.py", 9), executed, frozenset()) is Touch.FILE
    assert touch_level(change("pkg/a.py", 1, 0), executed, frozenset()) is Touch.FILE  # inserted between 1 and 2
    assert touch_level(change("pkg/a.py", 5, 0), executed, frozenset()) is Touch.LINES  # between 5 and 6
    assert touch_level(change("pkg/b.py", 4), executed, frozenset()) is Touch.NONE
    assert touch_level(change("pkg/b.py", 4), executed, frozenset(), imported={"pkg/b.py": frozenset({4})}) \
        is Touch.FILE  # an import-time line of a file the test's own work did not run
    assert touch_level(change("data/t.json", 1), executed, frozenset({"data/t.json"})) is Touch.LINES
    assert touch_level([FileDiff("pkg/a.py", None, ())], executed, frozenset()) is Touch.LINES  # deleted
    assert touch_level([FileDiff(None, "pkg/c.py", ())], executed, frozenset(), frozenset({"pkg/c.py"})) \
        is Touch.LINES  # added, executed at the map's commit
    assert TouchWeights().weights([Touch.LINES, Touch.FILE, Touch.NONE]) == [1.0, 0.1, 0.02]
    inserted = [FileDiff("pkg/a.py", "pkg/a.py", (Hunk(3, 0, 4, 2), Hunk(5, 1, 6, 0)))]  # 2 lines after 3; 5 removed
    assert carry(executed, inserted) == {"pkg/a.py": frozenset({3, 4, 5, 6, 7})}  # 4 -> 6, 5 -> around 6
    with pytest.raises(ValueError, match="not within"):
        TouchWeights(file=0)


def signed_stop(noise: NoiseModel, broken: bool, k: int, failures: int, same: bool | None) -> float:
    """`attempt_chain_stop` with each failed attempt's signature enumerated too (S the breakage's,
    O another; working code's failure is S with m, broken code's unless a flake with another
    signature struck first, f (1 - m); floored at 1e-6), kept
    when the run's last failed attempt has signature ``same`` (None: any)."""
    f, p = max(noise.flake, 1e-6), max(noise.false_pass, 1e-6)
    r = max(noise.retry_fail if noise.retry_fail is not None else f, f)
    m = min(max(noise.flake_match, 1e-6), 1 - 1e-6)
    total = 0.0
    for seq in itertools.product("PSO", repeat=k):
        prob, prev_failed = 1.0, False
        for j, a in enumerate(seq):
            q = (1 - p) if broken else (f if j == 0 else (r if prev_failed else f))
            other = min(max(noise.flake * (1 - m), 1e-6), 1 - 1e-6)  # broken: a flake struck first
            s = (1 - other if a == "S" else other) if broken else (m if a == "S" else 1 - m)
            prob *= 1 - q if a == "P" else q * s
            prev_failed = a != "P"
        ran = seq[:failures + 1]
        if all(a != "P" for a in seq[:failures]) and (failures == k or seq[failures] == "P") \
                and (same is None or failures == 0 or (ran[failures - 1] == "S") == same):
            total += prob
    return total


SIGNED_NOISES = [NoiseModel(0.1, 0.01, 0.5, 0.1), NoiseModel(0.3, 0.002, 0.8, 0.0), NoiseModel(0.05, flake_match=0.6)]


@pytest.mark.parametrize("noise", SIGNED_NOISES)
@pytest.mark.parametrize("seed", range(6))
def test_signed_posterior_equals_enumeration(noise: NoiseModel, seed: int) -> None:
    """Runs that report their failed attempts and, mostly, the last failed attempt's signature
    against an enumeration of every attempt sequence with every signature of each failure."""
    rng = random.Random(seed)
    n = rng.randint(1, 7)
    weights = prior_weights(n, [rng.random() < 0.5 for _ in range(n)], w_low=0.2)
    post, outcomes = Posterior(weights, noise), []
    for _ in range(rng.randint(1, 12)):
        k, i = rng.randint(1, 3), rng.randrange(n)
        j = rng.randint(0, k)
        same = rng.random() < 0.5 if j and rng.random() < 0.8 else None
        outcomes.append(Outcome(i, j == k, k, j, same))
        post.update(outcomes[-1])
        joint = [w * math.prod(signed_stop(noise, o.index >= h, o.attempts, o.failures, o.same_signature)
                               for o in outcomes) for h, w in enumerate(weights)]
        assert post.probabilities() == pytest.approx([x / sum(joint) for x in joint], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("noise", SIGNED_NOISES)
@pytest.mark.parametrize("seed", range(3))
def test_signed_joint_gain_equals_enumeration(noise: NoiseModel, seed: int) -> None:
    """Each greedy step with signed outcomes against an enumeration of every joint (count, signature)."""
    rng = random.Random(seed)
    n, k = rng.randint(2, 6), rng.randint(1, 2)
    raw = [rng.random() + 0.01 for _ in range(n)]
    probs = [x / sum(raw) for x in raw]
    said = [(0, None)] + [(j, same) for j in range(1, k + 1) for same in (True, False)]
    assert_greedy_steps_enumerated(probs, noise, k, said, lambda broken, o: signed_stop(noise, broken, k, *o))


def test_a_failure_with_a_flakes_signature_moves_the_posterior_less() -> None:
    """Candidate 0 failed: with the breakage's signature the failure moves the posterior towards
    c_1 more than an unknown one does; with another it reads partly as a flake and moves it less
    (a flake striking broken code first is possible too, so it still leans to c_1 at f = 0.2)."""
    noise = NoiseModel(0.2, 0.005, 0.5, flake_match=0.1)
    said = {}
    for same in (True, None, False):
        post = Posterior([1.0, 1.0], noise)
        post.update(Outcome(0, True, 2, 2, same))
        said[same] = post.probabilities()[0]
    assert said[True] > said[None] > said[False] > 0.5


def test_unknown_signatures_reproduce_todays_answers() -> None:
    """Runs whose signature is unknown weigh as without signatures, digit for digit; a search whose
    breakage signature is unknown (no m) picks today's probes."""
    rng = random.Random(3)
    plain, signed = NoiseModel(0.15, 0.004, 0.6), NoiseModel(0.15, 0.004, 0.6, 0.05)
    runs = [Outcome(rng.randrange(5), j == 2, 2, j) for j in (rng.randint(0, 2) for _ in range(20))]
    a, b = Posterior([1.0, 0.1, 1.0, 0.02, 1.0], plain), Posterior([1.0, 0.1, 1.0, 0.02, 1.0], signed)
    for o in runs:
        a.update(o)
        b.update(o)
    assert a.probabilities() == b.probabilities()
    culprit = 3

    def counts(batch):
        return [2 if p.index >= culprit else 0 for p in batch]

    def pairs(batch):
        return [(c, None) for c in counts(batch)]
    today, _ = run_search(Search([1.0] * 12, plain, attempts=2, detail=True), counts, runners=2)
    unknown, _ = run_search(Search([1.0] * 12, plain, attempts=2, detail=True), pairs, runners=2)
    assert today == unknown
