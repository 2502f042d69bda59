"""HybridLinearKVPool: global full-attention layer ids map onto a smaller pool."""

from __future__ import annotations

import pytest
import torch

from fp4kv.mem_cache import HybridLinearKVPool, MHATokenToKVPool, NotAFullAttentionLayerError
from kvpool_testutil import make_mha, randn, same_bits


def test_maps_global_ids_onto_the_full_pool():
    hybrid = HybridLinearKVPool([7, 3, 11], lambda n: make_mha("fp4_e2m1", layer_num=n))
    assert hybrid.full_attention_layer_ids == (3, 7, 11)
    assert hybrid.full_pool.layer_num == 3
    assert [hybrid.map_layer_id(i) for i in (3, 7, 11)] == [0, 1, 2]
    loc = torch.tensor([1, 2])
    xs = {}
    for layer in (3, 7, 11):
        xs[layer] = randn(2, 2, 32, seed=layer)
        hybrid.set_kv_buffer(layer, loc, xs[layer], xs[layer])
    for layer, local in ((3, 0), (7, 1), (11, 2)):
        got = hybrid.get_kv(layer, loc)[0]
        assert same_bits(got, hybrid.full_pool.get_kv(local, loc)[0])
        assert same_bits(hybrid.get_key_buffer(layer)[loc], got)
        assert same_bits(hybrid.get_value_buffer(layer)[loc], got)
    assert not same_bits(hybrid.get_kv(3, loc)[0], hybrid.get_kv(7, loc)[0])
    assert hybrid.get_kv_size_bytes() == hybrid.full_pool.get_kv_size_bytes()
    assert hybrid.get_raw_kv(11)[0].data.data_ptr() == hybrid.full_pool.get_raw_kv(2)[0].data.data_ptr()


def test_wraps_a_ready_pool_with_start_layer():
    pool = make_mha("bf16", layer_num=2, start_layer=4)
    hybrid = HybridLinearKVPool([1, 5], pool)
    assert hybrid.map_layer_id(1) == 4 and hybrid.map_layer_id(5) == 5


@pytest.mark.parametrize("layer", [0, 2, 4, 12, -1, "3"])
def test_linear_attention_layer_is_a_clear_error(layer):
    hybrid = HybridLinearKVPool([3, 7, 11], lambda n: make_mha("bf16", layer_num=n))
    with pytest.raises(NotAFullAttentionLayerError, match=r"full-attention layers: \[3, 7, 11\]") as err:
        hybrid.get_key_buffer(layer)
    assert repr(layer) in str(err.value)
    with pytest.raises(IndexError):  # NotAFullAttentionLayerError is an IndexError
        hybrid.set_kv_buffer(layer, torch.tensor([1]), randn(1, 2, 32), randn(1, 2, 32))


@pytest.mark.parametrize("ids,pool,msg", [
    ([], 2, "non-empty"), ([1, 1], 2, "duplicates"), ([1, 2, 3], 2, "has 2 layers but 3"),
    ([-1, 2], 2, "ints >= 0"),
])
def test_bad_construction(ids, pool, msg):
    with pytest.raises(ValueError, match=msg):
        HybridLinearKVPool(ids, make_mha("bf16", layer_num=pool))


def test_factory_must_return_a_pool():
    with pytest.raises(ValueError, match="not a KV pool"):
        HybridLinearKVPool([1], lambda n: object())
    assert isinstance(HybridLinearKVPool([1], lambda n: make_mha(layer_num=n)).full_pool, MHATokenToKVPool)


def test_nvfp4_global_scales_by_global_id():
    hybrid = HybridLinearKVPool([2, 6], lambda n: make_mha("nvfp4", layer_num=n))
    hybrid.set_kv_global_scales(6, 0.5, 0.25)
    assert hybrid.get_kv_global_scales(6) == (0.5, 0.25)
    assert hybrid.full_pool.get_kv_global_scales(1) == (0.5, 0.25)
    assert hybrid.get_kv_global_scales(2) == (None, None)
    with pytest.raises(NotAFullAttentionLayerError, match="layer 3 "):
        hybrid.set_kv_global_scales(3, 0.5, 0.25)
