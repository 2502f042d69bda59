"""The sixth labelled history's world (issue 47, held out from the verdict rules): a vLLM-on-Buildkite-like
project's tests, GPU queues, runners, and the causes its story draws (`bench._history_gen6`).

Contract: everything here is plain data, a pure function of the seed; the story module decides which
attempt fails and why, the text module writes it as pytest's JUnit.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from bench._verdicts_records import Label, Report  # noqa: F401 (Report: the story's jobs)

START = datetime(2026, 9, 1, 6, 0, tzinfo=timezone.utc)
# Buildkite queues as tiers, with how many parallel jobs split each one's test files.
SHARDS = {"h100": 3, "l4": 2, "cpu": 1}
RUNNERS = {"h100": 4, "l4": 3, "cpu": 3}
RERUNS = 2  # pytest-rerunfailures --reruns 2: at most three attempts per run
# The story's causes, each with the truth label every failure it makes gets.
CAUSE_LABEL = {"hf_outage": "infra", "image_bump": "infra", "disk_full": "infra", "pin_bump": "broken_on_main",
               "hidden": "broken_on_main", "masked": "broken_on_main", "pr_bug": "new", "pr_param": "new",
               "pr_segv": "new", "order": "flaky", "flaky": "flaky", "timeout": "flaky"}


@dataclass(frozen=True)
class Scale:
    """How long the history is: main commits (about one every six hours), pull requests, and whether
    retried attempts carry their own text (`ci.pytest_attempts`; False: stock pytest + rerunfailures)."""

    commits: int = 60
    prs: int = 60
    attempt_text: bool = True


QUICK = Scale(commits=24, prs=14)


@dataclass(frozen=True)
class Test:
    """One test id: ``tiers`` it runs on, ``weights`` if it downloads a model, ``rate`` its flake rate,
    ``skip_on`` tiers where a marker skips it, ``disk`` if it writes the compile cache."""

    file: str
    cls: str
    name: str
    tiers: tuple[str, ...]
    weights: bool = False
    rate: float = 0.0
    flake: str = ""  # "flaky" or "timeout": how its flakes read
    skip_on: tuple[str, ...] = ()
    disk: bool = False

    @property
    def node(self) -> str:
        return f"{self.file}::{self.cls}::{self.name}"

    @property
    def classname(self) -> str:
        return f"{self.file[:-3].replace('/', '.')}.{self.cls}"


@dataclass(frozen=True)
class Window:
    """A cause in force from ``start`` to ``end`` (times; main commit indexes for commit causes)."""

    cause: str
    start: datetime
    end: datetime
    tier: str = ""
    runner: str = ""
    nodes: tuple[str, ...] = ()


@dataclass
class History:
    """What the harness reads (``seed``, ``runs`` in the order they finish) and the story behind it."""

    seed: int
    tests: list[Test]
    main_shas: list[str]
    runs: list
    windows: list[Window]
    breaks: list  # `bench._history_gen6.Break`: main's own breakages, by commit index


def sha(seed: int, what: str) -> str:
    """A commit id for ``what`` (stable for the seed)."""
    return hashlib.sha1(f"gen6-{seed}-{what}".encode()).hexdigest()


def _param(file: str, cls: str, base: str, params: list[str], tiers: tuple[str, ...], **kw) -> list[Test]:
    return [Test(file, cls, f"{base}[{p}]", tiers, **kw) for p in params]


def base_tests() -> list[Test]:
    """The suite at the first commit (main adds model files as it goes: `model_file`)."""
    gpu, both = ("h100", "l4"), ("h100", "l4", "cpu")
    tests = [
        *_param("tests/kernels/test_fp8_gemm.py", "TestFp8Gemm", "test_scaled_mm",
                ["bf16-128", "bf16-4096", "fp16-128", "fp16-4096"], gpu),
        *_param("tests/kernels/test_rotary.py", "TestRotary", "test_rope", ["neox", "gptj"], gpu),
        Test("tests/kernels/test_rotary.py", "TestRotary", "test_rope_compiled", ("h100",)),
        *_param("tests/kernels/test_moe.py", "TestFusedMoe", "test_fused_moe", ["e8-k2", "e64-k6"], ("h100",)),
        Test("tests/kernels/test_attention.py", "TestFlashInfer", "test_decode_paged", gpu, skip_on=("l4",)),
        Test("tests/kernels/test_attention.py", "TestFlashInfer", "test_prefill_ragged", gpu),
        Test("tests/compile/test_inductor_cache.py", "TestInductorCache", "test_cache_reuse", gpu, disk=True),
        Test("tests/compile/test_inductor_cache.py", "TestInductorCache", "test_cache_size_limit", gpu),
        Test("tests/compile/test_full_graph.py", "TestFullGraph", "test_llama_graph", gpu, weights=True, disk=True),
        Test("tests/engine/test_async_engine.py", "TestAsyncEngine", "test_abort_stream", gpu, rate=0.03,
             flake="flaky"),
        Test("tests/engine/test_async_engine.py", "TestAsyncEngine", "test_generate", gpu, weights=True),
        Test("tests/distributed/test_pp.py", "TestPipeline", "test_pp_2", ("h100",), rate=0.04, flake="timeout"),
        Test("tests/distributed/test_pp.py", "TestPipeline", "test_tp_pp", ("h100",), weights=True),
        Test("tests/entrypoints/test_openai_server.py", "TestOpenAIServer", "test_chat", gpu, weights=True),
        Test("tests/entrypoints/test_openai_server.py", "TestOpenAIServer", "test_completion_stream", gpu,
             weights=True, rate=0.02, flake="flaky"),
        Test("tests/models/test_llama.py", "TestLlama", "test_greedy", gpu, weights=True),
        Test("tests/models/test_qwen.py", "TestQwen", "test_greedy", gpu, weights=True),
        Test("tests/lora/test_lora_loading.py", "TestLora", "test_load_adapter", gpu, weights=True, disk=True),
        *_param("tests/sampling/test_sampler.py", "TestSampler", "test_top_p", ["0.5", "0.9"], both),
        Test("tests/sampling/test_sampler.py", "TestSampler", "test_seeded", both),
        Test("tests/tokenization/test_detokenize.py", "TestDetokenize", "test_incremental", ("cpu",),
             weights=True),
        Test("tests/core/test_scheduler.py", "TestScheduler", "test_preempt", ("cpu",)),
        Test("tests/core/test_scheduler.py", "TestScheduler", "test_chunked_prefill", ("cpu",), rate=0.02,
             flake="flaky"),
        Test("tests/core/test_block_manager.py", "TestBlockManager", "test_prefix_cache", ("cpu",)),
    ]
    return tests


def model_file(k: int) -> list[Test]:
    """The ``k``-th model file main adds (every other one lands between the order-dependent pair's files,
    so how they fall into jobs shifts as main grows)."""
    path = f"tests/models/test_model_{k:02d}.py" if k % 2 == 0 else f"tests/engine/test_model_{k:02d}_engine.py"
    return [Test(path, "TestModel", name, ("h100", "l4"), weights=True)
            for name in ("test_greedy", "test_logprobs")]


# Order dependence: this test fails whenever the polluter's file ran before it in the same job.
ORDER_VICTIM = "tests/kernels/test_rotary.py::TestRotary::test_rope_compiled"
ORDER_POLLUTER = "tests/compile/test_inductor_cache.py"


def shard_files(files: list[str], shards: int) -> list[list[str]]:
    """Buildkite parallelism as the project splits it: sorted files dealt round-robin to the jobs."""
    out: list[list[str]] = [[] for _ in range(shards)]
    for i, name in enumerate(sorted(files)):
        out[i % shards].append(name)
    return out


def hours(rng: random.Random, low: float, high: float) -> timedelta:
    return timedelta(hours=rng.uniform(low, high))
