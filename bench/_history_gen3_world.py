"""The third labelled history's world (`bench._history_gen3`): a vLLM-like GPU suite.

Six tiers sharded as vLLM's Buildkite steps are (``parallelism``: 3, 2, 2, 4, 1, 1), 103 tests
named after vLLM's own test files and parametrizations, three runner pools, each tier's retry
policy (pytest-rerunfailures ``reruns``: 2, 1 or none, as vLLM's ``flaky(reruns=2)`` marks; the
two kernel tiers under xdist), and the flaky tests with their kind and base rate per attempt. Nothing here is random: the
story (`bench._history_gen3`) draws from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

# Flake kinds, each with its own trigger (see `FlakyTest`).
DOWNLOAD, TIMEOUT, OOM, XDIST, PORT, NUMERIC = "download", "timeout", "oom", "xdist", "port", "numeric"
FLAKE_KINDS = (DOWNLOAD, TIMEOUT, OOM, XDIST, PORT, NUMERIC)

POOLS = {
    "h100": tuple(f"h100-{i:02d}" for i in range(1, 7)),
    "l4": tuple(f"l4-{i:02d}" for i in range(1, 9)),
    "h100x2": ("h100x2-1", "h100x2-2", "h100x2-3"),
}
BAD_GPU_RUNNER = "h100-04"  # its GPU gets stuck for stretches of hours, then is repaired
SLOW_RUNNER = "l4-07"  # an older host: pytest-timeout flakes are 3x as likely on it
POOL_LOAD = "l4"  # two jobs share one L4 host at times (co-scheduled): OOM flakes 10x


@dataclass(frozen=True)
class Test:
    """One test case (a parametrized case is its own test), in the shard it always runs in."""

    tier: str
    file: str
    name: str
    shard: int
    line: int
    seconds: float

    @property
    def node(self) -> str:
        """The node id `ci.history.ingest.node_id` gives the xunit1 testcase."""
        return f"{self.file}::{self.name}"

    @property
    def classname(self) -> str:
        """pytest's xunit1 ``classname`` of a module-level test: the file's dotted module."""
        return self.file[:-3].replace("/", ".")


@dataclass(frozen=True)
class Tier:
    """A sharded CI step: its pool, retry policy (plugin reruns per failing test; xdist: run with
    ``-n 4``, where a worker can crash) and its tests in shard order."""

    name: str
    shards: int
    pool: str
    reruns: int
    xdist: bool
    files: tuple[tuple[str, tuple[str, ...], float], ...]  # file, test names, typical seconds

    @cached_property
    def tests(self) -> tuple[Test, ...]:
        flat = [(file, name, secs, 20 + 9 * i) for file, names, secs in self.files for i, name in enumerate(names)]
        return tuple(Test(self.name, file, name, i % self.shards, line, secs) for i, (file, name, secs, line)
                     in enumerate(flat))

    def shard(self, index: int) -> tuple[Test, ...]:
        """The tests of shard ``index`` (0-based), in the order they run."""
        return tuple(t for t in self.tests if t.shard == index)


@dataclass(frozen=True)
class FlakyTest:
    """A test that fails ``rate`` of its attempts for a reason outside the code under test."""

    node: str
    kind: str
    rate: float


def _params(base: str, *cases: str) -> tuple[str, ...]:
    return tuple(f"{base}[{case}]" for case in cases)


_BLOCKS = [f"{dtype}-{block}" for dtype in ("fp16", "bf16", "fp8") for block in (16, 32, 64)]
_MODELS = ("meta-llama/Llama-3.2-1B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3",
           "google/gemma-2-2b-it", "microsoft/Phi-3.5-mini-instruct", "facebook/opt-125m", "openai-community/gpt2",
           "tiiuae/falcon-rw-1b", "ibm-granite/granite-3.0-2b-instruct", "allenai/OLMo-1B-hf")

TIERS = (
    Tier("kernels-attention", 3, "h100", 0, True, (
        ("tests/kernels/attention/test_flash_attn.py",
         _params("test_varlen_with_paged_kv", *_BLOCKS) + _params("test_flash_attn_with_paged_kv", "fp16", "bf16"), 4.0),
        ("tests/kernels/attention/test_triton_decode_attention.py",
         _params("test_decode_attention", "B3-L1025-H32", "B5-L1025-H32", "B3-L2048-H8", "B5-L4096-H8"), 2.0),
        ("tests/kernels/attention/test_cascade_flash_attn.py", _params("test_cascade", "16", "32", "64"), 6.0),
        ("tests/kernels/attention/test_prefix_prefill.py",
         _params("test_contexted_kv_attention", "fp16", "bf16", "fp8") + ("test_contexted_kv_attention_alibi",), 9.0),
    )),
    Tier("kernels-moe", 2, "h100", 2, True, (
        ("tests/kernels/moe/test_moe.py",
         _params("test_fused_moe", "1-128-128-8", "33-2048-128-8", "64-1024-511-16", "222-1024-1024-64",
                 "1-2048-511-64", "33-128-1024-16", "64-2048-128-8", "222-128-511-64")
         + _params("test_mixtral_moe", "fp16", "bf16"), 12.0),
        ("tests/kernels/moe/test_cutlass_moe.py",
         _params("test_run_cutlass_moe_fp8", "2-8-True", "2-8-False", "64-16-True", "64-16-False"), 8.0),
        ("tests/kernels/quantization/test_fp8_quant.py",
         _params("test_dynamic_per_token_fp8_quant", "7-1024", "83-5137", "2048-8192", "4096-4096")
         + ("test_fp8_quant_large",), 3.0),
    )),
    Tier("entrypoints", 2, "l4", 0, False, (
        ("tests/entrypoints/openai/test_chat.py", ("test_chat_streaming", "test_tool_choice", "test_logprobs",
                                                   "test_response_format_json", "test_max_tokens"), 25.0),
        ("tests/entrypoints/openai/test_completion.py", ("test_single_completion", "test_batch_completions",
                                                         "test_echo_logprobs") + _params("test_prompt_logprobs", "1", "5"),
         20.0),
        ("tests/entrypoints/openai/test_embedding.py",
         ("test_single_embedding", "test_batch_embedding", "test_truncate_prompt"), 18.0),
        ("tests/entrypoints/llm/test_generate.py", ("test_multiple_sampling_params", "test_chat_template"), 30.0),
        ("tests/entrypoints/openai/test_metrics.py", ("test_metrics_counts", "test_metrics_exist"), 15.0),
        ("tests/entrypoints/openai/test_models.py", ("test_check_models", "test_served_model_name"), 10.0),
    )),
    Tier("models-language", 4, "l4", 1, False, (
        ("tests/models/language/generation/test_common.py", _params("test_models", *_MODELS), 60.0),
        ("tests/models/language/pooling/test_embedding.py",
         _params("test_models", "BAAI/bge-base-en-v1.5", "intfloat/e5-small", "Alibaba-NLP/gte-base-en-v1.5",
                 "nomic-ai/nomic-embed-text-v1"), 40.0),
        ("tests/models/language/generation/test_mistral.py",
         ("test_mistral_format", "test_mistral_function_calling"), 90.0),
        ("tests/models/quantization/test_gptq_marlin.py", _params("test_models", "4bit-g128", "4bit-gm1", "8bit-g128"),
         70.0),
        ("tests/models/quantization/test_fp8.py", _params("test_models", "dynamic", "static", "kv-fp8"), 50.0),
    )),
    Tier("distributed-2gpu", 1, "h100x2", 0, False, (
        ("tests/distributed/test_comm_ops.py",
         _params("test_all_reduce", "tp2-fp16", "tp2-bf16") + ("test_all_gather", "test_reduce_scatter"), 20.0),
        ("tests/distributed/test_pynccl.py", ("test_pynccl", "test_pynccl_multiple_allreduce"), 15.0),
        ("tests/distributed/test_pipeline_parallel.py", _params("test_tp_pp", "1-2-mp", "2-1-ray", "1-2-ray"), 80.0),
        ("tests/distributed/test_custom_all_reduce.py", _params("test_custom_allreduce", "2-1", "2-2"), 25.0),
    )),
    Tier("basic-correctness", 1, "l4", 2, False, (
        ("tests/basic_correctness/test_basic_correctness.py",
         _params("test_models", "distilgpt2-FLASH_ATTN", "distilgpt2-XFORMERS", "llama-FLASH_ATTN", "llama-XFORMERS")
         + ("test_model_with_failure",), 30.0),
        ("tests/basic_correctness/test_preemption.py", ("test_chunked_prefill_recompute", "test_preemption"), 45.0),
        ("tests/basic_correctness/test_cumem.py", ("test_basic_cumem", "test_end_to_end"), 20.0),
        ("tests/basic_correctness/test_cpu_offload.py", ("test_cpu_offload",), 50.0),
    )),
)
TIER = {t.name: t for t in TIERS}
ALWAYS = "basic-correctness"  # every push and pull request runs it (vLLM's fast check)

FLAKY = (
    FlakyTest("tests/entrypoints/openai/test_chat.py::test_chat_streaming", DOWNLOAD, 0.06),
    FlakyTest("tests/entrypoints/openai/test_embedding.py::test_single_embedding", DOWNLOAD, 0.05),
    FlakyTest("tests/models/language/generation/test_common.py::test_models[google/gemma-2-2b-it]", DOWNLOAD, 0.08),
    FlakyTest("tests/models/language/pooling/test_embedding.py::test_models[nomic-ai/nomic-embed-text-v1]",
              DOWNLOAD, 0.06),
    FlakyTest("tests/basic_correctness/test_basic_correctness.py::test_models[llama-FLASH_ATTN]", DOWNLOAD, 0.05),
    FlakyTest("tests/models/language/generation/test_mistral.py::test_mistral_function_calling", TIMEOUT, 0.08),
    FlakyTest("tests/kernels/moe/test_moe.py::test_fused_moe[222-1024-1024-64]", TIMEOUT, 0.05),
    FlakyTest("tests/basic_correctness/test_preemption.py::test_preemption", TIMEOUT, 0.05),
    FlakyTest("tests/models/quantization/test_gptq_marlin.py::test_models[8bit-g128]", OOM, 0.03),
    FlakyTest("tests/entrypoints/llm/test_generate.py::test_multiple_sampling_params", OOM, 0.03),
    FlakyTest("tests/kernels/attention/test_cascade_flash_attn.py::test_cascade[64]", XDIST, 0.05),
    FlakyTest("tests/kernels/attention/test_prefix_prefill.py::test_contexted_kv_attention_alibi", XDIST, 0.04),
    FlakyTest("tests/kernels/moe/test_moe.py::test_mixtral_moe[bf16]", XDIST, 0.05),
    FlakyTest("tests/distributed/test_pynccl.py::test_pynccl_multiple_allreduce", PORT, 0.08),
    FlakyTest("tests/distributed/test_comm_ops.py::test_all_gather", PORT, 0.06),
    FlakyTest("tests/kernels/moe/test_cutlass_moe.py::test_run_cutlass_moe_fp8[64-16-True]", NUMERIC, 0.08),
    FlakyTest("tests/kernels/attention/test_flash_attn.py::test_varlen_with_paged_kv[bf16-64]", NUMERIC, 0.06),
)
FLAKE = {f.node: f for f in FLAKY}
TEST = {t.node: t for tier in TIERS for t in tier.tests}
