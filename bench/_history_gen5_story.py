"""The fifth labelled history's story (`bench._history_gen5`): main's commits and what breaks
on them when, the ROCm pool's outage, the disable bot's window, the file move, and the pull
requests (stale bases, ghstack stacks, pushes that cancel the run before them).

Contract: `plan(seed, commits, prs)` is a pure function of its arguments and works for any seed
and any ``commits >= 12``, ``prs >= 4``; positions are fractions of the history, clamped.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field, replace

from bench._history_gen5_world import (CASES, CUDA, DEFAULT, PARTIAL_NODES, REVERT_NODE, ROCM, ROCM_BUG_NODES,
                                       ROCM_DEFAULT, ROCM_NUMERIC, SLOW_NODE, SRT, Case)

DAY = 86400.0
HOUR = 3600.0
RUN_SECONDS = 2.5 * HOUR  # a pull request's or push's run, build included
BUILD_SHARE = 0.3  # of a run spent building before any shard's tests start
AUTHORS = ("malfet", "eqy", "jeffdaily", "pragupta", "ezyang", "jansel", "kwen2501", "huydhn", "zou3519", "ngimel")
_SPECIAL = {*ROCM_BUG_NODES, *PARTIAL_NODES, REVERT_NODE, SLOW_NODE}


@dataclass(frozen=True)
class Breakage:
    """``nodes`` fail every attempt on ``platforms`` in the code of main commits ``start`` up to
    (not including) ``end``; ``error`` is their exception, ``why`` the story's reason."""

    nodes: tuple[str, ...]
    platforms: tuple[str, ...]
    start: int
    end: int
    error: str
    why: str


@dataclass(frozen=True)
class Window:
    """A stretch of wall-clock time, seconds from the history's start, ``end`` excluded."""

    start: float
    end: float

    def __contains__(self, when: float) -> bool:
        return self.start <= when < self.end


@dataclass(frozen=True)
class Push:
    """One head of a pull request: its sha, when it was pushed, and the pull request's own
    breakages in its code (``why`` names the pull request whose commit brought each)."""

    sha: str
    time: float
    breaks: tuple[Breakage, ...] = ()


@dataclass(frozen=True)
class PullRequest:
    """A pull request: its merge base with main (PyTorch's CI tests the head, not a merge with
    main's tip), the tiers its labels ask for, its pushes, and for a ghstack the ones below it."""

    number: int
    author: str
    base: int  # the main commit index it branched from (its merge base)
    tiers: tuple[str, ...]
    pushes: tuple[Push, ...]
    stack: tuple[int, ...] = ()  # ghstack: the pull requests below it, bottom first


