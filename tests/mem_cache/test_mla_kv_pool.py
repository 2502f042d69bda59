"""MLATokenToKVPool: latent round trips, value buffer is real values, validation, sizes."""

from __future__ import annotations

import pytest
import torch

from fp4kv.mem_cache import MLATokenToKVPool
from kvpool_testutil import ALL_DTYPES, FP4_DTYPES, randn, reference, same_bits, snapshot, snapshots_equal
from fp4kv.quant import NVFP4KVQuantizeUtil


def _mla(dtype, **kw) -> MLATokenToKVPool:
    return MLATokenToKVPool(size=32, page_size=2, dtype=dtype, layer_num=2, device="cpu", **kw)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_latent_round_trip(dtype):
    pool = _mla(dtype)
    nope, rope = randn(4, 1, 512, seed=1), randn(4, 1, 64, seed=2) * 8
    loc = torch.tensor([2, 7, 33, 5])
    pool.set_mla_kv_buffer(1, loc, nope, rope)
    latent = torch.cat([nope, rope], dim=-1)
    g = None
    if dtype == "nvfp4":
        g = torch.tensor(NVFP4KVQuantizeUtil.compute_global_scale(latent), dtype=torch.float32)
        assert pool.get_kv_global_scale(1) == float(g)
    data, scales, decoded = reference(dtype, latent, g, out_dtype=pool.compute_dtype)
    raw = pool.get_raw_kv(1)
    assert same_bits(raw.data[loc], data)
    if scales is not None:
        assert same_bits(raw.scales[loc], scales)
    k, v = pool.get_kv(1, loc)
    assert k.shape == (4, 1, 576) and v.shape == (4, 1, 512)
    assert same_bits(k, decoded) and same_bits(v, decoded[..., :512])
    full_k, full_v = pool.get_key_buffer(1), pool.get_value_buffer(1)
    assert full_k.shape == (pool.rows, 1, 576) and full_v.shape == (pool.rows, 1, 512)
    assert same_bits(full_k[loc].to(pool.compute_dtype), decoded)
    assert not full_k[0].float().abs().sum()  # padding slot untouched


@pytest.mark.parametrize("dtype", FP4_DTYPES)
def test_value_buffer_is_dequantized_values_not_packed_bytes(dtype):
    # The peer's FP4 MLA pool returned the packed uint8 bytes here.
    pool = _mla(dtype)
    nope = randn(3, 1, 512, seed=3)
    pool.set_mla_kv_buffer(0, torch.tensor([1, 2, 3]), nope, randn(3, 1, 64, seed=4))
    v = pool.get_value_buffer(0)
    assert v.dtype == torch.bfloat16 and v.shape[-1] == 512
    err = (v[1:4].float() - nope.float()).pow(2).mean()
    assert float(err) < 0.03


def test_set_kv_buffer_equivalent_to_set_mla_kv_buffer():
    a, b = _mla("fp4_e2m1"), _mla("fp4_e2m1")
    nope, rope = randn(2, 1, 512, seed=5), randn(2, 1, 64, seed=6)
    loc = torch.tensor([4, 9])
    a.set_mla_kv_buffer(0, loc, nope, rope)
    b.set_kv_buffer(0, loc, torch.cat([nope, rope], -1), nope)
    assert snapshots_equal(snapshot(a), snapshot(b))


@pytest.mark.parametrize("args,exc,msg", [
    ((2, torch.tensor([1]), randn(1, 1, 512), randn(1, 1, 64)), IndexError, "layer_id 2"),
    ((0, torch.tensor([99]), randn(1, 1, 512), randn(1, 1, 64)), IndexError, "99"),
    ((0, torch.tensor([1, 1]), randn(2, 1, 512), randn(2, 1, 64)), ValueError, "duplicate"),
    ((0, torch.tensor([1]), randn(1, 1, 500), randn(1, 1, 64)), ValueError, r"cache_k_nope has shape \(1, 1, 500\)"),
    ((0, torch.tensor([1]), randn(1, 1, 512), randn(1, 2, 64)), ValueError, r"cache_k_rope has shape \(1, 2, 64\)"),
    ((0, torch.tensor([1]), randn(1, 1, 512), randn(1, 1, 64, dtype=torch.float16)), ValueError, "float16"),
])
def test_rejected_mla_write_changes_nothing(args, exc, msg):
    pool = _mla("nvfp4")
    before = snapshot(pool)
    with pytest.raises(exc, match=msg):
        pool.set_mla_kv_buffer(*args)
    assert snapshots_equal(before, snapshot(pool))
    with pytest.raises(ValueError, match=r"cache_v has shape \(1, 1, 576\)"):
        pool.set_kv_buffer(0, torch.tensor([1]), randn(1, 1, 576), randn(1, 1, 576))


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_mla_size_bytes(dtype):
    pool = _mla(dtype)
    rows, L = 34, 2
    per_row = {"bf16": 576 * 2, "fp16": 576 * 2, "fp8_e4m3": 576,
               "fp4_e2m1": 288 + 36, "nvfp4": 288 + 36}[dtype]
    expected = L * rows * per_row + (L * 4 if dtype == "nvfp4" else 0)
    actual = sum(sum(t.nbytes for t in (r.data, r.scales, r.global_scale) if t is not None)
                 for r in (pool.get_raw_kv(0), pool.get_raw_kv(1)))
    assert pool.get_kv_size_bytes() == (expected, 0) == (actual, 0)
