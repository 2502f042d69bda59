"""Bounded working memory for the torch paths: they process blocks in chunks of `CHUNK_BLOCKS`.

A chunk of 32768 blocks (512 Ki elements) keeps every temporary a few MB whatever the input's
size, so quantize and dequantize need no memory beyond their outputs and these temporaries
(``bench/quant.py --big`` measures it); it was also the fastest of 8-32 Ki blocks on a 2-core
CPU. Tests shrink it to check that chunking changes no bit.
"""

from __future__ import annotations

from typing import Iterator

CHUNK_BLOCKS = 32768


def chunk_ranges(n_blocks: int) -> Iterator[slice]:
    """Consecutive slices covering ``range(n_blocks)``, each at most `CHUNK_BLOCKS` long (read per call)."""
    step = CHUNK_BLOCKS
    for start in range(0, n_blocks, step):
        yield slice(start, min(start + step, n_blocks))
