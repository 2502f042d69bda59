"""A labelled replay of a GPU CI's history, for measuring `ci.history.verdict` against the truth.

The story (seeded, so every run of it is the same): two tiers (``gpu_h100`` on three runners, one of
them bad; ``gpu_b200`` on two), `COMMITS` commits on the default branch, each pushed and run on
both tiers with one retry per failing test (pytest-rerunfailures), a nightly every fourth commit,
and pull requests opened from the newest commit at the time, run on both tiers (unscored: their
JUnit is theirs), with a ``rerun`` run of the same commit, of the failed tests, for 60 % of those
where something failed. Tests:

- eight that always pass;
- ``test_spec_decode``: a real flake (p = 0.15), a specific message (``acceptance length 1.93
  below 2.0``); some pull requests really break it with that very message (they fail every retry);
- ``test_eval_accuracy``: a real flake (p = 0.12) whose message is generic (a bare
  ``AssertionError`` over ``assert ok``);
- ``test_moe_kernel``: breaks on main at `BREAK_AT` on both tiers (a shape error, every run);
- ``test_flashinfer_decode``: flaky (p = 0.15, ``max diff 0.031 > 0.02``) until `FLAKY_BREAKS_AT`,
  then broken with the same message (the flaky test that then really breaks);
- ``test_server_launch``: on gpu_b200, a rare flake (p = 0.04) that reads ``Server process exited
  with code 1`` and from `GENERIC_BREAK_AT` a breakage with that same generic line;
- infra: runner ``h100-03`` puts a CUDA, NCCL or OOM-kill failure (both attempts) on a random
  test in half its runs; the other runners in 2 % of theirs;
- pull requests break a random stable test a third of the time (``logits differ``), sometimes
  ``test_log_filter`` with an assertion that quotes ``NCCL error`` (never infra).

Each pull request's failing tests are labelled with the verdict that is true of them; `replay`
ingests everything in time order and judges each pull request once its runs are in, as the bot
would, returning (truth, verdict) pairs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

from ci.history.ingest import ingest, prepare
from ci.history.model import RunIdentity
from ci.history.run_results import load_run
from ci.history.store import open_store
from ci.history.verdict import BROKEN_ON_MAIN, FLAKY, INFRA, NEW, Verdict, judge
from tests.ci.history_support import Case, write_report

REPO = "acme/llm"
COMMITS = 48
BREAK_AT = 20
FLAKY_BREAKS_AT = 30
GENERIC_BREAK_AT = 36
FILE = "tests/srt/test_serving.py"
STABLE = tuple(f"test_stable_{i}" for i in range(8))
RUNNERS = {"gpu_h100": ("h100-01", "h100-02", "h100-03"), "gpu_b200": ("b200-01", "b200-02")}
BAD_RUNNER = "h100-03"
INFRA_MESSAGES = (
    ("RuntimeError: CUDA error: unspecified launch failure",
     "E   RuntimeError: CUDA error: unspecified launch failure\nE   CUDA kernel errors might be asynchronously reported"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
     "E   torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"),
    ("RuntimeError: Server process exited with code -9",
     "E   RuntimeError: Server process exited with code -9"),
)
SPEC = ("AssertionError: acceptance length 1.93 below 2.0", "E   AssertionError: acceptance length 1.93 below 2.0")
EVAL = ("AssertionError", ">       assert ok\nE       AssertionError")
FLASH = ("AssertionError: max diff 0.031 > 0.02", "E   AssertionError: max diff 0.031 > 0.02")
LAUNCH = ("RuntimeError: Server process exited with code 1", "E   RuntimeError: Server process exited with code 1")
MOE = ("RuntimeError: shape mismatch: expected [8, 128], got [8, 64]",
       "E   RuntimeError: shape mismatch: expected [8, 128], got [8, 64]")
PR_BREAKS = ("AssertionError: logits differ from the reference by 0.21 at position 17",
             "E   AssertionError: logits differ from the reference by 0.21 at position 17")
LOG_FILTER = ("AssertionError: assert 'NCCL error' not in 'server log: NCCL error: remote process exited'",
              "E   AssertionError: assert 'NCCL error' not in 'server log: NCCL error: remote process exited'")


@dataclass
class Outcome:
    """One test in one run: its attempts' failures (None: passed) and why it failed."""

    attempts: list[tuple[str, str] | None]
    cause: str = ""  # the true verdict when it failed


