"""The torch path works in chunks of `fp4kv.quant._chunks.CHUNK_BLOCKS` blocks, which bounds its
working memory at any input size (``python -m bench quant --big`` measures the peak). Shrinking
the chunk to a few blocks must change no bit, in either recipe and direction, for every dtype,
including chunk boundaries that split a tensor's rows and an input that is not contiguous."""

from __future__ import annotations

import math

import pytest
import torch

import fp4kv.quant.mx_block16 as mx_block16
import fp4kv.quant.nvfp4 as nvfp4
from fp4kv.quant import BlockFP4KVQuantizeUtil, NVFP4KVQuantizeUtil, _chunks

import fp_oracle as oracle

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
N_BLOCKS = 3 * 5 * 64 // 16  # 60 blocks: chunks of 7 leave a short last chunk


def sample(dtype: torch.dtype) -> torch.Tensor:
    """x [3, 5, 64] over many binades, with a NaN block, -0.0 and a strided (non-contiguous) view."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(3, 64, 5, generator=gen, dtype=torch.float64).transpose(1, 2)  # not contiguous
    x = x * torch.exp2(torch.randint(-12, 12, (3, 5, 1), generator=gen).double())
    x[1, 2, 17] = math.nan
    x[2, 0, :16] = -0.0
    return x.to(dtype)


def in_chunks_of(monkeypatch: pytest.MonkeyPatch, blocks: int, module: object, name: str) -> list[int]:
    """Set the chunk size and count the blocks each call of ``module.name`` (a per-chunk worker) gets."""
    monkeypatch.setattr(_chunks, "CHUNK_BLOCKS", blocks)
    sizes: list[int] = []
    worker = getattr(module, name)

    def spy(first: torch.Tensor, *rest: object) -> None:
        sizes.append(first.shape[0])
        worker(first, *rest)

    monkeypatch.setattr(module, name, spy)
    return sizes


def test_chunk_ranges_cover_every_block_once_in_bounded_slices(monkeypatch):
    monkeypatch.setattr(_chunks, "CHUNK_BLOCKS", 7)
    parts = list(_chunks.chunk_ranges(60))
    assert [(p.start, p.stop) for p in parts] == [(i, min(i + 7, 60)) for i in range(0, 60, 7)]
    assert list(_chunks.chunk_ranges(0)) == []


@pytest.mark.parametrize("dtype", DTYPES)
def test_mx_block16_small_chunks_change_no_bit(dtype, monkeypatch):
    x = sample(dtype)
    whole = BlockFP4KVQuantizeUtil.batched_quantize(x, backend="torch")
    whole_out = {d: BlockFP4KVQuantizeUtil.batched_dequantize(*whole, dtype=d, backend="torch") for d in DTYPES}
    sizes = in_chunks_of(monkeypatch, 7, mx_block16, "_quantize_blocks_torch")
    chunked = BlockFP4KVQuantizeUtil.batched_quantize(x, backend="torch")
    assert sizes == [7] * 8 + [4]
    assert torch.equal(chunked[0], whole[0]) and torch.equal(chunked[1], whole[1])
    assert torch.equal(whole[0], oracle.mx_quantize(x)[0])  # and the bytes are right, not only stable
    sizes = in_chunks_of(monkeypatch, 7, mx_block16, "_dequantize_blocks_torch")
    for d in DTYPES:
        assert bool(oracle.same_bits(BlockFP4KVQuantizeUtil.batched_dequantize(*whole, dtype=d, backend="torch"),
                                     whole_out[d]).all())
    assert sizes == ([7] * 8 + [4]) * len(DTYPES)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nvfp4_small_chunks_change_no_bit(dtype, monkeypatch):
    x = sample(dtype)
    g = 0.0123  # not a power of two
    whole = NVFP4KVQuantizeUtil.quantize(x, g, backend="torch")
    whole_out = {d: NVFP4KVQuantizeUtil.dequantize(*whole, dtype=d, backend="torch") for d in DTYPES}
    sizes = in_chunks_of(monkeypatch, 7, nvfp4, "_quantize_blocks_torch")
    chunked = NVFP4KVQuantizeUtil.quantize(x, g, backend="torch")
    assert sizes == [7] * 8 + [4]
    assert torch.equal(chunked.packed, whole.packed) and torch.equal(chunked.block_scales, whole.block_scales)
    assert torch.equal(whole.packed, oracle.nvfp4_quantize(x, g)[0])
    sizes = in_chunks_of(monkeypatch, 7, nvfp4, "_dequantize_blocks_torch")
    for d in DTYPES:
        assert bool(oracle.same_bits(NVFP4KVQuantizeUtil.dequantize(*whole, dtype=d, backend="torch"), whole_out[d]).all())
    assert sizes == ([7] * 8 + [4]) * len(DTYPES)
