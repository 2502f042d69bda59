"""FP4 KV quantization speed, error and memory: ``python -m bench quant [--quick] [--big] [--race]``.

``--race [--fresh=N] [--repeat=R]``: mx_block16 against the peer's math (SGLang, restated in
`bench._peer_mx_block16`), eager and under ``torch.compile``, a ``clone()`` of the input and a
copy of it into a preallocated buffer, and our nvfp4 quantize, in the same process, at
``[4096, 8, 128]`` and ``[32768, 8, 128]``, bf16/fp16/fp32, quantize and dequantize (see
`bench._quant_race`). Docs quote only ratios from such a run, with its date and load.

Speed: mx_block16 and nvfp4 quantize/dequantize of ``randn(4096, 8, 128)`` bf16 (``--quick``:
``randn(512, 8, 128)``) on the torch path (CPU); with CUDA present also the compiled Triton
kernels on the GPU, on ``randn(262144, 8, 128)`` (512 MiB; ``--quick``: 16384 rows). Baseline:
a copy of the same input bytes on the same device (``dst.copy_(x)`` into a preallocated tensor:
device to device on CUDA), measured in the same run. "x copy time" is each op's time over the
copy's; GB/s counts each op's input + output bytes, and "of copy GB/s" divides it by the copy's
GB/s (the issue's target for quantize on H200-class memory: >= 0.8). CPU: best of N wall times; CUDA: best of N CUDA-event timings of 10
back-to-back calls each.

Error: round-trip MSE and max abs error against the bf16 input for mx_block16, nvfp4 (computed
global scale) and a plain FP8 E4M3 cast, with bits per element.

``--big``: only the memory check. Peak resident memory (VmHWM, reset through
/proc/self/clear_refs) of each torch-path call on ``[1, 2868672, 1024]`` bf16 (5.9 GB, the largest
shape of the peer's test), over the resident memory just before the call; needs Linux and about
11 GB free. fp4kv's own quantize/dequantize must stay within 2x the bf16 tensor's bytes.
"""

from __future__ import annotations

import gc
import math
import re
import time
from dataclasses import dataclass
from typing import Callable

import torch

from bench.table import best_seconds, device_label, format_table
from fp4kv.quant import BlockFP4KVQuantizeUtil, NVFP4KVQuantizeUtil

MX = BlockFP4KVQuantizeUtil
NV = NVFP4KVQuantizeUtil
BIG_SHAPE = (1, 2868672, 1024)
MEMORY_BOUND = 2.0  # extra memory of one call, in units of the bf16 tensor's bytes
_GB = 1e9


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[[], object]
    bytes_moved: int


def _speed_rows(x: torch.Tensor, backend: str, repeat: int) -> list[list[object]]:
    n = x.numel()
    in_bytes, fp4_bytes = n * x.element_size(), n // 2 + n // 16
    packed, scales = MX.batched_quantize(x, backend=backend)
    nv = NV.quantize(x, NV.compute_global_scale(x), backend=backend)
    g = nv.global_scale
    dst = torch.empty_like(x)
    cases = [
        Case("copy of the input (baseline)", lambda: dst.copy_(x), 2 * in_bytes),
        Case("mx_block16 quantize", lambda: MX.batched_quantize(x, backend=backend), in_bytes + fp4_bytes),
        Case("mx_block16 dequantize", lambda: MX.batched_dequantize(packed, scales, backend=backend), fp4_bytes + in_bytes),
        Case("nvfp4 quantize (given g)", lambda: NV.quantize(x, g, backend=backend), in_bytes + fp4_bytes),
        Case("nvfp4 dequantize", lambda: NV.dequantize(*nv, dtype=torch.bfloat16, backend=backend), fp4_bytes + in_bytes),
    ]
    seconds = best_seconds(x.device, [c.fn for c in cases], repeat)
    copy_rate = cases[0].bytes_moved / seconds[0]
    return [[c.name, backend if i else "-", device_label(x.device), f"{s * 1e3:.3f}", f"{s / seconds[0]:.1f}x",
             f"{c.bytes_moved / s / _GB:.1f}", f"{c.bytes_moved / s / copy_rate:.3f}"]
            for i, (c, s) in enumerate(zip(cases, seconds))]


def _error_rows(x: torch.Tensor) -> list[list[object]]:
    ref = x.float()
    n = x.numel()
    mx = MX.batched_dequantize(*MX.batched_quantize(x, backend="torch"), dtype=torch.float32, backend="torch")
    nv = NV.dequantize(*NV.quantize(x, backend="torch"), dtype=torch.float32, backend="torch")
    fp8 = x.to(torch.float8_e4m3fn).float()
    rows = []
    for name, out, bits in [("mx_block16", mx, 4 + 8 / 16), ("nvfp4 (computed g)", nv, 4 + 8 / 16 + 32 / n),
                            ("fp8 e4m3 cast", fp8, 8.0), ("bf16 (input)", ref, 16.0)]:
        err = out - ref
        rows.append([name, f"{bits:.3f}", f"{(err ** 2).mean().item():.5f}", f"{err.abs().max().item():.4f}"])
    return rows


