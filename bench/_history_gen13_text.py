"""What the thirteenth history's JUnit says: pytest 8.2.1's ``--junitxml`` (the ``xunit2`` family it
writes by default: no ``file`` attribute, the dotted ``classname`` relative to its rootdir) and the
failure text of each planted cause, as pytest's ``--tb=auto`` prints a torch, JAX, NCCL or CUDA
error. The qa scripts run no rerun plugin, so each test is one ``<testcase>``."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from xml.sax.saxutils import escape, quoteattr

from bench._history_gen13_world import Case, stable

CUDA_TAIL = ("CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
             "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
             "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")


@dataclass(frozen=True)
class Outcome:
    """One case's result in a JUnit file: ``kind`` failure or error (``""`` passed), its text."""

    case: Case
    seconds: float
    kind: str = ""
    message: str = ""
    text: str = ""


def _close(rng: random.Random, elements: int) -> str:
    total = rng.choice((4096, 16384, 65536, 262144, 1048576))
    absdiff = rng.choice((0.0078125, 0.015625, 0.03125, 0.125, 0.5, 2.0))
    return (f"AssertionError: Tensor-likes are not close!\n\nMismatched elements: {elements} / {total} "
            f"({100 * elements / total:.1f}%)\nGreatest absolute difference: {absdiff} at index "
            f"({rng.randrange(64)}, {rng.randrange(128)}) (up to 0.001 allowed)\nGreatest relative difference: "
            f"{rng.uniform(0.002, 0.4):.4f} at index ({rng.randrange(64)}, {rng.randrange(128)}) (up to 0.001 allowed)")


def flake_error(kind: str, rng: random.Random) -> str:
    """The exception a flake of ``kind`` raises (one line or a few; pytest prints it with ``E``)."""
    port = rng.randrange(29400, 29700)
    return {
        "tolerance": _close(rng, rng.randint(1, 3)),
        "nondeterministic": ("AssertionError: Tensors are not bitwise identical across runs: max abs diff "
                             f"{rng.choice(('6.1035e-05', '1.2207e-04', '3.0518e-05'))} in dgrad"),
        "port": (f"torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
                 f"address. port: {port}, useIpv6: false, code: -98, name: EADDRINUSE, message: address already in use"),
        "store": ("torch.distributed.DistStoreError: Timed out after 301 seconds waiting for clients. "
                  f"{rng.randint(1, 3)}/4 clients joined."),
        "nccl_timeout": (f"torch.distributed.DistBackendError: [Rank {rng.randrange(8)}] Watchdog caught collective "
                         f"operation timeout: WorkNCCL(SeqNum={rng.randint(20, 900)}, OpType=ALLGATHER, "
                         f"NumelIn={rng.choice((4096, 65536))}, NumelOut={rng.choice((32768, 524288))}, "
                         "Timeout(ms)=600000) ran for 600031 milliseconds before timing out."),
        "subprocess": ("AssertionError: Distributed test failed with exit code -6:\nterminate called after throwing "
                       "an instance of 'c10::DistBackendError'\n  what():  [PG ID 0 PG GUID 0 Rank 2] Process group "
                       "watchdog thread terminated with exception: NCCL error: unhandled system error"),
        "xla": ("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to execute XLA Runtime executable: run time "
                "error: custom call 'te_fused_attn_forward_ffi' failed: CUDA error: unspecified launch failure"),
        "cuda_graph": ("RuntimeError: CUDA error: operation not permitted when stream is capturing\n" + CUDA_TAIL),
    }[kind]


