"""The simulated causes of the tenth history (`bench._history_gen10`): flaky tests, runner and
service problems, and a torch nightly's own break, each drawn once per seed. The rates are the
module constants; `bench._history_gen10`'s docstring says which parts are real.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from bench._history_gen10_world import World

HOUR = 3600
DAY = 24 * HOUR
FLAKY_SHARE = 0.025            # share of test nodes with a numerical-tolerance / SQNR flake
FLAKY_RATE = (0.005, 0.03)     # each such node's chance to fail one job (uniform in this range)
COMPILE_RATE = 0.004           # a node with "compile" in its id: inductor cache / recompile-limit error
OOM_RATE = 0.001               # a memory-heavy node on a 24 GB GPU (A10G, L4): CUDA OOM
NCCL_RATE = 0.02               # a 4xH100 node: NCCL watchdog timeout
HUB_RATE = 0.004               # a node that downloads from the hub: 429 / 504, any time
HUB_INCIDENT_RATE = 0.5        # the same during one of the hub's incidents
HUB_INCIDENTS, HUB_INCIDENT_SECONDS = 2, 3 * HOUR
LOST_RUNNER_RATE = 0.003       # a job whose runner loses its connection: no report, the job fails
BAD_HOST_RATE = 0.06           # each CUDA test on the bad g5 host while it is bad: ECC error
BAD_HOST_SECONDS = 5 * DAY
OUTAGE_SECONDS = 4 * HOUR      # the H100 pool's driver mismatch after a node-image roll
NIGHTLY_BREAK_SECONDS = 36 * HOUR
NIGHTLY_BREAK_TESTS = 4
MEMORY_HEAVY = ("test/prototype/moe_training/", "test/integration/", "test/prototype/mx_formats/")
HUB_FILES = ("test/integration/test_load_and_run_checkpoint.py", "test/integration/test_vllm.py",
             "test/prototype/gptq/", "test/test_model_architecture.py")
SMALL_GPU_POOLS = ("linux.g5.12xlarge.nvidia.gpu", "linux.g6.4xlarge.experimental.nvidia.gpu")
OUTAGE_POOL = "mt-l-x86iamx-22-225-h100"


@dataclass(frozen=True)
class Span:
    """A stretch of time [start, end) in Unix seconds."""

    start: int
    end: int

    def holds(self, t: float) -> bool:
        return self.start <= t < self.end


@dataclass(frozen=True)
class Causes:
    """One seed's simulated causes: each flaky node's rate and message kind, the hosts of each
    pool (the bad one and its span), the H100 outage, the hub incidents and the torch nightly's
    own break (its span and tests)."""

    flaky: dict[str, tuple[float, str]]
    hosts: dict[str, tuple[str, ...]]
    bad_host: str
    bad_span: Span
    outage: Span
    hub: tuple[Span, ...]
    nightly_span: Span
    nightly_tests: tuple[str, ...]


def _hosts(rng: random.Random, pool: str, count: int) -> tuple[str, ...]:
    if pool.startswith("mt-l-"):
        return tuple(f"{pool}-{rng.getrandbits(24):06x}" for _ in range(count))
    return tuple(f"i-0{rng.getrandbits(64):016x}" for _ in range(count))


def draw(world: World, seed: int, start: int, end: int) -> Causes:
    """The causes of one seed over [start, end) (the history's first and last commit times)."""
    rng = random.Random(f"gen10-causes-{seed}")
    nodes = sorted({n for f in world.files.values() for n in f.nodes})
    flaky = {n: (rng.uniform(*FLAKY_RATE), rng.choice(("tolerance", "sqnr")))
             for n in nodes if rng.random() < FLAKY_SHARE}
    pools = sorted({job.pool for job in world.jobs})
    sizes = {"linux.g5.12xlarge.nvidia.gpu": 24, "linux.g6.4xlarge.experimental.nvidia.gpu": 12}
    hosts = {pool: _hosts(rng, pool, sizes.get(pool, 6)) for pool in pools}
    span = end - start

    def somewhere(length: int) -> Span:
        at = start + int(rng.uniform(0.1, 0.9) * max(1, span - length))
        return Span(at, at + length)

    compile_nodes = [n for n in world.files.get("test/float8/test_compile.py").nodes] if \
        "test/float8/test_compile.py" in world.files else []
    rng.shuffle(compile_nodes)
    return Causes(flaky, hosts, rng.choice(hosts["linux.g5.12xlarge.nvidia.gpu"]), somewhere(BAD_HOST_SECONDS),
                  somewhere(OUTAGE_SECONDS), tuple(somewhere(HUB_INCIDENT_SECONDS) for _ in range(HUB_INCIDENTS)),
                  somewhere(NIGHTLY_BREAK_SECONDS), tuple(sorted(compile_nodes[:NIGHTLY_BREAK_TESTS])))


def flake(causes: Causes, node: str, pool: str, tier: str, rng: random.Random) -> str:
    """The flaky cause ``node`` fails with in one job, or ``""`` (at most one is drawn)."""
    trait = causes.flaky.get(node)
    if trait is not None and rng.random() < trait[0]:
        return trait[1]
    if "compile" in node and rng.random() < COMPILE_RATE:
        return rng.choice(("compile", "recompile"))
    if pool in SMALL_GPU_POOLS and node.startswith(MEMORY_HEAVY) and rng.random() < OOM_RATE:
        return "oom"
    if tier.startswith("4xH100") and rng.random() < NCCL_RATE:
        return "nccl"
    return ""


def hub_error(causes: Causes, node: str, t: float, rng: random.Random) -> str:
    """``hub`` (429) or ``hub5xx`` when ``node`` downloads from the hub and the hub fails it at ``t``."""
    if not node.startswith(HUB_FILES):
        return ""
    rate = HUB_INCIDENT_RATE if any(s.holds(t) for s in causes.hub) else HUB_RATE
    return rng.choice(("hub", "hub5xx")) if rng.random() < rate else ""
