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


# -- nvfp4 global scales ---------------------------------------------------------------------

def test_nvfp4_scale_computed_from_first_write_then_fixed():
    pool = make_mha("nvfp4")
    k, v = randn(4, 2, 32, seed=14), randn(4, 2, 32, seed=15) * 0.1
    assert pool.get_kv_global_scales(0) == (None, None)
    pool.set_kv_buffer(0, torch.arange(1, 5), k, v)
    gk, gv = pool.get_kv_global_scales(0)
    assert gk == float(_gscale(k)) and gv == float(_gscale(v))
    assert gk != gv
    # A later, 10x larger write keeps the scale (it is never silently changed) ...
    big = k * 10
    pool.set_kv_buffer(0, torch.tensor([9]), big[:1], v[:1])
    assert pool.get_kv_global_scales(0) == (gk, gv)
    data, scales, _ = reference("nvfp4", big[:1], torch.tensor(gk))
    assert same_bits(pool.get_raw_kv(0)[0].data[9:10], data)
    assert same_bits(pool.get_raw_kv(0)[0].scales[9:10], scales)
    # ... and the earlier rows still decode exactly as before.
    _, _, decoded = reference("nvfp4", k, torch.tensor(gk))
    assert same_bits(pool.get_kv(0, torch.arange(1, 5))[0], decoded)
    # Other layers are independent.
    assert pool.get_kv_global_scales(1) == (None, None)


def test_nvfp4_calibrated_scale_is_used_and_then_locked():
    pool = make_mha("nvfp4")
    pool.set_kv_global_scales(1, 0.01, 0.02)
    pool.set_kv_global_scales(1, 0.005, 0.02)  # still changeable: nothing written yet
    x = randn(2, 2, 32, seed=16)
    pool.set_kv_buffer(1, torch.tensor([1, 2]), x, x)
    assert pool.get_kv_global_scales(1) == (float(torch.tensor(0.005)), float(torch.tensor(0.02)))
    data, _, _ = reference("nvfp4", x, torch.tensor(0.005))
    assert same_bits(pool.get_raw_kv(1)[0].data[1:3], data)
    pool.set_kv_global_scales(1, 0.005, 0.02)  # same values: accepted
    before = snapshot(pool)
    with pytest.raises(ValueError, match="fixed"):
        pool.set_kv_global_scales(1, 0.005, 0.03)
    assert snapshots_equal(before, snapshot(pool))


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, "1", torch.ones(2)])
def test_nvfp4_bad_scale_values(bad):
    pool = make_mha("nvfp4")
    with pytest.raises(ValueError, match="scale"):
        pool.set_kv_global_scales(0, 0.01, bad)
    assert pool.get_kv_global_scales(0) == (None, None)  # K was not set either


def test_global_scales_only_for_nvfp4():
    with pytest.raises(ValueError, match="only exist for nvfp4"):
        make_mha("fp4_e2m1").set_kv_global_scales(0, 0.1, 0.1)
    assert make_mha("bf16").get_kv_global_scales(0) == (None, None)


def test_nvfp4_all_zero_first_write_leaves_scale_unset():
    pool = make_mha("nvfp4")
    zeros = torch.zeros(2, 2, 32, dtype=torch.bfloat16)
    pool.set_kv_buffer(0, torch.tensor([1, 2]), zeros, zeros)
    assert pool.get_kv_global_scales(0) == (None, None)
    assert not pool.get_kv(0, torch.tensor([1, 2]))[0].float().abs().sum()
    x = randn(1, 2, 32, seed=17)
    pool.set_kv_buffer(0, torch.tensor([3]), x, x)
    assert pool.get_kv_global_scales(0)[0] == float(_gscale(x))
    assert not pool.get_kv(0, torch.tensor([1, 2]))[0].float().abs().sum()  # zeros stay zeros


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


# -- CUDA (gpu tiers; skipped on the cpu tier) ------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cuda_pool_matches_cpu_pool_bit_for_bit(dtype):
    cpu, gpu = make_mha(dtype, page_size=4), make_mha(dtype, page_size=4, device="cuda")
    loc = torch.tensor([4, 9, 33, 67, 0, 0])
    k, v = randn(6, 2, 32, seed=20) * 5, randn(6, 2, 32, seed=21)
    cpu.set_kv_buffer(1, loc, k, v)
    gpu.set_kv_buffer(1, loc.cuda(), k.cuda(), v.cuda())
    assert snapshots_equal(snapshot(cpu), [t.cpu() for t in snapshot(gpu)])
    for a, b in zip(cpu.get_kv(1, loc[:4]), gpu.get_kv(1, loc[:4].cuda())):
        assert same_bits(a, b.cpu())
    assert same_bits(cpu.get_key_buffer(1), gpu.get_key_buffer(1).cpu())
    with pytest.raises(ValueError, match="is on cpu"):
        gpu.set_kv_buffer(1, loc, k.cuda(), v.cuda())


