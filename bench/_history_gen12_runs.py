"""gen12's runs: DeepSpeed's GitHub Actions events over the real commits (`bench._history_gen12`).

Per merged pull request (a commit's ``(#N)``): opened 4 hours to 9 days before its merge on the
master commit of that time, 1-5 pushes (a later push merges master in a quarter of the time), each
a ``pull_request`` run of every workflow with that event whose path filter its files pass
(``paths``: one file matches; ``paths-ignore``: one file matches none); a push while a workflow's
run is still going cancels that run (``cancel-in-progress``, no JUnit). After a run with failed
jobs the author re-runs the failed jobs (``attempt`` 2, at most 3) with `Scale.rerun_failed`. Then
the ``merge_group`` run on master's tip (all workflows with that event: GitHub applies no path
filter to it), re-queued once if it fails. Nightly, a ``schedule`` run of every workflow with the
event at master's tip at 00:00 UTC. Runners are drawn from each workflow's pool; one V100 host per
seed turns bad for two to four days (ECC and Xid errors on most of its jobs).
"""

from __future__ import annotations

import fnmatch
import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bench._history_gen12_jobs import Code, run_job
from bench._history_gen12_world import POOL_SIZES, Workflow, World, code_error, pick_nodes, reached_tests
from bench._verdicts_records import Run

RUN_ID_BASE = 11_400_000_000


def matches(pattern: str, path: str) -> bool:
    """GitHub's path filter glob: ``**`` any folders, ``*`` within one."""
    if pattern.endswith("/**"):
        return path.startswith(pattern[:-2])
    return fnmatch.fnmatchcase(path, pattern)


def passes_filter(workflow: Workflow, touched: tuple[str, ...]) -> bool:
    """Whether a push touching ``touched`` starts ``workflow``'s pull_request run."""
    if workflow.paths:
        include = [p for p in workflow.paths if not p.startswith("!")]
        exclude = [p[1:] for p in workflow.paths if p.startswith("!")]
        return any(any(matches(p, f) for p in include) and not any(matches(p, f) for p in exclude) for f in touched)
    if workflow.paths_ignore:
        return any(not any(matches(p, f) for p in workflow.paths_ignore) for f in touched)
    return True


@dataclass
class Sim:
    world: World
    scale: object
    rng: random.Random
    bad_runner: str = ""
    bad_from: datetime | None = None
    bad_to: datetime | None = None
    runs: list[Run] = field(default_factory=list)
    meta: dict[int, tuple[bool, Workflow]] = field(default_factory=dict)  # a run's failure and workflow
    next_id: int = RUN_ID_BASE

    def head(self, when: datetime, low: int) -> int:
        """The master commit at ``when`` (not before index ``low``)."""
        index = low
        for commit in self.world.commits[low:self.scale.first + self.scale.count]:
            if commit.time <= when:
                index = commit.index
        return index

    def workflows(self, event: str, index: int) -> list[Workflow]:
        out = []
        for name in sorted(self.world.workflow_versions):
            shape = self.world.workflow(name, index)
            if shape is not None and event in shape.events and shape.marks:
                out.append(shape)
        return out

    def run(self, event: str, sha: str, code: Code, started: datetime, workflows: list[Workflow],
            pr: int | None = None, author: str = "", base_sha: str = "", run_ids: dict | None = None,
            attempt: int = 1, batch: tuple[int, ...] = ()) -> list[Run]:
        """One run per workflow (each workflow is its own GitHub run); returns them."""
        out = []
        for workflow in workflows:
            pool = workflow.pool
            runner = f"aisc-{pool}-{self.rng.randrange(POOL_SIZES[pool]) + 1:02d}"
            bad = runner == self.bad_runner and self.bad_from <= started < self.bad_to
            job = run_job(self.world, workflow, code, started, runner, self.rng, bad_host=bad,
                          infra_rate=self.scale.infra_rate, lost_rate=self.scale.lost_rate,
                          attempt_text=self.scale.attempt_text)
            if run_ids is not None and workflow.name in run_ids:
                run_id = run_ids[workflow.name]
            else:
                self.next_id += self.rng.randint(3, 40)
                run_id = str(self.next_id)
                if run_ids is not None:
                    run_ids[workflow.name] = run_id
            finished = started + timedelta(minutes=job.minutes)
            reports = [job.report] if job.report is not None else []
            run = Run(event, sha, code.index, started, finished, run_id, attempt, pr, base_sha, author, reports,
                      batch=batch)
            self.meta[id(run)] = (job.failed, workflow)
            out.append(run)
        return out


def _fake_sha(rng: random.Random) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(40))


