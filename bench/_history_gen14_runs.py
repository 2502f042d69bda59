"""gen14's runs: each push's GPU jobs, which of their tests fail and why, re-runs and cancels.

A pull-request run holds the merge base's code plus the pull request's own change (its merged
commit's tests and workflows where it touched them); a nightly run holds main's head. Each job
lands on a host of its GPU's pool, takes a build plus a test time of its GPU's speed, and is cut
off (no report) when the run is cancelled by a newer push of the same pull request
(``cancel-in-progress``) before it finished, when its runner is lost (`LOST`) or when the wheel
index is down (its install step fails before pytest). A failed run is
re-run (its failed jobs only, as "Re-run failed jobs" does) with `RERUN` (pull requests) or
`RERUN_NIGHTLY`, up to attempt 3. Each failed case gets exactly one label: infra first (the job's
host or a service failed), then a breakage (broken_on_main, or new for the breaking pull request's
own runs and a pull request's own mistakes), then flaky.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bench._history_gen14_causes import AGAIN, Plan, functions, hosts
from bench._history_gen14_junit import Outcome
from bench._history_gen14_text import failure
from bench._history_gen14_world import HOUR, Case, Job, Push, Tree

LOST = 0.012
RERUN, RERUN_NIGHTLY = 0.5, 0.15
OWN_MISTAKE = 0.22
GPU_SPEED = {"T4": 1.0, "A10": 0.6, "L40S": 0.45}


@dataclass(frozen=True)
class Failed:
    """One failed case's cause: its label, planted ``why``, text ``kind`` and whether at setup."""

    label: str
    why: str
    kind: str
    setup: bool = False


@dataclass
class JobResult:
    """One job attempt: its ``outcomes`` and their causes, or none (``reported`` False)."""

    job: Job
    host: str
    started: int
    finished: int
    reported: bool
    outcomes: list[Outcome] = field(default_factory=list)
    causes: dict[str, Failed] = field(default_factory=dict)


def _host(job: Job, rng: random.Random) -> str:
    return rng.choice(hosts("windows" if job.os.startswith("windows") else job.gpu))


def _seconds(case: Case, job: Job, rng: random.Random) -> float:
    return round(rng.lognormvariate(-0.5, 1.3) * GPU_SPEED.get(job.gpu, 1.0) * (1.6 if "windows" in job.os else 1.0), 3)


def _skip(case: Case, job: Job) -> str:
    if job.os.startswith("windows") and "compile" in case.func:
        return "Triton is not available on Windows"
    if job.gpu == "T4" and ("bf16" in case.name or "bfloat16" in case.name):
        return "bf16 requires compute capability >= 8.0"
    return ""


