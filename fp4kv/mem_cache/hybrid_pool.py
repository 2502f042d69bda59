"""`HybridLinearKVPool`: KV storage for models that mix full attention with linear attention
(whose layers keep a recurrent state elsewhere and have no token-to-KV storage)."""

from __future__ import annotations

from typing import Callable, Sequence, Union

import torch

from fp4kv.mem_cache.mha_pool import MHATokenToKVPool
from fp4kv.mem_cache.mla_pool import MLATokenToKVPool

FullPool = Union[MHATokenToKVPool, MLATokenToKVPool]


class NotAFullAttentionLayerError(IndexError):
    """A layer id that has no KV storage in a hybrid pool (a linear-attention or unknown layer)."""


class HybridLinearKVPool:
    """Maps global layer ids of the full-attention layers onto a pool holding only those layers.

    ``full_attention_layer_ids``: distinct global ids (any order; the i-th id in ascending order is
    the wrapped pool's layer ``start_layer + i``). ``full_pool``: a pool with exactly that many
    layers, or a factory called with the layer count that builds one. Every method of the wrapped
    pool that takes a ``layer_id`` is offered here with the global id; any other id raises
    `NotAFullAttentionLayerError` naming it and the full-attention ids.
    """

    def __init__(self, full_attention_layer_ids: Sequence[int],
                 full_pool: FullPool | Callable[[int], FullPool]):
        ids = list(full_attention_layer_ids)
        if not ids or any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in ids):
            raise ValueError(f"full_attention_layer_ids must be non-empty ints >= 0, got {ids!r}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"full_attention_layer_ids has duplicates: {ids!r}")
        self.full_attention_layer_ids = tuple(sorted(ids))
        pool = full_pool if isinstance(full_pool, (MHATokenToKVPool, MLATokenToKVPool)) \
            else full_pool(len(ids))
        if not isinstance(pool, (MHATokenToKVPool, MLATokenToKVPool)):
            raise ValueError(f"full_pool factory returned {type(pool).__name__}, not a KV pool")
        if pool.layer_num != len(ids):
            raise ValueError(f"the full-attention pool has {pool.layer_num} layers but "
                             f"{len(ids)} full-attention layer ids were given: {self.full_attention_layer_ids}")
        self.full_pool: FullPool = pool
        self._map = {g: pool.start_layer + i for i, g in enumerate(self.full_attention_layer_ids)}

    def map_layer_id(self, layer_id: int) -> int:
        """Global layer id -> layer id of the wrapped pool."""
        local = self._map.get(layer_id) if isinstance(layer_id, int) else None
        if local is None:
            raise NotAFullAttentionLayerError(
                f"layer {layer_id!r} is not a full-attention layer, so it has no KV cache here; "
                f"full-attention layers: {list(self.full_attention_layer_ids)}")
        return local

    @property
    def size(self) -> int:
        return self.full_pool.size

    @property
    def page_size(self) -> int:
        return self.full_pool.page_size

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor,
                      cache_v: torch.Tensor | None) -> None:
        self.full_pool.set_kv_buffer(self.map_layer_id(layer_id), loc, cache_k, cache_v)  # type: ignore[arg-type]

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        return self.full_pool.get_key_buffer(self.map_layer_id(layer_id))

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        return self.full_pool.get_value_buffer(self.map_layer_id(layer_id))

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.full_pool.get_kv_buffer(self.map_layer_id(layer_id))

    def get_kv(self, layer_id: int, loc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.full_pool.get_kv(self.map_layer_id(layer_id), loc)

    def get_raw_kv(self, layer_id: int):  # type: ignore[no-untyped-def]
        return self.full_pool.get_raw_kv(self.map_layer_id(layer_id))

    def get_kv_size_bytes(self) -> tuple[int, int]:
        return self.full_pool.get_kv_size_bytes()

    def set_kv_global_scales(self, layer_id: int, k_scale: float | torch.Tensor,
                             v_scale: float | torch.Tensor) -> None:
        """nvfp4 MHA pools: see `MHATokenToKVPool.set_kv_global_scales`."""
        self.full_pool.set_kv_global_scales(self.map_layer_id(layer_id), k_scale, v_scale)  # type: ignore[union-attr]

    def get_kv_global_scales(self, layer_id: int) -> tuple[float | None, float | None]:
        return self.full_pool.get_kv_global_scales(self.map_layer_id(layer_id))  # type: ignore[union-attr]
