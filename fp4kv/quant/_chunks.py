"""Bounded working memory for the torch paths: they process blocks in chunks of `CHUNK_BLOCKS`.

A chunk of 16384 blocks (256 Ki elements) keeps every temporary at most 1 MB whatever the
input's size, so quantize and dequantize need no memory beyond their outputs and these
temporaries (``bench/quant.py --big`` measures it). Of 8, 16 and 32 Ki blocks on a 2-core CPU
(bf16 ``[4096, 8, 128]`` and ``[32768, 8, 128]``), 16 Ki was as fast as 32 Ki with two threads
and 5-20 % faster with one: a chunk's int16 temporaries then stay in a 2 MB L2 cache. Tests
shrink it to check that chunking changes no bit.
"""

from __future__ import annotations

from typing import Iterator

CHUNK_BLOCKS = 16384


def chunk_ranges(n_blocks: int) -> Iterator[slice]:
    """Consecutive slices covering ``range(n_blocks)``, each at most `CHUNK_BLOCKS` long (read per call)."""
    step = CHUNK_BLOCKS
    for start in range(0, n_blocks, step):
        yield slice(start, min(start + step, n_blocks))
