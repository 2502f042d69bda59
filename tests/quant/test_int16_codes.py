"""`fp4kv.quant._int16_codes` (mx_block16's int16 code arithmetic on CPU) against the fp64
nearest-value oracle, on every input a finite block can give it, and at the ends of its range;
and the nibble packer both recipes share."""

from __future__ import annotations

import pytest
import torch

from fp4kv.quant import _int16_codes as codes16
from fp4kv.quant._workspace import Workspace, pack_code_pairs

import fp_oracle as oracle


def buffers(like: torch.Tensor, k: int) -> list[torch.Tensor]:
    return [torch.empty_like(like) for _ in range(k)]


def expected_codes(key: torch.Tensor, magnitude: torch.Tensor, ties: str) -> torch.Tensor:
    """sign (from ``key``) | nearest E2M1 index of the fp64 ``magnitude``."""
    sign = (key.to(torch.int32) < 0).to(torch.int64) * 8
    return oracle.e2m1_index(magnitude, ties) | sign


def shifted_inputs() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(p, sign keys, fp64 magnitudes): every magnitude pattern of a finite block (0 .. 6.0 in
    bf16 bits) at the largest and smallest block shifts, both signs, and the lowest p values."""
    m = torch.arange(0, 0x40C1, dtype=torch.int32)  # bits of |x| / 2^e, 0 .. 6.0
    magnitude = m.to(torch.int16).view(torch.bfloat16).to(torch.float64)
    rows_p, rows_key, rows_mag = [], [], []
    for negative in (False, True):
        key = (m | 0x8000 if negative else m).to(torch.int16)
        rows_p.append(m - codes16.TIES_AWAY_BIAS)
        rows_key.append(key)
        rows_mag.append(magnitude)
    # underflow: |x| / 2^e far below the grid (the largest shift, 126 << 7, on small magnitudes)
    low = torch.arange(0, 4096, dtype=torch.int32) - (126 << 7)
    rows_p.append(low - codes16.TIES_AWAY_BIAS)
    rows_key.append(torch.arange(0, 4096, dtype=torch.int32).to(torch.int16))
    rows_mag.append(torch.zeros(4096, dtype=torch.float64))
    p = torch.cat(rows_p)
    assert int(p.min()) >= -32768
    pad = 16 - len(p) % 16
    return (torch.cat([p, torch.full((pad,), -32768, dtype=torch.int32)]).to(torch.int16).view(-1, 16),
            torch.cat(rows_key + [torch.zeros(pad, dtype=torch.int16)]).view(-1, 16),
            torch.cat(rows_mag + [torch.zeros(pad, dtype=torch.float64)]))


def test_ties_away_codes_of_every_in_range_input_match_the_oracle():
    p, key, magnitude = shifted_inputs()
    got = codes16.ties_away_codes(p, key, *buffers(p, 2)).reshape(-1)
    want = expected_codes(key.reshape(-1), magnitude, "away")
    assert got.tolist() == want.tolist()


def test_ties_away_codes_at_the_bounds():
    values = torch.tensor([0.25, 0.2490234375, 0.75, 0.7460937, 1.25, 1.75, 2.5, 3.5, 5.0, 4.96875, 6.0,
                           0.0, -0.25, -5.0, 0.5, 1.0], dtype=torch.bfloat16)
    bits = values.view(torch.int16)
    p = ((bits.to(torch.int32) & 0x7FFF) - codes16.TIES_AWAY_BIAS).to(torch.int16).view(1, 16)
    got = codes16.ties_away_codes(p, bits.view(1, 16), *buffers(p, 2)).reshape(-1).tolist()
    assert got == [1, 0, 2, 1, 3, 4, 5, 6, 7, 6, 7, 0, 9, 15, 1, 2]


@pytest.mark.parametrize("dtype", [torch.int16, torch.uint8])
def test_pack_code_pairs_puts_the_even_element_low(dtype):
    codes = torch.randint(0, 16, (64, 16), generator=torch.Generator().manual_seed(0)).to(dtype)
    packed = torch.empty(64, 8, dtype=torch.uint8)
    pack_code_pairs(codes, packed, Workspace(64, codes.device))
    assert torch.equal(packed, oracle.pack(codes.to(torch.int64)))
    assert torch.equal(oracle.unpack(packed), codes.to(torch.int64))


def test_spread_per_block_fills_every_lane_with_its_blocks_value():
    values = torch.tensor([0, 1, -1, 0x7FFF, -32768, -16096], dtype=torch.int32)
    out = torch.empty(len(values), 16, dtype=torch.int16)
    codes16.spread_per_block(codes16.lanes64(values), out)
    assert out.tolist() == [[v] * 16 for v in values.tolist()]
