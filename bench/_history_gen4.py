"""The fourth labelled history for `python -m bench verdicts --generator gen4` (issue 47), written
without reading the verdict rules, the replay, gen2 or gen3: a Liger-Kernel-like project.

One GPU tier in three shards on a pool of three runners, so jobs queue for hours and runs finish
out of order; nearly every test parametrized over dtypes and shapes (`_history_gen4_world`). Main
is fed by a merge queue: pull requests land in batches of 1-4 commits, each batch tested first on
the queue's temporary ref (the tail pull request's run on ``gh-readonly-queue/main/pr-N-SHA``,
stored as a ``pull_request`` run based on main before the batch, or with ``Scale.merge_group`` as
the ``merge_group`` run of the batch's pull requests), then pushed (a ``push`` run of the batch's head); one breaking commit is pushed past the
queue by an admin. pytest-rerunfailures
(``--reruns 2``) is in the config for a middle stretch of main's commits only, and a job runs
with the config of the commit it tests. The planted causes are `_history_gen4_causes`; a hang in
the largest fused-linear-cross-entropy case kills its shard at the job timeout, losing the
shard's JUnit or keeping only the files it finished. Pull requests open on main's head, push 1-4
times, half the pushes rebased on the head of the moment. Every test with a failed attempt, a
passed rerun included, is labelled with its cause in the report that holds it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from bench._history_gen4_causes import OWN_BUGS, Code, attempts, breakages, flakes, infra
from bench._history_gen4_text import CaseOutcome, Failure, shard_xml
from bench._history_gen4_world import (QUICK, RUNNERS, SHARDS, TIER, History, Label, Report, Run, Scale,
                                       TestSpec, suite)

__all__ = ["QUICK", "Scale", "generate", "HANG_NODE", "JOB_TIMEOUT_H"]

EPOCH = datetime(2026, 10, 5, 8, 0)
HANG_NODE = "test/transformers/test_fused_linear_cross_entropy.py::test_correctness[float32-8-2048-4096-128256]"
HANG_RATE = 0.03
JOB_TIMEOUT_H = 1.5
AUTHORS = ("lancerts", "ByronHsu", "Tcc0403", "austin362667", "shivam15s", "yundai424", "qingquansong")


@dataclass
class _Job:
    run: Run
    shard: int
    code: Code
    request: float  # hours since EPOCH
    hang: bool = False  # the hanging case hangs this time: the job runs to its timeout


def _sha(rng: random.Random) -> str:
    return f"{rng.getrandbits(160):040x}"


def _schedule(rng: random.Random, jobs: list[_Job]) -> list[tuple[_Job, str, float, float]]:
    """First come, first served on the pool: each job takes the runner free soonest; (job,
    runner, start, end) in hours, a hung job holding its runner until the job timeout."""
    free = {runner: 0.0 for runner in RUNNERS}
    out = []
    for job in sorted(jobs, key=lambda j: (j.request, rng.random())):
        runner = min(RUNNERS, key=lambda r: (free[r], rng.random()))
        start = max(job.request, free[runner])
        free[runner] = start + (JOB_TIMEOUT_H if job.hang else rng.uniform(0.4, 0.6))  # 25-35 minutes
        out.append((job, runner, start, free[runner]))
    return out


class _Story:
    def __init__(self, seed: int, scale: Scale):
        self.rng = rng = random.Random(seed * 104729 + 4)
        self.scale = scale
        self.specs: list[TestSpec] = suite()
        taken: set[str] = set()
        self.breakages = breakages(rng, self.specs, taken, scale.commits)
        self.infra = infra(rng, self.specs, taken, scale.commits * 1.3)
        self.fix_pr = 1000 + scale.prs // 2
        self.flakes = flakes(rng, self.specs, taken, self.fix_pr)
        self.free = [s.node for s in self.specs if s.node not in taken]
        self.by_node = {f.node: f for f in self.flakes}
        third = scale.commits // 3
        self.rerun_commits = (third + rng.randint(-2, 2), 2 * third + rng.randint(-2, 2))
        self.shas = [_sha(rng) for _ in range(scale.commits)]
        self.landed: list[float] = []
        self.fix_commit = scale.commits  # the flake fix's merge commit, set when its batch lands
        self.jobs: list[_Job] = []
        self.run_count = 0

    def reruns(self, commit: int) -> int:
        return 2 if self.rerun_commits[0] <= commit < self.rerun_commits[1] else 0

    def _run(self, event: str, sha: str, commit: int, hour: float, code: Code, **extra) -> Run:
        self.run_count += 1
        at = EPOCH + timedelta(hours=hour)
        run = Run(event, sha, commit, at, at, str(19_000_000_000 + 7 * self.run_count), reruns=self.reruns(commit),
                  **extra)
        hang_shard = next(s.shard for s in self.specs if s.node == HANG_NODE)
        self.jobs += [_Job(run, shard, code, hour, shard == hang_shard and self.rng.random() < HANG_RATE)
                      for shard in range(SHARDS)]
        return run

    def main(self) -> None:
        """Main's batches: the queue's run of the batch, then the push of the batch head."""
        commit, hour = 0, 0.0
        geglu = self.breakages[0]
        while commit < self.scale.commits:
            size = 1 if commit == geglu.start else self.rng.randint(1, 4)
            if commit < geglu.start < commit + size:
                size = geglu.start - commit
            head = min(commit + size, self.scale.commits) - 1
            if commit <= self.scale.commits // 2 <= head:
                self.fix_commit = head  # the flake-fixing pull request lands in this batch
            if commit != geglu.start:  # the admin push skips the queue
                fixed = frozenset({self.fix_pr}) if self.fix_commit <= head else frozenset()
                # the queue's run, on the gh-readonly-queue ref: main before the batch plus the
                # batch; stored as the tail pull request's, or as the batch's merge_group run
                code, base = Code(head, {}, fixed, max(commit - 1, 0)), self.shas[max(commit - 1, 0)]
                sha, author = _sha(self.rng), self.rng.choice(AUTHORS)
                if self.scale.merge_group:
                    self._run("merge_group", sha, head, hour, code, base_sha=base, author=author, queue=True,
                              batch=tuple(range(2000 + commit, 2001 + head)))
                else:
                    self._run("pull_request", sha, head, hour, code, pr=2000 + head, base_sha=base, author=author,
                              queue=True)
                hour += 0.9
            self.landed += [hour] * (head - commit + 1)
            fixed = frozenset({self.fix_pr}) if self.fix_commit <= head else frozenset()
            self._run("push", self.shas[head], head, hour, Code(head, {}, fixed), author=self.rng.choice(AUTHORS))
            commit = head + 1
            hour += self.rng.uniform(1.0, 3.5)

    def head_at(self, hour: float) -> int:
        return max([i for i, t in enumerate(self.landed) if t <= hour] or [0])

    def pulls(self) -> None:
        """Pull requests: own bugs in 30 %, fixed by a later push; half the pushes rebased."""
        end = self.landed[-1]
        for index in range(self.scale.prs):
            pr = 1000 + index
            hour = self.rng.uniform(0, end * 0.97)
            base = self.head_at(hour)
            pushes = self.rng.randint(1, 4)
            own: dict[str, Failure] = {}
            buggy_until = -1
            if self.rng.random() < 0.3:
                file = self.rng.choice(sorted({n.split("::")[0] for n in self.free}))
                nodes = [n for n in self.free if n.startswith(file)]
                error, text = self.rng.choice(OWN_BUGS)
                own = {n: Failure(error, text) for n in self.rng.sample(nodes, min(len(nodes), self.rng.randint(1, 3)))}
                buggy_until = self.rng.randint(1, pushes)  # a push index from which it is fixed
            if pr == self.fix_pr:  # the flake fix is reviewed before it lands at fix_commit
                hour, pushes = max(0.0, self.landed[self.fix_commit] - self.rng.uniform(18, 24)), min(pushes, 2)
            author = self.rng.choice(AUTHORS)
            for push in range(pushes):
                if push and self.rng.random() < 0.5:
                    base = self.head_at(hour)
                fixed = frozenset({self.fix_pr}) if pr == self.fix_pr or self.fix_commit <= base else frozenset()
                code = Code(base, own if push < buggy_until else {}, fixed)
                self._run("pull_request", _sha(self.rng), base, hour, code, pr=pr, base_sha=self.shas[base],
                          author=author)
                hour += self.rng.uniform(1, 10)

    def outcomes(self) -> list[Run]:
        """Every job on its runner, its tests' attempts, its JUnit (or none); runs by finish."""
        runs: dict[str, Run] = {}
        for job, runner, start, stop in _schedule(self.rng, self.jobs):
            run = job.run
            runs[run.run_id] = run
            specs = [s for s in self.specs if s.shard == job.shard]
            cases, labels, hung = [], [], job.hang
            broken_now = [b for b in self.breakages if b.active(job.code.commit)]
            for spec in specs:
                if hung and spec.node == HANG_NODE:
                    break
                in_image = self.infra.hits(runner, start, spec.node)
                broken = [b for b in broken_now if spec.node in b.nodes]
                failures, passed, truth = attempts(self.rng, spec.node, job.code, run.reruns, in_image,
                                                   self.by_node.get(spec.node), broken)
                seconds = spec.seconds * (len(failures) + passed) * self.rng.uniform(0.7, 1.3)
                cases.append(CaseOutcome(spec, tuple(failures), passed, seconds))
                if truth:
                    labels.append(Label(spec.node, TIER, truth[0], not passed, truth[1]))
            run.finished = max(run.finished, EPOCH + timedelta(hours=stop))
            if hung:
                run.killed.append(job.shard)
                hang_file = HANG_NODE.split("::")[0]
                if self.rng.random() < 0.6:
                    continue  # killed before the JUnit was written: no report for the shard
                # the suite runner writes one JUnit per file; files finished before the hang survive
                kept = [c for c in cases if c.spec.file != hang_file]
                cases, labels = kept, [lb for lb in labels if lb.node.split("::")[0] != hang_file]
            xml = shard_xml(cases, runner, EPOCH + timedelta(hours=start), self.scale.attempt_text)
            run.reports.append(Report(TIER, job.shard, SHARDS, runner, xml, labels, not hung))
        return sorted(runs.values(), key=lambda r: (r.finished, r.run_id))


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The history of ``seed`` at ``scale``: every run, labelled, in the order runs finish."""
    story = _Story(seed, scale)
    story.main()
    story.pulls()
    runs = story.outcomes()
    return History(seed, story.specs, story.flakes, story.breakages, story.shas, runs, story.rerun_commits,
                   story.infra, story.fix_commit)
