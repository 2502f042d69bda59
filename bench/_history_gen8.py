"""gen8: a labelled history held out from the verdict rules, on vLLM's real skeleton (Buildkite).

Real (`bench._history_gen8_data.json`, made by `bench._history_gen8_extract` from vLLM's main,
checked by `bench._history_gen8_verify`): 221 consecutive first-parent commits of vLLM's main,
1bf2ddd0ee24 (2026-03-25) .. 5a2d420c1756 (2026-04-02), with their committer times, authors, PR
numbers and touched files; the non-optional GPU steps of ``.buildkite/test_areas/*.yaml`` at the
first commit (label, device, GPU count, parallelism, ``soft_fail``, ``source_file_dependencies``),
the test files their ``pytest`` commands run and those files' real test functions, imports and
``mark.flaky`` reruns; which steps each PR runs (vLLM's rule, `bench._history_gen8_story`); the
breakage windows of the real reverts and fixes (same module: the tests fail from the breaker until
the revert or fix, ``broken_on_main``; the breaker's own PR run fails them, ``new``).

Main: every main commit runs the whole pipeline (every kept step) once it lands. The tree says
per-commit main builds exist (docs/contributing/ci/failures.md points at Buildkite's main branch
builds); that main runs every step and not only the changed ones is not in the tree (vLLM's
pipeline generator lives elsewhere) and is assumed here.

Simulated on top (rates per seed, `Scale`): a PR's run starts 0.5-12 h before its merge, on the
newest main commit before that (its merge base); `flaky_share` (12 %) of the kept tests are flaky,
each attempt failing with p 0.03, 0.08 or 0.15, in the way its step suggests (huggingface_hub
5xx/429 in model steps, the OpenAI server not up in time or its port held in entrypoint steps,
NCCL in multi-GPU steps, CUDA OOM in kernel steps: `bench._history_gen8_text.FLAKE_KINDS`), and
every test of a model-loading step meets a hub 5xx with p `hub_p` (0.002) per attempt; a test
file's real ``mark.flaky(reruns=N)`` reruns a failed test in the job (pytest-rerunfailures), and
such a test is flaky at p 0.08 (its steps are always kept).
`bad_push` (15 %) of the PRs had an earlier push that failed 1-2 of their own tests (``new``). One
agent of the 1-GPU L4 pool has a bad GPU for an eighth of the span (each test on it fails with p
0.5, ``infra``); the 4-GPU pool loses its model cache mount for 3 hours (every test there fails,
``infra``). A job loses its agent with p `agent_lost` (1 %): Buildkite's automatic retry
(``exit_status: -1``, as image_build.yaml declares) runs it again as a new job of the same step,
attempt 2 on another agent 10-30 min later, which alone writes JUnit. After a red build the author
(PR, `manual_retry` 35 %) or the build cop (main, `main_retry` 20 %) retries its red jobs (soft_fail
steps' left alone): the next attempt, those jobs only. A build's jobs start `IMAGE_BUILD` (25 min)
after it, a retry's at once, all at one time (the bad agent and the outage are judged at it), and
take 5-15 min of set-up (container, model download and load) plus their tests' 5-120 s each; `Scale`
keeps 24 of the 83 steps, 4 tests each, so that a seed's verdict bench stays near a minute of CPU.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import datetime, timezone

from bench._history_gen8_story import Commit, Skeleton, Step, Test, load, selected_steps
from bench._history_gen8_text import INFRA_KINDS, Attempt, flake_text, junit
from bench._history_gen8_world import World, draw
from bench._verdicts_records import Label, Report, Run

# Every test step ``depends_on: image-build``: a build's jobs start once its image is built (seconds).
IMAGE_BUILD = 1500
HUB_AREAS = ("models_basic", "models_language", "models_multimodal", "models_distributed", "basic_correctness",
             "lm_eval", "quantization", "entrypoints", "spec_decode", "lora", "samplers")


@dataclass(frozen=True)
class Scale:
    """How much of the skeleton a history keeps (``commits`` 0: all) and the simulated rates."""

    commits: int = 0
    steps: int = 24
    tests_per_step: int = 4
    flaky_share: float = 0.12
    hub_p: float = 0.002
    bad_push: float = 0.15
    agent_lost: float = 0.01
    manual_retry: float = 0.35
    main_retry: float = 0.2
    attempt_text: bool = True


QUICK = Scale(commits=40, steps=12)


@dataclass
class History:
    """A generated history: its runs in the order they finish, and what made them."""

    seed: int
    runs: list[Run]
    world: World


@dataclass(frozen=True)
class Code:
    """What a run's code breaks: (step, node) -> (label, error line, why)."""

    broken: dict[tuple[str, str], tuple[str, str, str]]


