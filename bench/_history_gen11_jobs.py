"""One attempt of one FlashInfer CI run, job by job: which cases each job's JUnit holds and why the
failing ones failed (the rates are `bench._history_gen11`'s), and when each job ended: pr-test.yml's
``fail-fast: true`` matrix cancels every job still running when the first one fails, and a newer
run of the same concurrency group (``cancel-in-progress``) cancels the whole run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from bench import _history_gen11_text as text
from bench._history_gen11_world import Jobs, Node, Window
from bench._verdicts_records import Label, Report

MINUTES = {"h100": (150, 30), "a10g": (50, 15), "t4": (40, 10)}  # job length: mean, spread
HOSTS = {"a10g": [f"ci-gpu-sm86-od-{i:02d}" for i in range(1, 13)],
         "t4": [f"ci-gpu-sm75-od-{i:02d}" for i in range(1, 5)],
         "h100": [f"ci-h100-node-{n}-runner-{r}" for n in (1, 2) for r in range(4)]}


@dataclass(frozen=True)
class Rates:
    """Per attempt rates of the simulated causes (documented in `bench._history_gen11`)."""

    tolerance: float = 0.04      # a tolerance-prone node's assert_close/SQNR miss
    illegal: float = 0.006       # per job: a racy kernel's illegal memory access, poisoning its file
    jit_cache: float = 0.012     # per job (twice on the shared H100 node): a corrupt/concurrent JIT cache
    oom: float = 0.015           # per H100 job: another runner's process holds the GPU's memory
    download: float = 0.03       # per downloading node: artifactory or HF hub 5xx/429
    comm: float = 0.04           # per multi-GPU comm node: NCCL or MPI error
    lost_runner: float = 0.007   # per job: "lost communication with the server", no JUnit at all
    bad_host: float = 0.6        # per job on the bad A10G host while it is bad: 1-3 ECC errors


@dataclass(frozen=True)
class World:
    """What every attempt reads: the suite's nodes by file, the tiers' shards, the windows, the
    tolerance-prone nodes, the bad host's and the outage's spans, each xfail's fixing commit."""

    files: dict[str, tuple[Node, ...]]
    jobs: Jobs
    windows: list[Window]
    prone: frozenset[str]
    downloads: frozenset[str]
    comms: frozenset[str]
    bad_host: tuple[str, datetime, datetime]
    outage: tuple[datetime, datetime]
    xpass_at: dict[str, int]
    rates: Rates = Rates()


@dataclass(frozen=True)
class Code:
    """The code a run tests: main at ``base`` plus, for a pull request, its own merge ``own``."""

    base: int
    own: int | None = None

    def holds(self, index: int) -> bool:
        return index <= self.base or index == self.own


@dataclass
class JobResult:
    """One job of an attempt: its reports (none when cancelled before pytest wrote, or lost), its
    status (``success``, ``failure``, ``cancelled``) and when it ended."""

    tier: str
    shard: int
    status: str
    end: datetime
    reports: list[Report] = field(default_factory=list)


def _breakage(world: World, code: Code, node: str, tier: str) -> tuple[str, Window] | None:
    for w in world.windows:
        if tier in w.tiers and node in w.nodes and code.holds(w.breaker) and not code.holds(w.fixer):
            return ("new" if code.own == w.breaker else "broken_on_main"), w
    return None


