"""`MLATokenToKVPool`: one compressed latent per token (DeepSeek/Kimi multi-head latent attention)."""

from __future__ import annotations

import torch

from fp4kv.mem_cache.token_store import RawBuffers, StreamSpec, TokenKVStore
from fp4kv.mem_cache.validate import check_loc, check_rows


class MLATokenToKVPool(TokenKVStore):
    """Per layer one latent row ``[rows, 1, kv_lora_rank + qk_rope_head_dim]`` (576 by default):
    the first ``kv_lora_rank`` values are the compressed KV (also the attention values), the rest
    the rotary key part. Same dtypes, storage rules and slot rules as `MHATokenToKVPool` (for FP4
    the 512 + 64 split falls on 16-value block boundaries, so the two parts never share a scale).
    """

    def __init__(self, size: int, page_size: int, dtype: object, kv_lora_rank: int = 512,
                 qk_rope_head_dim: int = 64, layer_num: int = 1, device: torch.device | str = "cpu",
                 start_layer: int = 0, compute_dtype: torch.dtype | None = None,
                 dequant_cache_layers: int = 0):
        for label, value in (("kv_lora_rank", kv_lora_rank), ("qk_rope_head_dim", qk_rope_head_dim)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{label} must be an int >= 1, got {value!r}")
        self.kv_lora_rank, self.qk_rope_head_dim = kv_lora_rank, qk_rope_head_dim
        self.kv_cache_dim = kv_lora_rank + qk_rope_head_dim
        super().__init__(size, page_size, dtype, layer_num, device, start_layer,
                         [StreamSpec("kv", 1, self.kv_cache_dim)], compute_dtype, dequant_cache_layers)

    def set_mla_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k_nope: torch.Tensor,
                          cache_k_rope: torch.Tensor) -> None:
        """Store ``cache_k_nope [T, 1, kv_lora_rank]`` and ``cache_k_rope [T, 1, qk_rope_head_dim]``
        as one latent row per slot of ``loc``; validation as in `MHATokenToKVPool.set_kv_buffer`."""
        self._index(layer_id)
        tokens = check_loc(loc, self.rows, self.device, reject_duplicates=True).numel()
        check_rows(cache_k_nope, "cache_k_nope", tokens, 1, self.kv_lora_rank, self.device, self._extra())
        check_rows(cache_k_rope, "cache_k_rope", tokens, 1, self.qk_rope_head_dim, self.device, self._extra())
        if cache_k_nope.dtype != cache_k_rope.dtype:
            raise ValueError(f"cache_k_nope is {cache_k_nope.dtype} but cache_k_rope is {cache_k_rope.dtype}")
        self._write(layer_id, loc, {"kv": torch.cat([cache_k_nope, cache_k_rope], dim=-1)})

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor,
                      cache_v: torch.Tensor | None = None) -> None:
        """Store full latents ``cache_k [T, 1, kv_cache_dim]``. ``cache_v`` (the attention values)
        is the first ``kv_lora_rank`` entries of ``cache_k`` in MLA, so it is not stored; when
        given, its shape is checked (``[T, 1, kv_lora_rank]``)."""
        if cache_v is not None:
            self._index(layer_id)
            tokens = check_loc(loc, self.rows, self.device, reject_duplicates=True).numel()
            check_rows(cache_v, "cache_v", tokens, 1, self.kv_lora_rank, self.device, self._extra())
        self._write(layer_id, loc, {"kv": cache_k})

    def _extra(self) -> tuple[torch.dtype, ...]:
        plain = self.fmt.torch_dtype
        return (plain,) if plain is torch.float8_e4m3fn else ()

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        """All latents ``[rows, 1, kv_cache_dim]`` (storage itself for plain dtypes, dequantized
        ``compute_dtype`` for FP4)."""
        return self._full(layer_id, "kv")

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        """``[rows, 1, kv_lora_rank]``: the value part of `get_key_buffer`, always real values
        (dequantized for FP4), never packed bytes."""
        return self._full(layer_id, "kv")[..., : self.kv_lora_rank]

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        full = self._full(layer_id, "kv")
        return full, full[..., : self.kv_lora_rank]

    def get_kv(self, layer_id: int, loc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(latents ``[T, 1, kv_cache_dim]``, values ``[T, 1, kv_lora_rank]``) of slots ``loc`` in
        ``compute_dtype``; only those rows are dequantized."""
        rows = self._read_rows(layer_id, loc, "kv")
        return rows, rows[..., : self.kv_lora_rank]

    def get_raw_kv(self, layer_id: int) -> RawBuffers:
        """Live latent storage of one layer: data, scales and global scale."""
        return self._raw(layer_id, "kv")

    def set_kv_global_scale(self, layer_id: int, scale: float | torch.Tensor) -> None:
        """nvfp4 only: the layer's fp32 dequantization multiplier; rules as
        `MHATokenToKVPool.set_kv_global_scales`."""
        self._set_global_scale(layer_id, {"kv": scale})

    def get_kv_global_scale(self, layer_id: int) -> float | None:
        return self._global_scale(layer_id, "kv")

    def get_kv_size_bytes(self) -> tuple[int, int]:
        """(latent bytes, 0): one latent holds both K and V; data + scales + global scales."""
        return self.stream_bytes("kv"), 0
