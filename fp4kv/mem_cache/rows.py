"""Fast bit-exact row gather/scatter for token buffers ``[rows, ...]``.

CPU advanced indexing copies element by element; reinterpreting each row as the widest integer
words that divide its byte size (int64 for every FP4/bf16 row here) and using ``index_select`` /
``index_copy_`` moves the same bytes up to ~15x faster. Integer words also keep every bit
(NaN payloads included). Buffers must be contiguous (the pools allocate them so).
"""

from __future__ import annotations

import math

import torch

_WORDS = ((8, torch.int64), (4, torch.int32), (2, torch.int16), (1, torch.uint8))


def _as_words(t: torch.Tensor, rows: int) -> torch.Tensor:
    # Row size from the shape, not numel / rows: with 0 rows (an empty write) reshape(0, -1) is
    # ambiguous and the word size must still match the buffer's.
    row_elems = math.prod(t.shape[1:])
    row_bytes = row_elems * t.element_size()
    flat = t.reshape(rows, row_elems)
    if flat.element_size() == 1 and flat.dtype != torch.uint8:
        flat = flat.view(torch.uint8)  # fp8: view through bytes
    for size, dtype in _WORDS:
        if row_bytes % size == 0 and size >= flat.element_size():
            return flat.view(dtype)
    return flat


def gather_rows(buf: torch.Tensor, loc: torch.Tensor) -> torch.Tensor:
    """``buf[loc]`` (a new tensor ``[len(loc), *buf.shape[1:]]`` of ``buf.dtype``)."""
    words = _as_words(buf, buf.shape[0])
    return words.index_select(0, loc).view(buf.dtype).reshape(loc.numel(), *buf.shape[1:])


def scatter_rows(buf: torch.Tensor, loc: torch.Tensor, src: torch.Tensor) -> None:
    """``buf[loc] = src`` for ``src`` of ``buf``'s dtype and shape ``[len(loc), *buf.shape[1:]]``.
    Repeated indices get one of their rows (which one is unspecified). An empty ``loc`` (with an
    empty ``src``) writes nothing."""
    src = src.contiguous()
    if src.dtype != buf.dtype or tuple(src.shape) != (loc.numel(), *buf.shape[1:]):
        raise ValueError(f"rows of {src.dtype} {tuple(src.shape)} do not fit buffer rows of "
                         f"{buf.dtype} {tuple(buf.shape[1:])} at {loc.numel()} slots")
    if loc.numel() == 0:
        return
    words = _as_words(buf, buf.shape[0])
    words.index_copy_(0, loc, _as_words(src, loc.numel()))
