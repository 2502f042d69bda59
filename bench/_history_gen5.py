"""The fifth labelled history (issue 47), held out from the verdict rules: a PyTorch-CI-like
project on two accelerator platforms (CUDA H100 and ROCm MI300 pools), written from GitHub's
and PyTorch CI's documented behaviour without reading the rules or the other generators.

Main is pushed to ~25 commits a day; every push runs the CUDA and ROCm default tiers (files
sharded by the day's test times, so a file moves shard as durations drift) and a SGLang-style
tier whose unittest files a runner script retries whole; a nightly run tests each day's last
commit on the slow tier (nightly only). Pull requests run the CUDA tiers, and ROCm with
``ciflow/rocm``; a newer push cancels the run in progress (partial JUnit, or none); a run hit
by the ROCm outage may be re-run (GitHub's "re-run failed jobs": attempt 2, those jobs only).
The story is `bench._history_gen5_story`, the world `bench._history_gen5_world`.

Contract: `generate(seed, scale)` is deterministic and works for any seed; every test with a
failed attempt in a report carries one `Label` (`LABELS`), ``every_attempt`` true when its last
attempt failed. Runs are in the order they finish, as the harness ingests them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from bench import _verdicts_records as records
from bench._history_gen5_story import BUILD_SHARE, DAY, HOUR, RUN_SECONDS, Breakage, Story, plan
from bench._history_gen5_text import Attempt, CaseRun, shard_xml
from bench._history_gen5_world import (CASES, DISABLED, DISABLED_NODE, HIP_DEVICE, NIGHTLY, PR, PUSH, ROCM, SLOW,
                                       TIERS, Case, Tier, classname, file_at, node_at, shard_files)
from bench._verdicts_records import LABELS, Label

BROKEN_ON_MAIN, NEW, INFRA, FLAKY = LABELS
EPOCH = datetime(2026, 11, 2, tzinfo=timezone.utc)
LOAD_CAP = 12  # runs in flight at once that saturate the pools (the load-dependent flake's full rate)


@dataclass(frozen=True)
class Scale:
    """How much history, and how its JUnit is written: ``attempt_text`` as `ci run` writes it (each
    rerun attempt's error as `ci.pytest_attempts` properties), else as stock pytest does."""

    commits: int = 150
    prs: int = 60
    attempt_text: bool = True


QUICK = Scale(30, 14)


@dataclass(frozen=True)
class Report(records.Report):
    """One shard job's JUnit (`bench._verdicts_records.Report`); ``partial`` when the run was
    cancelled while the shard ran."""

    partial: bool = False


@dataclass
class Run(records.Run):
    """One CI run attempt (`bench._verdicts_records.Run`); ``load`` how busy the pools were when it
    started (0..1); ``missing`` the (tier, shard) jobs that wrote no JUnit (failed at setup, or
    cancelled before tests)."""

    load: float = 0.0
    cancelled: bool = False
    missing: list[tuple[str, int]] = field(default_factory=list)
    own: tuple[Breakage, ...] = ()
    tiers: tuple[str, ...] = ()


@dataclass
class History:
    """``runs`` ingested in this order; ``silent`` the runs that wrote no JUnit at all (cancelled
    while building, or a re-run whose jobs all failed at setup again): nothing reaches the store."""

    seed: int
    story: Story
    runs: list[Run]
    silent: list[Run]


def _at(seconds: float) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def _seconds(when: datetime) -> float:
    return (when - EPOCH).total_seconds()


def _schedule(story: Story, rng: random.Random) -> list[Run]:
    runs: list[Run] = []
    ids = iter(range(9_100_000_000, 10_000_000_000, 7))

    def add(event: str, sha: str, commit: int, start: float, tiers: tuple[str, ...], pr: int | None = None,
            base: str = "", author: str = "pytorchmergebot", own: tuple[Breakage, ...] = ()) -> Run:
        run = Run(event, sha, commit, _at(start), _at(start + RUN_SECONDS * rng.uniform(0.9, 1.2)), str(next(ids)),
                  1, pr, base, author, own=own, tiers=tiers)
        runs.append(run)
        return run

    main_tiers = tuple(t.name for t in TIERS if PUSH in t.events)
    for i, (sha, when) in enumerate(zip(story.shas, story.times)):
        add(PUSH, sha, i, when + 30.0, main_tiers)
    for end in story.day_ends():
        add(NIGHTLY, story.shas[end], end, (story.times[end] // DAY + 1) * DAY + HOUR, (SLOW.name,))
    for pr in story.prs:
        for k, push in enumerate(pr.pushes):
            run = add(PR, push.sha, pr.base, push.time + 60.0, pr.tiers, pr=pr.number, base=story.shas[pr.base],
                      author=pr.author, own=push.breaks)
            if k + 1 < len(pr.pushes) and _at(pr.pushes[k + 1].time) < run.finished:
                run.cancelled = True
                run.finished = _at(pr.pushes[k + 1].time + 20.0)
    for run in runs:
        run.load = min(1.0, sum(1 for r in runs if r.started <= run.started < r.finished) / LOAD_CAP)
    return runs


def _label(story: Story, run: Run, case: Case, platform: str, in_outage: bool) -> tuple[str, str, str] | None:
    """(label, why, error) of a test that fails every attempt in ``run``, or None."""
    if in_outage:
        return INFRA, "ROCm pool outage: the device is gone", HIP_DEVICE
    broken = story.broken(run.commit, case.node, platform)
    if broken is not None:
        return BROKEN_ON_MAIN, broken.why, broken.error
    for own in run.own:
        if case.node in own.nodes and platform in own.platforms:
            return NEW, own.why, own.error
    return None


def _file_runs(story: Story, run: Run, tier: Tier, cases: list[Case], outage: bool, start: float,
               rng: random.Random) -> tuple[list[CaseRun], list[Label]]:
    """One file's tests in one shard job: attempts, and the labels of those with a failure."""
    renamed = run.commit >= story.renamed
    disabled = tier.platform == ROCM and start in story.disabled
    fixed = {c.node: _label(story, run, c, tier.platform, outage) for c in cases}
    chance = {c.node: c.flake.chance(run.load) if c.flake and tier.platform in c.flake.platforms else 0.0
              for c in cases}
    draws: dict[str, list[Attempt]] = {c.node: [] for c in cases}
    live = [c for c in cases if not (disabled and c.node == DISABLED_NODE)]
    pending = list(live)
    for _ in range(tier.reruns + 1):
        for c in pending:
            cause = fixed[c.node]
            if cause is not None:
                draws[c.node].append(Attempt(True, cause[2], setup=cause[0] == INFRA))
            elif rng.random() < chance[c.node]:
                draws[c.node].append(Attempt(True, c.flake.error if c.flake else ""))
            else:
                draws[c.node].append(Attempt(False))
        failed = [c for c in pending if draws[c.node][-1].failed]
        pending = (live if failed else []) if tier.file_retry else failed
    out, labels = [], []
    for c in cases:
        node = node_at(c, renamed)
        if c not in live:
            out.append(CaseRun(file_at(c, renamed), classname(c, renamed), c.name, c.seconds,
                               skipped=DISABLED.format(issue=140000 + story.seed)))
            continue
        attempts = tuple(draws[c.node])
        out.append(CaseRun(file_at(c, renamed), classname(c, renamed), c.name, c.seconds, attempts))
        if any(a.failed for a in attempts):
            cause = fixed[c.node]
            first = next(a for a in attempts if a.failed)  # a file's retry may fail a test that passed before
            label, why = (cause[0], cause[1]) if cause else (FLAKY, f"flaky at {chance[c.node]:.0%}: "
                                                                    f"{first.error.splitlines()[0][:60]}")
            labels.append(Label(node, tier.name, label, attempts[-1].failed, why))
    return out, labels


def _realize(story: Story, run: Run, scale: Scale, rng: random.Random, only: set[tuple[str, int]] | None) -> None:
    start = _seconds(run.started)
    span = _seconds(run.finished) - start
    day = int(start // DAY)
    for tier in TIERS:
        if tier.name not in run.tiers:
            continue
        for shard, files in enumerate(shard_files(tier, day, story.seed)):
            if only is not None and (tier.name, shard) not in only:
                continue
            outage = tier.platform == ROCM and start in story.outage
            done = BUILD_SHARE + (1 - BUILD_SHARE) * rng.uniform(0.6, 1.0)
            if (outage and rng.random() < 0.5) or (run.cancelled and span < BUILD_SHARE * RUN_SECONDS):
                run.missing.append((tier.name, shard))  # "Set up job" failed, or cancelled while building
                continue
            cases: list[CaseRun] = []
            labels: list[Label] = []
            for file in files:
                made, made_labels = _file_runs(story, run, tier, [c for c in CASES if c.file == file and tier.name
                                                                  in c.tiers], outage, start, rng)
                cases += made
                labels += made_labels
            partial = run.cancelled and span < done * RUN_SECONDS
            if partial:  # pytest's KeyboardInterrupt still writes the tests finished so far
                kept = (span / RUN_SECONDS - BUILD_SHARE) / (done - BUILD_SHARE)
                cases = cases[:int(len(cases) * max(0.0, kept))]
                nodes = {c.node for c in cases}
                labels = [lb for lb in labels if lb.node in nodes]
            host = f"{tier.runner}-i-{rng.getrandbits(40):010x}"
            run.reports.append(Report(tier.name, shard, tier.shards, host,
                                      shard_xml(cases, attempt_text=scale.attempt_text, file_retry=tier.file_retry,
                                                hostname=host), labels, partial))


def _reruns(story: Story, runs: list[Run], scale: Scale, rng: random.Random) -> list[Run]:
    """"Re-run failed jobs" on pull request runs the outage hit: attempt 2, those jobs only."""
    out = []
    for run in runs:
        failed = set(run.missing) | {(r.tier, r.shard) for r in run.reports if any(lb.label == INFRA for lb in r.labels)}
        if run.event != PR or run.cancelled or not failed or rng.random() < 0.4:
            continue
        start = _seconds(run.finished) + rng.uniform(0.5, 5.0) * HOUR
        again = Run(PR, run.sha, run.commit, _at(start), _at(start + RUN_SECONDS * rng.uniform(0.5, 0.8)),
                    run.run_id, 2, run.pr, run.base_sha, run.author, load=run.load, own=run.own, tiers=run.tiers)
        _realize(story, again, scale, rng, failed)
        out.append(again)
    return out


def generate(seed: int, scale: Scale = Scale()) -> History:
    """The history of ``seed`` at ``scale`` (see the module docstring)."""
    story = plan(seed, scale.commits, scale.prs)
    rng = random.Random(f"gen5-runs-{seed}")
    runs = _schedule(story, rng)
    for run in runs:
        _realize(story, run, scale, rng, None)
    runs += _reruns(story, runs, scale, rng)
    done = sorted((r for r in runs if r.reports), key=lambda r: (r.finished, r.run_id, r.attempt))
    return History(seed, story, done, [r for r in runs if not r.reports])
