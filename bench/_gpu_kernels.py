"""Parts b and c of `bench.gpu`: fp4kv's Triton kernels against the torch reference, and their speed.

b. Each kernel runs through fp4kv's public API with ``backend="triton"`` on the device (compiled
on CUDA; on CPU tensors under ``TRITON_INTERPRET=1``); the reference is the same call with
``backend="torch"`` on CPU copies of the same inputs. Codes and scales must be equal byte for byte,
dequantized values bit for bit (a NaN only has to meet a NaN). Quantize inputs, per input dtype
(bf16, fp16, fp32): the edge blocks of `bench._fp4_edges` (every bf16 pattern alone and after
scale anchors: zeros, subnormals, max finite, +-Inf, NaN, every decision-bound tie), then random
blocks over many binades with some NaN/Inf, so the count is odd and spans many programs of 64
blocks. nvfp4 quantizes with g = 1 and issue 15's g. Dequantize inputs: every packed byte with
every scale byte, then random bytes, to every output dtype (nvfp4: for each g of
`bench._fp4_edges.GLOBAL_SCALES`).

c. Each kernel's bytes read + written over its time (median of N, after warm-up; CUDA events on
CUDA, wall clock on CPU), as a ratio of the same figure for a device-to-device ``copy_`` that
moves the same number of bytes, timed in the same rounds (each round times the copy, then every
kernel). The goal, >= 0.8x, is reported, never a failure.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from bench._fp4_edges import GLOBAL_SCALES, ISSUE_G, alone_blocks, anchored_blocks
from fp4kv.quant import BlockFP4KVQuantizeUtil as MX
from fp4kv.quant import NVFP4KVQuantizeUtil as NV

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
KERNELS = ("mx_block16 quantize", "mx_block16 dequantize", "nvfp4 quantize", "nvfp4 dequantize")
GOAL = 0.8
EXPONENTS = {torch.bfloat16: (-30, 30), torch.float16: (-12, 10), torch.float32: (-30, 30)}
QUANTIZE_GS = {"one": 1.0, "issue_15": ISSUE_G}


@dataclass(frozen=True)
class Sizes:
    """How much each part does: every ``edge_stride``-th edge block (1: all), ``random_blocks``
    more, the full packed x scale byte cross (8,192 blocks) or one block per scale byte (256),
    the nvfp4 dequantize global scales (names in GLOBAL_SCALES), and for the speed part
    ``randn(speed_rows, 8, 128)`` bf16, ``warmup`` calls and the median of ``repeat`` rounds."""

    edge_stride: int
    random_blocks: int
    full_byte_cross: bool
    global_scales: tuple[str, ...]
    speed_rows: int
    warmup: int
    repeat: int


GPU_SIZES = Sizes(1, 2 ** 20 + 13, True, tuple(GLOBAL_SCALES), 262144, 3, 20)
INTERPRET_SIZES = Sizes(337, 131, False, ("one", "issue_15", "near_max"), 4, 1, 3)


@dataclass(frozen=True)
class ExactRow:
    """One kernel's bit-exact check: cases (input dtype or output dtype, and g) run and failed,
    blocks compared in all, and the first failing case's first differing block (``""`` if none)."""

    kernel: str
    cases: int
    failed: int
    blocks: int
    first_problem: str

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.cases > 0


@dataclass(frozen=True)
class SpeedRow:
    """One kernel's median seconds and bytes moved, and the copy's median seconds for those bytes."""

    kernel: str
    seconds: float
    copy_seconds: float
    bytes_moved: int
    shape: str

    @property
    def gbps(self) -> float:
        return self.bytes_moved / self.seconds / 1e9

    @property
    def of_copy(self) -> float:
        return self.copy_seconds / self.seconds


# -- inputs ------------------------------------------------------------------------------------

def quantize_blocks(sizes: Sizes, dtype: torch.dtype) -> tuple[torch.Tensor, int]:
    """``[n, 16]`` of ``dtype`` on CPU: edge blocks, then random ones; and how many are edge blocks."""
    edges = torch.cat([alone_blocks(), anchored_blocks()])[::sizes.edge_stride].to(dtype)
    gen = torch.Generator().manual_seed(0)
    low, high = EXPONENTS[dtype]
    scale = torch.exp2(torch.randint(low, high, (sizes.random_blocks, 1), generator=gen).float())
    noise = torch.randn(sizes.random_blocks, 16, generator=gen) * scale
    flat = noise.view(-1)
    flat[7::9973] = float("nan")
    flat[11::12007] = float("inf")
    flat[13::14009] = -float("inf")
    return torch.cat([edges, noise.to(dtype)]), len(edges)


def dequantize_bytes(sizes: Sizes) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(packed uint8 ``[n, 8]``, scale bytes uint8 ``[n]``, how many are edge blocks): every packed
    byte with every scale byte (or each scale byte once, with the packed bytes in turn), then
    random bytes."""
    repeats = 32 if sizes.full_byte_cross else 1
    scale_edges = torch.arange(256).repeat_interleave(repeats)
    groups = torch.arange(len(scale_edges)) % 32
    packed_edges = groups[:, None] * 8 + torch.arange(8)
    gen = torch.Generator().manual_seed(1)
    packed = torch.cat([packed_edges, torch.randint(0, 256, (sizes.random_blocks, 8), generator=gen)])
    scales = torch.cat([scale_edges, torch.randint(0, 256, (sizes.random_blocks,), generator=gen)])
    return packed.to(torch.uint8), scales.to(torch.uint8), len(scale_edges)


# -- b: bit-exact ------------------------------------------------------------------------------

def same_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise: equal bits, or both NaN."""
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32}[a.element_size()]
    equal = a.contiguous().view(ints) == b.contiguous().view(ints)
    return equal | (a.isnan() & b.isnan()) if a.is_floating_point() else equal


