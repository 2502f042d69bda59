"""The thirteenth labelled history: NVIDIA TransformerEngine's real skeleton (held out from the verdict
rules; scored once, by the lead, with ``python -m bench verdicts --generator gen13``).

Real (`bench/_history_gen13_data.json`, read by `bench._history_gen13_extract` from the repository):
240 consecutive first-parent commits (2026-05-18 .. 2026-08-22) with their times, authors, pull
request numbers and touched files; the qa scripts' pytest invocations at every commit (each writes its
own ``--junitxml`` file, keeps going after a failure and fails the job at its end), the test
functions, classes and parametrize argnames of the files they run; the breakage windows of its
reverts and of fixes that name what they fix.

The CI modelled (what the repository says, and what it does not, assumed; docs/bench.md):
- a pull request's GPU pipeline runs only on a maintainer's ``/te-ci`` comment (trigger-ci.yml):
  L0 of the frameworks it touches, L1 when the comment asks; a new push auto-cancels a running
  pipeline (its finished levels keep their JUnit), a failed pipeline is retried (failed levels
  again, the same run id, attempt 2) or commented again (a new run);
- every main commit runs L0 (``push``); a nightly runs L0, L1 and L2 on main's head (``schedule``);
- one job per level on a pool of hosts, one `Report` per JUnit file (``shard`` its place in the
  level's script), no rerun plugin: each test has one attempt per run, so every label has
  ``every_attempt`` true.

Simulated on top (`bench._history_gen13_causes`): flaky tests by what they exercise (tolerance,
nondeterminism, ports, store and NCCL timeouts, XLA, CUDA graph capture), hosts going bad (Xid 79,
ECC: the rest of that pytest process fails), a GPU left full by another job, Hugging Face hub
outages, InfiniBand failures on 8-GPU hosts, jobs lost without JUnit, and pull requests whose own
push breaks related tests until the next push.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from bench._history_gen13_causes import Causes, Planted, breakage, count_flakes, draw, fail_job, runner
from bench._history_gen13_plan import NIGHTLY_LEVELS, PUSH_LEVELS, PullRequest, plan_prs
from bench._history_gen13_text import junit
from bench._history_gen13_world import (LEVEL_POOL, Commit, Window, commits as all_commits, junit_files,
                                        levels, load, related_tests, stable, windows as all_windows)
from bench._verdicts_records import Label, Report, Run

BUILD_MINUTES = (18.0, 35.0)  # container pull, TE build and pip installs before a level's first pytest


@dataclass(frozen=True)
class Scale:
    """How much of the real history and how dense the simulated causes. ``attempt_text``: whether a
    failed rerun attempt carries the registry plugin's ``ci.attempt.*`` properties (``--stock-junit``
    turns it off); TransformerEngine's qa scripts run no rerun plugin, so no attempt is a rerun and
    the JUnit is the same either way."""

    start: int = 0
    commits: int = 240
    max_params: int = 2
    max_functions: int = 4
    flaky_share: float = 0.03
    flake_rates: tuple[float, float] = (0.02, 0.12)
    new_share: float = 0.15
    l1_share: float = 0.3
    retry_share: float = 0.35
    recomment_share: float = 0.2
    nightly: bool = True
    attempt_text: bool = True


QUICK = Scale(start=50, commits=28)


@dataclass
class History:
    """One seed's runs in the order they finish, and what made them: the windows modelled and the
    nodes each breaks, the windows no modelled test sees, the pull requests and the causes drawn."""

    seed: int
    runs: list[Run]
    commits: list[Commit]
    windows: list[Window]
    broken: list[tuple[str, ...]]
    unmodelled: list[Window]
    prs: list[PullRequest]
    causes: Causes
    cancelled: list[tuple[str, int]] = field(default_factory=list)  # (run id, attempt) a push cancelled

    @property
    def checkout_files(self) -> tuple[str, ...]:
        """The test files and the JAX pytest.ini a checkout holds (the harness ingests inside them)."""
        return (*sorted(load()["tests"]), "tests/jax/pytest.ini")


def _slice(scale: Scale) -> tuple[list[Commit], list[Window]]:
    chosen = all_commits()[scale.start:scale.start + scale.commits]
    if len(chosen) < 2:
        raise ValueError(f"Scale(start={scale.start}, commits={scale.commits}) leaves fewer than 2 of the "
                         f"{len(all_commits())} real commits")
    kept = [Window(w.culprit - scale.start, w.end - scale.start, w.kind, w.subject, w.fix_subject, w.files)
            for w in all_windows() if scale.start <= w.culprit and w.end < scale.start + len(chosen)]
    return chosen, kept


def _files_at(commit: int, scale: Scale) -> dict[str, list[str]]:
    """file -> its nodes in any level, as the scripts stand at ``commit`` (an index into all commits)."""
    out: dict[str, list[str]] = {}
    for level in levels():
        for jf in junit_files(level, commit, scale.max_params, scale.max_functions):
            for case in jf.cases:
                nodes = out.setdefault(case.file, [])
                if case.node not in nodes:
                    nodes.append(case.node)
    return out


def _pick_nodes(files: list[str], by_file: dict[str, list[str]], rng: random.Random) -> tuple[str, ...]:
    """A breakage's nodes: one or two test functions' instances in the first of ``files`` with tests."""
    for file in files:
        nodes = by_file.get(file, [])
        functions = sorted({n.split("[")[0] for n in nodes})
        if functions:
            hit = set(rng.sample(functions, min(len(functions), rng.choice((1, 1, 2)))))
            return tuple(n for n in nodes if n.split("[")[0] in hit)
    return ()


class _Builder:
    def __init__(self, seed: int, scale: Scale, chosen: list[Commit]):
        self.seed, self.scale, self.commits = seed, scale, chosen
        self.rng = random.Random(seed)
        self.runs: list[Run] = []
        self.next_id = 31_400_000 + 1000 * seed
        self.cancelled: list[tuple[str, int]] = []

    def run_id(self) -> str:
        self.next_id += 1 + self.rng.randrange(40)
        return str(self.next_id)

    def execute(self, run: Run, levels_: tuple[str, ...], code: int, planted: dict[str, Planted],
                causes: Causes, cancel_at: datetime | None = None) -> bool:
        """Run ``levels_`` of the qa scripts at history commit ``code`` into ``run``; True if any failed."""
        failed = cut = False
        finished = run.started
        for level in levels_:
            pool = LEVEL_POOL[level]
            host = runner(pool, self.rng)
            clock = run.started + timedelta(minutes=self.rng.uniform(*BUILD_MINUTES))
            if self.rng.random() < causes.lost_rate:  # runner lost before any JUnit was written
                cut = cut or (cancel_at is not None and clock > cancel_at)
                finished, failed = max(finished, clock), True
                continue
            files = junit_files(level, self.scale.start + code, self.scale.max_params, self.scale.max_functions)
            reports, tried = [], []
            oom_file = self.rng.randrange(len(files)) if files and self.rng.random() < causes.oom_rate else -1
            for shard, jf in enumerate(files):
                outcomes, labels, drew = fail_job(jf.cases, causes, host, clock, self.rng, planted, shard == oom_file)
                tried += drew
                xml = junit(outcomes, host, clock)
                clock += timedelta(seconds=sum(o.seconds for o in outcomes) + 6)
                reports.append(Report(level, shard, len(files), host, xml,
                                      [Label(node, level, lab, True, why) for node, (lab, why) in labels.items()]))
            if cancel_at is not None and clock > cancel_at:
                cut = True
                continue  # GitLab drops a cancelled job's artifacts: none of its JUnit is uploaded
            run.reports += reports
            count_flakes(causes, tried, [(label.node, label.label) for r in reports for label in r.labels])
            failed = failed or any(r.labels for r in reports)
            finished = max(finished, clock + timedelta(minutes=1))
        run.finished = cancel_at if cut and cancel_at is not None else finished
        return failed


def planted_at(windows: list[Window], broken: list[tuple[str, ...]], chosen: list[Commit], code: int,
             own: int | None, push_of: int | None) -> dict[str, Planted]:
    """The code breakages a run at base ``code`` sees: each window's nodes as broken on main inside it,
    but as the run's own change in the culprit's pull request (``own``) or push (``push_of``), and not
    at all in the pull request that reverts or fixes it."""
    planted: dict[str, Planted] = {}
    for window, nodes in zip(windows, broken):
        culprit, end = chosen[window.culprit], chosen[window.end]
        if own is not None and own == window.culprit:
            for node in nodes:
                planted[node] = breakage(node.split("::")[0], culprit.sha, "new",
                                         f"this pull request's change ({window.subject[:60]}) breaks it")
        elif push_of == window.culprit:
            for node in nodes:
                planted[node] = breakage(node.split("::")[0], culprit.sha, "new",
                                         f"the culprit's own merge ({culprit.sha[:10]})")
        elif window.culprit <= code < window.end and own != window.end:
            for node in nodes:
                planted[node] = breakage(node.split("::")[0], culprit.sha, "broken_on_main",
                                         f"main broken by {culprit.sha[:10]} until {window.kind} {end.sha[:10]}")
    return planted


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The history of ``seed`` (deterministic: the same seed and scale give the same runs and JUnit)."""
    chosen, windows = _slice(scale)
    build = _Builder(seed, scale, chosen)
    rng = build.rng
    broken, modelled, unmodelled = [], [], []
    for window in windows:
        by_file = _files_at(scale.start + window.culprit, scale)
        files = related_tests(window.files + chosen[window.end].files, set(by_file))
        nodes = _pick_nodes(files, by_file, random.Random(seed * 31 + stable(chosen[window.culprit].sha) % 997))
        (modelled if nodes else unmodelled).append(window)
        if nodes:
            broken.append(nodes)
    all_nodes = sorted({n for level in levels() for jf in junit_files(level, scale.start + len(chosen) - 1,
                                                                     scale.max_params, scale.max_functions)
                        for n in (c.node for c in jf.cases)})
    causes = draw(seed, all_nodes, chosen[0].time, chosen[-1].time + timedelta(days=1), scale.flaky_share,
                  scale.flake_rates)
    prs = plan_prs(chosen, rng, scale.new_share, scale.l1_share)
    for c in chosen:  # every main commit runs L0
        run = Run("push", c.sha, c.index - scale.start, c.time + timedelta(minutes=rng.uniform(3, 20)), c.time,
                  build.run_id(), author=c.author)
        build.execute(run, PUSH_LEVELS, run.commit, planted_at(modelled, broken, chosen, run.commit, None, run.commit),
                      causes)
        build.runs.append(run)
    if scale.nightly:
        _nightlies(build, modelled, broken, causes)
    for pr in prs:
        _pull_request(build, pr, modelled, broken, causes)
    build.runs.sort(key=lambda r: (r.finished, r.run_id, r.attempt))
    return History(seed, build.runs, chosen, modelled, broken, unmodelled, prs, causes, build.cancelled)


