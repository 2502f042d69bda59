"""FP4 KV quantization speed and error: ``python -m bench quant [--quick]``.

Speed: mx_block16 and nvfp4 quantize/dequantize of ``randn(4096, 8, 128)`` bf16 (``--quick``:
``randn(512, 8, 128)``), torch path on CPU, plus the compiled Triton path when CUDA is present;
ms (best of N), GB/s of input + output bytes, and the ratio to ``tensor.clone()`` of the same
input measured in the same run. Error: round-trip MSE and max abs error against the bf16 input
for mx_block16, nvfp4 (computed global scale) and a plain FP8 E4M3 cast, with bits per element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from bench.table import best_of, format_table
from fp4kv.quant import BlockFP4KVQuantizeUtil, NVFP4KVQuantizeUtil

MX = BlockFP4KVQuantizeUtil
NV = NVFP4KVQuantizeUtil


@dataclass(frozen=True)
class Case:
    name: str
    backend: str
    fn: Callable[[], object]
    bytes_moved: int


def _timer(device: torch.device, repeat: int) -> Callable[[Callable[[], object]], float]:
    def run(fn: Callable[[], object]) -> float:
        if device.type == "cuda":
            def synced() -> None:
                fn()
                torch.cuda.synchronize()
            return best_of(synced, repeat=repeat, warmup=2)
        return best_of(fn, repeat=repeat, warmup=1)
    return run


def _speed_rows(x: torch.Tensor, backend: str, repeat: int) -> list[list[object]]:
    n = x.numel()
    in_bytes, fp4_bytes = n * x.element_size(), n // 2 + n // 16
    packed, scales = MX.batched_quantize(x, backend=backend)
    nv = NV.quantize(x, backend=backend)
    g = nv.global_scale
    cases = [
        Case("clone (baseline)", "-", lambda: x.clone(), 2 * in_bytes),
        Case("mx_block16 quantize", backend, lambda: MX.batched_quantize(x, backend=backend), in_bytes + fp4_bytes),
        Case("mx_block16 dequantize", backend, lambda: MX.batched_dequantize(packed, scales, backend=backend),
             fp4_bytes + in_bytes),
        Case("nvfp4 quantize (given g)", backend, lambda: NV.quantize(x, g, backend=backend), in_bytes + fp4_bytes),
        Case("nvfp4 dequantize", backend, lambda: NV.dequantize(*nv, dtype=torch.bfloat16, backend=backend),
             fp4_bytes + in_bytes),
    ]
    timer = _timer(x.device, repeat)
    seconds = [timer(c.fn) for c in cases]
    base = seconds[0]
    return [[c.name, c.backend, str(x.device), f"{s * 1e3:.3f}", f"{c.bytes_moved / s / 1e9:.1f}", f"{s / base:.1f}x"]
            for c, s in zip(cases, seconds)]


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


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    shape = (512, 8, 128) if quick else (4096, 8, 128)
    repeat = 3 if quick else 5
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).bfloat16()
    headers = ["op", "backend", "device", "ms", "GB/s", "vs clone"]
    rows = _speed_rows(x, "torch", repeat)
    if torch.cuda.is_available():
        rows += _speed_rows(x.cuda(), "triton", repeat)
    print(format_table(headers, rows, title=f"fp4kv quantization speed, randn{shape} bf16, best of {repeat} "
                                            f"(torch threads: {torch.get_num_threads()})"))
    print()
    print(format_table(["format", "bits/elem", "MSE", "max abs err"], _error_rows(x),
                       title=f"round-trip error vs the bf16 input, randn{shape}"))
    return 0
