"""MHATokenToKVPool: round trips for every dtype, slot rules, validation before write, nvfp4 global
scales, size accounting and the write-through dequantization cache."""

from __future__ import annotations

import math
import re

import pytest
import torch

from fp4kv.mem_cache import KVCacheFormat, MHATokenToKVPool, parse_kv_cache_dtype
from fp4kv.quant import NVFP4KVQuantizeUtil
from kvpool_testutil import (ALL_DTYPES, FP4_DTYPES, bits, make_mha, randn, reference, same_bits,
                             snapshot, snapshots_equal)


def _gscale(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor(NVFP4KVQuantizeUtil.compute_global_scale(x), dtype=torch.float32)


@pytest.mark.parametrize("spelling,fmt", [
    (torch.bfloat16, KVCacheFormat.BF16), ("bf16", KVCacheFormat.BF16),
    (torch.float16, KVCacheFormat.FP16), ("fp16", KVCacheFormat.FP16),
    (torch.float8_e4m3fn, KVCacheFormat.FP8_E4M3), ("fp8_e4m3", KVCacheFormat.FP8_E4M3),
    ("fp4_e2m1", KVCacheFormat.MX_BLOCK16), ("mx_block16", KVCacheFormat.MX_BLOCK16),
    ("nvfp4", KVCacheFormat.NVFP4),
])
def test_dtype_spellings(spelling, fmt):
    assert parse_kv_cache_dtype(spelling) is fmt
    assert make_mha(spelling, size=4, layer_num=1).fmt is fmt


@pytest.mark.parametrize("bad", ["fp4", "int4", torch.int8, torch.float32, None, ["bf16"]])
def test_unknown_dtype_lists_valid_ones(bad):
    with pytest.raises(ValueError, match="unknown KV cache dtype") as err:
        make_mha(bad, size=4, layer_num=1)
    for name in ("bf16", "fp8_e4m3", "fp4_e2m1", "nvfp4"):
        assert name in str(err.value)


@pytest.mark.parametrize("kw,msg", [
    (dict(size=0), "size"), (dict(page_size=0), "page_size"), (dict(layer_num=0), "layer_num"),
    (dict(head_dim=0), "head_dim"), (dict(start_layer=-1), "start_layer"),
    (dict(dtype="nvfp4", head_dim=24), "head_dim divisible by 16"),
    (dict(dtype="fp4_e2m1", head_num=1, head_dim=6), "heads\\*head_dim divisible by 16"),
])
def test_bad_construction(kw, msg):
    with pytest.raises(ValueError, match=msg):
        make_mha(**kw)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("input_dtype", [torch.bfloat16, torch.float32])
def test_round_trip_matches_reference_bytes(dtype, input_dtype):
    pool = make_mha(dtype, page_size=4, v_head_dim=16)
    loc = torch.tensor([5, 9, 4, 60, 67], dtype=torch.int64)  # 67 = last row (size + page_size - 1)
    k = randn(5, 2, 32, seed=1, dtype=input_dtype) * 3
    v = randn(5, 2, 16, seed=2, dtype=input_dtype)
    gk = gv = None
    if dtype == "nvfp4":
        gk, gv = _gscale(k), _gscale(v)
        pool.set_kv_global_scales(1, gk, gv)
    pool.set_kv_buffer(1, loc, k, v)
    raw_k, raw_v = pool.get_raw_kv(1)
    got_k, got_v = pool.get_kv(1, loc)
    for x, g, raw, got in ((k, gk, raw_k, got_k), (v, gv, raw_v, got_v)):
        data, scales, decoded = reference(dtype, x, g, out_dtype=pool.compute_dtype)
        assert same_bits(raw.data[loc], data)
        if scales is None:
            assert raw.scales is None
        else:
            assert same_bits(raw.scales[loc], scales)
        assert same_bits(got, decoded)
    if dtype == "bf16" and input_dtype is torch.bfloat16:
        assert same_bits(got_k, k)  # plain bf16 storage is exact
    # layer 0 was never written
    assert not bits(pool.get_raw_kv(0)[0].data).any()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_fp4_is_lossy_but_close(dtype):
    pool = make_mha(dtype)
    x = randn(32, 2, 32, seed=3)
    pool.set_kv_buffer(0, torch.arange(1, 33), x, x)
    k, _ = pool.get_kv(0, torch.arange(1, 33))
    mse = float(((k.float() - x.float()) ** 2).mean())
    bound = {"bf16": 0.0, "fp16": 1e-5, "fp8_e4m3": 2e-3, "fp4_e2m1": 0.03, "nvfp4": 0.03}[dtype]
    assert mse <= bound
    if dtype in FP4_DTYPES:
        assert mse > 0


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_writes_touch_only_their_rows_and_never_slot0(dtype):
    pool = make_mha(dtype, page_size=2)
    pool.set_kv_buffer(0, torch.tensor([3, 4]), randn(2, 2, 32, seed=4), randn(2, 2, 32, seed=5))
    before = snapshot(pool)
    loc = torch.tensor([1, 2, 10])
    pool.set_kv_buffer(0, loc, randn(3, 2, 32, seed=6), randn(3, 2, 32, seed=7))
    after = snapshot(pool)
    changed = torch.zeros(pool.rows, dtype=torch.bool)
    changed[loc] = True
    for b, a in zip(before, after):
        if b.dim() == 0:
            continue
        assert same_bits(b[~changed], a[~changed])  # slot 0 and every other row unchanged
    assert not bits(pool.get_raw_kv(0)[0].data[0]).any()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_get_kv_equals_rows_of_full_buffers(dtype):
    pool = make_mha(dtype, page_size=4)
    pool.set_kv_buffer(1, torch.arange(4, 20), randn(16, 2, 32, seed=8), randn(16, 2, 32, seed=9))
    loc = torch.tensor([19, 0, 4, 7, 30, 4])  # unwritten rows and repeats are fine for reads
    k, v = pool.get_kv(1, loc)
    full_k, full_v = pool.get_kv_buffer(1)
    assert k.dtype == v.dtype == pool.compute_dtype
    assert same_bits(k, full_k[loc].to(pool.compute_dtype))
    assert same_bits(v, full_v[loc].to(pool.compute_dtype))
    assert full_k.shape == (pool.rows, 2, 32)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8_e4m3"])
def test_plain_buffers_are_the_storage(dtype):
    pool = make_mha(dtype)
    k_buf = pool.get_key_buffer(0)
    assert k_buf.dtype == parse_kv_cache_dtype(dtype).torch_dtype
    assert k_buf.data_ptr() == pool.get_raw_kv(0)[0].data.data_ptr()
    pool.set_kv_buffer(0, torch.tensor([7]), torch.ones(1, 2, 32), torch.ones(1, 2, 32))
    assert float(k_buf[7].float().sum()) == 64.0  # same memory, no copy


def test_compute_dtype_defaults_and_override():
    assert make_mha("fp16").compute_dtype is torch.float16
    assert make_mha("fp8_e4m3").compute_dtype is torch.bfloat16
    assert make_mha("nvfp4").compute_dtype is torch.bfloat16
    pool = make_mha("fp4_e2m1", compute_dtype=torch.float32)
    pool.set_kv_buffer(0, torch.tensor([1]), randn(1, 2, 32), randn(1, 2, 32))
    assert pool.get_kv(0, torch.tensor([1]))[0].dtype is torch.float32
    assert pool.get_key_buffer(0).dtype is torch.float32


def test_start_layer_ids_are_global():
    pool = make_mha("bf16", start_layer=5, layer_num=2)
    x = randn(1, 2, 32)
    pool.set_kv_buffer(6, torch.tensor([1]), x, x)
    assert same_bits(pool.get_kv(6, torch.tensor([1]))[0], x)
    for bad in (0, 4, 7, -1):
        with pytest.raises(IndexError, match=r"layer_id .* \[5, 7\)"):
            pool.get_key_buffer(bad)


# -- validation before write -----------------------------------------------------------------

def _bad_calls():
    k, v = randn(3, 2, 32, seed=10), randn(3, 2, 32, seed=11)
    loc = torch.tensor([1, 2, 3])
    return [
        ("layer too high", (2, loc, k, v), IndexError, "layer_id 2"),
        ("layer negative", (-1, loc, k, v), IndexError, "layer_id -1"),
        ("loc int32", (0, loc.int(), k, v), ValueError, "int64"),
        ("loc float", (0, loc.float(), k, v), ValueError, "int64"),
        ("loc list", (0, [1, 2, 3], k, v), ValueError, "torch.Tensor"),
        ("loc 2-D", (0, loc[None], k, v), ValueError, "1-D"),
        ("loc past end", (0, torch.tensor([1, 2, 68]), k, v), IndexError, "68"),
        ("loc negative", (0, torch.tensor([1, -2, 3]), k, v), IndexError, "-2"),
        ("loc duplicate", (0, torch.tensor([1, 5, 5]), k, v), ValueError, "duplicate slots \\[5\\]"),
        ("loc shorter", (0, loc[:2], k, v), ValueError, r"cache_k has shape \(3, 2, 32\).*\[2, 2, 32\]"),
        ("k heads", (0, loc, randn(3, 1, 32), v), ValueError, r"\(3, 1, 32\).*\[3, 2, 32\]"),
        ("v dim", (0, loc, k, randn(3, 2, 16)), ValueError, r"cache_v has shape \(3, 2, 16\)"),
        ("v tokens", (0, loc, k, randn(2, 2, 32)), ValueError, "cache_v has shape"),
        ("k int", (0, loc, k.to(torch.int32), v), ValueError, "dtype torch.int32"),
        ("k float64", (0, loc, k.double(), v), ValueError, "dtype torch.float64"),
        ("v not tensor", (0, loc, k, None), ValueError, "cache_v must be a torch.Tensor"),
    ]


@pytest.mark.parametrize("dtype", ["bf16", "fp4_e2m1", "nvfp4"])
def test_rejected_write_leaves_buffers_bit_identical(dtype):
    pool = make_mha(dtype, page_size=4)
    pool.set_kv_buffer(0, torch.arange(1, 9), randn(8, 2, 32, seed=12), randn(8, 2, 32, seed=13))
    before = snapshot(pool)
    for label, args, exc, msg in _bad_calls():
        with pytest.raises(exc, match=msg):
            pool.set_kv_buffer(*args)
        assert snapshots_equal(before, snapshot(pool)), label
    # nvfp4: a rejected first write to layer 1 must not have fixed its scales either
    assert pool.get_kv_global_scales(1) == (None, None)


def test_padding_slot_may_repeat():
    pool = make_mha("bf16")
    pool.set_kv_buffer(0, torch.tensor([0, 3, 0, 0]), randn(4, 2, 32), randn(4, 2, 32))
    assert same_bits(pool.get_kv(0, torch.tensor([3]))[0], randn(4, 2, 32)[1:2])


def test_read_validation():
    pool = make_mha("fp4_e2m1")
    with pytest.raises(IndexError, match="out of range"):
        pool.get_kv(0, torch.tensor([pool.rows]))
    with pytest.raises(ValueError, match="int64"):
        pool.get_kv(0, torch.tensor([1.0]))
    with pytest.raises(IndexError, match="layer_id 9"):
        pool.get_kv(9, torch.tensor([1]))


# -- size accounting -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_size_bytes_counts_every_buffer(dtype):
    L, H, D, Dv, rows = 3, 2, 32, 16, 64 + 4
    pool = make_mha(dtype, page_size=4, layer_num=L, v_head_dim=Dv)
    actual = [0, 0]
    for layer in range(L):
        for i, raw in enumerate(pool.get_raw_kv(layer)):
            actual[i] += sum(t.nbytes for t in (raw.data, raw.scales, raw.global_scale) if t is not None)
    assert pool.get_kv_size_bytes() == tuple(actual)

    def analytic(d: int) -> int:
        if dtype in ("bf16", "fp16"):
            return L * rows * H * d * 2
        if dtype == "fp8_e4m3":
            return L * rows * H * d
        per_row = H * d // 2 + H * d // 16  # packed codes + one scale byte per 16 values
        return L * (rows * per_row + (4 if dtype == "nvfp4" else 0))

    assert pool.get_kv_size_bytes() == (analytic(D), analytic(Dv))
    if dtype in FP4_DTYPES:  # the peer's defect: counting only the data buffers
        data_only = sum(pool.get_raw_kv(layer)[0].data.nbytes for layer in range(L))
        assert pool.get_kv_size_bytes()[0] > data_only


# -- dequantization cache --------------------------------------------------------------------

def test_fp4_full_buffer_without_cache_is_recomputed():
    pool = make_mha("fp4_e2m1")
    a, b = pool.get_key_buffer(0), pool.get_key_buffer(0)
    assert a is not b and same_bits(a, b)


@pytest.mark.parametrize("dtype", FP4_DTYPES)
def test_dequant_cache_is_write_through_and_lru(dtype):
    cached = make_mha(dtype, dequant_cache_layers=1)
    plain = make_mha(dtype)
    first = randn(6, 2, 32, seed=18)
    for pool in (cached, plain):
        pool.set_kv_buffer(0, torch.arange(1, 7), first, first)
    k0 = cached.get_key_buffer(0)
    assert cached.get_key_buffer(0) is k0  # served from the cache
    new = randn(3, 2, 32, seed=19) * 4
    loc = torch.tensor([2, 30, 0])
    for pool in (cached, plain):
        pool.set_kv_buffer(0, loc, new, new)
    assert cached.get_key_buffer(0) is k0
    assert same_bits(k0, plain.get_key_buffer(0))  # updated in place, not stale
    assert same_bits(cached.get_kv(0, loc)[0], plain.get_kv(0, loc)[0])
    assert same_bits(cached.get_value_buffer(0), plain.get_value_buffer(0))
    # capacity 1 layer: reading layer 1 evicts layer 0
    cached.get_kv_buffer(1)
    assert cached.get_key_buffer(0) is not k0
    assert same_bits(cached.get_key_buffer(0), plain.get_key_buffer(0))


def test_fp4_nan_block_reads_back_as_nan_not_zero():
    pool = make_mha("fp4_e2m1", head_num=1)
    k = randn(1, 1, 32, seed=24)
    k[0, 0, 20] = float("nan")
    pool.set_kv_buffer(0, torch.tensor([1]), k, k)
    got = pool.get_kv(0, torch.tensor([1]))[0][0, 0]
    assert bool(got[16:32].isnan().all())   # the block holding the NaN
    assert not bool(got[:16].isnan().any())  # its neighbour is unaffected


def test_fp8_reads_equal_torch_cast_for_every_byte():
    pool = make_mha("fp8_e4m3", size=256, head_num=1, head_dim=16, compute_dtype=torch.float32)
    every_byte = torch.arange(256 * 16, dtype=torch.int64).remainder(256).to(torch.uint8)
    pool.get_raw_kv(0)[0].data[1:].view(torch.uint8).copy_(every_byte.view(256, 1, 16))
    got = pool.get_kv(0, torch.arange(1, 257))[0]
    want = every_byte.view(torch.float8_e4m3fn).to(torch.float32).view(256, 1, 16)
    assert same_bits(got, want)  # NaN bytes included


# -- regressions: empty writes, fp8 non-finite -------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_empty_write_is_validated_and_writes_nothing(dtype):
    pool = make_mha(dtype, dequant_cache_layers=1)
    pool.set_kv_buffer(0, torch.arange(1, 5), randn(4, 2, 32), randn(4, 2, 32, seed=1))
    pool.get_key_buffer(0)  # cached layer: must stay consistent too
    if dtype == "nvfp4":
        pool.set_kv_global_scales(1, 0.01, 0.02)
    before = snapshot(pool)
    empty = torch.empty(0, dtype=torch.int64)
    for layer in (0, 1):
        pool.set_kv_buffer(layer, empty, torch.empty(0, 2, 32), torch.empty(0, 2, 32))
    assert snapshots_equal(before, snapshot(pool))
    assert pool.get_kv(0, empty)[0].shape == (0, 2, 32)
    with pytest.raises(ValueError, match="cache_k has shape"):  # still validated
        pool.set_kv_buffer(0, empty, torch.empty(1, 2, 32), torch.empty(0, 2, 32))
    with pytest.raises(IndexError, match="layer_id 5"):
        pool.set_kv_buffer(5, empty, torch.empty(0, 2, 32), torch.empty(0, 2, 32))
    if dtype == "nvfp4":  # no scale was fixed by the empty writes: calibration may still change
        pool.set_kv_global_scales(1, 0.03, 0.04)
        assert pool.get_kv_global_scales(1) == (float(torch.tensor(0.03)), float(torch.tensor(0.04)))
        pool2 = make_mha("nvfp4")
        pool2.set_kv_buffer(0, empty, torch.empty(0, 2, 32), torch.empty(0, 2, 32))
        assert pool2.get_kv_global_scales(0) == (None, None)


@pytest.mark.parametrize("input_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fp8_stores_nan_and_inf_as_nan_never_as_finite(input_dtype):
    pool = make_mha("fp8_e4m3", head_num=1, head_dim=16, compute_dtype=torch.float32)
    k = torch.tensor([math.inf, -math.inf, math.nan, 1.0, -2.0] + [0.5] * 11).view(1, 1, 16).to(input_dtype)
    pool.set_kv_buffer(0, torch.tensor([1]), k, k)
    for got in pool.get_kv(0, torch.tensor([1])):
        got = got.view(-1)
        assert bool(got[:3].isnan().all())  # +-Inf was +-448 before
        assert got[3:].tolist() == [1.0, -2.0] + [0.5] * 11