def first_bad_block(got: list[torch.Tensor], want: list[torch.Tensor], n: int, n_edge: int) -> str:
    """``""`` when every tensor pair has the same bits; else the first block where one differs."""
    bad = torch.zeros(n, dtype=torch.bool)
    for g, w in zip(got, want):
        bad |= ~same_bits(g.cpu().reshape(n, -1), w.reshape(n, -1)).all(dim=1)
    if not bool(bad.any()):
        return ""
    i = int(bad.nonzero()[0])
    where = f"edge block {i}" if i < n_edge else f"random block {i - n_edge}"
    shown = "; ".join(f"kernel {g.cpu().reshape(n, -1)[i].tolist()} reference {w.reshape(n, -1)[i].tolist()}"
                      for g, w in zip(got, want) if not bool(same_bits(g.cpu().reshape(n, -1)[i], w.reshape(n, -1)[i]).all()))
    return f"{int(bad.sum())} of {n} blocks differ; first: {where}: {shown}"


@dataclass
class _Tally:
    kernel: str
    cases: int = 0
    failed: int = 0
    blocks: int = 0
    first_problem: str = ""

    def add(self, case: str, problem: str, blocks: int) -> None:
        self.cases += 1
        self.blocks += blocks
        if problem:
            self.failed += 1
            self.first_problem = self.first_problem or f"{case}: {problem}"

    def row(self) -> ExactRow:
        return ExactRow(self.kernel, self.cases, self.failed, self.blocks, self.first_problem)


def exact_rows(device: torch.device, sizes: Sizes, log: Callable[[str], None]) -> list[ExactRow]:
    """One `ExactRow` per kernel of `KERNELS` (see the module docstring, part b)."""
    tallies = {k: _Tally(k) for k in KERNELS}
    for dtype in DTYPES:
        x, n_edge = quantize_blocks(sizes, dtype)
        n = len(x)
        got = MX.batched_quantize(x.to(device).view(1, n, 16), backend="triton")
        want = MX.batched_quantize(x.view(1, n, 16), backend="torch")
        tallies["mx_block16 quantize"].add(f"{dtype} input", first_bad_block(list(got), list(want), n, n_edge), n)
        for name, g in QUANTIZE_GS.items():
            q = NV.quantize(x.to(device), g, backend="triton")
            r = NV.quantize(x, g, backend="torch")
            problem = first_bad_block([q.packed, q.block_scales], [r.packed, r.block_scales], n, n_edge)
            tallies["nvfp4 quantize"].add(f"{dtype} input, g {name}", problem, n)
        log(f"quantize checked: {dtype}, {n} blocks")
    packed, scales, n_edge = dequantize_bytes(sizes)
    n = len(packed)
    p_dev, s_dev = packed.to(device), scales.to(device)
    for dtype in DTYPES:
        got = MX.batched_dequantize(p_dev.view(1, n, 8), s_dev.view(1, n), dtype, backend="triton")
        want = MX.batched_dequantize(packed.view(1, n, 8), scales.view(1, n), dtype, backend="torch")
        tallies["mx_block16 dequantize"].add(f"{dtype} output", first_bad_block([got], [want], n, n_edge), n)
        for name in sizes.global_scales:
            g = GLOBAL_SCALES[name]
            got = NV.dequantize(p_dev, s_dev.view(n, 1), g, dtype, backend="triton")
            want = NV.dequantize(packed, scales.view(n, 1), g, dtype, backend="torch")
            tallies["nvfp4 dequantize"].add(f"{dtype} output, g {name}", first_bad_block([got], [want], n, n_edge), n)
        log(f"dequantize checked: {dtype}, {n} blocks")
    return [t.row() for t in tallies.values()]


# -- c: bandwidth ------------------------------------------------------------------------------

def _timer(device: torch.device) -> Callable[[Callable[[], object]], float]:
    if device.type != "cuda":
        def wall(fn: Callable[[], object]) -> float:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        return wall

    def events(fn: Callable[[], object]) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    return events


def speed_rows(device: torch.device, sizes: Sizes) -> list[SpeedRow]:
    """One `SpeedRow` per kernel of `KERNELS` on ``randn(speed_rows, 8, 128)`` bf16 (part c)."""
    shape = (sizes.speed_rows, 8, 128)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(shape, generator=gen).to(device, torch.bfloat16)
    g = torch.tensor(ISSUE_G, dtype=torch.float32, device=device)  # on the device: no copy per call
    packed, scales = MX.batched_quantize(x, backend="triton")
    q = NV.quantize(x, g, backend="triton")
    n = x.numel()
    moved = 2 * n + n // 2 + n // 16  # bf16 in or out, packed codes and scale bytes the other way
    src = torch.ones(moved // 2, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    fns: dict[str, Callable[[], object]] = {
        "copy": lambda: dst.copy_(src),
        "mx_block16 quantize": lambda: MX.batched_quantize(x, backend="triton"),
        "mx_block16 dequantize": lambda: MX.batched_dequantize(packed, scales, torch.bfloat16, backend="triton"),
        "nvfp4 quantize": lambda: NV.quantize(x, g, backend="triton"),
        "nvfp4 dequantize": lambda: NV.dequantize(q.packed, q.block_scales, g, torch.bfloat16, backend="triton"),
    }
    for fn in fns.values():
        for _ in range(sizes.warmup):
            fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    timer = _timer(device)
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(sizes.repeat):
        for name, fn in fns.items():
            samples[name].append(timer(fn))
    median = {name: statistics.median(s) for name, s in samples.items()}
    label = f"randn{shape} bf16"
    return [SpeedRow(k, median[k], median["copy"], moved, label) for k in KERNELS]
