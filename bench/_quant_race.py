"""The race behind ``python -m bench quant --race [--quick] [--fresh N] [--repeat R]``.

In one process, for each dtype (bf16, fp16, fp32) and shape (``[4096, 8, 128]`` and
``[32768, 8, 128]``; ``--quick``: ``[512, 8, 128]`` only), the same ``randn`` input goes through:
a plain ``x.clone()`` (the baseline), a copy into a preallocated buffer, fp4kv's torch path
(mx_block16, and nvfp4 quantize), and the peer's math restated in
`bench._peer_mx_block16`, eager and under ``torch.compile`` (``dynamic=False``: one specialised
kernel per shape and dtype, the peer's best case; the first call, which compiles, is timed
separately and not counted). Quantize and dequantize (to the input's dtype) both. The timed calls
of one (dtype, shape) take turns for ``R`` rounds (`bench.table` explains why), and each reports
its median and best. Ratios are each contender's median over the clone's median (and best over
best: under load a burst of other work lands in some samples of every contender, so the minimum
is the steadier statistic), and ours over the compiled peer.

``--fresh N`` runs the race in N fresh processes (``python -m bench quant --race --json``), then
prints the median over processes of each median time and of each ratio, and each process's
compile seconds (the first process compiles cold; later ones may hit the inductor cache).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Callable, Sequence

import torch

from bench import _peer_mx_block16 as peer
from bench.table import format_table
from fp4kv.quant import BlockFP4KVQuantizeUtil as MX
from fp4kv.quant import NVFP4KVQuantizeUtil as NV

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
SHAPES = [(4096, 8, 128), (32768, 8, 128)]
QUICK_SHAPES = [(512, 8, 128)]
CONTENDERS = ["clone", "copy_ into a buffer", "ours quantize", "peer quantize eager", "peer quantize compiled",
              "ours dequantize", "peer dequantize eager", "peer dequantize compiled", "ours nvfp4 quantize"]
"""``copy_ into a buffer`` (no allocation, so no page faults) shows how much of the clone's time at
the large shape is fresh pages; ``ours nvfp4 quantize`` is the other recipe's torch path with its
global scale computed beforehand (the peer has no nvfp4)."""


def _timed_rounds(fns: Sequence[Callable[[], object]], rounds: int) -> list[list[float]]:
    """Seconds of every call: ``rounds`` rounds, each calling every function once in turn."""
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            samples[i].append(time.perf_counter() - start)
    return samples


def _first_call(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def race_case(dtype: torch.dtype, shape: tuple[int, int, int], rounds: int) -> dict[str, object]:
    """One (dtype, shape): per contender median/best seconds, plus compile seconds of the peer's
    compiled quantize and dequantize (their first calls)."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    ours_q = lambda: MX.batched_quantize(x, backend="torch")  # noqa: E731
    packed, scales = ours_q()
    peer_q, peer_dq = torch.compile(peer.quantize, dynamic=False), torch.compile(peer.dequantize, dynamic=False)
    compile_q = _first_call(lambda: peer_q(x))
    compile_dq = _first_call(lambda: peer_dq(packed, scales, dtype))
    buffer = torch.empty_like(x)
    g = NV.compute_global_scale(x)
    fns = [lambda: x.clone(), lambda: buffer.copy_(x), ours_q, lambda: peer.quantize(x), lambda: peer_q(x),
           lambda: MX.batched_dequantize(packed, scales, dtype, backend="torch"),
           lambda: peer.dequantize(packed, scales, dtype), lambda: peer_dq(packed, scales, dtype),
           lambda: NV.quantize(x.view(-1, shape[-1]), g, backend="torch")]
    for fn in fns:  # warm-up (tables, allocator, caches)
        fn()
    samples = _timed_rounds(fns, rounds)
    return {"median": {n: statistics.median(s) for n, s in zip(CONTENDERS, samples)},
            "best": {n: min(s) for n, s in zip(CONTENDERS, samples)},
            "compile_s": {"quantize": compile_q, "dequantize": compile_dq}}


