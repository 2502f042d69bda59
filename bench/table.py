"""Plain-text tables and timing for the benchmarks (the only place bench output is formatted)."""

from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable, Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], title: str = "") -> str:
    """Left-aligned first column, right-aligned others; floats use ``{:.3g}`` unless pre-formatted."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(values, widths)))

    out = [title] if title else []
    out += [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def ratio(value: float) -> str:
    """``value`` in decimal notation with two places, or two significant digits below 0.1, so a
    positive ratio never prints as ``0.00`` (a phase 200 times faster than its baseline reads
    ``0.0050``, not zero)."""
    if value <= 0 or value >= 0.1 or not math.isfinite(value):
        return f"{value:.2f}"
    places = 1 - math.floor(math.log10(value))
    return f"{value:.{places}f}"


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def best_of(fn: Callable[[], object], repeat: int = 5, warmup: int = 1) -> float:
    """Best wall time of ``repeat`` calls, in seconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def percentiles(samples: Sequence[float], points: Sequence[int] = (50, 90, 99)) -> dict[int, float]:
    """Percentiles (nearest-rank on the sorted samples) of a non-empty sequence."""
    if not samples:
        raise ValueError("percentiles of an empty sample")
    ordered = sorted(samples)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 99
    return {p: cuts[p - 1] for p in points}


def best_of_interleaved(fns: Sequence[Callable[[], object]], repeat: int = 5, warmup: int = 1) -> list[float]:
    """Best wall time of each function, in seconds, over ``repeat`` rounds that call every
    function once in turn. On a shared, noisy machine a burst of load then slows one sample of
    every function instead of all samples of one, so ratios between them stay meaningful."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def best_seconds(device: Any, fns: Sequence[Callable[[], object]], repeat: int) -> list[float]:
    """Best time of one call of each function on a torch ``device``. CPU: wall clock, rounds
    interleaved (`best_of_interleaved`). CUDA: CUDA events around 10 queued calls, best of
    ``repeat``, so launch latency overlaps the work as in a server. torch is imported only for
    CUDA, so the other benchmarks do not pay for it."""
    if device.type != "cuda":
        return best_of_interleaved(fns, repeat=repeat, warmup=1)
    return [_cuda_seconds(device, fn, repeat) for fn in fns]


def _cuda_seconds(device: Any, fn: Callable[[], object], repeat: int, inner: int = 10) -> float:
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize(device)
    best = math.inf
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3 / inner)
    return best


def device_label(device: Any) -> str:
    """``cpu``, or the CUDA device's name."""
    if device.type != "cuda":
        return device.type
    import torch

    return torch.cuda.get_device_name(device)