def _cases(world: World, code: Code, tier: str, files: tuple[str, ...], host: str, start: datetime,
           rng: random.Random, subjects: list[str]) -> list[tuple[Node, float, text.Failure | None, str, str, str]]:
    """Each case of one job: (node, seconds, failure, xfail mark, label, why)."""
    r = world.rates
    outage = world.outage[0] <= start < world.outage[1] and tier != "h100"
    ecc = set()
    if host == world.bad_host[0] and world.bad_host[1] <= start < world.bad_host[2] and rng.random() < r.bad_host:
        pool = [n.node for f in files for n in world.files[f]]
        ecc = set(rng.sample(pool, min(len(pool), rng.randint(1, 3))))
    jit_file = rng.choice(files) if files and rng.random() < r.jit_cache * (2 if tier == "h100" else 1) else None
    oom_nodes = set()
    if tier == "h100" and rng.random() < r.oom:
        pool = [n.node for f in files for n in world.files[f]]
        oom_nodes = set(rng.sample(pool, min(len(pool), rng.randint(1, 4))))
    illegal = rng.choice(files) if files and rng.random() < r.illegal else None
    out = []
    for path in files:
        poisoned = False
        start_at = rng.randrange(len(world.files[path])) if path == illegal else -1
        for i, node in enumerate(world.files[path]):
            seconds = rng.uniform(0.05, 30.0)
            if node.xfail:
                fixed = code.holds(world.xpass_at.get(node.node, 10 ** 9))
                out.append((node, seconds, None, "" if fixed else "xfail", "", ""))
                continue
            broke = _breakage(world, code, node.node, tier)
            failure, label, why = None, "", ""
            if broke:
                failure = text.broken(node, broke[1].style, subjects[broke[1].breaker])
                label, why = broke[0], f"{broke[1].kind} window {broke[1].breaker}..{broke[1].fixer}"
            elif outage:
                failure, label, why = text.driver_mismatch(node), "infra", "A10G/T4 pool outage (driver 803)"
            elif node.node in ecc:
                failure, label, why = text.bad_host(node), "infra", f"bad host {host}"
            elif path == jit_file:
                failure, label, why = text.jit_build(node, rng), "infra", "JIT cache corrupt or nvcc/ninja"
            elif node.node in oom_nodes:
                failure, label, why = text.oom(node, rng), "infra", "OOM from a neighbour on the shared H100"
            elif node.node in world.downloads and rng.random() < r.download:
                failure, label, why = text.download(node, rng), "infra", "download 5xx/429"
            elif node.node in world.comms and rng.random() < r.comm:
                failure, label, why = text.comm(node, rng), "infra", "NCCL/MPI error"
            elif poisoned or i == start_at:
                failure, label = text.illegal_access(node, not poisoned), "flaky"
                why = "illegal memory access" if not poisoned else "poisoned by an illegal memory access"
                poisoned = True
            elif node.node in world.prone and rng.random() < r.tolerance:
                failure, label, why = text.tolerance(node, rng), "flaky", "numerical tolerance"
            out.append((node, seconds, failure, "", label, why))
    return out


def attempt(world: World, code: Code, tiers: list[tuple[str, int]], start: datetime, cancel_at: datetime | None,
            rng: random.Random, subjects: list[str]) -> list[JobResult]:
    """The jobs ``tiers`` ((tier, shard) pairs) of one attempt started at ``start``."""
    planned = []
    for tier, shard in tiers:
        # the H100 job is one job; its unit runner writes one JUnit per batch (`H100_SHARDS`)
        files = sum(world.jobs.shards[tier], ()) if tier == "h100" else world.jobs.shards[tier][shard]
        host = rng.choice(HOSTS[tier])
        begin = start + timedelta(minutes=rng.uniform(1, 20))
        mean, spread = MINUTES[tier]
        length = timedelta(minutes=max(10.0, rng.gauss(mean, spread)))
        lost = rng.random() < world.rates.lost_runner
        cases = _cases(world, code, tier, files, host, begin, rng, subjects)
        planned.append((tier, shard, host, begin, length, lost, cases))
    fails = [b + (l * rng.uniform(0.2, 0.9) if lost else l) for _t, _s, _h, b, l, lost, c in planned
             if lost or any(f for _n, _x, f, *_ in c)]
    stop = min([t for t in fails] + ([cancel_at] if cancel_at else []), default=None)
    out = []
    for tier, shard, host, begin, length, lost, cases in planned:
        end = begin + length
        failed = lost or any(f for _n, _x, f, *_ in cases)
        if lost:
            lost_end = begin + length * 0.5
            out.append(JobResult(tier, shard, "failure", min(lost_end, stop) if stop else lost_end))
            continue
        if stop is not None and end > stop and not (failed and end == stop):
            cut = stop if stop > begin else begin
            result = JobResult(tier, shard, "cancelled", cut)
            if tier == "h100":  # its upload step runs on always(): the unit runner's finished batches
                batches = len(world.jobs.shards["h100"])
                done = int(batches * max(0.0, (cut - begin) / length))
                result.reports += _reports(world, tier, shard, host, cases, cut)[:done]
            out.append(result)
            continue
        result = JobResult(tier, shard, "failure" if failed else "success", end)
        result.reports += _reports(world, tier, shard, host, cases, end)
        out.append(result)
    return out


def _reports(world: World, tier: str, shard: int, host: str, cases: list, when: datetime) -> list[Report]:
    """A job's JUnit: the H100 job's one per batch, any other job's one."""
    if tier != "h100":
        return [_report(tier, shard, len(world.jobs.shards[tier]), host, cases, when)]
    batches = world.jobs.shards["h100"]
    return [_report(tier, b, len(batches), host, [c for c in cases if c[0].file in files], when)
            for b, files in enumerate(batches) if files]


def _report(tier: str, shard: int, shards: int, host: str, cases: list, when: datetime) -> Report:
    xml = text.junit([(n, s, f, mark) for n, s, f, mark, _l, _w in cases], host, when)
    labels = [Label(n.node, tier, label, True, why) for n, _s, f, _m, label, why in cases if f is not None]
    return Report(tier, shard, shards, host, xml, labels)
