"""What the tenth history's failures say and how its jobs' JUnit is written (`bench._history_gen10`).

Each job writes one JUnit file as pytest does with ``junit_family=xunit1`` (``file`` on each
``<testcase>``: torchao's commands run plain ``pytest`` with no rerun plugin, so each test has one
``<testcase>``). The texts are the shapes torch, NCCL, the Hugging Face hub client and the
CUDA driver print; the values in them (sizes, indices, ranks) vary with the seed.
"""

from __future__ import annotations

import random
from xml.sax.saxutils import quoteattr, escape

# cause -> (error line, traceback tail); {n} {a} {b} filled per failure
_TEXTS = {
    "tolerance": ("AssertionError: Tensor-likes are not close!",
                  "Mismatched elements: {n} / 65536 (0.0%)\nGreatest absolute difference: 0.0{a} at index ({b}, 3) "
                  "(up to 0.01 allowed)\nGreatest relative difference: 0.0{b} at index ({b}, 3) (up to 0.01 allowed)"),
    "sqnr": ("AssertionError: tensor({a}.{b}, device='cuda:0') not greater than or equal to 25.0",
             "sqnr = compute_error(ref, out)\n>       self.assertGreaterEqual(sqnr, 25.0)"),
    "compile": ("torch._inductor.exc.InductorError: FileNotFoundError: [Errno 2] No such file or directory: "
                "'/tmp/torchinductor_ec2-user/triton/0/{a}{b}/triton_.cubin'",
                "torch/_inductor/codecache.py in load_by_key_path\nSet TORCHDYNAMO_VERBOSE=1 for the internal stack trace"),
    "recompile": ("torch._dynamo.exc.FailOnRecompileLimitHit: recompile_limit reached with fullgraph=True. "
                  "Excessive recompilations can degrade performance due to the compilation overhead of each "
                  "recompilation.",
                  "torch/_dynamo/convert_frame.py in __call__\n  guard failed: ___check_obj_id(L['x']._local_scale)"),
    "oom": ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n}.00 MiB. GPU 0 has a total capacity of "
            "22.06 GiB of which {a}.12 MiB is free. Including non-PyTorch memory, this process has 21.9{b} GiB "
            "memory in use.",
            "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"),
    "nccl": ("torch.distributed.DistBackendError: [Rank {b}] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum={n}, OpType=_ALLGATHER_BASE, NumelIn=4194304, NumelOut=16777216, Timeout(ms)=600000) "
             "ran for 600{a} milliseconds before timing out.",
             "torch/distributed/distributed_c10d.py in all_gather_into_tensor\nNCCL_DEBUG=WARN"),
    "hub": ("huggingface_hub.errors.HfHubHTTPError: 429 Client Error: Too Many Requests for url: "
            "https://huggingface.co/api/models/unsloth/Llama-3.2-1B/revision/main",
            "huggingface_hub/utils/_http.py in hf_raise_for_status\nWe had to rate limit you."),
    "hub5xx": ("huggingface_hub.errors.HfHubHTTPError: 504 Server Error: Gateway Time-out for url: "
               "https://huggingface.co/facebook/opt-125m/resolve/main/config.json",
               "huggingface_hub/file_download.py in _get_metadata_or_catch_error"),
    "ecc": ("RuntimeError: CUDA error: uncorrectable ECC error encountered",
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
            "might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with "
            "`TORCH_USE_CUDA_DSA` to enable device-side assertions."),
    "driver803": ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before "
                  "calling NumCudaDevices() that might have caused the problem? Error 803: system has unsupported "
                  "display driver / cuda driver combination",
                  "torch/cuda/__init__.py in _lazy_init\n  torch._C._cuda_init()\nnvidia-smi: Failed to initialize "
                  "NVML: Driver/library version mismatch (NVML library version: 580.{a})"),
    "broken": ("AssertionError: {what}",
               "the change under test broke it: every run with it fails the same way"),
    "nightly": ("torch._inductor.exc.InductorError: LoweringException: AssertionError: expected size {n}=={n}, "
                "stride 1=={b} at dim=1",
                "target: aten._scaled_mm.default\ntorch nightly 2.14.0.dev{what}+cu126"),
}
BROKEN_ERRORS = ("RuntimeError: shape '[{n}, -1]' is invalid for input of size {a}{b}",
                 "AttributeError: 'Float8Tensor' object has no attribute 'act_quant_kwargs'",
                 "TypeError: _to_copy() got an unexpected keyword argument 'non_blocking'",
                 "AssertionError: torch.float32 != torch.bfloat16",
                 "ImportError: cannot import name '_mlir_helpers' from 'cutlass.base_dsl'")


def failure(cause: str, rng: random.Random, what: str = "") -> tuple[str, str]:
    """(error line, full text) of one failure of ``cause``."""
    head, tail = _TEXTS[cause]
    values = {"n": rng.randint(2, 900), "a": rng.randint(10, 99), "b": rng.randint(1, 63), "what": what}
    error = head.format(**values)
    return error, f"{tail.format(**values)}\nE   {error}"


def broken_error(key: int) -> str:
    """The one error line a breakage window's tests fail with (the same in every run)."""
    values = {"n": 64 + key, "a": 40 + key, "b": 9 + key, "what": ""}
    return BROKEN_ERRORS[key % len(BROKEN_ERRORS)].format(**values)


def testcase(node: str, seconds: float, failed: tuple[str, str] | None) -> str:
    """One ``<testcase>`` as pytest's xunit1 writes it."""
    path, _, rest = node.partition("::")
    klass, _, name = rest.rpartition("::")
    module = path[:-3].replace("/", ".")
    classname = f"{module}.{klass}" if klass else module
    open_tag = f'<testcase classname={quoteattr(classname)} name={quoteattr(name)} file={quoteattr(path)} ' \
               f'time="{seconds:.3f}"'
    if failed is None:
        return open_tag + " />"
    error, text = failed
    return f"{open_tag}><failure message={quoteattr(error)}>{escape(text)}</failure></testcase>"


def junit(cases: list[str], failures: int, seconds: float, host: str) -> str:
    """A whole report around ``cases``."""
    return ('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="0" '
            f'failures="{failures}" skipped="0" tests="{len(cases)}" time="{seconds:.3f}" hostname={quoteattr(host)}>'
            + "".join(cases) + "</testsuite></testsuites>")
