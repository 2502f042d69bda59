"""What the eleventh history's failures say, and its JUnit as pytest writes it (xunit1, one
``<testcase>`` per test: FlashInfer runs no pytest-level reruns). Each failure text follows what
torch, the FlashInfer JIT, NCCL, MPI, the artifact download and the CUDA driver print; the numbers
in it are drawn from the seeded generator so no two read byte-alike.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from xml.sax.saxutils import escape, quoteattr

from bench._history_gen11_world import Node

CACHE = "/root/.cache/flashinfer/0.6.3/90a/cached_ops"


@dataclass(frozen=True)
class Failure:
    """One failing test case: ``element`` ``failure`` (the call) or ``error`` (setup), its message
    attribute and its text."""

    element: str
    message: str
    text: str


def _tb(node: Node, line: str, where: str) -> str:
    return (f"{node.file}:{random.Random(node.node).randint(40, 900)}: in {node.name.split('[')[0]}\n"
            f"    {where}\n{line}")


def tolerance(node: Node, rng: random.Random) -> Failure:
    """A numerical tolerance miss of ``torch.testing.assert_close`` (or an SQNR check for the
    low-precision formats)."""
    if any(k in node.file for k in ("fp4", "fp8", "mxfp", "quant")):
        sqnr = rng.uniform(14.0, 19.9)
        line = f"AssertionError: SQNR {sqnr:.2f} dB below the {20 if sqnr > 15 else 18}.0 dB threshold"
        return Failure("failure", line, _tb(node, f"E   {line}", "assert sqnr >= min_sqnr"))
    total = rng.choice((65536, 131072, 262144, 524288))
    bad = rng.randint(1, 9)
    line = "AssertionError: Tensor-likes are not close!"
    text = (f"E   {line}\nE   \nE   Mismatched elements: {bad} / {total} ({100 * bad / total:.1f}%)\n"
            f"E   Greatest absolute difference: {rng.choice((0.0078125, 0.015625, 0.03125))} at index "
            f"({rng.randrange(16)}, {rng.randrange(32)}, {rng.randrange(128)}) (up to 0.001 allowed)\n"
            f"E   Greatest relative difference: {rng.uniform(0.01, 0.4):.6f} at index (0, 3, 17) (up to 0.001 allowed)")
    return Failure("failure", line, _tb(node, text, "torch.testing.assert_close(o, o_ref, rtol=1e-3, atol=1e-3)"))


def illegal_access(node: Node, first: bool) -> Failure:
    """A kernel's illegal memory access; every later test of the process fails the same way."""
    kind = "torch.AcceleratorError" if first else "RuntimeError"
    line = f"{kind}: CUDA error: an illegal memory access was encountered"
    text = (f"E   {line}\nE   CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.\nE   For debugging consider passing CUDA_LAUNCH_BLOCKING=1")
    return Failure("failure" if first else "error", line, _tb(node, text, "torch.cuda.synchronize()"))


def jit_build(node: Node, rng: random.Random) -> Failure:
    """A JIT build that fails on a corrupt or concurrently written kernel cache, or in nvcc/ninja."""
    op = rng.choice(("batch_decode_with_kv_cache_dtype_q_f16_dtype_kv_f16_head_dim_qk_128",
                     "batch_prefill_with_kv_cache_dtype_q_bf16_dtype_kv_bf16_head_dim_qk_128",
                     "norm", "sampling", "page", "rope", "fp4_quantization_sm90"))
    pick = rng.randrange(3)
    if pick == 0:
        line = f"OSError: {CACHE}/{op}/{op}.so: file too short"
        text = f"E   {line}"
    elif pick == 1:
        line = "RuntimeError: Ninja build failed. Ninja output:"
        text = (f"E   {line}\nE   ninja: error: loading 'build.ninja': No such file or directory\n"
                f"E   (while building {CACHE}/{op})")
    else:
        line = "RuntimeError: Ninja build failed. Ninja output:"
        text = (f"E   {line}\nE   [1/3] nvcc -c {op}.cu -o {op}.cuda.o\nE   FAILED: {op}.cuda.o\n"
                f"E   nvcc fatal   : Could not open output file '/tmp/tmpxft_{rng.randrange(1 << 16):08x}_00000000-7'")
    return Failure("error", line, _tb(node, text, "module = gen_module().build_and_load()"))


def oom(node: Node, rng: random.Random) -> Failure:
    """CUDA out of memory on the shared H100 node: another runner's process holds the memory."""
    used = rng.uniform(40, 70)
    line = (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {rng.choice((2, 4, 8))}.00 GiB. GPU 0 has "
            f"a total capacity of 79.19 GiB of which {79.19 - used - 8:.2f} GiB is free. Process "
            f"{rng.randint(1000, 99999)} has {used:.2f} GiB memory in use.")
    return Failure("failure", line, _tb(node, f"E   {line}", "x = torch.randn(shape, device='cuda')"))


