"""bitsandbytes' GPU test jobs as its GitHub Actions workflow files define them at one commit (gen14's extractor).

`gpu_jobs(files)` reads the ``tests*.yml`` workflows of one tree and returns the CUDA test jobs of
its pull-request workflow and of its nightly one: the matrix expanded as GitHub documents it
(product of the axes, ``exclude`` first, then each ``include`` object merged into every combination
whose original values it does not overwrite, or added as a new one), each combination's runner label
(the ``runner`` key, or the GPU-to-label case statement of ``test-runner.yml``), and the pull-request
trigger's path filters and the nightly cron.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import asdict, dataclass

import yaml

GPU_KEYS = ("gpu_type", "gpu")
_CASE = re.compile(r'^\s*(\w+)\)\s+TEST_RUNNER="([^"]+)"', re.M)


@dataclass(frozen=True)
class GpuJob:
    """One expanded CUDA test job: its tier name, GPU, CUDA and torch versions, OS and runner label."""

    tier: str
    gpu: str
    cuda: str
    torch: str
    os: str
    runner: str


@dataclass(frozen=True)
class CiShape:
    """The GPU jobs a pull request and a nightly run start, the pull request's path filters
    (empty: the workflow has no pull_request trigger) and the nightly cron."""

    pr_jobs: tuple[GpuJob, ...]
    pr_paths: tuple[str, ...]
    nightly_jobs: tuple[GpuJob, ...]
    nightly_cron: str

    def as_json(self) -> dict:
        return {"pr_jobs": [asdict(j) for j in self.pr_jobs], "pr_paths": list(self.pr_paths),
                "nightly_jobs": [asdict(j) for j in self.nightly_jobs], "nightly_cron": self.nightly_cron}


def expand_matrix(matrix: dict) -> list[dict]:
    """A ``strategy.matrix`` expanded as GitHub Actions documents it."""
    axes = {k: v for k, v in matrix.items() if k not in ("include", "exclude") and isinstance(v, list)}
    combos = [dict(zip(axes, values)) for values in itertools.product(*axes.values())] if axes else []
    for rule in matrix.get("exclude") or []:
        combos = [c for c in combos if not all(c.get(k) == v for k, v in rule.items())]
    originals = [dict(c) for c in combos]  # an include merges only into these, never into an added one
    added: list[dict] = []
    for rule in matrix.get("include") or []:
        merged = False
        for combo, original in zip(combos, originals):
            if all(original.get(k, v) == v for k, v in rule.items() if k in original):
                combo.update(rule)
                merged = True
        if not merged:
            added.append(dict(rule))
    return combos + added


def _runner_map(text: str) -> dict[str, str]:
    return dict(_CASE.findall(text))


def _jobs(workflow: dict, runners: dict[str, str]) -> list[GpuJob]:
    out: list[GpuJob] = []
    for job in (workflow.get("jobs") or {}).values():
        matrix = ((job or {}).get("strategy") or {}).get("matrix")
        if not isinstance(matrix, dict) or not any(k in matrix for k in GPU_KEYS):
            continue
        if "cuda" not in str(job.get("with", {}).get("backend", "cuda")) and "cuda_version" not in matrix:
            continue
        for combo in expand_matrix(matrix):
            gpu = str(next((combo[k] for k in GPU_KEYS if k in combo), ""))
            cuda, torch = str(combo.get("cuda_version", "")), str(combo.get("torch_version", ""))
            os_name = str(combo.get("platform") or combo.get("os") or "")
            windows = os_name.startswith("windows")
            runner = str(combo.get("runner") or ("CUDA-Windows-x64" if windows else runners.get(gpu, "")))
            if not (gpu and cuda and runner):
                continue
            tier = f"cuda{cuda}-{gpu}-{'windows' if windows else 'linux'}-torch{torch}"
            out.append(GpuJob(tier, gpu, cuda, torch, os_name, runner))
    return out


def gpu_jobs(files: dict[str, str]) -> CiShape:
    """The CI shape of one tree; ``files`` maps workflow paths (``.github/workflows/x.yml``) to text."""
    runners = _runner_map(files.get(".github/workflows/test-runner.yml", ""))
    pr_jobs: list[GpuJob] = []
    nightly: list[GpuJob] = []
    paths: tuple[str, ...] = ()
    cron = ""
    for path in sorted(files):
        name = path.rsplit("/", 1)[-1]
        if not name.startswith("tests") or not name.endswith(".yml"):
            continue
        workflow = yaml.safe_load(files[path]) or {}
        events = workflow.get("on", workflow.get(True)) or {}
        if not isinstance(events, dict):
            events = {e: None for e in (events if isinstance(events, list) else [events])}
        jobs = _jobs(workflow, runners)
        if "pull_request" in events:
            pr_jobs += jobs
            paths = tuple((events.get("pull_request") or {}).get("paths") or ("**",))
        if "schedule" in events:
            nightly += jobs
            cron = str(((events.get("schedule") or [{}])[0] or {}).get("cron", ""))
    return CiShape(_unique(pr_jobs), paths, _unique(nightly), cron)


def _unique(jobs: list[GpuJob]) -> tuple[GpuJob, ...]:
    """One job per tier (two workflows of one tree may both run a tier: a replaced one not yet removed)."""
    return tuple({job.tier: job for job in reversed(jobs)}[tier] for tier in dict.fromkeys(j.tier for j in jobs))