def test_nvfp4_failing_encode_writes_nothing_and_fixes_no_scale():
    pool = make_mha("nvfp4")
    before = snapshot(pool)
    v = randn(2, 2, 32, seed=22)
    v[1, 0, 3] = float("nan")  # no global scale exists for V: the quantizer refuses
    with pytest.raises(ValueError, match="NaN"):
        pool.set_kv_buffer(0, torch.tensor([1, 2]), randn(2, 2, 32, seed=23), v)
    assert snapshots_equal(before, snapshot(pool))
    assert pool.get_kv_global_scales(0) == (None, None)  # K's computed scale was not kept


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


# -- regressions: scale checks, empty writes, scale fixing order, fp8 non-finite ---------------

_F32_MAX = torch.finfo(torch.float32).max


@pytest.mark.parametrize("bad", [1e36, 3e38, _F32_MAX, _F32_MAX / 2688 * 1.001])
def test_nvfp4_scale_that_the_quantizer_refuses_is_refused_at_set_time(bad):
    pool = make_mha("nvfp4")
    with pytest.raises(ValueError, match=f"k global scale .*got {re.escape(repr(bad))}"):
        pool.set_kv_global_scales(0, bad, 0.01)
    assert pool.get_kv_global_scales(0) == (None, None)
    x = randn(1, 2, 32)
    pool.set_kv_buffer(0, torch.tensor([1]), x, x)  # later writes still work (scale computed)
    assert pool.get_kv_global_scales(0)[0] == float(_gscale(x))


def test_nvfp4_largest_scale_the_quantizer_accepts_is_accepted():
    largest = float(torch.tensor(_F32_MAX / 2688, dtype=torch.float32))
    while largest * 2688 > _F32_MAX:  # fp32 rounding of the quotient may land just above
        largest = float(torch.nextafter(torch.tensor(largest), torch.tensor(0.0)))
    pool = make_mha("nvfp4")
    pool.set_kv_global_scales(0, largest, largest)
    x = randn(1, 2, 32)
    pool.set_kv_buffer(0, torch.tensor([1]), x, x)
    assert pool.get_kv_global_scales(0) == (largest, largest)


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


@pytest.mark.parametrize("calibrate", [False, True])
def test_nvfp4_scale_is_fixed_only_after_the_rows_are_stored(calibrate, monkeypatch):
    pool = make_mha("nvfp4")
    if calibrate:
        pool.set_kv_global_scales(0, 0.01, 0.02)
    before = pool.get_kv_global_scales(0)

    def failing_store(*args, **kwargs):
        raise RuntimeError("store failed")

    monkeypatch.setattr(pool, "_store_rows", failing_store)
    with pytest.raises(RuntimeError, match="store failed"):
        pool.set_kv_buffer(0, torch.tensor([1]), randn(1, 2, 32), randn(1, 2, 32, seed=1))
    assert pool.get_kv_global_scales(0) == before
    assert pool.global_scale_state(0, "k")[1].value == ("calibrated" if calibrate else "unset")
    monkeypatch.undo()
    pool.set_kv_global_scales(0, 0.05, 0.06)  # not fixed: still changeable


def test_nvfp4_first_write_into_a_cached_layer_decodes_with_the_new_scale():
    cached, plain = make_mha("nvfp4", dequant_cache_layers=1), make_mha("nvfp4")
    k0 = cached.get_key_buffer(0)  # cached while the scale is unset
    x = randn(3, 2, 32, seed=5) * 7
    for pool in (cached, plain):
        pool.set_kv_buffer(0, torch.tensor([1, 2, 3]), x, x)
    assert cached.get_key_buffer(0) is k0
    assert same_bits(k0, plain.get_key_buffer(0))


def test_nvfp4_first_write_of_tiny_values_works():
    pool = make_mha("nvfp4")
    tiny = torch.full((1, 2, 32), 1e-42)  # amax / 2688 underflows fp32: scale clamped to 2^-126
    pool.set_kv_buffer(0, torch.tensor([1]), tiny, tiny)
    assert pool.get_kv_global_scales(0) == (2.0 ** -126, 2.0 ** -126)
    assert not pool.get_kv(0, torch.tensor([1]))[0].float().abs().sum()  # below the format: zeros
    x = randn(1, 2, 32) * 1e-36
    pool.set_kv_buffer(0, torch.tensor([2]), x.float(), x.float())
    got = pool.get_kv(0, torch.tensor([2]))[0].float()
    assert float((got - x.float()).abs().max()) <= 0.25 * float(x.float().abs().max())


@pytest.mark.parametrize("input_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fp8_stores_nan_and_inf_as_nan_never_as_finite(input_dtype):
    pool = make_mha("fp8_e4m3", head_num=1, head_dim=16, compute_dtype=torch.float32)
    k = torch.tensor([math.inf, -math.inf, math.nan, 1.0, -2.0] + [0.5] * 11).view(1, 1, 16).to(input_dtype)
    pool.set_kv_buffer(0, torch.tensor([1]), k, k)
    for got in pool.get_kv(0, torch.tensor([1])):
        got = got.view(-1)
        assert bool(got[:3].isnan().all())  # +-Inf was +-448 before
        assert got[3:].tolist() == [1.0, -2.0] + [0.5] * 11
