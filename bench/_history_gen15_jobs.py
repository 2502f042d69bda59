"""One job of the fifteenth history: which of its cases fail, of what, with what truth, and the
`Report` it uploads (none when its runner is lost).

Causes, first that applies wins: a breakage window the job's code and time are inside
(``broken_on_main``; ``new`` on the culprit commit's own push run); the pull request's own change
(``new``); the job's host, the hub or a crashed xdist worker (``infra``); a flaky test (``flaky``).
A flaky test of cause ``timing`` that failed in a job fails that job's re-run at ``again``, above
its rate: the re-run lands on the same runner image and cached models, so a slow host is slow again.
Every failed case is one label, ``every_attempt`` True: PEFT's CI reruns no test inside a job.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bench._history_gen15_text import Failure, failure, junit_xml
from bench._history_gen15_world import GPU_FILES, HUB_FILES, NIGHTLY_FILES, Case, Window, World
from bench._verdicts_records import Label, Report

GPU_SKIP = "test requires a GPU"
REGRESSION_SKIP = "need --regression option to run regression tests"


@dataclass(frozen=True)
class Flake:
    """A flaky test: ``cause`` tolerance, timing or winlock (Windows only), failing at ``rate``."""

    case: Case
    cause: str
    rate: float
    again: float


@dataclass(frozen=True)
class Outage:
    """The hub failing from ``start`` to ``end``; each hub-loading case fails at ``share``."""

    start: datetime
    end: datetime
    share: float


@dataclass
class Job:
    """One job to run: ``kind`` cpu (tests.yml), main (tests-main.yml) or gpu (nightly.yml)."""

    tier: str
    kind: str
    os: str
    runner: str
    hostname: str
    started: datetime
    seconds: float
    bad_host: str = ""
    previous: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Context:
    """What a run knows that decides its jobs' failures."""

    world: World
    base: int
    when: datetime
    own_commit: int | None
    new_cases: tuple[Case, ...]
    new_os: str
    new_file: str
    flakes: tuple[Flake, ...]
    outages: tuple[Outage, ...]


def job_cases(world: World, base: int, kind: str) -> tuple[list[Case], dict[str, str]]:
    """The cases a job of ``kind`` collects at commit ``base`` and the ones it skips, with why."""
    files = world.files_at(base)
    if kind == "gpu":
        files = [f for f in files if f in NIGHTLY_FILES]
    cases = [c for f in files for c in world.catalogue[f]]
    skips = {}
    if kind != "gpu":
        for case in cases:
            if case.file == "tests/regression/test_regression.py":
                skips[case.node] = REGRESSION_SKIP
            elif case.file in GPU_FILES:
                skips[case.node] = GPU_SKIP
    return cases, skips


def _window_text(window: Window) -> str:
    s = window.subject
    if "key_cache" in s:
        return "AttributeError: 'DynamicCache' object has no attribute 'key_cache'"
    if "max_cache_len" in s:
        return "AttributeError: 'DynamicCache' object has no attribute 'max_cache_len'"
    if "pytest" in s:
        return "TypeError: Node.__init__() got an unexpected keyword argument 'path'"
    if "torch.distributed" in s:
        return "AttributeError: module 'torch.distributed' has no attribute 'tensor'"
    if "transformers" in s.lower():
        return "TypeError: PreTrainedModel.from_pretrained() got an unexpected keyword argument 'torch_dtype'"
    if "Windows" in s:
        return "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, meta and cpu!"
    return "AssertionError: assert False\n +  where False = <built-in method allclose of type object>(output_before, output_after)"


def _model_of(case: Case) -> str:
    ids = case.name.partition("[")[2]
    return next((p for p in ids.rstrip("]").split("-") if "/" in p), "")


def failures(ctx: Context, job: Job, rng: random.Random) -> dict[str, tuple[Failure, Label]]:
    """Each failing case of the job by node, with its text and truth."""
    cases, skips = job_cases(ctx.world, ctx.base, job.kind)
    run_cases = [c for c in cases if c.node not in skips]
    out: dict[str, tuple[Failure, Label]] = {}

    def fail(case: Case, label: str, why: str, cause: str, detail: str = "") -> None:
        if case.node not in out:
            out[case.node] = (failure(cause, case, rng, detail), Label(case.node, job.tier, label, True, why))

    present = {c.node for c in run_cases}
    for window in ctx.world.windows:
        if window.gpu_only != (job.kind == "gpu") or (window.os_only and window.os_only != job.os):
            continue
        if window.breaks(ctx.base, ctx.when, transformers_main=job.kind == "main"):
            label = "new" if ctx.own_commit is not None and ctx.own_commit == window.start else "broken_on_main"
            for case in window.cases:
                if case.node in present:
                    fail(case, label, f"{window.kind} window to {ctx.world.commits[window.end].sha[:10]}: "
                         f"{window.subject}", "window", _window_text(window))
    if job.kind == "cpu" and (not ctx.new_os or ctx.new_os == job.os):
        for case in ctx.new_cases:
            if case.node in present:
                fail(case, "new", "the pull request's own change", "new", ctx.new_file)
    if job.bad_host:
        cause = "xid" if job.kind == "gpu" else "disk"
        for case in run_cases:
            if job.kind == "gpu" or rng.random() < 0.05:
                fail(case, "infra", f"bad host {job.bad_host}", cause)
    for outage in ctx.outages:
        if outage.start - timedelta(minutes=20) <= job.started <= outage.end:
            for case in run_cases:
                if case.file in HUB_FILES and rng.random() < outage.share:
                    fail(case, "infra", "hub outage", "hub", _model_of(case))
    if job.kind != "gpu" and run_cases and rng.random() < (0.012 if job.os.startswith("windows") else 0.006):
        case = rng.choice(run_cases)
        fail(case, "infra", "xdist worker killed (out of memory)", "crash", f"gw{rng.randint(0, 2)}")
    for flake in ctx.flakes:
        if flake.case.node not in present or (flake.cause == "winlock" and not job.os.startswith("windows")):
            continue
        again = flake.cause == "timing" and job.previous.get(flake.case.node) == "flaky"
        if rng.random() < (flake.again if again else flake.rate):
            fail(flake.case, "flaky", f"{flake.cause} flake{' (re-run on the same image)' if again else ''}", flake.cause)
    return out


def run_job(ctx: Context, job: Job, rng: random.Random) -> tuple[Report, dict[str, str]]:
    """The job's report and its failing nodes' labels (for a re-run's ``previous``)."""
    found = failures(ctx, job, rng)
    cases, skips = job_cases(ctx.world, ctx.base, job.kind)
    xml = junit_xml(cases, {n: f for n, (f, _) in found.items()}, skips, job.hostname, job.started, rng)
    labels = [label for _, label in found.values()]
    return Report(job.tier, 0, 1, job.runner, xml, labels), {n: lab.label for n, (_, lab) in found.items()}
