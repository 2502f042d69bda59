"""`MHATokenToKVPool`: per-layer K and V for multi-head (and grouped-query) attention."""

from __future__ import annotations

import torch

from fp4kv.mem_cache.token_store import RawBuffers, StreamSpec, TokenKVStore


class MHATokenToKVPool(TokenKVStore):
    """K ``[rows, head_num, head_dim]`` and V ``[rows, head_num, v_head_dim]`` per layer,
    ``rows = size + page_size``; slot 0 is the padding slot. Layer ids are global:
    ``start_layer .. start_layer + layer_num - 1``.

    ``dtype``: ``torch.bfloat16``/``"bf16"``, ``torch.float16``/``"fp16"``,
    ``torch.float8_e4m3fn``/``"fp8_e4m3"``, ``"fp4_e2m1"`` (= ``"mx_block16"``) or ``"nvfp4"``;
    anything else raises ValueError listing these.

    Storage per layer and per K/V:
    - plain dtypes: one buffer ``[rows, H, D]`` of that dtype;
    - fp4_e2m1: data uint8 ``[rows, H, D/2]`` + UE8M0 scales uint8 ``[rows, H*D/16]``;
    - nvfp4: data uint8 ``[rows, H, D/2]`` + E4M3 block scales uint8 ``[rows, H, D/16]`` + one
      fp32 global scale (the dequantization multiplier). Set it from calibration with
      `set_kv_global_scales` before the layer's first write; otherwise the first write with a
      nonzero value computes it from that write's data. Once data has been written with a scale it
      never changes (a later, larger value saturates at ``6 * 448 * scale``).

    ``compute_dtype`` (what reads return): bf16/fp16 pools default to their own dtype, fp8 and FP4
    pools to bfloat16. See `TokenKVStore` for ``dequant_cache_layers``.
    """

    def __init__(self, size: int, page_size: int, dtype: object, head_num: int, head_dim: int,
                 layer_num: int, device: torch.device | str, v_head_dim: int | None = None,
                 start_layer: int = 0, compute_dtype: torch.dtype | None = None,
                 dequant_cache_layers: int = 0):
        v_head_dim = head_dim if v_head_dim is None else v_head_dim
        for label, value in (("head_num", head_num), ("head_dim", head_dim), ("v_head_dim", v_head_dim)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{label} must be an int >= 1, got {value!r}")
        self.head_num, self.head_dim, self.v_head_dim = head_num, head_dim, v_head_dim
        super().__init__(size, page_size, dtype, layer_num, device, start_layer,
                         [StreamSpec("k", head_num, head_dim), StreamSpec("v", head_num, v_head_dim)],
                         compute_dtype, dequant_cache_layers)

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, cache_k: torch.Tensor,
                      cache_v: torch.Tensor) -> None:
        """Quantize (or cast) and store ``cache_k [T, H, D]`` and ``cache_v [T, H, Dv]`` at slots
        ``loc`` (int64 ``[T]``, in ``[0, rows)``, no repeats except the padding slot 0).

        Inputs may be bf16, fp16 or fp32 (or fp8_e4m3fn for an fp8 pool) on the pool's device.
        Everything is validated before anything is written: IndexError for a bad layer id or slot,
        ValueError for shapes, dtypes, devices and duplicate slots.
        """
        self._write(layer_id, loc, {"k": cache_k, "v": cache_v})

    def get_key_buffer(self, layer_id: int) -> torch.Tensor:
        """All K rows ``[rows, H, D]``: the storage buffer itself for plain dtypes (no copy, in the
        storage dtype), dequantized to ``compute_dtype`` for FP4 (a full-layer dequantization
        unless cached; prefer `get_kv`)."""
        return self._full(layer_id, "k")

    def get_value_buffer(self, layer_id: int) -> torch.Tensor:
        """All V rows ``[rows, H, Dv]``; same rules as `get_key_buffer`."""
        return self._full(layer_id, "v")

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.get_key_buffer(layer_id), self.get_value_buffer(layer_id)

    def get_kv(self, layer_id: int, loc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K ``[T, H, D]`` and V ``[T, H, Dv]`` of slots ``loc`` in ``compute_dtype``; only those
        rows are dequantized. Equal to the same rows of the full buffers (converted)."""
        return self._read_rows(layer_id, loc, "k"), self._read_rows(layer_id, loc, "v")

    def get_raw_kv(self, layer_id: int) -> tuple[RawBuffers, RawBuffers]:
        """Live storage of layer ``layer_id``: (K, V) data, scales and global scale, for kernels."""
        return self._raw(layer_id, "k"), self._raw(layer_id, "v")

    def set_kv_global_scales(self, layer_id: int, k_scale: float | torch.Tensor,
                             v_scale: float | torch.Tensor) -> None:
        """nvfp4 only: the fp32 dequantization multipliers (about ``amax / (448 * 6)``, e.g. a
        checkpoint's k_scale/v_scale) of one layer. Allowed until data is written with them;
        afterwards only the same values are accepted (ValueError otherwise)."""
        self._set_global_scale(layer_id, {"k": k_scale, "v": v_scale})

    def get_kv_global_scales(self, layer_id: int) -> tuple[float | None, float | None]:
        """The layer's (K, V) nvfp4 global scales, None while unset (and for other dtypes)."""
        return self._global_scale(layer_id, "k"), self._global_scale(layer_id, "v")

    def get_kv_size_bytes(self) -> tuple[int, int]:
        """(K bytes, V bytes) over all layers: data + scales + global scales."""
        return self.stream_bytes("k"), self.stream_bytes("v")
