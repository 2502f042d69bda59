"""What fails in gen14's history and why, planned once per seed: flaky tests, infra faults, the real
breakage windows and a torch nightly regression (all simulated on the real skeleton, from ``rng``).

* Flakes: test functions whose names say what they do (optimizer steps, 4-bit GEMV/matmul, blockwise
  quantize, ``torch.compile``) fail a run's job at their own rate (0.5-6 %), one or two of their
  cases, with a tolerance, error-bound, inductor-cache or stray illegal-address failure; a failed
  job's re-run fails them again with `AGAIN`. A real tolerance fix (a ``flaky`` window) makes
  its tests flaky at `WINDOW_FLAKE_RATE` until it lands.
* Infra: a GPU host with ECC errors for some days (every test after the fault fails), the one
  self-hosted Windows machine with a stray process holding GPU memory after a cancelled job
  (out of memory) and, once, a driver too old (every test errors at setup), Hugging Face Hub
  index outages (``pip install torch`` fails, the job uploads no JUnit: bitsandbytes' only
  Hub-downloading test, test_generation's, is ``slow`` and deselected), jobs that upload nothing
  (spot reclaim).
* Breakages: the real windows (`bench._history_gen14_windows`) fail their tests on every job in
  scope for main commits in ``[start, end)``; a torch nightly regression breaks a few custom-op
  tests on the nightly workflow's ``torch nightly`` jobs for some days, until a later nightly wheel.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from bench._history_gen14_world import Case, Tree

AGAIN = 0.3
WINDOW_FLAKE_RATE = 0.08
_FLAKY_NAMES = ((re.compile(r"optimizer|lion|ademamix|lamb|lars"), "mismatch", (0.01, 0.05)),
                (re.compile(r"gemv|matmul|linear|4bit_compressed|int8"), "tolerance", (0.005, 0.04)),
                (re.compile(r"blockwise|quantiz|dequant"), "tolerance", (0.005, 0.03)),
                (re.compile(r"compile"), "compile", (0.01, 0.06)),
                (re.compile(r"paged|deterministic|stream"), "illegal_address", (0.005, 0.02)))
POOLS = {"T4": 6, "A10": 4, "L40S": 4}


@dataclass(frozen=True)
class Flake:
    """A flaky test function (``file::func``): fails a job with probability ``rate``, as ``kind``,
    on ``gpus`` (empty: every GPU), between epochs ``since`` and ``until``."""

    key: str
    kind: str
    rate: float
    gpus: tuple[str, ...]
    since: int
    until: int
    why: str


@dataclass(frozen=True)
class Breakage:
    """Tests (``file::func``) failing on main commits ``[start, end)`` (epochs when ``by_time``: a
    dependency's regression) on jobs whose GPU is in ``gpus``, OS in ``scope`` and tier contains
    ``tier_part``; ``own_pr_fails``: the breaking pull request's own runs showed it."""

    keys: tuple[str, ...]
    start: int
    end: int
    by_time: bool
    gpus: tuple[str, ...]
    scope: str
    kind: str
    own_pr_fails: bool
    why: str
    tier_part: str = ""


@dataclass(frozen=True)
class Outage:
    """An infra fault from epoch ``since`` to ``until``: ``what`` is ``ecc`` (on ``host``), ``index``
    (the PyTorch wheel index) or ``driver`` (the Windows machine)."""

    what: str
    since: int
    until: int
    host: str


@dataclass(frozen=True)
class Plan:
    flakes: tuple[Flake, ...]
    breakages: tuple[Breakage, ...]
    outages: tuple[Outage, ...]


def functions(cases: list[Case]) -> dict[str, list[Case]]:
    out: dict[str, list[Case]] = {}
    for case in cases:
        out.setdefault(f"{case.file}::{case.func}", []).append(case)
    return out


def hosts(gpu: str) -> list[str]:
    """The instance names of one GPU pool (the Windows machine is one host)."""
    if gpu == "windows":
        return ["CUDA-Windows-x64"]
    return [f"{gpu.lower()}-use1-{i:02d}" for i in range(POOLS.get(gpu, 3))]


def _flakes(tree: Tree, rng: random.Random, span: tuple[int, int]) -> list[Flake]:
    every = sorted({key for i in range(len(tree.commits)) for key in functions(tree.cases(i))})
    out: list[Flake] = []
    for pattern, kind, (low, high) in _FLAKY_NAMES:
        matching = [k for k in every if pattern.search(k.split("::")[1])]
        for key in rng.sample(matching, min(len(matching), rng.randint(2, 4))):
            if any(f.key == key for f in out):
                continue
            gpus = (rng.choice(("T4", "A10", "L40S")),) if rng.random() < 0.3 else ()
            rate = round(rng.uniform(low, high), 4)
            out.append(Flake(key, kind, rate, gpus, span[0], span[1], f"flaky {kind} at {rate:.1%}"))
    for window in tree.windows:
        if window["flaky"]:
            since, until = tree.commits[window["start"]]["time"], tree.commits[window["end"]]["time"]
            for key in window["tests"]:
                out.append(Flake(key, "tolerance", WINDOW_FLAKE_RATE, (), since, until,
                                 f"tolerance flaky until {tree.commits[window['end']]['sha'][:8]}"))
    return out


def _breakages(tree: Tree, rng: random.Random) -> list[Breakage]:
    out: list[Breakage] = []
    for window in tree.windows:
        if window["flaky"]:
            continue
        start, end = window["start"] - tree.first, window["end"] - tree.first
        known = functions(tree.cases(start))
        keys = [k for k in window["tests"] if k in known]
        if not keys:
            pool = [k for k in known if k.split("::")[0] in window["files"]]
            keys = rng.sample(pool, min(len(pool), rng.randint(1, 3))) if pool else []
        if not keys:
            continue
        gpus = ("T4", "A10", "L40S") if rng.random() < 0.7 else (rng.choice(("T4", "A10", "L40S")),)
        out.append(Breakage(tuple(keys), start, end, False, gpus, window["scope"], rng.choice(("assert", "attr", "shape")),
                            rng.random() < 0.5, f"{window['kind']} window {tree.commits[start]['sha'][:8]}.."
                                                f"{tree.commits[end]['sha'][:8]}"))
    first, last = tree.commits[0]["time"], tree.commits[-1]["time"]
    nightly_era = [c["time"] for i, c in enumerate(tree.commits) if any("torchnightly" in j.tier for j in tree.jobs(i, True))]
    ops = sorted({k for k in functions(tree.cases(len(tree.commits) - 1)) if k.startswith("tests/test_ops.py")})
    if nightly_era and ops and nightly_era[-1] - nightly_era[0] > 10 * 86400:
        since = rng.randint(nightly_era[0], nightly_era[-1] - 8 * 86400)
        keys = tuple(rng.sample(ops, min(len(ops), rng.randint(2, 4))))
        out.append(Breakage(keys, since, since + rng.randint(3, 6) * 86400, True, ("T4", "A10", "L40S"), "all", "shape",
                            False, "dependency: a torch nightly wheel regressed torch.library ops", "torchnightly"))
    return out


def _outages(tree: Tree, rng: random.Random) -> list[Outage]:
    first, last = tree.commits[0]["time"], tree.commits[-1]["time"]
    days = max(1, (last - first) // 86400)
    out: list[Outage] = []
    for _ in range(max(1, days // 90)):
        since = rng.randint(first, last)
        gpu = rng.choice(("T4", "A10", "L40S"))
        out.append(Outage("ecc", since, since + rng.randint(2, 8) * 86400, rng.choice(hosts(gpu))))
    for _ in range(max(1, days // 40)):
        since = rng.randint(first, last)
        out.append(Outage("index", since, since + rng.randint(1, 5) * 3600, ""))
    since = rng.randint(first, last)
    out.append(Outage("driver", since, since + rng.randint(10, 30) * 3600, "CUDA-Windows-x64"))
    return out


def plan(tree: Tree, rng: random.Random) -> Plan:
    """One seed's causes over ``tree`` (see the module docstring)."""
    span = (tree.commits[0]["time"] - 86400, tree.commits[-1]["time"] + 86400)
    return Plan(tuple(_flakes(tree, rng, span)), tuple(_breakages(tree, rng)), tuple(_outages(tree, rng)))
