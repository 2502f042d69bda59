"""The fifth labelled history's world (`bench._history_gen5`): a PyTorch-CI-like project on two
accelerator platforms, its tiers, test files, flaky tests and the time-based sharding.

Contract: everything here is fixed data or a pure function of its arguments; the story (what
breaks when) is `bench._history_gen5_story`, the JUnit `bench._history_gen5_text`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CUDA, ROCM = "cuda", "rocm"
PUSH, PR, NIGHTLY = "push", "pull_request", "nightly"


@dataclass(frozen=True)
class Tier:
    """One CI tier: its platform, how many shards its files are split into by time, the runner
    label of its pool, the events that run it, and its retry policy: ``reruns`` per failing test
    (pytest-rerunfailures) or, for ``file_retry``, whole-file reruns by a runner script."""

    name: str
    platform: str
    shards: int
    runner: str
    events: tuple[str, ...]
    reruns: int
    file_retry: bool = False


DEFAULT = Tier("cuda-sm90-default", CUDA, 4, "linux.aws.h100", (PUSH, PR), 2)
ROCM_DEFAULT = Tier("rocm-mi300-default", ROCM, 3, "linux.rocm.gpu.mi300.2", (PUSH, PR), 2)
SRT = Tier("cuda-sm90-srt", CUDA, 1, "linux.aws.h100.4", (PUSH, PR), 1, file_retry=True)
SLOW = Tier("cuda-sm90-slow", CUDA, 2, "linux.aws.h100", (NIGHTLY,), 2)
TIERS = (DEFAULT, ROCM_DEFAULT, SRT, SLOW)


@dataclass(frozen=True)
class Flake:
    """How a flaky test fails: ``rate`` per attempt (``load_rate`` more at full pool load), the
    exception line, and on which platforms."""

    rate: float
    error: str
    platforms: tuple[str, ...] = (CUDA, ROCM)
    load_rate: float = 0.0

    def chance(self, load: float) -> float:
        """The failure probability of one attempt when the pool is ``load`` (0..1) busy."""
        return min(0.95, self.rate + self.load_rate * max(0.0, min(1.0, load)))


@dataclass(frozen=True)
class Case:
    """One test: its file (as the runner reports it), class, name, tiers, seconds, and flake."""

    file: str
    cls: str
    name: str
    tiers: tuple[str, ...]
    seconds: float
    flake: Flake | None = None

    @property
    def node(self) -> str:
        return f"{self.file}::{self.cls}::{self.name}"


NCCL = ("torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=412, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) "
        "ran for 600021 milliseconds before timing out.")
PORT = "RuntimeError: The server socket has failed to listen on any local network address. " \
       "port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use"
ADDR = "OSError: [Errno 98] Address already in use"
CLOSE = ("AssertionError: Tensor-likes are not close!\n\nMismatched elements: 1 / 65536 (0.0%)\n"
         "Greatest absolute difference: 0.0009765625 at index (17, 203) (up to 0.0001 allowed)")
COMPILE = "torch._inductor.exc.InductorError: TimeoutError: Triton compile of triton_red_fused_sum_1 timed out after 120 s"
SERVER = "TimeoutError: Server failed to start within 600 seconds (launch_server: port 30000 health check)"
ROCM_NUMERIC = ("AssertionError: Tensor-likes are not close!\n\nMismatched elements: 212 / 4096 (5.2%)\n"
                "Greatest absolute difference: 0.125 at index (3, 17) (up to 0.001 allowed)")
HIP_DEVICE = "RuntimeError: HIP error: hipErrorNoDevice: no ROCm-capable device is detected"
SETUP_FAIL = "failed on setup with \"" + HIP_DEVICE + "\""
DISABLED = ("Test is disabled because an issue exists disabling it: https://github.com/pytorch/pytorch/"
            "issues/{issue} for platform(s) rocm. If you're seeing this on your local machine and would "
            "like to enable this test, please make sure CI is not set and you are not using the flag "
            "--import-disabled-tests.")

OLD_GRAPHS, NEW_GRAPHS = "test/test_cuda_graphs.py", "test/cuda/test_graphs.py"
LOAD_NODE = "test/distributed/test_c10d_nccl.py::ProcessGroupNCCLTest::test_allreduce_coalesced"
DISABLED_NODE = "test/test_cuda_graphs.py::TestCudaGraphs::test_graph_memory_stats_and_use_result_after_destroy_graph"
ROCM_BUG_NODES = ("test/test_linalg.py::TestLinalgCUDA::test_svd_lowrank_cuda_float16",
                  "test/test_linalg.py::TestLinalgCUDA::test_svd_lowrank_cuda_bfloat16")
PARAMS = ("float16", "bfloat16", "float32", "float8_e4m3fn")
PARTIAL_NODES = tuple(f"test/test_matmul_cuda.py::TestMatmulCUDA::test_scaled_mm_vs_emulated_{p}_cuda"
                      for p in PARAMS)
REVERT_NODE = "test/inductor/test_torchinductor.py::GPUTests::test_reduction_config_limit_cuda"
SLOW_NODE = "test/test_ops_gradients.py::TestBwdGradientsCUDA::test_fn_gradgrad_linalg_eigh_cuda_float64"
SRT_FLAKE_NODE = "test_openai_server.py::TestOpenAIServer::test_chat_completion_stream"

_BOTH = (DEFAULT.name, ROCM_DEFAULT.name)
_CUDA = (DEFAULT.name,)


def _cases() -> tuple[Case, ...]:
    out: list[Case] = []

    def add(file: str, cls: str, names: list[str], tiers: tuple[str, ...], seconds: float,
            flakes: dict[str, Flake] | None = None) -> None:
        for i, name in enumerate(names):
            out.append(Case(file, cls, name, tiers, round(seconds * (0.6 + 0.1 * (i % 9)), 3),
                            (flakes or {}).get(name)))

    add("test/test_linalg.py", "TestLinalgCUDA",
        [f"test_{op}_cuda_{dt}" for op in ("svd_lowrank", "cholesky", "qr", "eigh", "lstsq")
         for dt in ("float16", "bfloat16", "float32")], _BOTH, 3.0,
        {"test_eigh_cuda_float32": Flake(0.03, CLOSE, (ROCM,))})
    add("test/test_nn.py", "TestNNDeviceTypeCUDA",
        [f"test_{op}_cuda_{dt}" for op in ("conv_transposed_large", "batchnorm_grad", "layer_norm_backward",
                                           "embedding_bag_empty_input", "ctc_loss") for dt in ("float32", "float64")],
        _BOTH, 2.5, {"test_ctc_loss_cuda_float32": Flake(0.05, CLOSE)})
    add("test/test_ops.py", "TestCommonCUDA",
        [f"test_compare_cpu_{op}_cuda_float32" for op in
         ("add", "addmm", "baddbmm", "cumsum", "index_put", "logsumexp", "nn_functional_gelu", "softmax",
          "sort", "topk", "var_mean", "where")], _BOTH, 1.5)
    add("test/test_matmul_cuda.py", "TestMatmulCUDA",
        [f"test_scaled_mm_vs_emulated_{p}_cuda" for p in PARAMS] + ["test_cublas_addmm_size_1000_cuda_float16",
                                                                    "test_cublas_baddbmm_large_input_cuda_bfloat16"],
        _CUDA, 4.0, {"test_cublas_addmm_size_1000_cuda_float16": Flake(0.02, CLOSE)})
    add("test/inductor/test_torchinductor.py", "GPUTests",
        [f"test_{n}_cuda" for n in ("reduction_config_limit", "fused_attention", "scatter_add", "layer_norm",
                                    "avg_pool2d_backward", "mixed_mm", "split_cumsum", "bucketize")],
        _BOTH, 6.0, {"test_mixed_mm_cuda": Flake(0.04, COMPILE)})
    add(OLD_GRAPHS, "TestCudaGraphs",
        ["test_graph_memory_stats_and_use_result_after_destroy_graph", "test_graph_capture_simple",
         "test_graph_two_successive", "test_graph_rng_distributions", "test_graph_optims"], _BOTH, 2.0,
        {"test_graph_memory_stats_and_use_result_after_destroy_graph": Flake(0.15, CLOSE, (ROCM,)),
         "test_graph_rng_distributions": Flake(0.02, CLOSE)})
    add("test/distributed/test_c10d_nccl.py", "ProcessGroupNCCLTest",
        ["test_allreduce_coalesced", "test_broadcast_coalesced", "test_nccl_barrier_timeout",
         "test_reduce_scatter_base", "test_allgather_into_tensor"], _BOTH, 12.0,
        {"test_allreduce_coalesced": Flake(0.01, NCCL, load_rate=0.19),
         "test_reduce_scatter_base": Flake(0.06, NCCL)})
    add("test/distributed/test_store.py", "TCPStoreTest",
        ["test_init_pg_and_rpc_with_same_socket", "test_multi_worker_with_fixed_world_size",
         "test_numkeys_delkeys"], _BOTH, 1.0, {"test_init_pg_and_rpc_with_same_socket": Flake(0.10, PORT)})
    add("test/test_transformers.py", "TestSDPACudaOnlyCUDA",
        [f"test_flash_attention_vs_math_ref_grads_{b}_cuda_{dt}" for b in ("batch_1", "batch_8")
         for dt in ("float16", "bfloat16")], _BOTH, 5.0)
    add("test_openai_server.py", "TestOpenAIServer",
        ["test_completion", "test_chat_completion", "test_chat_completion_stream", "test_embedding"],
        (SRT.name,), 20.0, {"test_chat_completion_stream": Flake(0.08, SERVER)})
    add("test_eval_accuracy_mini.py", "TestEvalAccuracyMini", ["test_mmlu", "test_gsm8k"], (SRT.name,), 60.0,
        {"test_gsm8k": Flake(0.05, ADDR)})
    add("test_srt_endpoint.py", "TestSRTEndpoint",
        ["test_simple_decode", "test_logprob_with_chunked_prefill", "test_get_server_info"], (SRT.name,), 15.0)
    add("test/test_ops_gradients.py", "TestBwdGradientsCUDA",
        [f"test_fn_gradgrad_{op}_cuda_float64" for op in ("linalg_eigh", "linalg_svd", "cdist", "grid_sampler_2d",
                                                          "nn_functional_interpolate_bicubic", "lu_solve")],
        (SLOW.name,), 90.0, {"test_fn_gradgrad_cdist_cuda_float64": Flake(0.05, CLOSE)})
    add("test/test_decomp.py", "TestDecompCUDA",
        [f"test_comprehensive_{op}_cuda_float64" for op in ("nn_functional_conv_transpose3d", "linalg_det",
                                                            "grid_sampler_2d", "cumprod")], (SLOW.name,), 80.0)
    return tuple(out)


CASES = _cases()


def node_at(case: Case, renamed: bool) -> str:
    """The node id ``case`` has before or after the CUDA graph tests' file was moved."""
    return case.node.replace(OLD_GRAPHS, NEW_GRAPHS, 1) if renamed and case.file == OLD_GRAPHS else case.node