def _reruns(sim: Sim, first: list[Run], code: Code, event: str, pr: int | None, author: str,
            limit: datetime | None) -> None:
    """Re-run failed jobs: attempt 2 (and maybe 3) of each failed workflow run."""
    sim.runs.extend(first)
    pending = [r for r in first if sim.meta[id(r)][0]]
    for attempt in (2, 3):
        if not pending or sim.rng.random() >= sim.scale.rerun_failed * (0.5 if attempt == 3 else 1.0):
            return
        again = []
        for old in pending:
            started = old.finished + timedelta(minutes=sim.rng.uniform(10, 150))
            if limit is not None and started >= limit:
                continue
            workflow = sim.meta[id(old)][1]
            new = sim.run(event, old.sha, code, started, [workflow], pr, author, old.base_sha,
                          {workflow.name: old.run_id}, attempt, old.batch)
            sim.runs.extend(new)
            again += [r for r in new if sim.meta[id(r)][0]]
        pending = again


def _pull_request(sim: Sim, index: int) -> None:
    world, rng = sim.world, sim.rng
    commit = world.commits[index]
    first = sim.scale.first
    opened = commit.time - timedelta(hours=4 + 212 * rng.random() ** 2)
    opened = max(opened, world.commits[first].time)
    base = sim.head(opened, first)
    pushes = min(5, 1 + int(rng.expovariate(0.7)))
    times = sorted(opened + (commit.time - timedelta(hours=1.5) - opened) * rng.random() for _ in range(pushes))
    culprit = any(w.kind != "env" and w.start == index for w in world.windows)
    broken: frozenset[str] = frozenset()
    error = ""
    if pushes >= 2 and rng.random() < sim.scale.pr_break:
        sources = [f for f in commit.touched if f.endswith(".py") and not f.startswith("tests/")]
        tests = [f for f in commit.touched if f in world.files]
        nodes = pick_nodes(world, rng, reached_tests(world, base, sources, tests), 3)
        broken = frozenset(n.node for n in nodes)
        module = (sources or [commit.touched[0] if commit.touched else "deepspeed/runtime/engine.py"])[0]
        error = code_error(rng, module.rsplit(".", 1)[0].replace("/", "."))
    fixed_at = rng.randrange(1, pushes) if broken else 0
    for number, when in enumerate(times):
        if number and rng.random() < 0.25:
            base = sim.head(when, base)
        code = Code(base, commit.pr, index if culprit else None, broken if number < fixed_at else frozenset(), error)
        sha = _fake_sha(rng)
        chosen = [w for w in sim.workflows("pull_request", base) if passes_filter(w, commit.touched)]
        started = when + timedelta(minutes=rng.uniform(1, 6))
        runs = sim.run("pull_request", sha, code, started, chosen, commit.pr, commit.author, world.commits[base].sha)
        nxt = times[number + 1] if number + 1 < len(times) else None
        kept = []
        for run in runs:
            if nxt is not None and run.finished > nxt:  # cancel-in-progress: the next push cancels it
                continue
            kept.append(run)
        _reruns(sim, kept, code, "pull_request", commit.pr, commit.author, nxt)
    if culprit:
        return  # merged around the queue: no merge_group run
    queue_code = Code(index)
    for tries in range(2):
        started = commit.time - timedelta(minutes=rng.uniform(70, 200) / (tries + 1))
        runs = sim.run("merge_group", _fake_sha(rng), queue_code, started, sim.workflows("merge_group", index),
                       commit.pr, commit.author, world.commits[index - 1].sha, batch=(commit.pr,))
        for run in runs:
            run.commit = index - 1  # the queue's merge base: master before the batch
        sim.runs.extend(runs)
        if not any(sim.meta[id(r)][0] for r in runs):
            break


def _nightly(sim: Sim) -> None:
    world = sim.world
    first, last = sim.scale.first, sim.scale.first + sim.scale.count - 1
    day = world.commits[first].time.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    while day <= world.commits[last].time:
        head = sim.head(day, first)
        started = day + timedelta(minutes=sim.rng.uniform(0, 25))
        runs = sim.run("schedule", world.commits[head].sha, Code(head), started, sim.workflows("schedule", head))
        sim.runs.extend(runs)
        day += timedelta(days=1)


def simulate(world: World, seed: int, scale) -> list[Run]:
    """Every run of the history, sorted by the time it finished."""
    rng = random.Random(f"gen12-runs-{seed}")
    sim = Sim(world, scale, rng)
    first, last = scale.first, scale.first + scale.count - 1
    span = world.commits[last].time - world.commits[first].time
    sim.bad_runner = f"aisc-v100-{rng.randrange(POOL_SIZES['v100']) + 1:02d}"
    sim.bad_from = world.commits[first].time + span * rng.uniform(0.1, 0.8)
    sim.bad_to = sim.bad_from + timedelta(days=rng.uniform(2, 4))
    _nightly(sim)
    for index in range(first + 1, last + 1):
        if world.commits[index].pr is not None:
            _pull_request(sim, index)
    sim.runs.sort(key=lambda r: (r.finished, r.run_id, r.attempt))
    return sim.runs
