"""HostKVMirror: offload and restore are bit-exact for data AND scales AND global scales."""

from __future__ import annotations

import pytest
import torch

from fp4kv.mem_cache import HostKVMirror, MLATokenToKVPool
from kvpool_testutil import ALL_DTYPES, FP4_DTYPES, make_mha, randn, same_bits, snapshot, snapshots_equal


def _filled(dtype, seed=0, **kw):
    pool = make_mha(dtype, page_size=2, **kw)
    loc = torch.arange(2, 14)
    for layer in range(pool.layer_num):
        scale = 1 + 3 * layer  # layers with different ranges -> different nvfp4 global scales
        pool.set_kv_buffer(layer, loc, randn(12, 2, 32, seed=seed + layer) * scale,
                           randn(12, 2, 32, seed=seed + 10 + layer))
    return pool, loc


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_backup_then_restore_elsewhere_is_bit_exact(dtype):
    pool, loc = _filled(dtype)
    mirror = HostKVMirror(pool, host_size=20)
    assert not mirror.pin_memory  # CPU pool
    host_loc = torch.arange(12) + 5
    mirror.backup(loc, host_loc)
    dest = torch.arange(30, 42)
    mirror.restore(host_loc, dest)
    for layer in range(2):
        for src_raw, name in zip(pool.get_raw_kv(layer), "kv"):
            assert same_bits(src_raw.data[dest], src_raw.data[loc]), name
            if src_raw.scales is not None:
                assert same_bits(src_raw.scales[dest], src_raw.scales[loc]), name
        a, b = pool.get_kv(layer, dest), pool.get_kv(layer, loc)
        assert same_bits(a[0], b[0]) and same_bits(a[1], b[1])


@pytest.mark.parametrize("dtype", FP4_DTYPES)
def test_restore_into_a_fresh_pool_carries_global_scales(dtype):
    pool, loc = _filled(dtype)
    mirror = HostKVMirror(pool, host_size=12)
    mirror.backup(loc, torch.arange(12))
    fresh = make_mha(dtype, page_size=2)
    mirror.pool = fresh  # same layout: reuse the host copy against another pool
    mirror.restore(torch.arange(12), loc)
    assert snapshots_equal(snapshot(pool), snapshot(fresh))
    for layer in range(2):
        assert same_bits(fresh.get_kv(layer, loc)[0], pool.get_kv(layer, loc)[0])
        assert fresh.get_kv_global_scales(layer) == pool.get_kv_global_scales(layer)


def test_restore_refuses_conflicting_fixed_global_scale():
    pool, loc = _filled("nvfp4")
    mirror = HostKVMirror(pool, host_size=12)
    mirror.backup(loc, torch.arange(12))
    other, _ = _filled("nvfp4", seed=50)
    other.set_kv_buffer(1, torch.tensor([20]), randn(1, 2, 32) * 100, randn(1, 2, 32) * 100)
    mirror.pool = other
    before = snapshot(other)
    with pytest.raises(ValueError, match="fixed at"):
        mirror.restore(torch.arange(12), loc)
    assert snapshots_equal(before, snapshot(other))


@pytest.mark.parametrize("dtype", FP4_DTYPES)
def test_hicache_defect_data_without_scales_corrupts_mirror_does_not(dtype):
    """The peer's host offload copied the packed data but not the scale buffers."""
    pool, loc = _filled(dtype)
    expected = pool.get_kv(1, loc)[0].clone()
    mirror = HostKVMirror(pool, host_size=12)
    mirror.backup(loc, torch.arange(12))
    host_data_only = pool.get_raw_kv(1)[0].data[loc].clone()
    # The slots get reused by other requests (different data and scales) ...
    pool.set_kv_buffer(1, loc, randn(12, 2, 32, seed=99) * 0.01, randn(12, 2, 32, seed=98))
    # ... then the old tokens come back. Defective restore: data only.
    pool.get_raw_kv(1)[0].data[loc] = host_data_only
    corrupted = pool.get_kv(1, loc)[0]
    assert not same_bits(corrupted, expected)
    assert float((corrupted.float() - expected.float()).abs().max()) > 0.5
    # The mirror restores data and scales together.
    mirror.restore(torch.arange(12), loc)
    assert same_bits(pool.get_kv(1, loc)[0], expected)


