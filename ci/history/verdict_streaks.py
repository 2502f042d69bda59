"""How a verdict reads a test's default-branch streaks (`ci.history.mainline.fail_streaks`): which
streak a failure belongs to, which is a breakage and which a flake firing once, and how likely a
flake makes a set of failed runs.

Contract: pure functions of the streaks, the failure's signature and the known flake signatures;
`ci.history.verdict` (rules 3 and 4 of its docstring) is their one caller, and states the rules.
"""

from __future__ import annotations

from typing import Sequence

from ci.history.errors import environment_kind
from ci.history.mainline import Streak, position
from ci.history.model import FlakyScore
from ci.history.verdict_tally import short


def breakage(streaks: list[Streak], fingerprint: str, known_flake: bool, flaky_prints: set[str],
             base_at: tuple[int | None, bool], flaked: frozenset[str],
             held: frozenset[int] = frozenset()) -> Streak | None:
    """The open streak a failure with ``fingerprint`` belongs to, or the fixed one the merge base
    lies in (``base_at``: its index in the order and whether it was placed at the tier's last
    commit before it, `place`), unless other pull requests passed its code (``held``: the first
    indexes of such streaks, `ci.history.held_code`)."""
    if not streaks:
        return None
    last = streaks[-1]
    if last.open and broke(last, flaky_prints, flaked) and (
            last.failing_attempts >= 2 or (fingerprint in last.fingerprints and not known_flake)):
        return last
    at, placed = base_at
    if at is not None:
        for streak in streaks:
            # a placed base is an inference: taken only when main's errors are the code's, not the surroundings'
            if (not streak.open and streak.first_index <= at < streak.end_index and streak.failing_attempts >= 2
                    and streak.first_index not in held
                    and broke(streak, flaky_prints, flaked)
                    and not (placed and all(environment_kind(text) for text in streak.messages))):
                return streak
    return None


def failed_runs(failures: int, stored: list[int], streaks: list[Streak], order: tuple[str, ...],
                flaky_prints: set[str], merge_base: str, flaked: frozenset[str]) -> tuple[list[int], Streak | None]:
    """Failed attempts of each run that failed the test with no pass (``failures``: the judged
    failure's own failed attempts): the stored runs of its commit, one more when the failure
    counts attempts no stored run holds (a run not yet ingested), and main's one failed run of the
    flake at the merge base (the pull request holds that code), which is returned too."""
    tries = list(stored)
    if failures > sum(tries):
        tries.append(failures - sum(tries))
    at = position(order, merge_base) if merge_base else None
    at_base = next((s for s in streaks if at is not None and s.first_index == at and not broke(s, flaky_prints, flaked)),
                   None)
    return tries + ([at_base.failing_attempts] if at_base else []), at_base


def flake_chance(p: float, r: float, tries: Sequence[int]) -> float:
    """P(runs failing ``tries`` attempts each, no pass | a flake of rate ``p`` whose retry after a
    failure fails with probability ``r``), given the first failure, which is why it is judged: the
    first run's retries r each, every further run p for its first attempt and r for each retry.
    Broken code would fail them all: this is the likelihood ratio of flaky to broken."""
    chance = 1.0
    for i, attempts in enumerate(tries):
        chance *= (p if i else 1.0) * r ** max(0, attempts - 1)
    return chance


def broke(streak: Streak, flaky_prints: set[str], flaked: frozenset[str] = frozenset()) -> bool:
    """A streak is the code's unless it is one failed run at one commit whose every error is one
    of the test's known flake signatures, or of an environmental class the history's tests flake
    with (``flaked``): that is a flake firing once, not a breakage."""
    single = streak.commits == 1 and streak.runs == 1
    environmental = all(environment_kind(text) in flaked for text in streak.messages)
    return not (single and streak.fingerprints and (set(streak.fingerprints) <= flaky_prints or environmental))


def broken_text(s: Streak, fingerprint: str) -> str:
    """The detail of a ``broken_on_main`` verdict from streak ``s``: since when, its candidates,
    the last pass, the fix if main has one, and whether main fails with another signature."""
    shown = ", ".join(short(c) for c in s.candidates)
    more = f" and {s.candidate_count - len(s.candidates)} more" if s.candidate_count > len(s.candidates) else ""
    cands = f"{s.candidate_count} candidate commit{'s' if s.candidate_count != 1 else ''}: {shown}{more}"
    since = f"broken on main since {short(s.first_fail)}"
    passed = f", last passed at {short(s.last_pass)}" if s.last_pass else ", never passed there"
    fixed = f"; fixed on main at {short(s.fixed_at)}: merge the default branch" if s.fixed_at else ""
    same = "" if not fingerprint or fingerprint in s.fingerprints else "; main fails with a different error"
    return f"{since} ({cands}{passed}){fixed}{same}"


def score_text(score: FlakyScore | None) -> str:
    """`` (flaky 12% [9%, 16%] over 202 runs on gpu)`` for a verdict's detail, or ``""`` with no score."""
    if score is None:
        return ""
    iv = score.interval
    return f" (flaky {score.score:.0%} [{iv.low:.0%}, {iv.high:.0%}] over {score.trials} runs on {score.tier})"