@dataclass
class Story:
    """Main's commits (sha and push time, index order), what breaks on them, the outage, the
    disable bot's window, the file move's commit, and the pull requests."""

    seed: int
    shas: list[str]
    times: list[float]
    breakages: list[Breakage]
    outage: Window  # the ROCm pool: every job fails at setup or with device errors
    disabled: Window  # the disable bot skips `DISABLED_NODE` on ROCm
    renamed: int  # first main commit with the CUDA graph tests in their new file
    prs: list[PullRequest] = field(default_factory=list)

    @property
    def days(self) -> int:
        return int(self.times[-1] // DAY) + 1

    def day_ends(self) -> list[int]:
        """The last main commit of each day: what that night's nightly run tests."""
        last: dict[int, int] = {}
        for i, t in enumerate(self.times):
            last[int(t // DAY)] = i
        return [last[d] for d in sorted(last)]

    def tip_at(self, when: float) -> int:
        """The newest main commit pushed by ``when`` (0 before the first)."""
        return max([i for i, t in enumerate(self.times) if t <= when] or [0])

    def broken(self, commit: int, node: str, platform: str) -> Breakage | None:
        """The main breakage ``node`` has on ``platform`` in main commit ``commit``'s code."""
        for b in self.breakages:
            if b.start <= commit < b.end and node in b.nodes and platform in b.platforms:
                return b
        return None


def sha(seed: int, what: str) -> str:
    return hashlib.sha1(f"gen5-{seed}-{what}".encode()).hexdigest()


def _at(rng: random.Random, commits: int, share: float) -> int:
    return max(1, min(commits - 2, int(commits * (share + rng.uniform(-0.04, 0.04)))))


def _main_breakages(rng: random.Random, commits: int, per_day: int) -> list[Breakage]:
    span = max(2, commits // 10)
    rocm = _at(rng, commits, 0.15)
    partial = _at(rng, commits, 0.35)
    first_fix = min(commits, partial + max(2, commits // 20))
    second_fix = min(commits, first_fix + per_day)
    landed = _at(rng, commits, 0.55)
    reverted = min(commits, landed + max(2, commits // 25))
    relanded = min(commits, reverted + span)
    fixed = min(commits, relanded + max(2, commits // 16))
    slow = _at(rng, commits, 0.25)
    scaled = ("RuntimeError: _scaled_mm: expected scale_a to be a float32 tensor of shape (M, 1), got "
              "torch.Size([1]) (rowwise scaling regression)")
    inductor = ("AssertionError: expected size 128==256, stride 1==1 at dim=0 (reduction split picked "
                "R0_BLOCK=2048 over config limit)")
    return [
        Breakage(ROCM_BUG_NODES, (ROCM,), rocm, min(commits, rocm + span), ROCM_NUMERIC,
                 "hipBLASLt heuristic change: wrong svd_lowrank results on MI300 only"),
        Breakage(PARTIAL_NODES[:2], (CUDA,), partial, first_fix, scaled, "scaled_mm change; first forward fix"),
        Breakage(PARTIAL_NODES[2:], (CUDA,), partial, second_fix, scaled,
                 "scaled_mm change; the float32/fp8 parametrizations fixed a day later"),
        Breakage((REVERT_NODE,), (CUDA, ROCM), landed, reverted, inductor, "inductor change, reverted"),
        Breakage((REVERT_NODE,), (CUDA, ROCM), relanded, fixed, inductor, "inductor change re-landed, broke again"),
        Breakage((SLOW_NODE,), (CUDA,), slow, min(commits, slow + 2 * per_day),
                 "torch.autograd.gradcheck.GradcheckError: Jacobian mismatch for output 0 with respect to input 0",
                 "eigh backward change, seen only by the nightly slow tier"),
    ]


_PR_ERRORS = ("AssertionError: Scalars are not equal!\n\nExpected 4 but got 3.\nAbsolute difference: 1",
              "RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
              "asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
              "TypeError: layer_norm() got an unexpected keyword argument 'bias_first'",
              "torch._dynamo.exc.Unsupported: call_method UserDefinedObjectVariable(Shape) __getitem__")


def _pr_breaks(rng: random.Random, number: int) -> tuple[Breakage, ...]:
    pool = [c for c in CASES if c.node not in _SPECIAL and (DEFAULT.name in c.tiers or SRT.name in c.tiers)]
    picked: list[Case] = rng.sample(pool, rng.randint(1, 2))
    out = []
    for case in picked:
        both = ROCM_DEFAULT.name in case.tiers
        platforms = rng.choice(((CUDA, ROCM), (CUDA, ROCM), (CUDA,), (ROCM,))) if both else (CUDA,)
        out.append(Breakage((case.node,), platforms, 0, 0, rng.choice(_PR_ERRORS), f"broken by #{number}'s own change"))
    return tuple(out)


def _tiers(rng: random.Random) -> tuple[str, ...]:
    tiers = [DEFAULT.name, SRT.name]
    if rng.random() < 0.5:
        tiers.append(ROCM_DEFAULT.name)  # ciflow/rocm
    return tuple(tiers)


def _pushes(rng: random.Random, seed: int, number: int, opened: float, breaks: tuple[Breakage, ...],
            count: int) -> tuple[Push, ...]:
    pushes, when = [], opened
    for k in range(count):
        mine = breaks if k == 0 or (breaks and k < count - 1 and rng.random() < 0.3) else ()
        pushes.append(Push(sha(seed, f"pr{number}-{k}"), when, mine))
        # a push inside the run before it cancels that run (concurrency: cancel-in-progress)
        when += rng.choice((rng.uniform(0.1, 0.9), rng.uniform(1.0, 8.0))) * RUN_SECONDS
    return tuple(pushes)


def _pull_requests(rng: random.Random, story: Story, count: int) -> list[PullRequest]:
    out: list[PullRequest] = []
    end = story.times[-1]
    stacks = {count // 3, (2 * count) // 3} if count >= 9 else {count // 2}
    number = 1000
    while len(out) < count:
        number += 1
        opened = rng.uniform(0.04, 0.97) * end
        tip = story.tip_at(opened)
        stale = rng.random() < 0.15
        base = max(0, tip - (rng.randint(30, 60) if stale else rng.randint(0, 4)))
        author = rng.choice(AUTHORS)
        if len(out) in stacks and count - len(out) >= 3:  # a ghstack of three, each on the one below
            bottom = _pr_breaks(rng, number)  # every head of the stack holds the bottom's commit
            tiers = _tiers(rng)
            for level in range(3):
                n = number + level
                held = bottom if not level else tuple(replace(b, why=f"broken by #{number}, below it in the ghstack")
                                                      for b in bottom)
                head = Push(sha(story.seed, f"pr{n}-0"), opened + 600.0 * level, held)
                out.append(PullRequest(n, author, base, tiers, (head,), tuple(range(number, n))))
            number += 2
            continue
        breaks = _pr_breaks(rng, number) if rng.random() < 0.3 else ()
        pushes = _pushes(rng, story.seed, number, opened, breaks, rng.choice((1, 1, 2, 3)))
        out.append(PullRequest(number, author, base, _tiers(rng), pushes))
    return out


def plan(seed: int, commits: int, prs: int) -> Story:
    """The story of seed ``seed``: ``commits`` main commits over whole days, ``prs`` pull requests."""
    rng = random.Random(f"gen5-story-{seed}")
    days = max(2, round(commits / 25))
    per_day = max(1, commits // days)
    step = days * DAY / commits
    times = [(i + rng.uniform(0.05, 0.95)) * step for i in range(commits)]
    shas = [sha(seed, f"main-{i}") for i in range(commits)]
    outage_start = times[_at(rng, commits, 0.7)]
    disabled = Window(times[_at(rng, commits, 0.3)], times[_at(rng, commits, 0.82)])
    story = Story(seed, shas, times, _main_breakages(rng, commits, per_day),
                  Window(outage_start, outage_start + rng.uniform(4, 7) * HOUR), disabled,
                  _at(rng, commits, 0.45))
    story.prs = _pull_requests(rng, story, prs)
    return story