class Planner:
    """Decides each job's failures for one seed's `Plan` over a `Tree`."""

    def __init__(self, tree: Tree, plan: Plan, rng: random.Random):
        self.tree, self.plan, self.rng = tree, plan, rng
        self.mistakes: dict[int, tuple[tuple[str, ...], str, bool]] = {}
        self.stray_until = 0  # a cancelled Windows job's process holds the GPU until then

    def _mistake(self, push: Push, cases: list[Case]) -> tuple[tuple[str, ...], str, bool] | None:
        """The pull request's own failing tests (its pushes before the last), planted once per PR."""
        if push.pr is None:
            return None
        if push.pr not in self.mistakes:
            commit = self.tree.commits[push.merged_as or 0]
            files = [f for f in commit["files"] if f.startswith("tests/test_")]
            keys = [k for k in functions(cases) if k.split("::")[0] in files] or \
                [k for k in functions(cases) if "bitsandbytes/" in " ".join(commit["files"])
                 and k.split("::")[0] in ("tests/test_functional.py", "tests/test_ops.py", "tests/test_modules.py")]
            chosen = tuple(self.rng.sample(keys, min(len(keys), self.rng.randint(1, 3)))) if keys and \
                self.rng.random() < OWN_MISTAKE else ()
            self.mistakes[push.pr] = (chosen, self.rng.choice(("assert", "attr", "shape", "tolerance")),
                                      self.rng.random() < 0.05)
        return self.mistakes[push.pr]

    def _broken(self, push: Push, job: Job, key: str) -> Failed | None:
        is_windows = job.os.startswith("windows")
        for b in self.plan.breakages:
            if key not in b.keys or (job.gpu not in b.gpus and not is_windows) or (b.scope == "windows" and not is_windows) \
                    or b.tier_part not in job.tier:
                continue
            if b.by_time:
                if b.start <= push.time < b.end:
                    return Failed("broken_on_main", b.why, b.kind)
                continue
            if push.merged_as == b.start and push.pr is not None:
                if b.own_pr_fails:
                    return Failed("new", f"the breaking pull request's own change ({b.why})", b.kind)
                continue
            if push.merged_as == b.end and push.pr is not None:
                continue  # the fixing pull request's change mends it
            if b.start <= push.base < b.end:
                return Failed("broken_on_main", b.why, b.kind)
        return None

    def job(self, push: Push, job: Job, cases: list[Case], started: int, before: set[str]) -> JobResult:
        """One job attempt's outcomes; ``before`` the flaky functions (``file::func``) that failed
        this job's previous attempt (they fail again with `AGAIN`)."""
        rng = self.rng
        host = _host(job, rng)
        build = rng.randint(8 * 60, 22 * 60)
        tests = [(c, _seconds(c, job, rng)) for c in cases]
        finished = started + build + int(sum(t for _, t in tests)) + rng.randint(60, 240)
        at = started + build
        index_down = any(o.what == "index" and o.since <= at < o.until for o in self.plan.outages)
        result = JobResult(job, host, started, finished, rng.random() >= LOST and not index_down)
        if not result.reported:
            return result
        ecc = next((o for o in self.plan.outages if o.what == "ecc" and o.host == host and o.since <= at < o.until), None)
        driver = job.os.startswith("windows") and any(o.what == "driver" and o.since <= at < o.until for o in self.plan.outages)
        stray = job.os.startswith("windows") and at < self.stray_until
        cut = int(len(tests) * rng.uniform(0.55, 0.97)) if ecc and rng.random() < 0.7 else len(tests)
        mistake = self._mistake(push, cases)
        own = mistake[0] if mistake and (not push.last or mistake[2]) else ()
        flaky: dict[str, Failed] = {}
        for key, group in functions(cases).items():
            for flake in self.plan.flakes:
                if flake.key != key or (flake.gpus and job.gpu not in flake.gpus) or not flake.since <= at < flake.until:
                    continue
                if rng.random() < (AGAIN if key in before else flake.rate):
                    for case in rng.sample(group, 2 if len(group) > 1 and rng.random() < 0.2 else 1):
                        flaky[case.node] = Failed("flaky", flake.why, flake.kind)
        oom = {c.node for c, _ in rng.sample(tests, min(len(tests), rng.randint(3, 12)))} if stray else set()
        for index, (case, seconds) in enumerate(tests):
            key = f"{case.file}::{case.func}"
            cause: Failed | None = None
            if driver:
                cause = Failed("infra", "Windows runner's driver too old for the CUDA runtime", "driver", True)
            elif index >= cut and ecc is not None:
                cause = Failed("infra", f"ECC errors on {ecc.host}", "ecc")
            elif case.node in oom:
                cause = Failed("infra", "stray process from a cancelled job holds the Windows GPU", "oom")
            else:
                cause = self._broken(push, job, key)
                if cause is None and key in own:
                    cause = Failed("new", f"pull request #{push.pr}'s own change", mistake[1] if mistake else "assert")
                if cause is None:
                    cause = flaky.get(case.node)
            skip = _skip(case, job)
            if cause is None and skip:
                result.outcomes.append(Outcome(case, "skipped", 0.0, skip, f"{case.file}:{rng.randint(30, 900)}: {skip}"))
                continue
            if cause is None:
                result.outcomes.append(Outcome(case, "passed", seconds))
                continue
            message, text = failure(cause.kind, rng, case, job.gpu, cause.setup)
            result.outcomes.append(Outcome(case, "error" if cause.setup else "failed", seconds, message, text))
            result.causes[case.node] = cause
        return result

    def cancelled(self, job: Job, at: int) -> None:
        """A job cut off at ``at``: on the Windows machine its process may stay on the GPU."""
        if job.os.startswith("windows") and self.rng.random() < 0.6:
            self.stray_until = max(self.stray_until, at + self.rng.randint(1, 6) * HOUR)
