"""The real skeleton of the tenth history (`bench._history_gen10`), built from the committed data
file alone: torchao's commits, its test nodes, which GPU jobs run which test files (as its
workflows at the window's last commit say), which tests a commit plausibly affects, and the
breakage windows its real reverts and fixes bound.

A test is affected by a commit when the commit touches the test file itself, or a ``torchao/``
source file whose module is (or lies inside) a module the test imports, the bare ``torchao`` import
left out (every test has it). A breakage window runs from its breaker's commit (included) to its
ending commit (excluded); its tests are at most `BROKEN_PER_WINDOW` of the tests the breaker
affects on a CUDA job: nodes of one file (seeded) the ending commit affects tightly (touches, or
imports a module it touches by name) and the breaker affects, else the tests named after a file it
touches (`by_name`), else the breaker's tight ones (not for a torch nightly's break).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

DATA = Path(__file__).with_name("_history_gen10_data.json")
BROKEN_PER_WINDOW = 3
FIX_LOOKBACK = 15  # how far back a fix's breaker is looked for (commits)
_FIX = re.compile(r"^(Fix|fix|\[BUG\])|\b[Ff]ix(es)?\b|\[[a-z0-9 ]+\] [Ff]ix")
# fixes for CI legs this history does not model (ROCm, XPU, CPU/x86, lint, docs, builds)
_OTHER_LEG = re.compile(r"ROCm|rocm|ROCM|xpu|XPU|x86|X86|CPU|ruff|docs|Sphinx|typo|GCC|Android|macOS|setup\.py|"
                        r"spelling|benchmark|column name|internal")
# torchao's own fix for a break caused by a torch nightly, not by a torchao commit
_NIGHTLY_FIX = re.compile(r"recent PyTorch nightly")


@dataclass(frozen=True)
class Commit:
    """One real first-parent commit of main."""

    index: int
    sha: str
    time: int
    author: str
    subject: str
    pr: int | None
    files: tuple[str, ...]
    reverts: str


@dataclass(frozen=True)
class TestFile:
    """One real test file: its node ids (a parametrized function's first cases) and imports."""

    path: str
    nodes: tuple[str, ...]
    imports: tuple[str, ...]


@dataclass(frozen=True)
class Job:
    """One GPU job of a workflow's matrix: its tier name, runner pool, GPUs, torch build and the
    ordered commands (each a tuple of test files; the script stops after a failing command)."""

    tier: str
    workflow: str
    pool: str
    torch: str  # "nightly" or "2.13"
    commands: tuple[tuple[str, ...], ...]
    events: tuple[str, ...]


@dataclass(frozen=True)
class Window:
    """A real breakage: ``tests`` fail on main from commit ``start`` to ``end`` (excluded);
    ``kind`` is revert, fix or nightly (a torch nightly's break, fixed by a torchao commit)."""

    kind: str
    start: int
    end: int
    tests: tuple[str, ...]
    nightly_only: bool
    why: str


@dataclass(frozen=True)
class World:
    repo: str
    first: str
    last: str
    commits: tuple[Commit, ...]
    files: dict[str, TestFile]
    jobs: tuple[Job, ...]


def _module(path: str) -> str:
    return path[:-3].replace("/", ".").removesuffix(".__init__")


def _nodes(path: str, functions: list, max_cases: int, max_functions: int) -> tuple[str, ...]:
    out = []
    for name, cases in functions[:max_functions]:
        base = f"{path}::{name}"
        out += [base] if cases <= 1 else [f"{base}[{i}]" for i in range(min(cases, max_cases))]
    return tuple(out)


@lru_cache(maxsize=4)
def load(max_cases: int = 1, max_functions: int = 2) -> World:
    """The world from the data file: each file's first ``max_functions`` test functions (in file
    order), a parametrized one as its first ``max_cases`` ids (``[0]``, ``[1]``...)."""
    data = json.loads(DATA.read_text(encoding="utf-8"))
    commits = tuple(Commit(i, c["sha"], c["time"], c["author"], c["subject"], c["pr"], tuple(c["files"]),
                           c["reverts"]) for i, c in enumerate(data["commits"]))
    files = {p: TestFile(p, _nodes(p, t["functions"], max_cases, max_functions), tuple(t["imports"]))
             for p, t in sorted(data["tests"].items())}
    return World(data["repo"], data["first"], data["last"], commits, files, _jobs(files))


def _under(files: dict[str, TestFile], *prefixes: str, skip: tuple[str, ...] = ()) -> tuple[str, ...]:
    return tuple(p for p in files if p.startswith(prefixes) and not p.startswith(skip))


def _jobs(files: dict[str, TestFile]) -> tuple[Job, ...]:
    """The GPU jobs of torchao's workflows, each matrix leg one tier (CPU, ROCm, XPU legs left out)."""
    single_fp8 = tuple(f"test/float8/{n}.py" for n in ("test_base", "test_compile", "test_numerics_integration",
                                                       "test_auto_filter"))
    wf = "test/quantization/quantize_/workflows/"
    l4 = (_under(files, "test/integration/"), ("test/dtypes/test_affine_quantized_float.py",), single_fp8,
          (wf + "float8/test_float8_tensor.py",), _under(files, "test/prototype/blockwise_fp8_inference/"))
    h100 = (_under(files, "test/integration/"), ("test/dtypes/test_affine_quantized_float.py",),
            _under(files, wf + "float8/"), (wf + "int4/test_int4_tensor.py",),
            (wf + "int4/test_int4_preshuffled_tensor.py",), single_fp8, _under(files, "test/prototype/mx_formats/"),
            tuple(f"test/prototype/moe_training/{n}.py" for n in ("test_fp8_grouped_mm", "test_mxfp8_grouped_mm",
                                                                 "test_training")),
            _under(files, "test/prototype/gptq/"))
    regression = (_under(files, "test/", skip=("test/quantization/pt2e/",)),)
    pt2e = (_under(files, "test/quantization/pt2e/", skip=("test/quantization/pt2e/test_x86inductor",)),)
    multi = (("test/float8/test_fsdp2/test_fsdp2.py",),)
    both = ("push", "pull_request")
    jobs = []
    for torch in ("nightly", "2.13"):
        jobs += [Job(f"regression-cuda-{torch}", "regression_test.yml", "linux.g5.12xlarge.nvidia.gpu", torch,
                     regression, both),
                 Job(f"pt2e-gpu-{torch}", "regression_test_pt2e_gpu.yml", "linux.g5.12xlarge.nvidia.gpu", torch,
                     pt2e, both),
                 Job(f"1xL4-{torch}", "1xL4_tests.yml", "linux.g6.4xlarge.experimental.nvidia.gpu", torch, l4, both),
                 Job(f"1xH100-{torch}", "1xH100_tests.yml", "mt-l-x86iamx-22-225-h100", torch, h100, both),
                 Job(f"4xH100-{torch}", "4xH100_tests.yml", "mt-l-x86iamx-88-900-h100-4", torch, multi, ("push",))]
    jobs.append(Job("smoke-cuda-nightly", "nightly_smoke_test.yml", "linux.g5.12xlarge.nvidia.gpu", "nightly",
                    regression, ("nightly",)))
    return tuple(_keep_known(j, files) for j in jobs)


def _keep_known(job: Job, files: dict[str, TestFile]) -> Job:
    commands = tuple(tuple(p for p in cmd if p in files) for cmd in job.commands)
    return Job(job.tier, job.workflow, job.pool, job.torch, tuple(c for c in commands if c), job.events)


def affected(world: World, commit: Commit, tight: bool = False) -> list[str]:
    """The test files ``commit`` plausibly affects (module docstring), sorted; ``tight``: only
    those it touches or that import a module it touches by its own name."""
    touched = {_module(f) for f in commit.files if f.startswith("torchao/") and f.endswith(".py")}
    touched |= {_module(f.rsplit("/", 1)[0] + "/__init__.py") for f in commit.files
                if f.startswith("torchao/") and not f.endswith(".py")}
    out = []
    for path, test in world.files.items():
        mods = [m for m in test.imports if m != "torchao"]
        if path in commit.files or (tight and touched & set(mods)) or (not tight and any(
                t == m or t.startswith(m + ".") or m.startswith(t + ".") for t in touched for m in mods)):
            out.append(path)
    return out


def by_name(world: World, commit: Commit) -> list[str]:
    """Test files whose name holds a touched torchao file's stem (underscores ignored): a fix's
    test moved after it (``test/dtypes/test_nf4.py`` is ``.../nf4/test_nf4_tensor.py`` at the end)."""
    stems = {f.rsplit("/", 1)[1][:-3].replace("_", "") for f in commit.files
             if f.startswith("torchao/") and f.endswith(".py") and not f.endswith("__init__.py")}
    return [p for p in world.files if any(s in p.rsplit("/", 1)[1].replace("_", "") for s in stems)]


def cuda_files(world: World) -> set[str]:
    return {p for job in world.jobs for cmd in job.commands for p in cmd}


def windows(world: World, seed: int) -> list[Window]:
    """The real breakage windows: each ``Revert`` of a commit in the window, each fix of a CUDA
    leg whose breaker (the newest earlier commit touching one of its torchao files, at most
    `FIX_LOOKBACK` back) is in the window, and torchao's fix for a torch nightly's break (from the
    window's start)."""
    rng = random.Random(f"gen10-windows-{seed}")
    by_sha = {c.sha: c for c in world.commits}
    on_cuda = cuda_files(world)
    out: list[Window] = []
    for fix in world.commits:
        if fix.subject.startswith("Revert \"Revert"):
            continue
        if fix.subject.startswith("Revert") and fix.reverts in by_sha:
            breaker, kind = by_sha[fix.reverts], "revert"
        elif _NIGHTLY_FIX.search(fix.subject):
            breaker, kind = world.commits[0], "nightly"
        elif _FIX.search(fix.subject) and not _OTHER_LEG.search(fix.subject):
            src = {f for f in fix.files if f.startswith("torchao/")}
            breaker = next((c for c in reversed(world.commits[max(0, fix.index - FIX_LOOKBACK):fix.index])
                            if src & set(c.files)), None)
            kind = "fix"
            if breaker is None:
                continue
        else:
            continue
        pool = [p for p in affected(world, fix, tight=True) if p in on_cuda]
        if kind != "nightly":
            pool = [p for p in pool if p in affected(world, breaker)] or pool
        pool = pool or [p for p in by_name(world, fix) if p in on_cuda]
        if kind != "nightly":
            pool = pool or [p for p in affected(world, breaker, tight=True) if p in on_cuda]
        if not pool:
            continue
        nodes = list(world.files[rng.choice(pool)].nodes)
        rng.shuffle(nodes)
        why = f"{kind}: {breaker.sha[:10]} broke, {fix.sha[:10]} ({fix.subject[:60]}) ended it"
        out.append(Window(kind, breaker.index, fix.index, tuple(sorted(nodes[:BROKEN_PER_WINDOW])),
                          kind == "nightly", why))
    return out