def fake_sha(*parts: object) -> str:
    return hashlib.sha1(" ".join(map(str, parts)).encode()).hexdigest()


def stamp(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


class Builder:
    """Builds one seed's runs (`generate`)."""

    def __init__(self, skeleton: Skeleton, scale: Scale, seed: int) -> None:
        self.skeleton, self.scale, self.seed = skeleton, scale, seed
        self.commits = skeleton.commits[:scale.commits or len(skeleton.commits)]
        self.world = draw(skeleton, len(self.commits), scale.steps, scale.tests_per_step, scale.flaky_share, seed)
        self.rng = random.Random(seed)
        self.build = 40000
        self.runs: list[Run] = []
        self.seconds = {(s.key, t.node): 5 + (int(fake_sha(t.node)[:4], 16) % 115)
                        for s in self.world.steps for t in s.tests}

    def main_code(self, index: int, fixed_by: int | None = None) -> Code:
        """Main's breakages at commit ``index`` (those the PR ``fixed_by`` fixes left out)."""
        broken = {}
        for w in self.world.windows:
            if w.start <= index < w.end and w.end != fixed_by:
                why = f"broken on main by {self.commits[w.start].sha[:10]} until {w.kind} at commit {w.end}"
                broken.update({test: ("broken_on_main", w.error, why) for test in w.tests})
        return Code(broken)

    def attempts(self, step: Step, test: Test, code: Code, agent: str, when: int) -> tuple[list[Attempt], str, str]:
        """A test's attempts in one job, the label of its failures ("" when none failed) and why."""
        key = (step.key, test.node)
        seconds = float(self.seconds[key])
        tries = 1 + test.reruns
        if key in code.broken:
            label, error, why = code.broken[key]
            return [Attempt(error, seconds)] * tries, label, why
        out, causes = [], []
        flake = self.world.flakes.get(key)
        for _ in range(tries):
            error = ""
            for stretch in self.world.stretches:
                if stretch.hits(agent, when) and self.rng.random() < stretch.p:
                    error, cause = INFRA_KINDS[stretch.kind], f"infra: {stretch.kind} on {agent}"
                    break
            if not error and flake is not None and self.rng.random() < flake.p:
                error, cause = flake_text(flake.kind, self.rng.randrange(8)), f"flaky: {flake.kind} (p {flake.p})"
            if not error and step.area in HUB_AREAS and self.rng.random() < self.scale.hub_p:
                error, cause = flake_text(self.rng.choice(("hub-5xx", "hub-429")), self.rng.randrange(8)), "flaky: hub"
            out.append(Attempt(error, seconds))
            if not error:
                break
            causes.append(cause)
        if not causes:
            return out, "", ""
        infra = [c for c in causes if c.startswith("infra")]
        return out, ("infra" if infra else "flaky"), (infra or causes)[0]

    def job(self, step: Step, shard: int, code: Code, when: int) -> tuple[Report, float]:
        """One Buildkite job of ``step`` (parallel job ``shard``) and how long it ran."""
        shards = max(1, min(step.parallelism, len(step.tests)))
        agent = self.rng.choice(self.world.agents[step.pool])
        cases, labels = [], []
        for test in step.tests[shard::shards]:
            attempts, label, why = self.attempts(step, test, code, agent, when)
            cases.append((test.node, attempts))
            if label:
                labels.append(Label(test.node, step.key, label, attempts[-1].failed, why))
        # the container's start and the model's download and load come before the tests
        seconds = self.rng.uniform(300, 900) + sum(a.seconds for _, attempts in cases for a in attempts)
        return Report(step.key, shard, shards, agent, junit(step.key, cases, self.scale.attempt_text), labels), seconds

    def jobs(self, jobs: list[tuple[Step, int]], code: Code, start: float) -> tuple[list[Report], float]:
        """The reports of ``jobs`` (step, parallel job) started at ``start``, and the longest one's time."""
        reports, took = [], 0.0
        for step, shard in jobs:
            report, seconds = self.job(step, shard, code, int(start))
            reports.append(report)
            took = max(took, seconds)
        return reports, took

    def build_run(self, event: str, sha: str, commit: Commit, start: float, steps: list[Step], code: Code,
                  pr: int | None = None, base: str = "", author: str = "") -> None:
        """One Buildkite build: every job of ``steps``, its agent-lost retries, and a manual retry."""
        self.build += 1
        run_id, attempt = str(self.build), 1
        every = [(step, shard) for step in steps for shard in range(max(1, min(step.parallelism, len(step.tests))))]
        lost = [job for job in every if self.rng.random() < self.scale.agent_lost]
        reports, took = self.jobs([job for job in every if job not in lost], code, start + IMAGE_BUILD)
        end = start + IMAGE_BUILD + took + 60
        self.runs.append(Run(event, sha, commit.index, stamp(start), stamp(end), run_id, 1, pr, base, author, reports))
        if lost:  # the automatic retry (exit -1): a new job of the same step, on another agent, the only one with JUnit
            again = start + IMAGE_BUILD + self.rng.uniform(600, 1800)
            retried, more = self.jobs(lost, code, again)
            attempt += 1
            self.runs.append(Run(event, sha, commit.index, stamp(again), stamp(again + more + 60), run_id, attempt, pr,
                                 base, author, retried))
            reports, end = reports + retried, max(end, again + more + 60)
        red = {(r.tier, r.shard) for r in reports if any(lb.every_attempt for lb in r.labels)}
        redo = [(step, shard) for step, shard in every if (step.key, shard) in red and not step.soft_fail]
        if redo and self.rng.random() < (self.scale.manual_retry if event == "pull_request" else self.scale.main_retry):
            later = end + self.rng.uniform(900, 5400)  # someone retries the failed jobs
            retried, more = self.jobs(redo, code, later)
            self.runs.append(Run(event, sha, commit.index, stamp(later), stamp(later + more + 60), run_id, attempt + 1,
                                 pr, base, author, retried))

    def pull_request(self, commit: Commit) -> None:
        """The PR that became ``commit``: its last push's build (and maybe an earlier, broken push's)."""
        steps = selected_steps(self.skeleton, self.world.steps, commit.touched)
        if not steps or commit.index == 0:
            return
        start = commit.time - self.rng.uniform(1800, 12 * 3600)
        base = max((c for c in self.commits[:commit.index] if c.time <= start), key=lambda c: c.index,
                   default=self.commits[0])
        start = max(start, base.time + 300)
        code = self.main_code(base.index, fixed_by=commit.index)
        own = {t: ("new", w.error, f"this PR breaks it (window to commit {w.end})")
               for w in self.world.windows if w.start == commit.index for t in w.tests}
        code = Code({**own, **code.broken})  # a test main already breaks is main's, whatever the PR does
        pr = commit.pr or 900000 + commit.index
        if self.rng.random() < self.scale.bad_push:
            self.bad_push(commit, steps, code, base, min(start, commit.time) - self.rng.uniform(3600, 8 * 3600), pr)
        self.build_run("pull_request", fake_sha("pr", commit.sha), commit, start, steps, code, pr, base.sha,
                       commit.author)

    def bad_push(self, commit: Commit, steps: list[Step], code: Code, base: Commit, start: float, pr: int) -> None:
        tests = [(s.key, t.node) for s in steps for t in s.tests if t.file in commit.touched
                 and (s.key, t.node) not in code.broken]
        tests = tests or [(s.key, t.node) for s in steps for t in s.tests if (s.key, t.node) not in code.broken]
        if not tests:
            return
        chosen = self.rng.sample(tests, min(len(tests), self.rng.choice((1, 1, 2))))
        error = f"AssertionError: assert {self.rng.randrange(2, 9)} == {self.rng.randrange(10, 99)}"
        own = {t: ("new", error, "an earlier push of this PR breaks it") for t in chosen}
        self.build_run("pull_request", fake_sha("push", commit.sha), commit, max(start, base.time + 300), steps,
                       Code({**code.broken, **own}), pr, base.sha, commit.author)

    def history(self) -> History:
        for commit in self.commits:
            self.pull_request(commit)
            self.build_run("push", commit.sha, commit, commit.time + self.rng.uniform(120, 600),
                           list(self.world.steps), self.main_code(commit.index), author=commit.author)
        self.runs.sort(key=lambda r: (r.finished, r.run_id, r.attempt))
        return History(self.seed, self.runs, self.world)


def generate(seed: int, scale: Scale = Scale()) -> History:
    """Seed ``seed``'s history (the same seed and scale give the same history)."""
    return Builder(load(), scale, seed).history()
