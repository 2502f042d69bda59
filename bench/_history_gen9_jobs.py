"""One GPU job of the ninth history: what ``modal run dev.modal.tests`` (tier ``nvi-tests``) or
``dev.modal.tests_bwd`` (``nvi-tests-bwd``: the oldest supported transformers) leaves behind.

The Modal function runs ``make test`` and then ``make test-convergence`` with ``check=True``, so a
failing ``make test`` means no convergence test runs; ``make test-convergence`` is six pytest
calls in a row and make stops at the first that fails. A container that never starts leaves no
JUnit; one that is terminated (a timeout, the Modal outage) leaves the test it was running as an
``<error>`` with the Modal client's line, and none of the tests after it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench._history_gen9_text import ECC, MODAL_TIMEOUT, Outcome, broken, flake, hub, modal_terminated, oom
from bench._history_gen9_world import Case
from bench._verdicts_records import Label


@dataclass(frozen=True)
class Conditions:
    """What one job meets: ``broken`` the cases failing from code (node -> (label, why)), ``flaky``
    each flaky case's failure rate, and the infrastructure's state while it ran."""

    broken: dict[str, tuple[str, str]]
    flaky: dict[str, float]
    start_fails: bool
    terminated: str  # "", "timeout" or "outage"
    ecc: bool
    hub_down: bool
    oom_rate: float
    hub_rate: float


@dataclass
class JobResult:
    outcomes: list[Outcome]
    labels: list[Label]

    @property
    def failed(self) -> bool:
        return any(o.kind != "passed" for o in self.outcomes)


def _one(case: Case, cond: Conditions, sha: str, rng: random.Random) -> tuple[str, str, str, str, str]:
    """(kind, message, detail, label, why) of one case that ran to its end."""
    if case.node in cond.broken:
        label, why = cond.broken[case.node]
        return ("failed", *broken(case, sha), label, why)
    if case.tokenizer and (rng.random() < (0.5 if cond.hub_down else cond.hub_rate)):
        return ("failed", *hub(rng), "infra", "Hugging Face hub error while building the tokenizer")
    if case.convergence and rng.random() < cond.oom_rate:
        return ("failed", *oom(rng), "infra", "another process held the Modal worker's GPU memory")
    if rng.random() < cond.flaky.get(case.node, 0.0):
        return ("failed", *flake(case, rng), "flaky", "Triton kernel numerics missed the tolerance")
    return "passed", "", "", "", ""


def run_job(cases: list[Case], cond: Conditions, tier: str, sha: str, minutes: float,
            rng: random.Random) -> JobResult | None:
    """The job's JUnit outcomes and labels; None when its container never started."""
    if cond.start_fails:
        return None
    correctness = [c for c in cases if not c.convergence]
    convergence = [c for c in cases if c.convergence]
    seconds = minutes * 60 / max(1, len(cases))
    stop = len(cases) + 1
    if cond.terminated:
        low = int(len(cases) * (0.6 if cond.terminated == "timeout" else 0.0))
        stop = rng.randint(low, max(low, len(cases) - 1))
    ecc_at = rng.randrange(len(correctness)) if cond.ecc and correctness else len(cases) + 1
    result = JobResult([], [])
    order = correctness + convergence
    make_test_failed = False
    failed_file = ""
    for position, case in enumerate(order):
        if case.convergence and (make_test_failed or (failed_file and case.file != failed_file)):
            break
        if position == stop:
            message, text = (MODAL_TIMEOUT, MODAL_TIMEOUT) if cond.terminated == "timeout" else modal_terminated(rng)
            why = "Modal timeout" if cond.terminated == "timeout" else "Modal outage: worker stream terminated"
            result.outcomes.append(Outcome(case, "error", seconds, message, text))
            result.labels.append(Label(case.node, tier, "infra", True, why))
            break
        if position >= ecc_at and not case.convergence:
            kind, message, text, label, why = ("failed", ECC, ECC + "\nCUDA kernel errors might be asynchronously "
                                               "reported at some other API call", "infra", "bad GPU host (ECC)")
        else:
            kind, message, text, label, why = _one(case, cond, sha, rng)
        result.outcomes.append(Outcome(case, kind, seconds * rng.uniform(0.7, 1.3), message, text))
        if kind != "passed":
            result.labels.append(Label(case.node, tier, label, True, why))
            if case.convergence:
                failed_file = failed_file or case.file
            else:
                make_test_failed = True
    return result