def download(node: Node, rng: random.Random) -> Failure:
    """A test that downloads kernels or a model meets a 5xx or a 429."""
    code, why = rng.choice(((503, "Service Unavailable"), (502, "Bad Gateway"), (429, "Too Many Requests")))
    kind = "Server Error" if code >= 500 else "Client Error"
    line = (f"requests.exceptions.HTTPError: {code} {kind}: {why} for url: https://edge.urm.nvidia.com/artifactory/"
            f"sw-kernelinferencelibrary-public-generic-local/{rng.randrange(1 << 32):08x}/batched_gemm/"
            "checksums.txt")
    if rng.random() < 0.4:
        line = (f"huggingface_hub.errors.HfHubHTTPError: {code} {kind}: {why} for url: "
                "https://huggingface.co/api/models/deepseek-ai/DeepSeek-V3/revision/main")
    return Failure("failure", line, _tb(node, f"E   {line}", "download_artifacts()"))


def comm(node: Node, rng: random.Random) -> Failure:
    """An NCCL or MPI error on a multi-GPU comm test."""
    if rng.random() < 0.6:
        line = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
                f"ProcessGroupNCCL.cpp:{rng.randint(3000, 4000)}, unhandled system error (run with NCCL_DEBUG=INFO "
                "for details), NCCL version 2.27.3")
    else:
        line = "mpi4py.MPI.Exception: MPI_ERR_OTHER: known error not in list"
    return Failure("failure", line, _tb(node, f"E   {line}", "dist.all_reduce(t)"))


def bad_host(node: Node) -> Failure:
    """One A10G host's GPU with uncorrectable ECC errors."""
    line = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    return Failure("error", line, _tb(node, f"E   {line}", "torch.cuda.synchronize()"))


def driver_mismatch(node: Node) -> Failure:
    """The A10G/T4 pool after a bad image rollout: the driver does not fit the container's CUDA."""
    line = ("RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before "
            "calling NumCudaDevices() that might have already set an error? Error 803: system has unsupported "
            "display driver / cuda driver combination")
    return Failure("error", line, _tb(node, f"E   {line}", "torch.cuda.set_device(0)"))


def broken(node: Node, style: int, subject: str) -> Failure:
    """A real breakage's failure: wrong numbers, a kernel's own check, or a launch error."""
    if style == 0:
        line = "AssertionError: Tensor-likes are not close!"
        text = (f"E   {line}\nE   \nE   Mismatched elements: 40960 / 65536 (62.5%)\n"
                "E   Greatest absolute difference: 3.96875 at index (0, 1, 2) (up to 0.001 allowed)")
        return Failure("failure", line, _tb(node, text, "torch.testing.assert_close(o, o_ref)"))
    if style == 1:
        source = node.file.split("/")[-1][5:-3]
        line = (f"RuntimeError: Error in function 'run' at csrc/{source}.cu:{len(subject) * 7}: "
                "Check failed: status == cudaSuccess")
        return Failure("failure", line, _tb(node, f"E   {line}", "wrapper.run(q, kv_cache)"))
    line = "RuntimeError: CUDA error: invalid argument"
    return Failure("failure", line, _tb(node, f"E   {line}", "kernel launch"))


def junit(cases: list[tuple[Node, float, Failure | None, str]], host: str, when: datetime) -> str:
    """A pytest xunit1 report: each case (node, seconds, failure or None, "xfail"/"" for an
    expected failure written as pytest's skipped)."""
    parts = []
    failures = errors = skipped = 0
    total = 0.0
    for node, seconds, failure, mark in cases:
        total += seconds
        attrs = f"classname={quoteattr(node.classname)} name={quoteattr(node.name)} file={quoteattr(node.file)} " \
                f'line="0" time="{seconds:.3f}"'
        if mark == "xfail":
            skipped += 1
            parts.append(f'<testcase {attrs}><skipped type="pytest.xfail" message="known failure" /></testcase>')
        elif failure is None:
            parts.append(f"<testcase {attrs} />")
        else:
            failures += failure.element == "failure"
            errors += failure.element == "error"
            parts.append(f"<testcase {attrs}><{failure.element} message={quoteattr(failure.message)}>"
                         f"{escape(failure.text)}</{failure.element}></testcase>")
    head = (f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="{errors}" '
            f'failures="{failures}" skipped="{skipped}" tests="{len(cases)}" time="{total:.3f}" '
            f'timestamp="{when.isoformat()}" hostname={quoteattr(host)}>')
    return head + "".join(parts) + "</testsuite></testsuites>\n"