def test_restore_updates_cached_dequantized_layers():
    pool, loc = _filled("fp4_e2m1", dequant_cache_layers=2)
    expected = pool.get_key_buffer(0)[loc].clone()
    mirror = HostKVMirror(pool, host_size=12)
    mirror.backup(loc, torch.arange(12))
    pool.set_kv_buffer(0, loc, randn(12, 2, 32, seed=77), randn(12, 2, 32, seed=78))
    mirror.restore(torch.arange(12), loc)
    assert same_bits(pool.get_key_buffer(0)[loc], expected)


def test_mla_pool_mirror():
    pool = MLATokenToKVPool(size=8, page_size=1, dtype="nvfp4", layer_num=1, device="cpu")
    pool.set_mla_kv_buffer(0, torch.tensor([1, 2]), randn(2, 1, 512), randn(2, 1, 64))
    mirror = HostKVMirror(pool, host_size=4)
    mirror.backup(torch.tensor([1, 2]), torch.tensor([0, 3]))
    mirror.restore(torch.tensor([3, 0]), torch.tensor([6, 5]))
    assert same_bits(pool.get_kv(0, torch.tensor([5, 6]))[0], pool.get_kv(0, torch.tensor([1, 2]))[0])
    assert mirror.size_bytes() == 4 * (288 + 36)


@pytest.mark.parametrize("call,exc,msg", [
    (lambda m: m.backup(torch.tensor([1, 2]), torch.tensor([0])), ValueError, "2 slots but host_loc has 1"),
    (lambda m: m.backup(torch.tensor([1]), torch.tensor([12])), IndexError, "host_loc out of range"),
    (lambda m: m.backup(torch.tensor([1, 2]), torch.tensor([3, 3])), ValueError, "host_loc holds duplicate"),
    (lambda m: m.backup(torch.tensor([99]), torch.tensor([0])), IndexError, "device_loc out of range"),
    (lambda m: m.restore(torch.tensor([0, 1]), torch.tensor([4, 4])), ValueError, "device_loc holds duplicate"),
    (lambda m: m.restore(torch.tensor([0]), torch.tensor([1.0])), ValueError, "int64"),
])
def test_mirror_validation_changes_nothing(call, exc, msg):
    pool, loc = _filled("fp4_e2m1")
    mirror = HostKVMirror(pool, host_size=12)
    mirror.backup(loc, torch.arange(12))
    before_pool = snapshot(pool)
    before_host = [t.clone() for t in mirror.data["k"] + mirror.scales["k"]]
    with pytest.raises(exc, match=msg):
        call(mirror)
    assert snapshots_equal(before_pool, snapshot(pool))
    assert all(same_bits(a, b) for a, b in zip(before_host, mirror.data["k"] + mirror.scales["k"]))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", FP4_DTYPES)
def test_cuda_mirror_uses_pinned_memory_and_is_exact(dtype):
    pool = make_mha(dtype, page_size=2, device="cuda")
    loc = torch.arange(2, 14, device="cuda")
    pool.set_kv_buffer(0, loc, randn(12, 2, 32).cuda() * 3, randn(12, 2, 32, seed=1).cuda())
    expected = pool.get_kv(0, loc)[0].clone()
    mirror = HostKVMirror(pool, host_size=12)
    assert mirror.pin_memory and mirror.data["k"][0].is_pinned()
    mirror.backup(loc, torch.arange(12))
    pool.set_kv_buffer(0, loc, randn(12, 2, 32, seed=2).cuda(), randn(12, 2, 32, seed=3).cuda())
    mirror.restore(torch.arange(12), loc)
    torch.cuda.synchronize()
    assert same_bits(pool.get_kv(0, loc)[0], expected)


# -- regressions: empty copies, per-row nvfp4 global scales ------------------------------------

@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_empty_backup_and_restore_copy_nothing(dtype):
    pool, loc = _filled(dtype)
    mirror = HostKVMirror(pool, host_size=12)
    mirror.backup(loc, torch.arange(12))
    before_host = [t.clone() for t in mirror.data["k"] + mirror.scales["k"] if t is not None]
    empty = torch.empty(0, dtype=torch.int64)
    mirror.backup(empty, empty)
    assert all(same_bits(a, b) for a, b in zip(before_host, [t for t in mirror.data["k"] + mirror.scales["k"]
                                                             if t is not None]))
    fresh = make_mha(dtype, page_size=2)
    mirror.pool = fresh
    before = snapshot(fresh)
    mirror.restore(empty, empty)
    assert snapshots_equal(before, snapshot(fresh))
    assert fresh.get_kv_global_scales(0) == (None, None)  # no scale adopted by an empty restore
    with pytest.raises(ValueError, match="0 slots but host_loc has 1"):  # still validated
        mirror.restore(torch.tensor([0]), empty)


