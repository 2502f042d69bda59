"""The pull requests of the thirteenth history around TransformerEngine's real squash merges: when each
opened, its pushes and the main commit each is based on, which ``/te-ci`` comments a maintainer
wrote (the internal GPU pipeline runs only on such a comment, `.github/workflows/trigger-ci.yml`)
and which qa levels each asked for, and the simulated pushes whose own change breaks tests."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from bench._history_gen13_world import Commit

L0 = {"pytorch": ("L0_pytorch_unittest", "L0_pytorch_debug_unittest"), "jax": ("L0_jax_unittest",)}
L1 = {"pytorch": ("L1_pytorch_distributed_unittest", "L1_pytorch_onnx_unittest"), "jax": ("L1_jax_distributed_unittest",)}
PUSH_LEVELS = L0["pytorch"] + L0["jax"]
NIGHTLY_LEVELS = PUSH_LEVELS + L1["pytorch"] + L1["jax"] + ("L2_jax_unittest",)


@dataclass(frozen=True)
class Trigger:
    """A ``/te-ci`` comment on the push it was written under: when, and the levels it asked for."""

    time: datetime
    levels: tuple[str, ...]


@dataclass(frozen=True)
class Push:
    """One push to a pull request: head ``sha``, its merge base ``base`` (an index into the history's
    commits), whether its own change breaks tests, and the ``/te-ci`` comments written under it."""

    sha: str
    time: datetime
    base: int
    breaks: bool
    triggers: tuple[Trigger, ...]


@dataclass(frozen=True)
class PullRequest:
    number: int
    merged: int
    author: str
    files: tuple[str, ...]
    pushes: tuple[Push, ...]


def components(files: tuple[str, ...]) -> tuple[str, ...]:
    """The frameworks a change touches, as a maintainer picks ``/te-ci pytorch`` or ``/te-ci jax``:
    common code, build files, qa scripts or nothing framework-specific asks for both."""
    torch = any(f.startswith(("transformer_engine/pytorch", "tests/pytorch", "transformer_engine/debug")) for f in files)
    jax = any(f.startswith(("transformer_engine/jax", "tests/jax")) for f in files)
    if torch != jax:
        return ("pytorch",) if torch else ("jax",)
    return ("pytorch", "jax")


def levels_for(files: tuple[str, ...], rng: random.Random, l1_share: float) -> tuple[str, ...]:
    """The levels one ``/te-ci`` comment runs: L0 of each framework, and L1 when the comment asks."""
    comps = components(files)
    multi = any(w in f for f in files for w in ("distributed", "comm_gemm", "userbuffers", "context_parallel", "ep"))
    asked = rng.random() < (min(1.0, 2 * l1_share) if multi else l1_share / 3)
    return tuple(lvl for comp in comps for lvl in L0[comp] + (L1[comp] if asked else ()))


def fake_sha(*parts: object) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


def base_at(commits: list[Commit], before: int, when: datetime) -> int:
    """The newest main commit (below index ``before``) already merged at ``when``; 0 if none."""
    base = 0
    for index in range(before):
        if commits[index].time <= when:
            base = index
    return base


def plan_prs(commits: list[Commit], rng: random.Random, new_share: float, l1_share: float) -> list[PullRequest]:
    """A pull request for every squash merge after the first commit, opened 2 hours to 3 weeks before
    it merged (mean 2.5 days), 1-4 pushes, each rebased onto main with probability 0.4."""
    prs = []
    for merged in range(1, len(commits)):
        commit = commits[merged]
        if commit.pr is None:
            continue
        hours = min(500.0, max(2.0, rng.expovariate(1 / 60)))
        opened = max(commits[0].time + timedelta(minutes=30), commit.time - timedelta(hours=hours))
        count = 1 + min(3, int(rng.expovariate(1.1)))
        breaking = rng.random() < new_share
        if breaking and count == 1:
            count = 2
        span = max(60.0, (commit.time - opened).total_seconds() - 900)
        times = sorted(opened + timedelta(seconds=rng.uniform(0, span)) for _ in range(count))
        broke_at = rng.randrange(count - 1) if breaking else -1
        pushes = []
        base = base_at(commits, merged, opened)
        for k, when in enumerate(times):
            if k and rng.random() < 0.4:
                base = base_at(commits, merged, when)
            triggers = []
            if rng.random() < (0.95 if k == count - 1 else 0.55):  # a comment under this push, before the next
                until = times[k + 1] if k + 1 < count else commit.time
                gap = max(1.0, (until - when).total_seconds() / 60 - 2)
                at = when + timedelta(minutes=rng.uniform(min(10.0, gap / 2), min(300.0, gap)))
                triggers.append(Trigger(at, levels_for(commit.files, rng, l1_share)))
            pushes.append(Push(fake_sha(commit.pr, k, commit.sha), when, base, k == broke_at, tuple(triggers)))
        prs.append(PullRequest(commit.pr, merged, commit.author, commit.files, tuple(pushes)))
    return prs
