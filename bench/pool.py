"""KV pool throughput: ``python -m bench pool [--quick]``.

For one realistic layer (8 KV heads x 128) and each KV dtype: set_kv_buffer of a batch of tokens,
get_kv(loc) of a batch, and a whole-layer get_key_buffer. GB/s counts the bytes of the bf16
tensors moved (what the caller hands in or gets back); "x clone" is the time relative to
``tensor.clone()`` of the same number of bytes, measured in this run (1.0 = copy speed).
"""

from __future__ import annotations

import sys

import torch

from bench.table import best_of, format_table
from fp4kv.mem_cache import MHATokenToKVPool

DTYPES = ("bf16", "fp8_e4m3", "fp4_e2m1", "nvfp4")
HEADS, HEAD_DIM = 8, 128


def _timer(device: torch.device, repeat: int):
    def measure(fn) -> float:
        def run() -> None:
            fn()
            if device.type == "cuda":
                torch.cuda.synchronize()
        return best_of(run, repeat=repeat, warmup=1)
    return measure


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    size, batch, repeat = (1024, 256, 3) if quick else (4096, 1024, 5)
    measure = _timer(device, repeat)
    gen = torch.Generator(device="cpu").manual_seed(0)
    k = torch.randn(batch, HEADS, HEAD_DIM, generator=gen).to(device, torch.bfloat16)
    v = torch.randn(batch, HEADS, HEAD_DIM, generator=gen).to(device, torch.bfloat16)
    loc = (torch.randperm(size, generator=gen)[:batch] + 1).to(device)

    clone_cache: dict[int, float] = {}

    def clone_time(nbytes: int) -> float:
        if nbytes not in clone_cache:
            t = torch.empty(nbytes // 2, dtype=torch.bfloat16, device=device).normal_()
            clone_cache[nbytes] = measure(t.clone)
        return clone_cache[nbytes]

    rows, bf16_per_token = [], None
    for dtype in DTYPES:
        pool = MHATokenToKVPool(size, 1, dtype, HEADS, HEAD_DIM, layer_num=1, device=device)
        pool.set_kv_buffer(0, loc, k, v)  # first write (fixes nvfp4 global scales), untimed
        k_bytes, v_bytes = pool.get_kv_size_bytes()
        per_token = (k_bytes + v_bytes) / pool.rows
        bf16_per_token = bf16_per_token or per_token
        kv_bytes = 2 * batch * HEADS * HEAD_DIM * 2
        layer_bytes = pool.rows * HEADS * HEAD_DIM * 2
        ops = [
            (f"set_kv_buffer({batch})", lambda: pool.set_kv_buffer(0, loc, k, v), kv_bytes),
            (f"get_kv({batch})", lambda: pool.get_kv(0, loc), kv_bytes),
            (f"get_key_buffer({pool.rows})", lambda: pool.get_key_buffer(0), layer_bytes),
        ]
        for op, fn, nbytes in ops:
            seconds = measure(fn)
            rows.append([dtype, op, f"{seconds * 1e3:.3f}", f"{nbytes / seconds / 1e9:.2f}",
                         f"{seconds / clone_time(nbytes):.1f}", f"{per_token:.0f}",
                         f"{per_token / bf16_per_token:.3f}"])
    title = (f"KV pool on {device.type}, {HEADS} heads x {HEAD_DIM}, pool {size} tokens, batch {batch}, "
             f"{torch.get_num_threads()} threads, best of {repeat} (x clone: time / clone of the same bf16 bytes)")
    print(format_table(["dtype", "op", "ms", "GB/s", "x clone", "B/token", "vs bf16"], rows, title))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
