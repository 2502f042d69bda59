"""MHATokenToKVPool's nvfp4 global scales: computed from the first nonzero write or calibrated,
then fixed; refused when the quantizer would refuse them; never fixed by a write that fails."""

from __future__ import annotations

import math
import re

import pytest
import torch

from fp4kv.quant import NVFP4KVQuantizeUtil
from kvpool_testutil import make_mha, randn, reference, same_bits, snapshot, snapshots_equal

_F32_MAX = torch.finfo(torch.float32).max


def _gscale(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor(NVFP4KVQuantizeUtil.compute_global_scale(x), dtype=torch.float32)


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


def test_nvfp4_failing_encode_writes_nothing_and_fixes_no_scale():
    pool = make_mha("nvfp4")
    before = snapshot(pool)
    v = randn(2, 2, 32, seed=22)
    v[1, 0, 3] = float("nan")  # no global scale exists for V: the quantizer refuses
    with pytest.raises(ValueError, match="NaN"):
        pool.set_kv_buffer(0, torch.tensor([1, 2]), randn(2, 2, 32, seed=23), v)
    assert snapshots_equal(before, snapshot(pool))
    assert pool.get_kv_global_scales(0) == (None, None)  # K's computed scale was not kept


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
