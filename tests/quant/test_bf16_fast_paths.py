"""The bf16 paths of the torch quantizers (int16 block max, scale bytes and offsets looked up by
the block's amax), held to the fp64 oracle on EVERY bf16 bit pattern.

Three sets of blocks, each pattern in each:
* alone in its block (the rest zeros): the scale byte of every possible amax, including
  subnormals, +-0, the largest finite values, +-Inf and every NaN payload;
* after an anchor that fixes the block's scale (6 * 2^k, the bf16 just above it, 3 * 2^k where
  the exponent steps, tiny anchors at SGLang's clamp): the code of every pattern against every
  decision bound at several scales, with both signs, saturation above 6 and underflow to 0;
* three random blocks, and a last chunk shorter than the others.
Enough blocks that nvfp4 builds its per-call amax tables; the per-block path is checked too.
"""

from __future__ import annotations

import pytest
import torch

import fp4kv.quant.nvfp4 as nvfp4
from bench._fp4_edges import alone_blocks, anchored_blocks
from fp4kv.quant import BlockFP4KVQuantizeUtil, NVFP4KVQuantizeUtil, _chunks

import fp_oracle as oracle

def all_blocks() -> torch.Tensor:
    short_chunk = torch.randn(3, 16, generator=torch.Generator().manual_seed(3)).bfloat16()
    return torch.cat([alone_blocks(), anchored_blocks(), short_chunk])


def test_the_sets_hold_every_pattern_and_enough_blocks_for_the_nvfp4_tables():
    blocks = all_blocks()
    assert blocks.shape[0] >= nvfp4.BF16_TABLE_MIN_BLOCKS
    assert blocks.shape[0] > _chunks.CHUNK_BLOCKS and blocks.shape[0] % _chunks.CHUNK_BLOCKS != 0
    assert torch.unique(alone_blocks().view(torch.int16)).numel() == 65536


def first_mismatches(actual: torch.Tensor, expected: torch.Tensor, blocks: torch.Tensor) -> list[str]:
    rows = (actual.reshape(blocks.shape[0], -1) != expected.reshape(blocks.shape[0], -1)).any(dim=1)
    return [f"block {i}: {blocks[i].view(torch.int16).tolist()}" for i in rows.nonzero().flatten()[:3].tolist()]


def test_mx_block16_bf16_matches_the_oracle_on_every_pattern():
    blocks = all_blocks()
    x = blocks.view(-1, 1, 16)
    packed, scales = BlockFP4KVQuantizeUtil.batched_quantize(x, backend="torch")
    want_packed, want_scales = oracle.mx_quantize(x)
    assert first_mismatches(scales, want_scales, blocks) == []
    assert first_mismatches(packed, want_packed, blocks) == []


@pytest.mark.parametrize("g", [1.0, 0.0123, 2.0 ** -100])
@pytest.mark.parametrize("tables", [True, False])
def test_nvfp4_bf16_matches_the_oracle_on_every_pattern(g, tables, monkeypatch):
    if not tables:
        monkeypatch.setattr(nvfp4, "BF16_TABLE_MIN_BLOCKS", 1 << 62)
    blocks = all_blocks()
    q = NVFP4KVQuantizeUtil.quantize(blocks, g, backend="torch")
    want_packed, want_scales = oracle.nvfp4_quantize(blocks, g)
    assert first_mismatches(q.block_scales, want_scales, blocks) == []
    assert first_mismatches(q.packed, want_packed, blocks) == []


def test_nvfp4_tables_are_used_from_the_threshold_on(monkeypatch):
    built = []
    real = nvfp4.bf16_amax_tables
    monkeypatch.setattr(nvfp4, "bf16_amax_tables", lambda g: built.append(1) or real(g))
    x = torch.ones(nvfp4.BF16_TABLE_MIN_BLOCKS, 16, dtype=torch.bfloat16)
    NVFP4KVQuantizeUtil.quantize(x[:-1], 1.0, backend="torch")
    NVFP4KVQuantizeUtil.quantize(x.float(), 1.0, backend="torch")  # fp32: never tables
    assert built == []
    NVFP4KVQuantizeUtil.quantize(x, 1.0, backend="torch")
    assert built == [1]
