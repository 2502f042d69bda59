"""Preallocated per-call scratch for the chunked torch quantizers, their nibble packing, and
mx_block16's offset code table.

Why a workspace: every chunk of a call needs the same few 1-4 MB temporaries. Allocated afresh
per chunk they cost page faults whenever the allocator hands back fresh pages (measured: one
[32768, 16] bf16 chunk took 2.0 ms instead of 1.4 ms single-threaded); one set per call, reused
by every chunk and written with ``out=``, avoids that. Each buffer is sized for one chunk
(`fp4kv.quant._chunks.CHUNK_BLOCKS` blocks at most: under 12 MB for all of them together), so a
call's extra memory stays bounded whatever the input's size, and it is never shared between
calls (thread safe).
"""

from __future__ import annotations

from typing import Callable

import torch

from fp4kv.quant._chunks import chunk_ranges
from fp4kv.quant.e2m1 import SIGN_BIT, magnitude_codes_ties_away

BLOCK_SIZE = 16  # both recipes' block: 16 elements, 8 packed bytes, one scale byte

OFFSET_TABLE_BIAS = 49152
"""Added to ``top16 - shift`` (see `offset_code_table`) so that every index it can take is >= 0."""
OFFSET_TABLE_SIZE = OFFSET_TABLE_BIAS + 16576 + 1
"""Largest index + 1: 16576 (= bf16 bits of 6.0) is the largest ``top16 - shift`` of a finite block."""
_POSITIVE_FROM = -16160
"""``top16 - shift`` below this stands for a negative input (see `offset_code_table`)."""


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


def pack_code_pairs(codes: torch.Tensor, packed: torch.Tensor, work: Workspace) -> None:
    """uint8 codes ``[n, 16]`` (values 0..15) -> writes ``packed [n, 8]``, element 2j in the low nibble."""
    code_pairs = codes.view(torch.int16)  # little-endian: the even element is the low byte
    pairs = torch.bitwise_right_shift(code_pairs, 4, out=work.get("pairs", codes.shape[0], torch.int16, BLOCK_SIZE // 2))
    packed.copy_(pairs.bitwise_or_(code_pairs))  # the low byte is even | odd << 4; the cast keeps it


def offset_code_table(device: torch.device) -> torch.Tensor:
    """uint8 ``[OFFSET_TABLE_SIZE]``: the E2M1 code (ties away from zero) of ``top16 - shift``.

    ``top16`` is an element's bf16 bit pattern as a *signed* int16 (for fp32 input, its bits
    ``>> 16``), ``shift = (scale_byte - 127) << 7`` its block's exponent in bf16's exponent field,
    and the index is ``top16 - shift + OFFSET_TABLE_BIAS``. For a finite block every element has
    ``|x| / 2^e <= 6``, so a non-negative input lands at ``top16 - shift`` in ``[-16128, 16576]``
    (the bits of ``|x| / 2^e``; below 0 it underflowed: code 0), and a negative one (``top16 =
    magnitude - 32768``) in ``[-48896, -16192]``: the two ranges are disjoint, so one subtraction
    and one lookup give sign and magnitude. Negatives that round to zero get code 8 (-0); ``-0.0``
    itself must be fixed up by the caller. Non-finite blocks (scale byte 255) also index inside the
    table; their codes are meaningless and the caller zeroes them.
    """
    table = _TABLES.get(device)
    if table is None:
        v = torch.arange(OFFSET_TABLE_SIZE, dtype=torch.int32) - OFFSET_TABLE_BIAS
        positive = v >= _POSITIVE_FROM
        magnitude = torch.where(positive, v, v + 32768).clamp_(min=0)
        codes = magnitude_codes_ties_away(magnitude << 16)
        codes = torch.where(positive, codes, codes | SIGN_BIT)
        table = codes.to(torch.uint8).to(device)
        _TABLES[device] = table
    return table


_TABLES: dict[torch.device, torch.Tensor] = {}


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
