"""The failure texts gen14 writes into JUnit: pytest's ``message`` and longrepr for each planted
cause, shaped as pytest 8 prints them for a quantization-kernel suite on CUDA runners (a
``torch.testing.assert_close`` mismatch, a CUDA error, an out-of-memory error, an ECC error, a driver
too old). Numbers come from ``rng`` so two failures seldom read alike.
"""

from __future__ import annotations

import random
import zlib

from bench._history_gen14_world import Case

def _gib(rng: random.Random, low: float, high: float) -> str:
    return f"{rng.uniform(low, high):.2f} GiB"


def _exception(kind: str, rng: random.Random, case: Case, gpu: str) -> tuple[str, str]:
    """(exception line(s) as pytest's reprcrash message, the exception type's module-less name)."""
    total = {"T4": 14.56, "A10": 21.98, "L40S": 44.39}.get(gpu, 14.56)
    if kind == "tolerance":
        n = rng.choice((4096, 65536, 262144, 1048576))
        bad = rng.randint(1, 12)
        return (f"AssertionError: Tensor-likes are not close!\n\nMismatched elements: {bad} / {n} "
                f"({100 * bad / n:.1f}%)\nGreatest absolute difference: {rng.uniform(0.02, 0.4):.4f} at index "
                f"({rng.randint(0, 63)}, {rng.randint(0, 1023)}) (up to {rng.choice(('0.01', '0.02', '0.05'))} allowed)\n"
                f"Greatest relative difference: {rng.uniform(0.1, 9):.4f} at index ({rng.randint(0, 63)}, "
                f"{rng.randint(0, 1023)}) (up to {rng.choice(('0.1', '0.05', '0.01'))} allowed)"), "AssertionError"
    if kind == "mismatch":
        err = rng.uniform(0.0101, 0.013)
        return f"assert {err:.6f} < 0.01\n +  where {err:.6f} = <built-in method item of Tensor object>()", "AssertionError"
    if kind == "compile":
        return ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\nFileNotFoundError: [Errno 2] "
                f"No such file or directory: '/tmp/torchinductor_runner/triton/0/{rng.getrandbits(64):016x}.json'"), \
            "BackendCompilerFailed"
    if kind == "illegal_address":
        return ("RuntimeError: CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
                "asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"), "RuntimeError"
    if kind == "oom":
        free = rng.uniform(0.05, 1.2)
        other = total - free - rng.uniform(0.5, 2)
        return (f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {_gib(rng, 1, 4)}. GPU 0 has a "
                f"total capacity of {total:.2f} GiB of which {free * 1024:.2f} MiB is free. Process "
                f"{rng.randint(2000, 60000)} has {other:.2f} GiB memory in use. Of the allocated memory "
                f"{_gib(rng, 0.1, 1)} is allocated by PyTorch"), "OutOfMemoryError"
    if kind == "ecc":
        return ("RuntimeError: CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors might be "
                "asynchronously reported at some other API call, so the stacktrace below might be incorrect."), \
            "RuntimeError"
    if kind == "driver":
        return ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update "
                "your GPU driver by downloading and installing a new version from the URL: "
                "http://www.nvidia.com/Download/index.aspx"), "RuntimeError"
    if kind == "attr":
        return f"AttributeError: 'Params4bit' object has no attribute '{rng.choice(('quant_state', 'bnb_quantized', 'module'))}'", \
            "AttributeError"
    if kind == "shape":
        return (f"RuntimeError: The size of tensor a ({rng.choice((64, 128, 4096))}) must match the size of tensor "
                f"b ({rng.choice((32, 256, 4097))}) at non-singleton dimension 1"), "RuntimeError"
    err = rng.uniform(0.2, 3)
    return f"assert {err:.4f} < 0.1\n +  where {err:.4f} = <built-in method item of Tensor object>()", "AssertionError"


def failure(kind: str, rng: random.Random, case: Case, gpu: str, setup: bool = False) -> tuple[str, str]:
    """(``message`` attribute, element text) of one failed test attempt, as pytest's junitxml writes them."""
    exc, typ = _exception(kind, rng, case, gpu)
    line = 40 + zlib.crc32(f"{case.file}::{case.func}:{kind}".encode()) % 860  # stable per test and cause
    params = case.name.partition("[")[2].rstrip("]")
    head = f"self = <{case.classname}.{case.cls} object at 0x7f{rng.getrandbits(40):010x}>" if case.cls else ""
    args = f"device = 'cuda', params = '{params}'" if params else "device = 'cuda'"
    source = {"tolerance": "        torch.testing.assert_close(out, ref, atol=atol, rtol=rtol)",
              "mismatch": "        assert err < 0.01",
              "assert": "        assert err.mean().item() < 0.1",
              "compile": "        out = compiled(x)"}.get(kind, "        out = bnb.functional.dequantize_4bit(qA, state)")
    lines = [", ".join(p for p in (head, args) if p), "", f"    def {case.func}({'self, ' if case.cls else ''}device, *args):",
             "        ...", f">{source[1:]}"]
    lines += [("E   " if setup else "E       ") + part for part in exc.split("\n")]
    lines += ["", f"{case.file}:{line}: {typ}"]
    message = f'failed on setup with "{exc}"' if setup else exc
    return message, "\n".join(lines)