def file_at(case: Case, renamed: bool) -> str:
    """The file ``case`` is in before or after the move."""
    return NEW_GRAPHS if renamed and case.file == OLD_GRAPHS else case.file


def classname(case: Case, renamed: bool) -> str:
    """The JUnit ``classname``: the dotted module and class (the module as the runner saw it)."""
    file = file_at(case, renamed)
    return f"{file[:-3].replace('/', '.')}.{case.cls}"


def tier_cases(tier: Tier) -> list[Case]:
    """The tests ``tier`` runs, in the order they are defined."""
    return [c for c in CASES if tier.name in c.tiers]


def file_seconds(tier: Tier, day: int, seed: int) -> dict[str, float]:
    """Each file's seconds on ``tier`` on ``day``: a deterministic random walk (test-times.json
    as the day before measured it), so a file's shard changes as durations drift."""
    out: dict[str, float] = {}
    for case in tier_cases(tier):
        out[case.file] = out.get(case.file, 0.0) + case.seconds
    for file in out:
        walk = sum(math.sin(seed * 12.9898 + d * 78.233 + len(file) * 3.1 + ord(file[-4])) for d in range(day + 1))
        out[file] *= math.exp(0.45 * walk / math.sqrt(day + 1))
    return out


def shard_files(tier: Tier, day: int, seed: int) -> list[list[str]]:
    """Files of ``tier`` split into its shards by the day's durations: longest first onto the
    lightest shard (PyTorch's run_test sharding), each shard's files in the order they run."""
    seconds = file_seconds(tier, day, seed)
    shards: list[list[str]] = [[] for _ in range(tier.shards)]
    loads = [0.0] * tier.shards
    for file in sorted(seconds, key=lambda f: (-seconds[f], f)):
        i = loads.index(min(loads))
        shards[i].append(file)
        loads[i] += seconds[file]
    return [sorted(s) for s in shards]