def run_race(quick: bool, rounds: int) -> dict[str, dict[str, object]]:
    """Every case, keyed ``"bf16 4096x8x128"``."""
    results: dict[str, dict[str, object]] = {}
    for name, dtype in DTYPES.items():
        for shape in QUICK_SHAPES if quick else SHAPES:
            results[f"{name} {'x'.join(map(str, shape))}"] = race_case(dtype, shape, rounds)
    return results


def _ratios(median: dict[str, float]) -> dict[str, float]:
    base = median["clone"]
    out = {f"{n} / clone": median[n] / base for n in CONTENDERS[1:]}
    out["ours / peer compiled (quantize)"] = median["ours quantize"] / median["peer quantize compiled"]
    out["ours / peer compiled (dequantize)"] = median["ours dequantize"] / median["peer dequantize compiled"]
    return out


def _fresh(n: int, quick: bool, rounds: int) -> list[dict[str, dict[str, object]]]:
    args = [sys.executable, "-m", "bench", "quant", "--race", "--json", f"--repeat={rounds}"] + (["--quick"] if quick else [])
    runs = []
    for _ in range(n):
        out = subprocess.run(args, check=True, capture_output=True, text=True, env=dict(os.environ)).stdout
        runs.append(json.loads(out[out.index("{"):]))
    return runs


def _load() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def report(runs: list[dict[str, dict[str, object]]], rounds: int) -> str:
    """Tables: per case, median-over-processes of median ms and of each ratio; compile seconds."""
    cases = list(runs[0])
    lines = [f"mx_block16 race (and our nvfp4), CPU, {torch.get_num_threads()} threads, torch {torch.__version__}; "
             f"{len(runs)} process(es) x {rounds} interleaved rounds; load average now {_load()}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]
    rows = []
    for case in cases:
        med = {n: statistics.median(r[case]["median"][n] for r in runs) for n in CONTENDERS}
        best = {n: min(r[case]["best"][n] for r in runs) for n in CONTENDERS}
        by_median = {k: statistics.median(_ratios(r[case]["median"])[k] for r in runs) for k in _ratios(med)}
        by_best = {k: statistics.median(_ratios(r[case]["best"])[k] for r in runs) for k in _ratios(best)}
        for n in CONTENDERS:
            rows.append([case, n, f"{med[n] * 1e3:.2f}", f"{best[n] * 1e3:.2f}",
                         "1.0x" if n == "clone" else f"{by_median[n + ' / clone']:.1f}x",
                         "1.0x" if n == "clone" else f"{by_best[n + ' / clone']:.1f}x"])
        rows.append([case, "ours / peer compiled", "", "",
                     f"q {by_median['ours / peer compiled (quantize)']:.2f}x, "
                     f"dq {by_median['ours / peer compiled (dequantize)']:.2f}x",
                     f"q {by_best['ours / peer compiled (quantize)']:.2f}x, "
                     f"dq {by_best['ours / peer compiled (dequantize)']:.2f}x"])
    lines.append(format_table(["case", "contender", "median ms", "best ms", "x clone (median)", "x clone (best)"], rows))
    lines.append("ratios: per process, median over median (or best over best), then the median over processes; "
                 "on a loaded machine the best-of ratios are the steadier ones")
    compile_rows = [[case] + [" / ".join(f"{r[case]['compile_s'][k]:.1f}" for r in runs)
                              for k in ("quantize", "dequantize")] for case in cases]
    lines.append("")
    lines.append(format_table(["case", "peer compile s, quantize (per process)", "dequantize"], compile_rows,
                              title="first-call compile seconds of the peer's torch.compile (not in the times above)"))
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Entry from `bench.quant.main` for ``--race``."""
    quick = "--quick" in argv
    rounds = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--repeat=")), 3 if quick else 7)
    fresh = next((int(a.split("=", 1)[1]) for a in argv if a.startswith("--fresh=")), 0)
    if "--json" in argv:
        print(json.dumps(run_race(quick, rounds)))
        return 0
    runs = _fresh(fresh, quick, rounds) if fresh else [run_race(quick, rounds)]
    print(report(runs, rounds))
    return 0
