"""Preallocated per-call scratch for the chunked torch quantizers.

Why a workspace: every chunk of a call needs the same few 0.5-1 MB temporaries. Allocated afresh
per chunk they cost page faults whenever the allocator hands back fresh pages (measured: one
[32768, 16] bf16 chunk took 2.0 ms instead of 1.4 ms single-threaded); one set per call, reused
by every chunk and written with ``out=``, avoids that. Each buffer is sized for one chunk
(`fp4kv.quant._chunks.CHUNK_BLOCKS` blocks at most: under 8 MB for all of them together), so a
call's extra memory stays bounded whatever the input's size, and it is never shared between
calls (thread safe).
"""

from __future__ import annotations

from typing import Callable

import torch

from fp4kv.quant._chunks import chunk_ranges

BLOCK_SIZE = 16  # both recipes' block: 16 elements, 8 packed bytes, one scale byte


class Workspace:
    """Scratch for one quantize call, for chunks of up to ``rows`` blocks: named buffers
    ``[rows]`` or ``[rows, width]``, each made on first use and reused by every later chunk."""

    def __init__(self, rows: int, device: torch.device) -> None:
        self.rows = rows
        self.device = device
        self._buffers: dict[str, torch.Tensor] = {}

    def get(self, name: str, n: int, dtype: torch.dtype, width: int = 0) -> torch.Tensor:
        """The first ``n <= rows`` rows of buffer ``name`` (``dtype``, ``[rows]`` if ``width`` is 0,
        else ``[rows, width]``). One name always means one dtype and width."""
        buffer = self._buffers.get(name)
        if buffer is None:
            shape = (self.rows, width) if width else (self.rows,)
            buffer = self._buffers[name] = torch.empty(shape, dtype=dtype, device=self.device)
        return buffer[:n]


_PAIR_DTYPES = {torch.uint8: torch.int16, torch.int16: torch.int32}
"""Code dtype -> the integer twice as wide that holds one pair of codes."""


def pack_code_pairs(codes: torch.Tensor, packed: torch.Tensor, work: Workspace) -> None:
    """uint8 or int16 codes ``[n, 16]`` (values 0..15) -> writes ``packed [n, 8]``, element 2j in
    the low nibble.

    Each pair is read as one little-endian integer twice as wide (the even element low): ``w | w
    >> (width - 4)`` has the byte in its low 8 bits, and the cast to uint8 keeps them.
    """
    pair_dtype = _PAIR_DTYPES[codes.dtype]
    pairs = codes.view(pair_dtype)
    shift = 8 * codes.element_size() - 4
    scratch = work.get(f"pairs_{pair_dtype}", codes.shape[0], pair_dtype, BLOCK_SIZE // 2)
    packed.copy_(torch.bitwise_right_shift(pairs, shift, out=scratch).bitwise_or_(pairs))


def quantize_blocks_in_chunks(x: torch.Tensor, kernel: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Workspace], None]
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` as 16-element blocks, quantized chunk by chunk (`chunk_ranges`) with one `Workspace`:
    ``kernel(blocks, packed, scales, work)`` fills a chunk's packed ``uint8 [n, 8]`` and scale
    ``uint8 [n]`` rows. Returns ``(packed [blocks, 8], scales [blocks])``; the caller shapes them."""
    blocks = x.reshape(-1, BLOCK_SIZE)
    packed = torch.empty((blocks.shape[0], BLOCK_SIZE // 2), dtype=torch.uint8, device=x.device)
    scales = torch.empty((blocks.shape[0],), dtype=torch.uint8, device=x.device)
    parts = list(chunk_ranges(blocks.shape[0]))
    work = Workspace(max((p.stop - p.start for p in parts), default=0), x.device)
    for part in parts:
        kernel(blocks[part], packed[part], scales[part], work)
    return packed, scales