def _nightlies(build: _Builder, windows: list[Window], broken: list[tuple[str, ...]], causes: Causes) -> None:
    chosen = build.commits
    day = chosen[0].time.astimezone(timezone.utc).replace(hour=8, minute=0, second=0, microsecond=0)
    while day < chosen[-1].time:
        day += timedelta(days=1)
        head = max((c.index - build.scale.start for c in chosen if c.time <= day), default=None)
        if head is None:
            continue
        c = chosen[head]
        run = Run("schedule", c.sha, head, day, day, build.run_id(), author="")
        build.execute(run, NIGHTLY_LEVELS, head, planted_at(windows, broken, chosen, head, None, None), causes)
        build.runs.append(run)


def _pull_request(build: _Builder, pr: PullRequest, windows: list[Window], broken: list[tuple[str, ...]],
                  causes: Causes) -> None:
    rng = build.rng
    chosen = build.commits
    for k, push in enumerate(pr.pushes):
        next_push = pr.pushes[k + 1].time if k + 1 < len(pr.pushes) else None
        planted = planted_at(windows, broken, chosen, push.base, pr.merged, None)
        if push.breaks:
            by_file = _files_at(build.scale.start + push.base, build.scale)
            files = related_tests(pr.files, set(by_file)) or sorted(by_file)[stable(pr.number) % len(by_file):][:1]
            for node in _pick_nodes(files, by_file, random.Random(stable(pr.number, build.seed))):
                planted.setdefault(node, breakage(node.split("::")[0], push.sha, "new",
                                                  f"push {k + 1} of PR #{pr.number} breaks it; push {k + 2} fixes it"))
        cancel = next_push
        for trigger in push.triggers:
            run, failed = _pr_run(build, pr, push.sha, push.base, trigger.levels, build.run_id(), 1, trigger.time,
                                  planted, causes, cancel)
            later = run.finished + timedelta(minutes=rng.uniform(5, 90))
            if not failed or (run.run_id, 1) in build.cancelled or (cancel is not None and later >= cancel):
                continue
            roll = rng.random()
            if roll < build.scale.retry_share:  # GitLab "retry" of the failed jobs: the same pipeline
                again = tuple(lvl for lvl in trigger.levels
                              if not any(r.tier == lvl for r in run.reports) or any(r.labels for r in run.reports
                                                                                   if r.tier == lvl))
                _pr_run(build, pr, push.sha, push.base, again, run.run_id, 2, later, planted, causes, cancel)
            elif roll < build.scale.retry_share + build.scale.recomment_share:  # "/te-ci" again: a new pipeline
                _pr_run(build, pr, push.sha, push.base, trigger.levels, build.run_id(), 1, later, planted, causes,
                        cancel)


def _pr_run(build: _Builder, pr: PullRequest, sha: str, base: int, levels_: tuple[str, ...], run_id: str,
            attempt: int, when: datetime, planted: dict[str, Planted], causes: Causes,
            cancel: datetime | None) -> tuple[Run, bool]:
    """One pull request pipeline attempt; a push landing before it finishes cancels it."""
    run = Run("pull_request", sha, base, when, when, run_id, attempt, pr.number, build.commits[base].sha, pr.author)
    cancel = cancel if cancel is not None and cancel > when else None
    failed = build.execute(run, levels_, base, planted, causes, cancel)
    if cancel is not None and run.finished >= cancel:
        build.cancelled.append((run_id, attempt))
    build.runs.append(run)
    return run, failed


