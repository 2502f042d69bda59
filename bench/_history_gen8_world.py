"""gen8's simulated world on top of the real skeleton, drawn once per seed: which steps and tests the
history keeps, each test's flake propensity and kind, the agents of each pool, the bad agent and
the pool outage. The rates are `bench._history_gen8`'s `Scale` and are listed in its docstring.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from bench._history_gen8_story import Skeleton, Step, Window, windows

# Agents per pool (device x GPUs); a pool not named here has `OTHER_AGENTS`.
AGENTS = {"l4x1": 16, "l4x2": 6, "l4x4": 4, "h100x1": 4, "h100x2": 3}
OTHER_AGENTS = 2
FLAKE_P = (0.03, 0.08, 0.15)


@dataclass(frozen=True)
class Flake:
    """A flaky test's chance that one attempt fails, and how it fails (`FLAKE_KINDS`)."""

    p: float
    kind: str


@dataclass(frozen=True)
class Stretch:
    """A time span (unix seconds, ``start`` included, ``end`` excluded) when ``agents`` are sick."""

    kind: str
    agents: frozenset[str]
    start: int
    end: int
    p: float

    def hits(self, agent: str, when: int) -> bool:
        return agent in self.agents and self.start <= when < self.end


@dataclass(frozen=True)
class World:
    """What one seed drew: the kept ``steps`` (each trimmed to its kept tests), the ``windows``
    inside the kept commits, ``flakes`` by (step key, node), ``agents`` by pool, ``stretches``."""

    steps: tuple[Step, ...]
    windows: tuple[Window, ...]
    flakes: dict[tuple[str, str], Flake]
    agents: dict[str, tuple[str, ...]]
    stretches: tuple[Stretch, ...]


def flake_kind(step: Step, rng: random.Random) -> str:
    """The way a flaky test of ``step`` fails: NCCL in multi-GPU steps, the server in entrypoint
    steps, the hub in model steps, memory in kernel steps, else any of these."""
    if step.gpus > 1 and rng.random() < 0.6:
        return "nccl"
    if step.area == "entrypoints":
        return rng.choice(("startup", "startup", "port"))
    if step.area.startswith("models") or step.area in ("lm_eval", "quantization"):
        return rng.choice(("hub-5xx", "hub-429"))
    if step.area == "kernels":
        return "oom"
    return rng.choice(("hub-5xx", "startup", "oom", "port"))


def _keep(skeleton: Skeleton, count: int, per_step: int, rng: random.Random) -> tuple[tuple[Step, ...], list[Window]]:
    every = windows(skeleton)
    needed = {key for w in every for key, _ in w.tests}
    needed |= {s.key for s in skeleton.steps if any(t.reruns for t in s.tests)}
    others = [s for s in skeleton.steps if s.key not in needed]
    extra = set(s.key for s in rng.sample(others, max(0, min(len(others), count - len(needed)))))
    kept = []
    for step in skeleton.steps:
        if step.key in needed or step.key in extra:
            pinned = {node for w in every for key, node in w.tests if key == step.key}
            pinned |= {t.node for t in step.tests if t.reruns}
            tests = [t for t in step.tests if t.node in pinned]
            tests += [t for t in step.tests if t.node not in pinned][:max(0, per_step - len(tests))]
            kept.append(replace(step, tests=tuple(tests)))
    return tuple(kept), every


def draw(skeleton: Skeleton, commits: int, steps: int, per_step: int, flaky_share: float,
         seed: int) -> World:
    """The world of seed ``seed`` over the first ``commits`` commits."""
    rng = random.Random(seed * 7919 + 8)
    kept, every = _keep(skeleton, steps, per_step, rng)
    flakes = {}
    for step in kept:
        for test in step.tests:
            if test.reruns:  # vLLM marks it flaky: it is
                flakes[(step.key, test.node)] = Flake(FLAKE_P[1], flake_kind(step, rng))
            elif rng.random() < flaky_share:
                flakes[(step.key, test.node)] = Flake(rng.choice(FLAKE_P), flake_kind(step, rng))
    agents = {}
    for step in kept:
        count = AGENTS.get(step.pool, OTHER_AGENTS)
        agents.setdefault(step.pool, tuple(f"{step.pool}-{k + 1:02d}" for k in range(count)))
    times = [c.time for c in skeleton.commits[:commits]]
    stretches = []
    if len(times) > 8:
        first = rng.randrange(len(times) // 4, len(times) // 2)
        last = min(len(times) - 1, first + max(4, len(times) // 8))
        bad = rng.choice(agents.get("l4x1", ("l4x1-01",)))
        stretches.append(Stretch("bad-agent", frozenset({bad}), times[first], times[last], 0.5))
        pool = "l4x4" if "l4x4" in agents else max(agents, key=lambda p: len(agents[p]))
        start = times[rng.randrange(len(times) // 2, len(times) - 2)]
        stretches.append(Stretch("pool-outage", frozenset(agents[pool]), start, start + 3 * 3600, 1.0))
    inside = tuple(w for w in every if w.start < commits)
    return World(kept, inside, flakes, agents, tuple(stretches))
