"""The simulated causes of the thirteenth history, drawn once per seed: which tests are flaky (kind and
rate by what the test does), which hosts go bad and when (Xid 79, ECC), when the Hugging Face hub is
down, when one 8-GPU host's InfiniBand fails NCCL, and the per-job chances of a GPU left full by
another process or a job lost with no JUnit. `fail_job` applies them to one JUnit file's cases."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bench._history_gen13_text import Outcome, break_error, flake_error, infra_error, traceback
from bench._history_gen13_world import Case, stable

POOL_SIZE = {"h100-1g": 12, "h100-8g": 4, "b200-1g": 4}
HUB_FILES = ("tests/pytorch/test_hf_integration.py",)
# A flaky fixture-setup failure is written as an <error> (pytest's "failed on setup with ...").
SETUP_KINDS = ("port", "store")


@dataclass(frozen=True)
class Flake:
    kind: str
    rate: float


@dataclass(frozen=True)
class Span:
    """A stretch of time a host (or, ``host`` empty, a service) is broken, and what it raises."""

    host: str
    start: datetime
    end: datetime
    kind: str

    def covers(self, host: str, when: datetime) -> bool:
        return self.start <= when < self.end and (not self.host or self.host == host)


@dataclass
class Causes:
    """One seed's planted causes: ``flaky`` node -> flake, broken-host and outage spans, job rates."""

    flaky: dict[str, Flake]
    bad_hosts: list[Span]
    hub_outages: list[Span]
    ib_spans: list[Span]
    oom_rate: float
    lost_rate: float
    hits: dict[str, int] = field(default_factory=dict)
    trials: dict[str, int] = field(default_factory=dict)  # uploaded runs of a flaky node nothing else failed


def flake_kinds(file: str) -> tuple[str, ...]:
    """The ways a test of ``file`` fails at random on working code, by what it exercises."""
    if "distributed" in file or "with_cp" in file or "/debug/test_distributed" in file:
        return ("port", "store", "nccl_timeout", "subprocess")
    if file.startswith("tests/jax/"):
        return ("xla", "tolerance")
    if "attention" in file:
        return ("nondeterministic", "tolerance")
    if "cuda_graphs" in file or "grouped_mlp" in file:
        return ("cuda_graph", "tolerance")
    return ("tolerance",)


def runner(pool: str, rng: random.Random) -> str:
    return f"te-ci-{pool}-{rng.randrange(POOL_SIZE[pool]):02d}"


def draw(seed: int, nodes: list[str], start: datetime, end: datetime, flaky_share: float,
         rate_range: tuple[float, float]) -> Causes:
    """The seed's causes over the history's time span ``start``..``end``."""
    rng = random.Random(seed * 7919 + 13)
    flaky = {}
    for node in sorted(nodes):
        if rng.random() < flaky_share:
            file = node.split("::", 1)[0]
            flaky[node] = Flake(rng.choice(flake_kinds(file)), round(rng.uniform(*rate_range), 3))
    span = (end - start).total_seconds()

    def spans(count: int, hours: tuple[float, float], pool: str, kinds: tuple[str, ...]) -> list[Span]:
        out = []
        for _ in range(count):
            begin = start + timedelta(seconds=rng.uniform(0, span))
            host = runner(pool, rng) if pool else ""
            out.append(Span(host, begin, begin + timedelta(hours=rng.uniform(*hours)), rng.choice(kinds)))
        return out

    return Causes(flaky, spans(3, (6, 36), "h100-1g", ("xid79", "ecc")) + spans(1, (6, 24), "b200-1g", ("xid79",)),
                  spans(2, (1, 4), "", ("hub",)), spans(2, (4, 20), "h100-8g", ("nccl_net",)),
                  oom_rate=0.03, lost_rate=0.008)


@dataclass(frozen=True)
class Planted:
    """A failure the caller plants in a case: its label, why, and the exception text."""

    label: str
    why: str
    error: str


def fail_job(cases: tuple[Case, ...], causes: Causes, host: str, when: datetime, rng: random.Random,
             planted: dict[str, Planted], oom: bool = False
             ) -> tuple[list[Outcome], dict[str, tuple[str, str]], list[str]]:
    """Each case's outcome in one JUnit file run on ``host`` at ``when``, and node -> (label, why) for
    those that failed, and the flaky nodes that drew for a flake. ``planted`` holds the code breakages (broken on main, the PR's own); infra that
    hits a case wins over them (the case never got to its assertion), a flake loses to them. ``oom``:
    another job's leftover process holds the GPU for three of this file's tests."""
    outcomes: list[Outcome] = []
    labels: dict[str, tuple[str, str]] = {}
    tried: list[str] = []
    poisoned = ""
    bad = next((s for s in causes.bad_hosts if s.covers(host, when)), None)
    ib = next((s for s in causes.ib_spans if s.covers(host, when)), None)
    hub = next((s for s in causes.hub_outages if s.covers("", when)), None)
    crash_at = rng.randrange(len(cases)) if bad and rng.random() < 0.3 else -1
    oom_at = rng.randrange(len(cases)) if oom else -1
    ib_file = ib is not None and rng.random() < 0.6
    for index, case in enumerate(cases):
        seconds = round((0.4 + (stable(case.node) % 1900) / 100) * rng.uniform(0.85, 1.2), 3)
        cause: tuple[str, str, str] | None = None  # label, why, error
        if index == crash_at:
            poisoned = bad.kind  # the CUDA context is lost: every later test in this process fails too
        if poisoned:
            cause = ("infra", f"bad host {host}: {poisoned}", infra_error(poisoned, rng))
        elif oom_at >= 0 and oom_at <= index < oom_at + 3:
            kind = "jax_oom_other" if case.file.startswith("tests/jax/") else "oom_other"
            cause = ("infra", "GPU held by another job's leftover process", infra_error(kind, rng))
        elif hub and case.file in HUB_FILES:
            cause = ("infra", "Hugging Face hub outage", infra_error("hub", rng))
        elif ib_file and ("distributed" in case.file or "with_cp" in case.file):
            cause = ("infra", f"InfiniBand failure on {host}", infra_error("nccl_net", rng))
        elif case.node in planted:
            p = planted[case.node]
            cause = (p.label, p.why, p.error)
        elif case.node in causes.flaky:
            flake = causes.flaky[case.node]
            tried.append(case.node)
            if rng.random() < flake.rate:
                cause = ("flaky", f"flaky: {flake.kind} at {flake.rate:.3f}", flake_error(flake.kind, rng))
        if cause is None:
            outcomes.append(Outcome(case, seconds))
            continue
        label, why, error = cause
        text = traceback(case, error)
        first = error.split("\n")[0]
        if label == "flaky" and causes.flaky[case.node].kind in SETUP_KINDS and stable(case.node, "setup") % 2:
            outcomes.append(Outcome(case, seconds, "error", f'failed on setup with "{first}"', text))
        else:
            outcomes.append(Outcome(case, seconds, "failure", error, text))
        labels[case.node] = (label, why)
    return outcomes, labels, tried


def count_flakes(causes: Causes, tried: list[str], labels: list[tuple[str, str]]) -> None:
    """Record an uploaded file's flake draws (``tried``) and flaky failures (``labels``: node, label)."""
    for node in tried:
        causes.trials[node] = causes.trials.get(node, 0) + 1
    for node, label in labels:
        if label == "flaky":
            causes.hits[node] = causes.hits.get(node, 0) + 1


def breakage(file: str, key: str, label: str, why: str) -> Planted:
    """A code breakage of ``file`` (the same error every run, fixed by ``key``)."""
    return Planted(label, why, break_error(file, random.Random(key), key))