def infra_error(kind: str, rng: random.Random) -> str:
    """The exception a machine, pool or service failure of ``kind`` raises inside a test."""
    return {
        "ecc": "RuntimeError: CUDA error: uncorrectable ECC error encountered\n" + CUDA_TAIL,
        "xid79": "RuntimeError: CUDA error: unspecified launch failure\n" + CUDA_TAIL,
        "oom_other": (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {rng.choice((1.0, 2.0, 4.0))} "
                      f"GiB. GPU 0 has a total capacity of 79.19 GiB of which {rng.randint(90, 700)}.00 MiB is free. "
                      f"Process {rng.randint(20000, 90000)} has {rng.randint(55, 76)}.31 GiB memory in use. Including "
                      "non-PyTorch memory, this process has 2.87 GiB memory in use."),
        "jax_oom_other": (f"jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
                          f"allocate {rng.choice((2147483648, 4294967296))} bytes."),
        "hub": ("OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the "
                "cached files and it looks like meta-llama/Llama-3.2-1B is not the path to a directory containing a "
                "file named config.json.\nCheckout your internet connection or see how to run the library in offline "
                "mode at 'https://huggingface.co/docs/transformers/installation#offline-mode'."),
        "nccl_net": ("torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/"
                     "c10d/ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL "
                     "version 2.27.7\nncclRemoteError: A call failed possibly due to a network error or a remote "
                     "process exiting prematurely.\nLast error:\nNET/IB : Got completion from peer "
                     f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}<{rng.randint(40000, 60000)}> "
                     "with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.1"),
    }[kind]


def break_error(file: str, rng: random.Random, seed_text: str) -> str:
    """The exception a real code change breaking tests in ``file`` raises (fixed per window or PR)."""
    pick = random.Random(seed_text)
    kinds = [_close(pick, pick.randint(40, 9000)),
             "TypeError: GroupedLinear.forward() got an unexpected keyword argument 'm_splits'",
             "AttributeError: 'Float8Quantizer' object has no attribute 'columnwise_usage'",
             ("RuntimeError: /opt/transformerengine/transformer_engine/common/gemm/cublaslt_gemm.cu:"
              f"{pick.randint(300, 900)} in function cublas_gemm: cuBLAS Error: an unsupported value or "
              "parameter was passed to the function"),
             ("RuntimeError: /opt/transformerengine/transformer_engine/pytorch/csrc/extensions/cast.cpp:"
              f"{pick.randint(40, 400)} in function quantize: Assertion failed: input.dim() >= 2. "
              "Expected a 2D tensor for MXFP8 quantization"),
             "ValueError: Unsupported recipe for fused operation: expected NVFP4BlockScaling"]
    if "jax" in file:
        kinds = [("jaxlib.xla_extension.XlaRuntimeError: INVALID_ARGUMENT: Custom call "
                  "'te_grouped_gemm_ffi' failed: Shape mismatch"), _close(pick, pick.randint(40, 9000)),
                 "TypeError: compute_on() got an unexpected keyword argument 'stream'"]
    return pick.choice(kinds)


def traceback(case: Case, error: str) -> str:
    """pytest's ``--tb=auto`` text: the test's frame long, the library frame short, then ``E`` lines
    (the same lines every time a test fails: they are its code's)."""
    function = case.name.split("[")[0]
    head = error.split("\n")
    lib = ("transformer_engine/jax/cpp_extensions/base.py" if "jax" in case.file
           else "transformer_engine/pytorch/module/base.py")
    body = [f"{case.file}:{40 + stable(case.file, function) % 2360}: in {function}",
            "    out = _run_layer(config, dtype, recipe)",
            f"/opt/transformerengine/{lib}:{100 + stable(lib, error.split(':')[0]) % 1400}: in forward",
            "    return super().forward(inp)"]
    body += ["E   " + part if part else "E   " for part in head]
    return "\n".join(body)


def junit(outcomes: list[Outcome], host: str, started: datetime) -> str:
    """One pytest 8.2.1 ``--junitxml`` document: ``<testsuites>`` around one ``testsuite``."""
    failures = sum(o.kind == "failure" for o in outcomes)
    errors = sum(o.kind == "error" for o in outcomes)
    total = sum(o.seconds for o in outcomes)
    parts = ['<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" '
             f'errors="{errors}" failures="{failures}" skipped="0" tests="{len(outcomes)}" time="{total + 4.2:.3f}" '
             f'timestamp="{started.strftime("%Y-%m-%dT%H:%M:%S.%f")}" hostname={quoteattr(host)}>']
    for o in outcomes:
        attrs = f"classname={quoteattr(o.case.classname)} name={quoteattr(o.case.name)} time=\"{o.seconds:.3f}\""
        if not o.kind:
            parts.append(f"<testcase {attrs} />")
        else:
            parts.append(f"<testcase {attrs}><{o.kind} message={quoteattr(o.message)}>{escape(o.text)}"
                         f"</{o.kind}></testcase>")
    parts.append("</testsuite></testsuites>")
    return "".join(parts)
