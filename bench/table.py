"""Plain-text tables and timing for the benchmarks (the only place bench output is formatted)."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence


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