@dataclass
class Replay:
    seed: int = 11
    prs: int = 40
    pairs: list[tuple[str, str, Verdict]] = field(default_factory=list)  # (pr label, truth, verdict)
    retried_pairs: list[tuple[str, str, Verdict]] = field(default_factory=list)  # passed on retry
    # Pull requests that broke test_spec_decode with its flake's very message: a breakage that no
    # rule can tell from the flake by its signature (only by how often it repeats).
    disguised: set[tuple[str, str, str]] = field(default_factory=set)  # (pr label, node, tier)

    def run_tests(self, rng: random.Random, tier: str, runner: str, commit: int, pr_break: str = "",
                  pr_breaks_spec: bool = False, pr_log_filter: bool = False) -> dict[str, Outcome]:
        """Every test of one run at main commit ``commit`` (plus a pull request's own change)."""
        out: dict[str, Outcome] = {}

        def flake(p: float, msg: tuple[str, str]) -> Outcome:
            attempts: list[tuple[str, str] | None] = []
            for _ in range(2):
                failed = rng.random() < p
                attempts.append(msg if failed else None)
                if not failed:
                    break
            return Outcome(attempts, FLAKY)

        for name in STABLE:
            out[name] = Outcome([None])
        out["test_spec_decode"] = (Outcome([SPEC, SPEC], NEW) if pr_breaks_spec else flake(0.15, SPEC))
        out["test_eval_accuracy"] = flake(0.12, EVAL)
        out["test_moe_kernel"] = Outcome([MOE, MOE], BROKEN_ON_MAIN) if commit >= BREAK_AT else Outcome([None])
        out["test_flashinfer_decode"] = (Outcome([FLASH, FLASH], BROKEN_ON_MAIN) if commit >= FLAKY_BREAKS_AT
                                         else flake(0.15, FLASH))
        if tier == "gpu_b200":
            out["test_server_launch"] = (Outcome([LAUNCH, LAUNCH], BROKEN_ON_MAIN) if commit >= GENERIC_BREAK_AT
                                         else flake(0.04, LAUNCH))
        else:
            out["test_server_launch"] = Outcome([None])
        out["test_log_filter"] = Outcome([LOG_FILTER, LOG_FILTER], NEW) if pr_log_filter else Outcome([None])
        if pr_break:
            out[pr_break] = Outcome([PR_BREAKS, PR_BREAKS], NEW)
        if rng.random() < (0.5 if runner == BAD_RUNNER else 0.02):
            victim = rng.choice(sorted(out))
            msg = rng.choice(INFRA_MESSAGES)
            out[victim] = Outcome([msg, msg], INFRA)
        return out

    def cases(self, outcomes: dict[str, Outcome]) -> list[Case]:
        cases = []
        for name, o in sorted(outcomes.items()):
            final = o.attempts[-1]
            reruns = len(o.attempts) - 1
            if final is None:
                cases.append(Case(FILE, name, reruns=reruns))
            else:
                cases.append(Case(FILE, name, "failed", final[0], final[1], reruns=reruns))
        return cases

    def replay(self, location: str, directory: Path) -> "Replay":
        rng = random.Random(self.seed)
        pr_at = sorted(rng.sample(range(4, COMMITS), min(self.prs, COMMITS - 4)))
        pr_number = 100
        with open_store(location) as store:
            for commit in range(COMMITS):
                sha = f"{commit:04x}{'c' * 36}"
                events = ["push"] + (["nightly"] if commit % 4 == 3 else [])
                for event in events:
                    for tier, runners in RUNNERS.items():
                        runner = rng.choice(runners)
                        outcomes = self.run_tests(rng, tier, runner, commit)
                        self._ingest(store, directory, outcomes, RunIdentity(
                            REPO, sha, event, tier, runner=runner, run_id=f"{event}-{commit}", author="alice"))
                for _ in range(pr_at.count(commit)):
                    pr_number += 1
                    self._pull_request(store, directory, rng, pr_number, commit, sha)
        return self

    def _ingest(self, store, directory: Path, outcomes: dict[str, Outcome], identity: RunIdentity) -> None:
        ingest(store, prepare(write_report(directory, self.cases(outcomes)), identity))

    def _pull_request(self, store, directory: Path, rng: random.Random, pr: int, base: int, base_sha: str) -> None:
        head = f"{base:04x}{pr:04x}{'d' * 32}"
        kind = rng.random()
        pr_break = rng.choice(STABLE) if kind < 0.33 else ""
        breaks_spec = 0.33 <= kind < 0.43
        log_filter = 0.43 <= kind < 0.5
        truth: dict[tuple[str, str], str] = {}
        for tier, runners in RUNNERS.items():
            runner = rng.choice(runners)
            first = self.run_tests(rng, tier, runner, base, pr_break, breaks_spec, log_filter)
            self._ingest(store, directory, first, RunIdentity(REPO, head, "pull_request", tier, pr=pr, runner=runner,
                                                              author="bob", base_sha=base_sha, scored=False))
            failed = {n: o for n, o in first.items() if o.attempts[-1] is not None}
            retried = {n for n, o in first.items() if o.attempts[-1] is None and len(o.attempts) > 1}
            for n in retried:
                truth[(f"{FILE}::{n}", tier)] = first[n].cause
            if failed and rng.random() < 0.6:  # the bot's /rerun-failed: the failing tests once more, same commit
                runner = rng.choice(runners)
                again = self.run_tests(rng, tier, runner, base, pr_break, breaks_spec, log_filter)
                again = {n: again[n] for n in failed}
                self._ingest(store, directory, again, RunIdentity(REPO, head, "rerun", tier, pr=pr, runner=runner,
                                                                  attempt=2, author="bob", base_sha=base_sha,
                                                                  scored=False))
                for n, o in failed.items():
                    rerun = again[n]
                    causes = [o.cause] + ([rerun.cause] if rerun.attempts[-1] is not None else [])
                    code = [c for c in causes if c != INFRA]  # infra on top of a real failure hides nothing
                    truth[(f"{FILE}::{n}", tier)] = code[-1] if code else INFRA
            else:
                truth.update(((f"{FILE}::{n}", tier), o.cause) for n, o in failed.items())
        if breaks_spec:
            self.disguised.update((f"#{pr}", f"{FILE}::test_spec_decode", tier) for tier in RUNNERS)
        results = load_run(store, pr=pr)
        verdicts = judge(store, results.failures, merge_base=results.base_sha)
        for v in verdicts:
            label = truth.get((v.node, v.tier))
            assert label, f"PR #{pr}: {v.node} [{v.tier}] judged but not labelled"
            failure = next(f for f in results.failures if f.node == v.node and f.tier == v.tier)
            (self.retried_pairs if failure.passed_on_retry else self.pairs).append((f"#{pr}", label, v))