# ------------------------------------------------------------------------------------------------
# --big: peak extra resident memory
# ------------------------------------------------------------------------------------------------

def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        match = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field}")
    return int(match.group(1)) * 1024


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        match = re.search(r"^MemAvailable:\s+(\d+) kB", f.read(), re.MULTILINE)
    return int(match.group(1)) * 1024 if match else 0


def peak_extra(fn: Callable[[], object]) -> tuple[object, int, float]:
    """Run ``fn`` once: (its result, peak RSS during the call minus RSS before it, seconds).

    Resets the kernel's high-water mark first (``echo 5 > /proc/self/clear_refs``, Linux)."""
    gc.collect()
    before = _status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    return result, _status_bytes("VmHWM") - before, seconds


def _nbytes(result: object) -> int:
    tensors = result if isinstance(result, tuple) else (result,)
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def _randn_in_place(shape: tuple[int, ...]) -> torch.Tensor:
    """randn bf16 of ``shape`` filled in slices: no fp32 temporary of the whole size, and no view
    left behind that would keep the storage alive after the caller drops it."""
    x = torch.empty(shape, dtype=torch.bfloat16)
    gen = torch.Generator().manual_seed(0)
    for part in x.view(-1, shape[-1]).split(65536):
        part.normal_(generator=gen)
    return x


def memory_rows(shape: tuple[int, int, int]) -> list[list[object]]:
    """One row per torch-path call on ``randn(shape)`` bf16: input, output and peak extra GB, the
    extra beyond the output (temporaries), extra over the bf16 tensor's bytes, seconds."""
    x = _randn_in_place(shape)
    tensor_bytes = x.numel() * 2
    rows: list[list[object]] = []

    def measure(name: str, fn: Callable[[], object], in_bytes: int) -> object:
        result, extra, seconds = peak_extra(fn)
        out_bytes = _nbytes(result)
        rows.append([name, f"{in_bytes / _GB:.2f}", f"{out_bytes / _GB:.2f}", f"{extra / _GB:.2f}",
                     f"{(extra - out_bytes) / _GB:.3f}", f"{extra / tensor_bytes:.2f}", f"{seconds:.1f}"])
        return result

    mx = measure("mx_block16 quantize", lambda: MX.batched_quantize(x, backend="torch"), tensor_bytes)
    g = measure("nvfp4 compute_global_scale", lambda: NV.compute_global_scale(x), tensor_bytes)
    nv = measure("nvfp4 quantize", lambda: NV.quantize(x, g, backend="torch"), tensor_bytes)
    del x
    out = measure("mx_block16 dequantize (bf16)", lambda: MX.batched_dequantize(*mx, backend="torch"), _nbytes(mx))
    del out
    measure("nvfp4 dequantize (bf16)", lambda: NV.dequantize(*nv, dtype=torch.bfloat16, backend="torch"), _nbytes(nv[:2]))
    return rows


def _big() -> int:
    shape = BIG_SHAPE
    need = 2 * 2 * math.prod(shape) * 1.25 + 1.5 * _GB  # input or output, both FP4 results, margin
    if _available_bytes() < need:
        print(f"bench quant --big: needs about {need / _GB:.1f} GB available, this machine has "
              f"{_available_bytes() / _GB:.1f} GB; not run")
        return 2
    rows = memory_rows(shape)
    title = (f"peak extra resident memory per call, torch path, randn{shape} bf16 "
             f"({math.prod(shape) * 2 / _GB:.2f} GB), {torch.get_num_threads()} threads; bound: "
             f"{MEMORY_BOUND:g}x the bf16 tensor")
    print(format_table(["call", "input GB", "output GB", "peak extra GB", "beyond output GB",
                        "extra / tensor", "s"], rows, title))
    worst = max(float(r[5]) for r in rows)
    return 0 if worst <= MEMORY_BOUND else 1


def main(argv: list[str]) -> int:
    if "--big" in argv:
        return _big()
    if "--race" in argv:
        from bench import _quant_race  # imports the peer restatement and torch.compile only here

        return _quant_race.main(argv)
    quick = "--quick" in argv
    shape = (512, 8, 128) if quick else (4096, 8, 128)
    repeat = 3 if quick else 5
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).bfloat16()
    headers = ["op", "backend", "device", "ms", "x copy time", "GB/s", "of copy GB/s"]
    rows = _speed_rows(x, "torch", repeat)
    title = (f"fp4kv quantization speed, bf16; CPU: randn{shape}, {torch.get_num_threads()} threads; "
             f"best of {repeat}")
    if torch.cuda.is_available():
        cuda_shape = (16384 if quick else 262144, 8, 128)
        x_cuda = torch.randn(cuda_shape, device="cuda", dtype=torch.bfloat16)
        rows += _speed_rows(x_cuda, "triton", repeat)
        title += f"; CUDA: randn{cuda_shape}"
    print(format_table(headers, rows, title=title))
    print()
    print(format_table(["format", "bits/elem", "MSE", "max abs err"], _error_rows(x),
                       title=f"round-trip error vs the bf16 input, randn{shape}"))
    return 0
