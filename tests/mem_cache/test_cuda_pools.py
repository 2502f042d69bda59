"""The pools on CUDA (GPU tiers): every operation on a CUDA pool leaves the same bits as on a CPU
pool. FP4 data then goes through the compiled Triton kernels on the GPU and the torch path on the
CPU, so this also holds the kernels to the reference through the pools' row layouts.

Skipped where there is no CUDA device (the cpu tier runs the same pools on CPU in the other files).
"""

from __future__ import annotations

import pytest
import torch

from fp4kv.mem_cache import (
    HybridLinearKVPool,
    MLATokenToKVPool,
    PagedTokenToKVPoolAllocator,
    TokenToKVPoolAllocator,
)
from kvpool_testutil import ALL_DTYPES, FP4_DTYPES, make_mha, randn, same_bits, snapshot, snapshots_equal

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = "cuda"


def on_cpu(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    return [t.cpu() for t in tensors]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_kv_sized_layer_on_cuda_equals_cpu(dtype):
    # 8 KV heads x 128, a 4096-token pool, 1024 tokens written at scattered slots, two layers.
    cpu = make_mha(dtype, size=4096, head_num=8, head_dim=128, layer_num=2)
    gpu = make_mha(dtype, size=4096, head_num=8, head_dim=128, layer_num=2, device=CUDA)
    loc = torch.randperm(4096, generator=torch.Generator().manual_seed(0))[:1024] + 1
    for layer in (0, 1):
        k = randn(1024, 8, 128, seed=10 + layer) * (layer + 1) * 7
        v = randn(1024, 8, 128, seed=20 + layer)
        cpu.set_kv_buffer(layer, loc, k, v)
        gpu.set_kv_buffer(layer, loc.to(CUDA), k.to(CUDA), v.to(CUDA))
    assert snapshots_equal(snapshot(cpu), on_cpu(snapshot(gpu)))
    assert cpu.get_kv_global_scales(1) == gpu.get_kv_global_scales(1)
    for a, b in zip(cpu.get_kv(1, loc[:300]), gpu.get_kv(1, loc[:300].to(CUDA))):
        assert b.is_cuda and same_bits(a, b.cpu())
    assert same_bits(cpu.get_value_buffer(0), gpu.get_value_buffer(0).cpu())
    assert cpu.get_kv_size_bytes() == gpu.get_kv_size_bytes()


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_mla_pool_on_cuda_equals_cpu(dtype):
    pools = [MLATokenToKVPool(size=64, page_size=2, dtype=dtype, layer_num=2, device=d) for d in ("cpu", CUDA)]
    nope, rope = randn(6, 1, 512, seed=1), randn(6, 1, 64, seed=2) * 8
    loc = torch.tensor([2, 7, 33, 5, 64, 0])
    for pool in pools:
        dev = pool.get_raw_kv(1).data.device
        pool.set_mla_kv_buffer(1, loc.to(dev), nope.to(dev), rope.to(dev))
    cpu, gpu = pools
    assert snapshots_equal(snapshot(cpu), on_cpu(snapshot(gpu)))
    for a, b in zip(cpu.get_kv(1, loc[:5]), gpu.get_kv(1, loc[:5].to(CUDA))):
        assert same_bits(a, b.cpu())
    assert same_bits(cpu.get_value_buffer(1), gpu.get_value_buffer(1).cpu())
    assert cpu.get_kv_global_scale(1) == gpu.get_kv_global_scale(1)


@pytest.mark.parametrize("dtype", FP4_DTYPES)
def test_hybrid_pool_on_cuda_equals_cpu(dtype):
    hybrids = [HybridLinearKVPool([7, 3, 11], lambda n, d=d: make_mha(dtype, layer_num=n, device=d))
               for d in ("cpu", CUDA)]
    loc = torch.tensor([1, 2, 9])
    for layer in (3, 7, 11):
        k, v = randn(3, 2, 32, seed=layer) * layer, randn(3, 2, 32, seed=layer + 1)
        hybrids[0].set_kv_buffer(layer, loc, k, v)
        hybrids[1].set_kv_buffer(layer, loc.to(CUDA), k.to(CUDA), v.to(CUDA))
    cpu, gpu = hybrids
    assert snapshots_equal(snapshot(cpu.full_pool), on_cpu(snapshot(gpu.full_pool)))
    for layer in (3, 7, 11):
        assert same_bits(cpu.get_key_buffer(layer), gpu.get_key_buffer(layer).cpu())


def test_nvfp4_calibrated_global_scales_given_as_cuda_tensors():
    cpu, gpu = make_mha("nvfp4"), make_mha("nvfp4", device=CUDA)
    cpu.set_kv_global_scales(0, 0.0123, 0.0456)
    gpu.set_kv_global_scales(0, torch.tensor(0.0123, device=CUDA), torch.tensor(0.0456, device=CUDA))
    loc = torch.tensor([3, 4, 5])
    k, v = randn(3, 2, 32, seed=3) * 5, randn(3, 2, 32, seed=4)
    cpu.set_kv_buffer(0, loc, k, v)
    gpu.set_kv_buffer(0, loc.to(CUDA), k.to(CUDA), v.to(CUDA))
    assert cpu.get_kv_global_scales(0) == gpu.get_kv_global_scales(0)
    assert snapshots_equal(snapshot(cpu), on_cpu(snapshot(gpu)))


@pytest.mark.parametrize("dtype", FP4_DTYPES)
def test_dequant_cache_on_cuda_stays_write_through(dtype):
    plain, cached = make_mha(dtype, device=CUDA), make_mha(dtype, device=CUDA, dequant_cache_layers=1)
    loc = torch.tensor([1, 5, 9], device=CUDA)
    for pool in (plain, cached):
        pool.set_kv_buffer(0, loc, randn(3, 2, 32).to(CUDA), randn(3, 2, 32, seed=1).to(CUDA))
    k0 = cached.get_key_buffer(0)
    new = randn(3, 2, 32, seed=2).to(CUDA) * 3
    for pool in (plain, cached):
        pool.set_kv_buffer(0, loc, new, new)
    assert cached.get_key_buffer(0) is k0 and k0.is_cuda
    assert same_bits(k0.cpu(), plain.get_key_buffer(0).cpu())


@pytest.mark.parametrize("dtype", FP4_DTYPES)
def test_rejected_cuda_write_changes_nothing(dtype):
    pool = make_mha(dtype, device=CUDA)
    pool.set_kv_buffer(0, torch.tensor([1, 2], device=CUDA), randn(2, 2, 32).to(CUDA), randn(2, 2, 32).to(CUDA))
    before = snapshot(pool)
    with pytest.raises((ValueError, IndexError)):
        pool.set_kv_buffer(0, torch.tensor([3, 3], device=CUDA), randn(2, 2, 32).to(CUDA), randn(2, 2, 32).to(CUDA))
    with pytest.raises((ValueError, IndexError)):
        pool.set_kv_buffer(0, torch.tensor([1000], device=CUDA), randn(1, 2, 32).to(CUDA), randn(1, 2, 32).to(CUDA))
    assert snapshots_equal(on_cpu(before), on_cpu(snapshot(pool)))


def test_allocators_on_cuda_hand_out_valid_cuda_slots():
    tokens = TokenToKVPoolAllocator(64, device=CUDA)
    got = tokens.alloc(10)
    assert got.is_cuda and got.unique().numel() == 10 and int(got.min()) >= 1 and int(got.max()) <= 64
    tokens.free(got[:4])
    assert tokens.available_size() == 64 - 6
    paged = PagedTokenToKVPoolAllocator(64, page_size=4, device=CUDA)
    slots = paged.alloc(6)  # two pages
    assert slots.is_cuda and slots.numel() == 8 and int(slots.min()) >= 1
    paged.free(slots)
    assert paged.available_size() == 64


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
