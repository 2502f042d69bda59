"""The fourth labelled history's world (`bench._history_gen4`): a Liger-Kernel-like project of
Triton kernels, its parametrized test suite, its runner pool and its planted causes. Only data
and its types; the story that makes runs of it is `bench._history_gen4`.

One GPU tier (``gpu``), three shards, one per job, on a pool of three self-hosted runners; every
run runs every test. Test ids are xunit1 as pytest writes them: ``file``, dotted ``classname``,
and a ``name`` carrying the parametrization (``test_correctness[bfloat16-4-4096]``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

from bench import _verdicts_records as records
from bench._verdicts_records import LABELS, Label  # noqa: F401 (the generator and its tests read them here)

TIER = "gpu"
SHARDS = 3
RUNNERS = ("gpu-runner-1", "gpu-runner-2", "gpu-runner-3")
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class Scale:
    """How much history: ``commits`` on main, ``prs`` pull requests; ``attempt_text`` writes the
    registry plugin's per-attempt properties (`ci.pytest_attempts`), else stock pytest +
    pytest-rerunfailures JUnit (a rerun attempt is an empty ``<testcase>``); ``merge_group`` stores
    the queue's runs as ``merge_group`` runs with their batch, else (the measured default) as the
    tail pull request's ``pull_request`` runs. The history is the same either way."""

    commits: int = 72
    prs: int = 56
    attempt_text: bool = True
    merge_group: bool = False


QUICK = Scale(commits=24, prs=14)


@dataclass(frozen=True)
class TestSpec:
    """One test id: its file (``test/...``), function name with parameters, shard and seconds."""

    __test__ = False  # not a pytest class

    file: str
    name: str
    shard: int
    seconds: float

    @property
    def node(self) -> str:
        return f"{self.file}::{self.name}"

    @property
    def classname(self) -> str:
        return self.file[:-3].replace("/", ".")


@dataclass(frozen=True)
class Flake:
    """A flaky test: ``rate`` the chance one attempt fails, ``error`` its exception line, ``text``
    the traceback's tail; ``fixed_by`` the pull request whose merge makes it deterministic."""

    node: str
    rate: float
    error: str
    text: str
    fixed_by: int | None = None


@dataclass(frozen=True)
class Breakage:
    """A code change on main that fails ``nodes``: from main commit ``start`` until ``end`` (the
    revert or fix, exclusive; None: never fixed), failing each attempt with chance ``rate``."""

    name: str
    nodes: tuple[str, ...]
    start: int
    end: int | None
    rate: float
    error: str
    text: str

    def active(self, commit: int) -> bool:
        return self.start <= commit and (self.end is None or commit < self.end)


@dataclass(frozen=True)
class Infra:
    """The runner image update: on ``runner``, from ``start`` to ``end`` (hours into the history),
    ``nodes`` fail every attempt with the driver's PTX error."""

    runner: str
    start: float
    end: float
    nodes: tuple[str, ...]

    def hits(self, runner: str, hour: float, node: str) -> bool:
        return runner == self.runner and self.start <= hour < self.end and node in self.nodes


@dataclass(frozen=True)
class Report(records.Report):
    """One shard's JUnit (`bench._verdicts_records.Report`); ``complete`` False when the shard was
    killed and only earlier files' results survived."""

    complete: bool = True


@dataclass
class Run(records.Run):
    """One workflow run attempt (`bench._verdicts_records.Run`): ``event`` ``push`` (main) or
    ``pull_request``; ``queue`` a merge-queue run (the tail pull request's, on the queue's
    temporary ref, ``base_sha`` main before the batch, ``batch`` its pull requests); ``killed``
    the shards that hung; ``reruns`` how often its config reruns a failed test."""

    reruns: int = field(kw_only=True)
    killed: list[int] = field(default_factory=list)
    queue: bool = False


@dataclass
class History:
    """A seed's history: the suite, its flakes and breakages, main's shas, and every run in the
    order runs finish; ``rerun_commits`` the main commits [from, to) whose config reruns failures,
    ``infra`` the runner image update, ``fix_commit`` the commit landing the atomics test's fix."""

    seed: int
    tests: list[TestSpec]
    flakes: list[Flake]
    breakages: list[Breakage]
    main_shas: list[str]
    runs: list[Run]
    rerun_commits: tuple[int, int] = (0, 0)
    infra: Infra | None = None
    fix_commit: int = 0


# (file, function, dtypes, shapes) of the suite; Liger's layout: test/transformers/test_<op>.py
_SUITE = (
    ("test/transformers/test_rms_norm.py", "test_correctness", DTYPES, ("2-128-512", "4-256-4096", "8-64-8192")),
    ("test/transformers/test_layer_norm.py", "test_layer_norm", DTYPES, ("2-8-64", "16-128-1024")),
    ("test/transformers/test_swiglu.py", "test_correctness", DTYPES, ("2-256-512", "9-7-41", "6-42-256")),
    ("test/transformers/test_geglu.py", "test_correctness", DTYPES, ("2-256-512", "9-7-41")),
    ("test/transformers/test_rope.py", "test_correctness", DTYPES, ("1-128-32-32-64", "2-47-32-32-128")),
    ("test/transformers/test_cross_entropy.py", "test_correctness", DTYPES, ("8-4096-32000", "4-2048-128256")),
    ("test/transformers/test_fused_linear_cross_entropy.py", "test_correctness", ("float32", "bfloat16"),
     ("2-4-512-128256", "3-47-31-32000", "8-2048-4096-128256")),
    ("test/transformers/test_embedding.py", "test_embedding_backward", ("float32", "bfloat16"), ("512-768", "32000-4096")),
    ("test/transformers/test_kl_div.py", "test_correctness", DTYPES, ("1-4096-32000", "3-512-128256")),
    ("test/transformers/test_jsd.py", "test_correctness", ("float32", "bfloat16"), ("2-1024-3200", "8-2048-32000")),
    ("test/transformers/test_fused_add_rms_norm.py", "test_correctness", DTYPES, ("2-128-512", "4-256-4096")),
    ("test/transformers/test_qwen2vl_mrope.py", "test_correctness", ("float32", "bfloat16"), ("1-128-28-4-128",)),
    ("test/convergence/test_mini_models.py", "test_mini_model", ("float32", "bfloat16"),
     ("mini_llama3", "mini_qwen2", "mini_gemma2", "mini_mistral")),
)


def suite() -> list[TestSpec]:
    """Every test id of the suite, each file pinned to one shard (files in order, round robin
    by summed seconds so the three jobs take about as long)."""
    specs: list[TestSpec] = []
    loads = [0.0] * SHARDS
    for file, func, dtypes, shapes in _SUITE:
        shard = loads.index(min(loads))
        cost = 40.0 if "convergence" in file else (6.0 if "fused_linear" in file else 1.5)
        for dtype, shape in product(dtypes, shapes):
            specs.append(TestSpec(file, f"{func}[{dtype}-{shape}]", shard, cost))
            loads[shard] += cost
    return specs


_CLOSE = ("E       AssertionError: Tensor-likes are not close!\nE       \nE       Mismatched elements: {n} / {total} "
          "({pct}%)\nE       Greatest absolute difference: {diff} at index (1, {i}) (up to {atol} allowed)")


def close_text(n: int, total: int, diff: float, atol: float, index: int) -> str:
    """``torch.testing.assert_close``'s message, as pytest prints it."""
    return _CLOSE.format(n=n, total=total, pct=f"{100 * n / total:.1f}", diff=f"{diff:.6f}", i=index, atol=atol)
