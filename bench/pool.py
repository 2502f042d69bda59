"""KV pool throughput: ``python -m bench pool [--quick]``.

For one realistic layer (8 KV heads x 128) and each KV dtype: set_kv_buffer of a batch of tokens,
get_kv(loc) of a batch, and a whole-layer get_key_buffer, on CPU (4096-token pool, batch 1024)
and, with CUDA present, on the GPU (262144-token pool, batch 65536). GB/s counts the bytes of the
bf16 tensors moved (what the caller hands in or gets back); "of copy" divides it by the GB/s of a
copy of the same number of bytes on the same device (``dst.copy_(src)``, preallocated: device to
device on CUDA), measured in the same run (1.00 = copy speed). On CPU all ops and copies take
turns within each of the N rounds (see `bench.table.best_of_interleaved`).
"""

from __future__ import annotations

import sys
from typing import Callable

import torch

from bench.table import best_seconds, device_label, format_table
from fp4kv.mem_cache import MHATokenToKVPool

DTYPES = ("bf16", "fp8_e4m3", "fp4_e2m1", "nvfp4")
HEADS, HEAD_DIM = 8, 128


def _rows(device: torch.device, size: int, batch: int, repeat: int) -> list[list[object]]:
    gen = torch.Generator(device="cpu").manual_seed(0)
    k = torch.randn(batch, HEADS, HEAD_DIM, generator=gen).to(device, torch.bfloat16)
    v = torch.randn(batch, HEADS, HEAD_DIM, generator=gen).to(device, torch.bfloat16)
    loc = (torch.randperm(size, generator=gen)[:batch] + 1).to(device)
    kv_bytes = 2 * batch * HEADS * HEAD_DIM * 2
    copies: dict[int, Callable[[], object]] = {}
    ops: list[tuple[str, str, Callable[[], object], int, bool]] = []  # dtype, op, fn, bf16 bytes, copies nothing
    per_token: dict[str, float] = {}
    for dtype in DTYPES:
        pool = MHATokenToKVPool(size, 1, dtype, HEADS, HEAD_DIM, layer_num=1, device=device)
        pool.set_kv_buffer(0, loc, k, v)  # first write (fixes nvfp4 global scales), untimed
        per_token[dtype] = sum(pool.get_kv_size_bytes()) / pool.rows
        layer_bytes = pool.rows * HEADS * HEAD_DIM * 2
        storage = pool.get_key_buffer(0).data_ptr() == pool.get_raw_kv(0)[0].data.data_ptr()
        ops += [(dtype, f"set_kv_buffer({batch})", lambda p=pool: p.set_kv_buffer(0, loc, k, v), kv_bytes, False),
                (dtype, f"get_kv({batch})", lambda p=pool: p.get_kv(0, loc), kv_bytes, False),
                (dtype, f"get_key_buffer({pool.rows})", lambda p=pool: p.get_key_buffer(0), layer_bytes, storage)]
    for _, _, _, nbytes, _ in ops:
        if nbytes not in copies:
            src = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).normal_()
            copies[nbytes] = lambda s=src, d=torch.empty_like(src): d.copy_(s)
    sizes = list(copies)
    seconds = best_seconds(device, [fn for _, _, fn, _, _ in ops] + [copies[n] for n in sizes], repeat)
    copy_seconds = dict(zip(sizes, seconds[len(ops):]))
    rows = []
    for (dtype, op, _, nbytes, no_copy), s in zip(ops, seconds):
        rate, of_copy = ("no copy", "-") if no_copy else (f"{nbytes / s / 1e9:.2f}", f"{copy_seconds[nbytes] / s:.3f}")
        rows.append([device_label(device), dtype, op, f"{s * 1e3:.3f}", rate, of_copy, f"{per_token[dtype]:.0f}",
                     f"{per_token[dtype] / per_token['bf16']:.3f}"])
    return rows


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    repeat = 3 if quick else 5
    rows = _rows(torch.device("cpu"), *((1024, 256) if quick else (4096, 1024)), repeat)
    title = (f"KV pool, {HEADS} heads x {HEAD_DIM}, best of {repeat}; CPU: {torch.get_num_threads()} threads, "
             f"pool {1024 if quick else 4096} tokens, batch {256 if quick else 1024}")
    if torch.cuda.is_available():
        size, batch = (16384, 4096) if quick else (262144, 65536)
        rows += _rows(torch.device("cuda"), size, batch, repeat)
        title += f"; CUDA: pool {size} tokens, batch {batch}"
    title += " (of copy: GB/s over a copy of the same bytes on the same device)"
    print(format_table(["device", "dtype", "op", "ms", "GB/s", "of copy", "B/token", "vs bf16"], rows, title))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