def _nvfp4_pool(scale, seed):
    pool = make_mha("nvfp4", size=16, head_num=1, head_dim=16, layer_num=1)
    pool.set_kv_buffer(0, torch.tensor([1, 2]), randn(2, 1, 16, seed=seed) * scale,
                       randn(2, 1, 16, seed=seed + 1) * scale)
    return pool


def test_backups_from_pools_with_different_global_scales_keep_their_own_scale():
    loc = torch.tensor([1, 2])
    a, b = _nvfp4_pool(1, seed=0), _nvfp4_pool(100, seed=2)
    assert a.get_kv_global_scales(0) != b.get_kv_global_scales(0)
    mirror = HostKVMirror(a, host_size=8)
    mirror.backup(loc, torch.tensor([0, 1]))
    mirror.pool = b
    mirror.backup(loc, torch.tensor([2, 3]))  # must not overwrite the scale of host rows 0, 1
    for src, host, src_loc in ((a, [0, 1], [1, 2]), (b, [3, 2], [2, 1])):
        dest = make_mha("nvfp4", size=16, head_num=1, head_dim=16, layer_num=1)
        mirror.pool = dest
        mirror.restore(torch.tensor(host), torch.tensor([4, 5]))
        assert dest.get_kv_global_scales(0) == src.get_kv_global_scales(0)
        for got, want in zip(dest.get_kv(0, torch.tensor([4, 5])), src.get_kv(0, torch.tensor(src_loc))):
            assert same_bits(got, want)  # t10.py: -1.05 came back as -128


def test_restore_of_rows_with_different_global_scales_is_refused_and_writes_nothing():
    loc = torch.tensor([1, 2])
    a, b = _nvfp4_pool(1, seed=0), _nvfp4_pool(100, seed=2)
    mirror = HostKVMirror(a, host_size=8)
    mirror.backup(loc, torch.tensor([0, 1]))
    mirror.pool = b
    mirror.backup(loc, torch.tensor([2, 3]))
    dest = make_mha("nvfp4", size=16, head_num=1, head_dim=16, layer_num=1)
    mirror.pool = dest
    before = snapshot(dest)
    with pytest.raises(ValueError, match="different nvfp4 global scales"):
        mirror.restore(torch.tensor([1, 2]), torch.tensor([4, 5]))
    assert snapshots_equal(before, snapshot(dest))
    assert dest.get_kv_global_scales(0) == (None, None)


def test_overwritten_host_rows_take_the_new_global_scale():
    loc = torch.tensor([1, 2])
    a, b = _nvfp4_pool(1, seed=0), _nvfp4_pool(100, seed=2)
    mirror = HostKVMirror(a, host_size=4)
    mirror.backup(loc, torch.tensor([0, 1]))
    mirror.pool = b
    mirror.backup(loc, torch.tensor([0, 1]))  # same host rows: B's rows and scale replace A's
    dest = make_mha("nvfp4", size=16, head_num=1, head_dim=16, layer_num=1)
    mirror.pool = dest
    mirror.restore(torch.tensor([0, 1]), loc)
    assert dest.get_kv_global_scales(0) == b.get_kv_global_scales(0)
    assert same_bits(dest.get_kv(0, loc)[0], b.get_kv(0, loc)[0])


def test_zero_rows_backed_up_before_the_scale_was_set_restore_with_any_scale():
    pool = make_mha("nvfp4", size=16, head_num=1, head_dim=16, layer_num=1)
    mirror = HostKVMirror(pool, host_size=4)
    mirror.backup(torch.tensor([1]), torch.tensor([0]))  # scale unset: the row is zeros
    pool.set_kv_buffer(0, torch.tensor([2]), randn(1, 1, 16) * 3, randn(1, 1, 16))
    mirror.backup(torch.tensor([2]), torch.tensor([1]))
    dest = make_mha("nvfp4", size=16, head_num=1, head_dim=16, layer_num=1)
    mirror.pool = dest
    mirror.restore(torch.tensor([0, 1]), torch.tensor([3, 4]))
    assert dest.get_kv_global_scales(0) == pool.get_kv_global_scales(0)
    assert not dest.get_kv(0, torch.tensor([3]))[0].float().abs().sum()
    assert same_bits(dest.get_kv(0, torch.tensor([4]))[0], pool.get_kv(0, torch.tensor([2]))[0])
